import DatongContracts
import DatongRuntime
import DatongTestSupport
import HTTPTypes
import Synchronization
import Testing

@testable import Collector

/// Group commit without a database: a fake transaction that takes a while and remembers its groups.
@Suite("collector: group commit")
struct GroupCommitTests {
    final class FakeDatabase: Sendable {
        let groups = Mutex<[[Int]]>([])

        /// Each batch's `receivedAt` names it; a batch whose name is negative is refused.
        func commit(_ batches: [IncomingBatch]) async throws -> [CollectResult] {
            try await Task.sleep(for: .milliseconds(20))
            let names = batches.map { Int($0.receivedAt) }
            groups.withLock { $0.append(names) }
            if names.contains(where: { $0 < 0 }) { throw ServiceError.badRequest(ErrorCode("test_refusal"), "refused") }
            return batches.map { CollectResult(stored: Int($0.receivedAt), duplicates: 0, rejected: 0) }
        }
    }

    private func batch(_ name: Int, records: Int = 1) throws -> IncomingBatch {
        let record = CollectRecord(project: "p", type: "track", event: "E", time: 1, distinctId: "d", userId: nil, properties: "{}")
        return try IncomingBatch(CollectBatch(receivedAt: Int64(name), records: Array(repeating: record, count: records)))
    }

    @Test("concurrent batches share transactions, and each caller gets its own batch's result")
    func folding() async throws {
        let database = FakeDatabase()
        let group = GroupCommit(maxWriters: 2, maxRecordsPerGroup: 1_000, maxWaitingRecords: 10_000) { try await database.commit($0) }
        let answers = try await withThrowingTaskGroup(of: (Int, Int).self) { tasks in
            for name in 1...40 { tasks.addTask { (name, try await group.submit(try batch(name)).stored) } }
            return try await tasks.reduce(into: [:]) { $0[$1.0] = $1.1 }
        }
        #expect(answers.count == 40)
        #expect(answers.allSatisfy { $0.key == $0.value })
        let groups = database.groups.withLock { $0 }
        #expect(groups.flatMap { $0 }.sorted() == Array(1...40))
        #expect(groups.count < 40, "\(groups.count) transactions for 40 concurrent batches")
    }

    @Test("a batch the database refuses fails alone; the others in its group are written")
    func isolation() async throws {
        let database = FakeDatabase()
        let group = GroupCommit(maxWriters: 1, maxRecordsPerGroup: 1_000, maxWaitingRecords: 10_000) { try await database.commit($0) }
        let outcomes = await withTaskGroup(of: (Int, Bool).self) { tasks in
            for name in [1, 2, -3, 4, 5] {
                tasks.addTask { (name, (try? await group.submit(try batch(name))) != nil) }
            }
            return await tasks.reduce(into: [:]) { $0[$1.0] = $1.1 }
        }
        #expect(outcomes == [1: true, 2: true, -3: false, 4: true, 5: true])
    }

    @Test("beyond the waiting limit a batch is refused with 503 and Retry-After, not queued")
    func overload() async throws {
        let database = FakeDatabase()
        let group = GroupCommit(maxWriters: 1, maxRecordsPerGroup: 100, maxWaitingRecords: 100) { try await database.commit($0) }
        let refusals = await withTaskGroup(of: ServiceError?.self) { tasks in
            for name in 1...10 {
                tasks.addTask {
                    do {
                        _ = try await group.submit(try batch(name, records: 40))
                        return nil
                    } catch {
                        return error as? ServiceError
                    }
                }
            }
            return await tasks.reduce(into: [ServiceError]()) { if let error = $1 { $0.append(error) } }
        }
        #expect(!refusals.isEmpty)
        #expect(refusals.allSatisfy { $0.status == .serviceUnavailable && $0.retryAfterSeconds != nil && $0.code == .collectorBusy })
        let written = database.groups.withLock { $0.flatMap { $0 } }
        #expect(written.count + refusals.count == 10)
    }
}
