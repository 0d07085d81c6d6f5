import DatongContracts
import DatongRuntime
import Synchronization

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

    private struct Waiting {
        let batch: IncomingBatch
        let continuation: CheckedContinuation<CollectResult, any Error>
    }

    private struct State {
        var waiting: [Waiting] = []
        var waitingRecords = 0
        var writers = 0
    }

    private let state = Mutex(State())
    private let maxWriters: Int
    private let maxRecordsPerGroup: Int
    private let maxWaitingRecords: Int
    private let commit: Commit

    init(maxWriters: Int, maxRecordsPerGroup: Int, maxWaitingRecords: Int, commit: @escaping Commit) {
        self.maxWriters = max(1, maxWriters)
        self.maxRecordsPerGroup = maxRecordsPerGroup
        self.maxWaitingRecords = maxWaitingRecords
        self.commit = commit
    }

    /// Queues `batch` and returns its result once the transaction holding it committed.
    func submit(_ batch: IncomingBatch) async throws -> CollectResult {
        try await withCheckedThrowingContinuation { continuation in
            let start: Bool = state.withLock { state in
                if state.waitingRecords > 0, state.waitingRecords + batch.weight > maxWaitingRecords {
                    continuation.resume(
                        throwing: ServiceError.unavailable(
                            .collectorBusy, "the collector has \(state.waitingRecords) records waiting to be written; retry shortly"
                        ))
                    return false
                }
                state.waiting.append(Waiting(batch: batch, continuation: continuation))
                state.waitingRecords += batch.weight
                guard state.writers < maxWriters else { return false }
                state.writers += 1
                return true
            }
            if start { Task { await self.drain() } }
        }
    }

    /// One writer: takes what is waiting (up to a group's size) and commits it, until nothing waits.
    private func drain() async {
        while let group = nextGroup() {
            await write(group)
        }
    }

    private func nextGroup() -> [Waiting]? {
        state.withLock { state in
            guard !state.waiting.isEmpty else {
                state.writers -= 1
                return nil
            }
            var records = 0
            var count = 0
            for waiting in state.waiting {
                if count > 0, records + waiting.batch.weight > maxRecordsPerGroup { break }
                records += waiting.batch.weight
                count += 1
            }
            let group = Array(state.waiting.prefix(count))
            state.waiting.removeFirst(count)
            state.waitingRecords -= records
            return group
        }
    }

    /// Commits a group; if it fails and held several batches, each is tried alone, so one batch the
    /// database refuses does not fail the others.
    private func write(_ group: [Waiting]) async {
        do {
            let results = try await commit(group.map(\.batch))
            for (waiting, result) in zip(group, results) { waiting.continuation.resume(returning: result) }
        } catch {
            guard group.count > 1 else {
                group[0].continuation.resume(throwing: error)
                return
            }
            for waiting in group {
                do {
                    let result = try await commit([waiting.batch])
                    waiting.continuation.resume(returning: result[0])
                } catch {
                    waiting.continuation.resume(throwing: error)
                }
            }
        }
    }
}
