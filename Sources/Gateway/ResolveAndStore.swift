import DatongContracts
import DatongRuntime
import Foundation
import Hummingbird
import IdentityCore
import Logging
import NIOCore
import Prometheus

/// The path every accepted record takes, whether it came in an upload or a bridge relay: the users
/// of the whole batch are resolved (from the gateway's identity cache, the rest in one
/// identity-service call, with the records of other uploads that waited for it, `IdentityCalls`),
/// one collector call stores it (with the batches of other uploads that waited for it,
/// `CollectorCalls`), and the answer comes only after the collector committed.
struct ResolveAndStore: Sendable {
    let identity: IdentityCalls
    let collector: CollectorCalls
    /// The owners of identities resolved before, kept fresh by `CacheFeed` from identity-service's
    /// invalidation log: a returning device costs no identity call. nil: every record asks.
    var cache: IdentityCache? = nil
    var metrics: IdentityCacheMetrics? = nil
    /// `datong_gateway_suppressed_records_total`: records of erased users dropped.
    var suppressedRecords: Counter? = nil
    var outcomes: RecordOutcomeMetrics? = nil

    /// Stores the accepted records of `slots` and keeps the refused ones, but drops those naming a
    /// suppressed id of their project (an erased user's), accepted or refused; sets each slot's
    /// fate to what became of it. Returns the collector's counts.
    func store(
        _ slots: inout RecordSlots, receivedAt: Int64, suppressed: [String: SuppressedIDs], context: DatongRequestContext
    ) async throws -> CollectResult {
        if suppressed.values.contains(where: { !$0.isEmpty }) {
            var dropped = 0
            for slot in slots.all.indices {
                let drop: Bool
                switch slots[slot].fate {
                case .accepted:
                    drop = slots[recordOf: slot].identity.map { suppressed[$0.project]?.suppresses($0) == true } ?? false
                case .refused(let kept, _):
                    // A refused record of an erased user is not kept for analysts either.
                    drop = suppressed[kept.project]?.suppresses(rawRecord: kept.raw) == true
                default:
                    drop = false
                }
                if drop {
                    slots[slot].drop(as: .suppressed)
                    dropped += 1
                }
            }
            if dropped > 0 { suppressedRecords?.increment(by: Int64(dropped)) }
        }
        let sent = slots.acceptedSlots
        let rejected = slots.rejected
        guard !sent.isEmpty || !rejected.isEmpty else { return CollectResult(stored: 0, duplicates: 0, rejected: 0) }
        var users = sent.map { slots[recordOf: $0].collect.userId }
        try await resolveUsers(slots, sent, into: &users, context: context)
        // Written from the slots where the records are: a copy of each record into a `CollectBatch`
        // was ten retains and releases per record.
        let batch = CollectBatch.jsonBytes(
            receivedAt: receivedAt, records: sent.count,
            propertiesBytes: sent.reduce(0) { $0 + slots[recordOf: $1].collect.properties.utf8.count }, rejected: rejected
        ) { slots[recordOf: sent[$0]].collect.write(to: &$1, userId: users[$0]) }
        let result = try await collector.store(batch: batch, requestID: context.requestID, logger: context.logger)
        outcomes?.count(result)
        slots.record(result, sent: sent)
        return result
    }

    /// Sets `users[i]` to the user of the record in `slots[sent[i]]`, for every record that names one,
    /// by the resolve procedure identity-service runs too (`IdentityResolution`): here the cache's
    /// misses go, in their order, to identity-service.
    private func resolveUsers(_ slots: RecordSlots, _ sent: [Int], into users: inout [Int64?], context: DatongRequestContext) async throws {
        let resolved = try await IdentityResolution.resolve(slots.identities(of: sent), cache: cache) { misses in
            // In calls identity-service always reads (`ResolveRequest.maxCallBytes`), one after
            // another: it applies records in their order, so a later call sees what an earlier one linked.
            let records = misses.map(\.record)
            var answer = ResolveResponse(users: [])
            for run in ResolveRequest.calls(of: records) {
                let part = try await identity.resolve(
                    Array(records[run]), forCache: cache != nil, requestID: context.requestID, logger: context.logger)
                answer.users += part.users
                answer.invalidated += part.invalidated
            }
            // The owners identity-service vouched for: every identity of a record it says is owned.
            var learned: [(ScopedIdentity, Int64)] = []
            if cache != nil {
                for (entry, user) in zip(misses, answer.users) where user.owned {
                    guard let userId = user.userId else { continue }
                    for identity in entry.plan.identities { learned.append((ScopedIdentity(project: entry.record.project, identity: identity), userId)) }
                }
            }
            return IdentityResolution.Fetched(
                users: answer.users, learned: learned,
                forgetting: answer.invalidated.map { ScopedIdentity(project: $0.project, identity: IdentityKey(key: $0.key, value: $0.value)) })
        }
        if cache != nil { metrics?.count(hits: resolved.answered, asked: resolved.asked) }
        for (position, user) in resolved.users.enumerated() {
            if let user { users[position] = user.userId }
        }
    }

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
            tooLarge: { limit in
                ServiceError(
                    .contentTooLarge, .bodyTooLarge,
                    "the request body inflates to more than \(limit) bytes (MAX_DECOMPRESSED_BYTES, or \(GzipInflater.maxRatio) times its compressed size beyond 1 MiB)"
                )
            },
            invalid: ServiceError.badRequest(.invalidGzip, "Content-Encoding is gzip but the body is not valid gzip")
        )
    default:
        throw ServiceError(
            .unsupportedMediaType, .unsupportedContentEncoding,
            "Content-Encoding '\(UntrustedText.quoted(encoding, limit: 32))' is not supported; send gzip or nothing")
    }
}

/// `datong_gateway_identity_cache_hits_total` and `…_misses_total`: records whose user the
/// gateway's identity cache answered, and distinct identity records it sent to identity-service.
struct IdentityCacheMetrics: Sendable {
    let hits: Counter
    let misses: Counter

    init(registry: PrometheusCollectorRegistry) {
        hits = registry.gatewayCounter("identity_cache_hits", "Records whose user the gateway's identity cache answered")
        misses = registry.gatewayCounter(
            "identity_cache_misses",
            "Distinct identity records the gateway sent to identity-service to resolve (repeats in one upload are sent once)")
    }

    func count(hits: Int, asked: Int) {
        if hits > 0 { self.hits.increment(by: Int64(hits)) }
        if asked > 0 { misses.increment(by: Int64(asked)) }
    }
}

/// identity-service's `GET /v1/invalidations`: what the gateway's identity cache follows.
struct IdentityServiceLog: InvalidationSource {
    let identity: ServiceClient
    let logger: Logger

    func look(after horizon: String?) async throws -> InvalidationLog {
        try await identity.get("/v1/invalidations" + (horizon.map { "?after=\($0)" } ?? ""), as: InvalidationLog.self, logger: logger)
    }
}
