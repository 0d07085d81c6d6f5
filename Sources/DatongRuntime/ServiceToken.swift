import Hummingbird

/// The shared secret of the calls between Datong's services (`SERVICE_TOKEN`). Internal endpoints
/// check it; with no token configured they refuse every request (a service started from the
/// environment never runs without one).
package struct ServiceToken: Sendable {
    private let digest: [UInt8]?

    package init(_ token: String?) {
        digest = token.map { SHA256Digest.hash(Array($0.utf8)) }
    }

    /// 401 unless the request carries the token as `Authorization: Bearer …` (compared in constant
    /// time); always 401 when no token is configured.
    package func check(_ request: Request) throws {
        guard let expected = digest else {
            throw ServiceError(.unauthorized, .serviceTokenNotConfigured, "this endpoint is for Datong's services, and this service has no SERVICE_TOKEN")
        }
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else {
            throw ServiceError(.unauthorized, .missingServiceToken, "this endpoint is for Datong's services: send the service token")
        }
        let presented = SHA256Digest.hash(Array(header.dropFirst("Bearer ".count).utf8))
        guard SHA256Digest.equalInConstantTime(presented, expected) else {
            throw ServiceError(.unauthorized, .invalidServiceToken, "the service token is not valid")
        }
    }
}
