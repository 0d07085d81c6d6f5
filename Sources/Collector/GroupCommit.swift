import DatongContracts
import DatongRuntime
import Prometheus

/// Group commit: concurrent batches wait in one queue, and a few writers (one per database
/// connection) each take everything waiting and write it in one transaction. An idle collector
/// writes a batch at once; a busy one folds many requests into few transactions, so commits (and
/// their fsyncs) stop being the limit. Each caller is answered only after its batch's transaction
/// committed.
///
/// The queue is bounded: beyond `maxWaitingRecords` a batch is refused with a 503 and `Retry-After`
/// rather than held in memory, which is how an overload reaches the SDKs (they retry 5xx).
final class GroupCommit: Sendable {
    typealias Commit = @Sendable ([IncomingBatch]) async throws -> [CollectResult]

    private let queue: FoldingQueue<IncomingBatch, CollectResult>
    /// `datong_collector_waiting_records`: records waiting for a writer, as of the last batch that
    /// came or went.
    private let waiting: Gauge?

    init(maxWriters: Int, maxRecordsPerGroup: Int, maxWaitingRecords: Int, waiting: Gauge? = nil, commit: @escaping Commit) {
        self.waiting = waiting
        queue = FoldingQueue(
            maxWorkers: maxWriters, maxGroupWeight: maxRecordsPerGroup,
            waitingLimit: .init(weight: maxWaitingRecords) { waiting in
                ServiceError.unavailable(.collectorBusy, "the collector has \(waiting) records waiting to be written; retry shortly")
            },
            process: { batches in await Self.write(batches, commit: commit) }
        )
    }

    /// Queues `batch` and returns its result once the transaction holding it committed.
    func submit(_ batch: IncomingBatch) async throws -> CollectResult {
        defer { waiting?.set(Double(queue.waitingWeight)) }
        waiting?.set(Double(queue.waitingWeight + batch.weight))
        return try await queue.submit(batch, weight: batch.weight)
    }

    /// Commits a group; if it fails and held several batches, each is tried alone, so one batch the
    /// database refuses does not fail the others.
    private static func write(_ batches: [IncomingBatch], commit: Commit) async -> [Result<CollectResult, any Error>] {
        do {
            return try await commit(batches).map { .success($0) }
        } catch {
            guard batches.count > 1 else { return [.failure(error)] }
            var outcomes: [Result<CollectResult, any Error>] = []
            for batch in batches {
                do {
                    outcomes.append(.success(try await commit([batch])[0]))
                } catch {
                    outcomes.append(.failure(error))
                }
            }
            return outcomes
        }
    }
}
