import DatongRuntime
import Hummingbird

/// Checks the admin API's bearer token. The configured token is kept only as its SHA-256, and the
/// comparison takes the same time wherever the digests differ.
struct AdminAuth: Sendable {
    private let tokenDigest: [UInt8]?

    init(token: String?) {
        tokenDigest = token.map { SHA256Digest.hash(Array($0.utf8)) }
    }

    func authorize(_ request: Request) throws {
        guard let expected = tokenDigest else {
            throw ServiceError(.unauthorized, "admin_disabled", "the admin API is disabled: start config-service with ADMIN_TOKEN set")
        }
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else {
            throw ServiceError(.unauthorized, "missing_token", "send the admin token as 'Authorization: Bearer <token>'")
        }
        let presented = SHA256Digest.hash(Array(header.dropFirst("Bearer ".count).utf8))
        var difference: UInt8 = 0
        for (a, b) in zip(presented, expected) { difference |= a ^ b }
        guard difference == 0 else {
            throw ServiceError(.unauthorized, "invalid_token", "the admin token is not valid")
        }
    }
}
