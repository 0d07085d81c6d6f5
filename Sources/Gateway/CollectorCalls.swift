import DatongContracts
import DatongRuntime
import Logging
import Prometheus
import Synchronization

/// The gateway's calls to the collector, folded when they wait. At most `maxCalls` are in flight;
/// an upload whose batch arrives while every call is busy waits, and the next call to end takes
/// every waiting batch (up to `maxGroupBytes`) in one `POST /v1/batch-groups`. An idle gateway
/// sends each batch at once and alone (`POST /v1/batches`), so folding never adds a wait; a busy
/// one makes fewer, larger calls, which cost the collector (HTTP, tasks, a transaction slot) per
/// call rather than per record (docs/BENCHMARKS.md). Each upload is answered with its own batch's
/// outcome, as if it had been sent alone.
final class CollectorCalls: Sendable {
    private struct Waiting {
        let body: [UInt8]
        let requestID: String
        let logger: Logger
        let continuation: CheckedContinuation<CollectResult, any Error>
    }

    private struct State {
        var waiting: [Waiting] = []
        var calls = 0
        /// The collector answered 404 to a group: an older version, during an upgrade. Batches go
        /// alone from then on (until the gateway restarts).
        var groupsUnsupported = false
    }

    private let collector: ServiceClient
    private let maxCalls: Int
    private let maxGroupBytes: Int
    private let state = Mutex(State())
    private let metrics: CollectorCallMetrics?

    /// - Parameters:
    ///   - maxCalls: calls in flight at once (`COLLECTOR_CALLS`).
    ///   - maxGroupBytes: the most one group's batches hold (`COLLECTOR_GROUP_BYTES`); a batch larger
    ///     than it goes alone. Keep it under the collector's `COLLECTOR_MAX_BATCH_BYTES`.
    init(collector: ServiceClient, maxCalls: Int, maxGroupBytes: Int, registry: PrometheusCollectorRegistry? = nil) {
        self.collector = collector
        self.maxCalls = max(1, maxCalls)
        self.maxGroupBytes = maxGroupBytes
        metrics = registry.map(CollectorCallMetrics.init)
    }

    /// Stores `batch` and returns its result after the collector committed it.
    func store(_ batch: CollectBatch, requestID: String, logger: Logger) async throws -> CollectResult {
        let body = batch.jsonBytes
        return try await withCheckedThrowingContinuation { continuation in
            let start: Bool = state.withLock { state in
                state.waiting.append(Waiting(body: body, requestID: requestID, logger: logger, continuation: continuation))
                guard state.calls < maxCalls else { return false }
                state.calls += 1
                return true
            }
            if start { Task { await self.drain() } }
        }
    }

    /// One call slot: sends what waits, until nothing does.
    private func drain() async {
        while let group = nextGroup() {
            await send(group)
        }
    }

    private func nextGroup() -> [Waiting]? {
        state.withLock { state in
            guard !state.waiting.isEmpty else {
                state.calls -= 1
                return nil
            }
            var bytes = 0
            var count = 0
            for waiting in state.waiting {
                if count > 0, bytes + waiting.body.count > maxGroupBytes { break }
                bytes += waiting.body.count
                count += 1
                if state.groupsUnsupported { break }
            }
            let group = Array(state.waiting.prefix(count))
            state.waiting.removeFirst(count)
            return group
        }
    }

    private func send(_ group: [Waiting]) async {
        metrics?.calls.increment()
        metrics?.batches.increment(by: Int64(group.count))
        guard group.count > 1 else {
            let waiting = group[0]
            do {
                let result = try await collector.post(
                    "/v1/batches", bytes: waiting.body, as: CollectResult.self, requestID: waiting.requestID, logger: waiting.logger
                )
                waiting.continuation.resume(returning: result)
            } catch {
                waiting.continuation.resume(throwing: error)
            }
            return
        }
        let first = group[0]
        let answer: CollectGroupResult
        do {
            answer = try await collector.post(
                "/v1/batch-groups", bytes: CollectBatchGroup.jsonBytes(joining: group.map(\.body)), as: CollectGroupResult.self,
                requestID: first.requestID, logger: first.logger
            )
        } catch let error as ServiceError where error.code == .lacksRoute(collector.name) {
            first.logger.warning("collector.no_groups", metadata: ["detail": "the collector has no /v1/batch-groups: batches go alone"])
            state.withLock { $0.groupsUnsupported = true }
            for waiting in group { await send([waiting]) }
            return
        } catch {
            for waiting in group { waiting.continuation.resume(throwing: error) }
            return
        }
        guard answer.outcomes.count == group.count else {
            first.logger.error(
                "upstream.bad_answer", metadata: ["upstream": "collector", "error": "\(answer.outcomes.count) outcomes for \(group.count) batches"])
            let error = ServiceError.unavailable(.badAnswer(from: collector.name), "the collector gave an answer the gateway cannot read")
            for waiting in group { waiting.continuation.resume(throwing: error) }
            return
        }
        for (waiting, outcome) in zip(group, answer.outcomes) {
            switch outcome {
            case .written(let result): waiting.continuation.resume(returning: result)
            case .refused(let status, let error, let message):
                waiting.continuation.resume(throwing: collector.refusal(status: status, error: error, message: message))
            }
        }
    }
}

/// `datong_gateway_collector_calls_total` and `…_batches_total`: their ratio is how many uploads a
/// call carries.
struct CollectorCallMetrics: Sendable {
    let calls: Counter
    let batches: Counter

    init(registry: PrometheusCollectorRegistry) {
        calls = registry.makeCounter(
            descriptor: MetricNameDescriptor(
                namespace: "datong", subsystem: "gateway", metricName: "collector_calls", unitName: "total",
                helpText: "Calls to the collector (one batch alone, or a group of the batches that waited)"
            ))
        batches = registry.makeCounter(
            descriptor: MetricNameDescriptor(
                namespace: "datong", subsystem: "gateway", metricName: "collector_batches", unitName: "total",
                helpText: "Batches (one per upload or relay) sent to the collector"
            ))
    }
}
