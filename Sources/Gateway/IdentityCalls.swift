import DatongContracts
import DatongRuntime
import HTTPTypes
import Logging
import NIOCore
import Prometheus

/// The gateway's calls to identity-service's `POST /v1/resolve`, folded when they wait, as
/// `CollectorCalls` folds the collector's. At most `maxCalls` are in flight; the records of uploads
/// that arrive while every call is busy go, upload after upload, in the next call (up to
/// `ResolveRequest.maxCallBytes`), which identity-service resolves in order in one transaction. An
/// idle gateway sends each upload's records at once and alone.
///
/// Uploads that waited together were concurrent, so the order the call gives them is one they could
/// have arrived in; each upload's own records keep theirs. Each upload gets the users of its own
/// records, and every upload of the call the identities it invalidated (its cache forgets them).
/// A refusal (4xx) of a call carrying several uploads is not theirs to share: each is then sent
/// alone, so that only the upload at fault is refused.
final class IdentityCalls: Sendable {
    private let queue: FoldingQueue<Run, ResolveResponse>
    private let timeout: TimeAmount

    /// - Parameter maxCalls: calls in flight at once (`IDENTITY_CALLS`).
    init(identity: ServiceClient, maxCalls: Int, registry: PrometheusCollectorRegistry? = nil) {
        timeout = identity.timeout
        let sender = Sender(identity: identity, metrics: registry.map(IdentityCallMetrics.init))
        queue = FoldingQueue(maxWorkers: maxCalls, maxGroupWeight: ResolveRequest.maxCallBytes) { group in await sender.send(group) }
    }

    /// Resolves `records` (at most `ResolveRequest.maxCallBytes` of them: a run of
    /// `ResolveRequest.calls(of:)`) and returns one user per record, in order. Its wait for a call
    /// counts in identity-service's timeout (`UPSTREAM_TIMEOUT_SECONDS`): a run still waiting when
    /// that has passed is answered 503 without being sent, and its call ends by then.
    func resolve(_ records: [IdentityRecord], forCache: Bool, requestID: String, logger: Logger) async throws -> ResolveResponse {
        let deadline = NIODeadline.now() + timeout
        return try await queue.submit(
            Run(request: ResolveRequest(records: records, forCache: forCache), requestID: requestID, deadline: deadline, logger: logger),
            weight: records.reduce(32) { $0 + $1.maxWireBytes })
    }

    /// One upload's records, in order.
    private struct Run: Sendable {
        let request: ResolveRequest
        let requestID: String
        let deadline: NIODeadline
        let logger: Logger
    }

    private struct Sender: Sendable {
        let identity: ServiceClient
        let metrics: IdentityCallMetrics?

        func send(_ group: [Run]) async -> [Result<ResolveResponse, any Error>] {
            await group.sendingInTime(\.deadline, tooLate: identity.tooLate, send: sendInTime)
        }

        private func sendInTime(_ group: [Run]) async -> [Result<ResolveResponse, any Error>] {
            guard group.count > 1 else { return await group.asyncMap(alone) }
            // A caller with a cache needs PostgreSQL's answer; one without is as well served by it.
            let joined = ResolveRequest(records: group.flatMap(\.request.records), forCache: group.contains { $0.request.forCache })
            let answer: ResolveResponse
            do {
                answer = try await call(joined, uploads: group.count, first: group[0], deadline: group.map(\.deadline).min())
            } catch let error as ServiceError where (400..<500).contains(error.status.code) {
                return await group.asyncMap(alone)
            } catch {
                return group.map { _ in .failure(error) }
            }
            var outcomes: [Result<ResolveResponse, any Error>] = []
            var start = 0
            for run in group {
                let end = start + run.request.records.count
                outcomes.append(.success(ResolveResponse(users: Array(answer.users[start..<end]), invalidated: answer.invalidated)))
                start = end
            }
            return outcomes
        }

        private func alone(_ run: Run) async -> Result<ResolveResponse, any Error> {
            do {
                return .success(try await call(run.request, uploads: 1, first: run, deadline: run.deadline))
            } catch {
                return .failure(error)
            }
        }

        private func call(_ request: ResolveRequest, uploads: Int, first: Run, deadline: NIODeadline?) async throws -> ResolveResponse {
            metrics?.count(uploads: uploads)
            let answer = try await identity.post(
                "/v1/resolve", request, as: ResolveResponse.self, requestID: first.requestID, deadline: deadline, logger: first.logger)
            guard answer.users.count == request.records.count else {
                throw ServiceError.unavailable(
                    .badAnswer(from: .identity), "identity-service answered for \(answer.users.count) of \(request.records.count) records")
            }
            return answer
        }
    }
}

extension Array where Element: Sendable {
    /// `map` with an async transform, one element after another.
    fileprivate func asyncMap<T>(_ transform: (Element) async -> T) async -> [T] {
        var mapped: [T] = []
        mapped.reserveCapacity(count)
        for element in self { mapped.append(await transform(element)) }
        return mapped
    }
}

/// `datong_gateway_identity_calls_total` and `…_identity_uploads_total`: their ratio is how many
/// uploads' records a resolve call carries.
struct IdentityCallMetrics: Sendable {
    let calls: Counter
    let uploads: Counter

    init(registry: PrometheusCollectorRegistry) {
        calls = registry.gatewayCounter("identity_calls", "Resolve calls to identity-service (one upload's records alone, or those of the uploads that waited)")
        uploads = registry.gatewayCounter("identity_uploads", "Uploads (or relays) whose records a resolve call carried")
    }

    func count(uploads: Int) {
        calls.increment()
        self.uploads.increment(by: Int64(uploads))
    }
}
