import DatongContracts
import DatongRuntime
import Logging
import NIOCore
import Prometheus

/// The gateway's calls to the collector (`FoldedCalls`): a batch alone goes in `POST /v1/batches`,
/// the batches that waited together in one `POST /v1/batch-groups`. Each upload is answered with
/// its own batch's outcome, as if it had been sent alone.
final class CollectorCalls: Sendable {
    private let calls: FoldedCalls<Sender>

    /// - Parameters:
    ///   - maxCalls: calls in flight at once (`COLLECTOR_CALLS`).
    ///   - maxGroupBytes: the most one group's batches hold (`COLLECTOR_GROUP_BYTES`); a batch larger
    ///     than it goes alone. Keep it under the collector's `COLLECTOR_MAX_BATCH_BYTES`.
    init(collector: ServiceClient, maxCalls: Int, maxGroupBytes: Int, registry: PrometheusCollectorRegistry? = nil) {
        calls = FoldedCalls(
            service: collector, maxCalls: maxCalls, maxGroupWeight: maxGroupBytes,
            calls: Sender(collector: collector, metrics: registry.map(CollectorCallMetrics.init)))
    }

    /// Stores a batch (its text: `CollectBatch.jsonBytes`) and returns its result after the
    /// collector committed it.
    func store(batch body: [UInt8], requestID: String, logger: Logger) async throws -> CollectResult {
        try await calls.submit(body, weight: body.count, requestID: requestID, logger: logger)
    }

    private struct Sender: FoldableCalls {
        let collector: ServiceClient
        let metrics: CollectorCallMetrics?

        func alone(_ batch: Waiting<[UInt8]>) async throws -> CollectResult {
            metrics?.count(calls: 1, batches: 1)
            return try await collector.post(
                "/v1/batches", bytes: batch.request, as: CollectResult.self, requestID: batch.requestID, deadline: batch.deadline,
                logger: batch.logger)
        }

        func together(_ group: [Waiting<[UInt8]>], deadline: NIODeadline?) async -> [Result<CollectResult, any Error>] {
            // Every call is counted; every batch once, whichever call carried it.
            metrics?.count(calls: 1, batches: 0)
            defer { metrics?.count(calls: 0, batches: group.count) }
            let first = group[0]
            let answer: CollectGroupResult
            do {
                answer = try await collector.post(
                    "/v1/batch-groups", bytes: CollectBatchGroup.jsonBytes(joining: group.map(\.request)), as: CollectGroupResult.self,
                    requestID: first.requestID, deadline: deadline, logger: first.logger
                )
            } catch {
                return group.map { _ in .failure(error) }
            }
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
