import DatongContracts
import DatongRuntime
import Foundation
import Hummingbird
import NIOCore

/// The path every accepted record takes, whether it came in an upload or a bridge relay: one
/// identity-service call resolves the users of the whole batch, one collector call stores it, and
/// the answer comes only after the collector committed.
struct ResolveAndStore: Sendable {
    let identity: ServiceClient
    let collector: ServiceClient

    func store(
        _ accepted: [NormalizedRecord], rejected: [RejectedRecord], receivedAt: Int64, context: DatongRequestContext
    ) async throws -> CollectResult {
        guard !accepted.isEmpty || !rejected.isEmpty else { return CollectResult(stored: 0, duplicates: 0, rejected: 0) }
        var records = accepted.map(\.collect)
        let withIdentity = accepted.indices.filter { accepted[$0].identity != nil }
        if !withIdentity.isEmpty {
            let resolved = try await identity.post(
                "/v1/resolve", ResolveRequest(records: withIdentity.map { accepted[$0].identity! }),
                as: ResolveResponse.self, requestID: context.requestID, logger: context.logger
            )
            guard resolved.users.count == withIdentity.count else {
                throw ServiceError.unavailable(.identityBadAnswer, "identity-service answered for \(resolved.users.count) of \(withIdentity.count) records")
            }
            for (index, user) in zip(withIdentity, resolved.users) { records[index].userId = user.userId }
        }
        return try await collector.post(
            "/v1/batches", CollectBatch(receivedAt: receivedAt, records: records, rejected: rejected),
            as: CollectResult.self, requestID: context.requestID, logger: context.logger
        )
    }

    /// Why a record the gateway accepted was refused by the collector (the reason in full is in
    /// `analytics.rejected`).
    static let collectorRefusal = "the collector could not store a value of this record; analytics.rejected has the reason"

    /// The server's clock in milliseconds since the Unix epoch.
    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}

/// Reads a request body within `maxBodyBytes`, inflating `Content-Encoding: gzip` within
/// `maxDecompressedBytes` (a gzip bomb stops at the limit, memory stays flat).
func readRequestBody(_ request: Request, limits: UploadLimits) async throws -> [UInt8] {
    let body = try await collectBody(request, limit: limits.maxBodyBytes, timeout: .seconds(limits.bodyTimeoutSeconds))
    let encoding = (request.headers[.contentEncoding] ?? "").trimmingCharacters(in: .whitespaces).lowercased()
    switch encoding {
    case "", "identity":
        return Array(body.readableBytesView)
    case "gzip", "x-gzip":
        return try inflateGzip(
            body, limit: limits.maxDecompressedBytes,
            tooLarge: ServiceError(.contentTooLarge, .bodyTooLarge, "the request body inflates to more than \(limits.maxDecompressedBytes) bytes"),
            invalid: ServiceError.badRequest(.invalidGzip, "Content-Encoding is gzip but the body is not valid gzip")
        )
    default:
        throw ServiceError(
            .unsupportedMediaType, .unsupportedContentEncoding,
            "Content-Encoding '\(UntrustedText.quoted(encoding, limit: 32))' is not supported; send gzip or nothing")
    }
}
