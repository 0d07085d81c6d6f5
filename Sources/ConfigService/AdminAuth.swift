import DatongPostgres
import DatongRuntime
import Hummingbird

/// Who may use the admin API: the first token, from the `ADMIN_TOKEN` setting (named `bootstrap`),
/// and the tokens made through the API (`POST /v1/admin-tokens`). Every token is kept only as its
/// SHA-256; the setting's is compared in constant time, the others are found by their digest.
struct AdminAuth: Sendable {
    static let bootstrapName = "bootstrap"

    private let bootstrapDigest: [UInt8]?
    private let pool: PostgresPool

    init(bootstrapToken: String?, pool: PostgresPool) {
        bootstrapDigest = bootstrapToken.map { SHA256Digest.hash(Array($0.utf8)) }
        self.pool = pool
    }

    /// The name of the token the request carries; 401 when it carries none or an unknown one.
    func authorize(_ request: Request) async throws -> String {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else {
            throw ServiceError(.unauthorized, .missingToken, "send an admin token as 'Authorization: Bearer <token>'")
        }
        let token = Array(header.dropFirst("Bearer ".count).utf8)
        let presented = SHA256Digest.hash(token)
        if let expected = bootstrapDigest, SHA256Digest.equalInConstantTime(presented, expected) {
            return Self.bootstrapName
        }
        let hex = SHA256Digest.hex(token)
        let name = try await pool.withConnection { connection in
            try connection.query("SELECT name FROM config.admin_tokens WHERE sha256 = $1", [hex]).scalar
        }
        guard let name else {
            throw ServiceError(.unauthorized, .invalidToken, "the admin token is not valid (or was revoked)")
        }
        return name
    }

    /// A new random token: 32 bytes from the system's secure generator, as hex.
    static func newToken() -> String {
        var generator = SystemRandomNumberGenerator()
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for _ in 0..<32 {
            let byte = UInt8.random(in: 0...255, using: &generator)
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// What is stored for a token: the hex SHA-256 of its text.
    static func digestHex(of token: String) -> String {
        SHA256Digest.hex(Array(token.utf8))
    }
}
