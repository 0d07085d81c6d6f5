import DatongContracts
import DatongRuntime
import Logging
import NIOCore
import Prometheus

/// The gateway's calls to the collector, folded when they wait. At most `maxCalls` are in flight;
/// an upload whose batch arrives while every call is busy waits, and the next call to end takes
/// every waiting batch (up to `maxGroupBytes`) in one `POST /v1/batch-groups`. An idle gateway
/// sends each batch at once and alone (`POST /v1/batches`), so folding never adds a wait; a busy
/// one makes fewer, larger calls, which cost the collector (HTTP, tasks, a transaction slot) per
/// call rather than per record (docs/BENCHMARKS.md). Each upload is answered with its own batch's
/// outcome, as if it had been sent alone.
final class CollectorCalls: Sendable {
    private let queue: FoldingQueue<Batch, CollectResult>
    private let timeout: TimeAmount

    /// - Parameters:
    ///   - maxCalls: calls in flight at once (`COLLECTOR_CALLS`).
    ///   - maxGroupBytes: the most one group's batches hold (`COLLECTOR_GROUP_BYTES`); a batch larger
    ///     than it goes alone. Keep it under the collector's `COLLECTOR_MAX_BATCH_BYTES`.
    init(collector: ServiceClient, maxCalls: Int, maxGroupBytes: Int, registry: PrometheusCollectorRegistry? = nil) {
        timeout = collector.timeout
        let sender = Sender(collector: collector, metrics: registry.map(CollectorCallMetrics.init))
        queue = FoldingQueue(maxWorkers: maxCalls, maxGroupWeight: maxGroupBytes) { group in await sender.send(group) }
    }

    /// Stores a batch (its text: `CollectBatch.jsonBytes`) and returns its result after the
    /// collector committed it. Its wait for a call counts in the collector's timeout
    /// (`UPSTREAM_TIMEOUT_SECONDS`): a batch still waiting when that has passed is answered 503
    /// without being sent, and its call ends by then.
    func store(batch body: [UInt8], requestID: String, logger: Logger) async throws -> CollectResult {
        let deadline = NIODeadline.now() + timeout
        return try await queue.submit(Batch(body: body, requestID: requestID, deadline: deadline, logger: logger), weight: body.count)
    }

    /// One upload's batch, encoded.
    private struct Batch: Sendable {
        let body: [UInt8]
        let requestID: String
        let deadline: NIODeadline
        let logger: Logger
    }

    /// Makes the calls: a batch alone, or a group with each batch's outcome taken from the answer.
    private struct Sender: Sendable {
        let collector: ServiceClient
        let metrics: CollectorCallMetrics?

        func send(_ group: [Batch]) async -> [Result<CollectResult, any Error>] {
            await group.sendingInTime(\.deadline, tooLate: collector.tooLate, send: sendInTime)
        }

        /// A call carries its batches' earliest deadline.
        private func sendInTime(_ group: [Batch]) async -> [Result<CollectResult, any Error>] {
            guard group.count > 1 else {
                var outcomes: [Result<CollectResult, any Error>] = []
                for batch in group { outcomes.append(await alone(batch)) }
                return outcomes
            }
            // Every call is counted; every batch once, whichever call carried it.
            metrics?.count(calls: 1, batches: 0)
            let first = group[0]
            let answer: CollectGroupResult
            do {
                answer = try await collector.post(
                    "/v1/batch-groups", bytes: CollectBatchGroup.jsonBytes(joining: group.map(\.body)), as: CollectGroupResult.self,
                    requestID: first.requestID, deadline: group.map(\.deadline).min(), logger: first.logger
                )
            } catch {
                metrics?.count(calls: 0, batches: group.count)
                return group.map { _ in .failure(error) }
            }
            metrics?.count(calls: 0, batches: group.count)
            guard answer.outcomes.count == group.count else {
                first.logger.error(
                    "upstream.bad_answer", metadata: ["upstream": "collector", "error": "\(answer.outcomes.count) outcomes for \(group.count) batches"])
                let error = ServiceError.unavailable(.badAnswer(from: .collector), "the collector gave an answer the gateway cannot read")
                return group.map { _ in .failure(error) }
            }
            return answer.outcomes.map { outcome in
                switch outcome {
                case .written(let result): .success(result)
                case .refused(let status, let error, let message): .failure(collector.refusal(status: status, error: error, message: message))
                }
            }
        }

        private func alone(_ batch: Batch) async -> Result<CollectResult, any Error> {
            metrics?.count(calls: 1, batches: 1)
            do {
                return .success(
                    try await collector.post(
                        "/v1/batches", bytes: batch.body, as: CollectResult.self, requestID: batch.requestID, deadline: batch.deadline,
                        logger: batch.logger))
            } catch {
                return .failure(error)
            }
        }
    }
}

/// `datong_gateway_collector_calls_total` and `…_batches_total`: their ratio is how many uploads a
/// call carries.
struct CollectorCallMetrics: Sendable {
    let calls: Counter
    let batches: Counter

    func count(calls: Int, batches: Int) {
        self.calls.increment(by: Int64(calls))
        self.batches.increment(by: Int64(batches))
    }

    init(registry: PrometheusCollectorRegistry) {
        calls = registry.gatewayCounter("collector_calls", "Calls to the collector (one batch alone, or a group of the batches that waited)")
        batches = registry.gatewayCounter("collector_batches", "Batches (one per upload or relay) sent to the collector")
    }
}

/// `datong_gateway_records_total{outcome}`: what the collector made of the records the gateway
/// gave it (stored, duplicate, or rejected and kept in analytics.rejected), as it answered.
struct RecordOutcomeMetrics: Sendable {
    let stored: Counter
    let duplicate: Counter
    let rejected: Counter

    init(registry: PrometheusCollectorRegistry) {
        let help = "Records the collector stored, found to be duplicates, or kept as rejected"
        stored = registry.gatewayCounter("records", help, labels: [("outcome", "stored")])
        duplicate = registry.gatewayCounter("records", help, labels: [("outcome", "duplicate")])
        rejected = registry.gatewayCounter("records", help, labels: [("outcome", "rejected")])
    }

    func count(_ result: CollectResult) {
        stored.increment(by: Int64(result.stored))
        duplicate.increment(by: Int64(result.duplicates))
        rejected.increment(by: Int64(result.rejected))
    }
}

extension PrometheusCollectorRegistry {
    /// `datong_gateway_<name>_total`.
    func gatewayCounter(_ name: String, _ help: String, labels: [(String, String)] = []) -> Counter {
        makeCounter(
            descriptor: MetricNameDescriptor(namespace: "datong", subsystem: "gateway", metricName: name, unitName: "total", helpText: help),
            labels: labels)
    }
}
