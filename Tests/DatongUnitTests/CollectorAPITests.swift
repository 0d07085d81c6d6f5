import DatongContracts
import DatongRuntime
import DatongTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Synchronization
import Testing

@testable import Collector

/// An `EventStore` in memory: it keeps what it was given and deduplicates by the collector's own
/// key, so a test sees exactly what the API passed on and can make the store fail.
final class InMemoryEventStore: EventStore {
    private let state = Mutex<(batches: [IncomingBatch], keys: Set<RecordKey>)>(([], []))
    /// Thrown by every write while set.
    let failure = Mutex<(any Error)?>(nil)

    var batches: [IncomingBatch] { state.withLock { $0.batches } }

    func write(_ batch: IncomingBatch) async throws -> CollectResult {
        if let error = failure.withLock({ $0 }) { throw error }
        return state.withLock { state in
            state.batches.append(batch)
            var duplicates: [Int] = []
            for (index, record) in batch.records.enumerated() where !state.keys.insert(record.key).inserted {
                duplicates.append(index)
            }
            return batch.result(duplicates: duplicates)
        }
    }
}

/// Reads that remember what they were asked and answer an empty page.
final class RecordingReads: StoredDataReads {
    let queries = Mutex<[String]>([])

    func events(_ query: EventQuery) async throws -> String {
        queries.withLock { $0.append("events \(query)") }
        return #"{"events":[],"next":null}"#
    }

    func rejected(project: String, before: Int64?, limit: Int) async throws -> String {
        queries.withLock { $0.append("rejected \(project) \(before.map(String.init) ?? "-") \(limit)") }
        return #"{"rejected":[],"next":null}"#
    }

    func ingestCounts(project: String, hours: Int) async throws -> String {
        queries.withLock { $0.append("counts \(project) \(hours)") }
        return #"{"hours":\#(hours),"minutes":[]}"#
    }

    func metadata(project: String) async throws -> String {
        queries.withLock { $0.append("metadata \(project)") }
        return #"{"project":"\#(project)","events":[],"properties":[]}"#
    }
}

/// The collector's HTTP contract over a store in memory: what reaches the store, what the answer
/// says, and what a failing store makes of it. (CollectorTests runs the PostgreSQL store itself.)
@Suite("collector API over an in-memory store")
struct CollectorAPITests {
    static let token = "collector-api-test-service-token"

    static func withAPI(
        reads: RecordingReads = RecordingReads(), keys: KeyRule = .trackIDs,
        _ body: @escaping @Sendable (InMemoryEventStore, any TestClientProtocol) async throws -> Void
    ) async throws {
        let store = InMemoryEventStore()
        let router = Router(context: DatongRequestContext.self)
        router.addMiddleware { ErrorMiddleware() }
        CollectorAPI(store: store, reads: reads, serviceToken: ServiceToken(Self.token), maxBatchBytes: 64 << 10, keyRule: { keys })
            .register(on: router)
        try await Application(router: router).test(.router) { client in try await body(store, client) }
    }

    @Test("the live-data reads take their filters, cursor and bounds from the query, and refuse what is out of bounds before reading")
    func readParameters() async throws {
        let reads = RecordingReads()
        try await Self.withAPI(reads: reads) { _, client in
            let auth: HTTPFields = [.authorization: "Bearer \(Self.token)"]
            let id = "0b6f3a2e-8d1c-4f5e-9a7b-1c2d3e4f5a6b"
            let asked = [
                "/v1/projects/shop/events?event=Buy&distinct_id=d%201&user_id=7&before=1795273000000123.\(id)&limit=200",
                "/v1/projects/shop/events", "/v1/projects/shop/rejected?before=42&limit=1", "/v1/projects/shop/ingest-counts?hours=72",
            ]
            for uri in asked {
                let answer = try await client.execute(uri: uri, method: .get, headers: auth)
                #expect(answer.status == .ok, "\(uri): \(String(buffer: answer.body))")
            }
            let recorded = reads.queries.withLock { $0 }
            #expect(recorded.count == 4)
            let cursor = EventCursor(micros: 1_795_273_000_000_123, eventID: UUID(uuidString: id)!)
            #expect(
                recorded.first
                    == "events \(EventQuery(project: "shop", event: "Buy", distinctID: "d 1", userID: 7, before: cursor, limit: 200))")
            #expect(recorded[1] == "events \(EventQuery(project: "shop", limit: ReadBounds.defaultLimit))")
            #expect(recorded[2] == "rejected shop 42 1" && recorded[3] == "counts shop 72")

            let refused = [
                ("/v1/projects/shop/events?limit=201", "invalid_limit"), ("/v1/projects/shop/events?limit=0", "invalid_limit"),
                ("/v1/projects/shop/events?before=12345", "invalid_cursor"), ("/v1/projects/shop/events?before=-1.\(id)", "invalid_cursor"),
                ("/v1/projects/shop/events?user_id=abc", "invalid_value"), ("/v1/projects/shop/rejected?before=0", "invalid_cursor"),
                ("/v1/projects/shop/ingest-counts?hours=73", "invalid_limit"), ("/v1/projects/1shop/events", "invalid_project"),
                ("/v1/projects/shop/events?event=\(String(repeating: "e", count: 1025))", "invalid_value"),
            ]
            for (uri, code) in refused {
                let answer = try await client.execute(uri: uri, method: .get, headers: auth)
                #expect(answer.status == .badRequest && String(buffer: answer.body).contains(code), "\(uri)")
            }
            let anonymous = try await client.execute(uri: "/v1/projects/shop/events", method: .get)
            #expect(anonymous.status == .unauthorized)
            #expect(reads.queries.withLock { $0.count } == 4, "nothing refused reached the reads")
        }
    }

    static func post(_ client: some TestClientProtocol, _ batch: CollectBatch) async throws -> TestResponse {
        try await client.execute(
            uri: "/v1/batches", method: .post, headers: [.authorization: "Bearer \(Self.token)"], body: ByteBuffer(bytes: batch.jsonBytes))
    }

    static func record(_ event: String, time: Int64 = 1_795_273_000_000, project: String = "default") -> CollectRecord {
        CollectRecord(project: project, type: "track", event: event, time: time, distinctId: "d1", userId: 1, properties: "{}")
    }

    @Test("a record the collector cannot store goes to the store as rejected, alone, and the answer names it at its position")
    func unstorableRecordAlone() async throws {
        try await Self.withAPI { store, client in
            let batch = CollectBatch(
                receivedAt: 1_795_273_000_000, records: [Self.record("a"), Self.record("b\u{0}"), Self.record("c"), Self.record("c")])
            let answer = try await Self.post(client, batch)
            #expect(answer.status == .ok)
            let result = try CollectResult(jsonBytes: Array(buffer: answer.body))
            #expect(result.stored == 2 && result.duplicates == 1 && result.rejected == 1)
            #expect(result.duplicateIndexes == [3] && result.rejectedIndexes == [1])
            let written = try #require(store.batches.first)
            #expect(store.batches.count == 1)
            #expect(try written.collectRecords().map(\.event) == ["a", "c", "c"])
            #expect(written.rejected.count == 1 && written.rejected[0].reason.contains("event contains a NUL"))
        }
    }

    @Test("both write routes key records by the database's rule: content before the upgrade, track ids after")
    func keysByTheDatabasesRule() async throws {
        let upgrade: Int64 = 1_795_273_000_000
        let rule = KeyRule(contentKeysBefore: upgrade)
        var records = [Self.record("old", time: upgrade - 1), Self.record("new", time: upgrade)]
        (records[0].trackId, records[1].trackId) = (7, 8)
        let (old, new) = (records[0], records[1])
        try await Self.withAPI(keys: rule) { store, client in
            let batch = CollectBatch(receivedAt: upgrade, records: [old, new])
            #expect(try await Self.post(client, batch).status == .ok)
            let group = CollectBatchGroup(batches: [batch])
            let grouped = try await client.execute(
                uri: "/v1/batch-groups", method: .post, headers: [.authorization: "Bearer \(Self.token)"], body: ByteBuffer(bytes: group.jsonBytes))
            #expect(grouped.status == .ok)
            #expect(store.batches.count == 2)
            for written in store.batches {
                // Stored before the upgrade under its content key, the old record keeps it.
                #expect(written.records.map(\.key) == [RecordKey(of: old, rule: KeyRule(contentKeysBefore: .max)), RecordKey(of: new)])
                #expect(RecordKey(of: old, rule: KeyRule(contentKeysBefore: .max)) != RecordKey(of: old))
            }
        }
    }

    @Test("a group's batches are answered each on its own, in order: one that is not a batch, or has a bad time, costs the others nothing")
    func group() async throws {
        try await Self.withAPI { store, client in
            let good = CollectBatch(receivedAt: 1_795_273_000_000, records: [Self.record("a"), Self.record("b\u{0}"), Self.record("a")])
            let late = CollectBatch(receivedAt: -1, records: [Self.record("late")])
            let again = CollectBatch(receivedAt: 1_795_273_000_001, records: [Self.record("a"), Self.record("c")])
            let body = CollectBatchGroup.jsonBytes(joining: [good.jsonBytes, late.jsonBytes, Array(#"{"records":[]}"#.utf8), again.jsonBytes])
            let answer = try await client.execute(
                uri: "/v1/batch-groups", method: .post, headers: [.authorization: "Bearer \(Self.token)"], body: ByteBuffer(bytes: body))
            #expect(answer.status == .ok)
            let outcomes = try CollectGroupResult(jsonBytes: Array(buffer: answer.body)).outcomes
            #expect(outcomes.count == 4)
            #expect(
                outcomes[0]
                    == .written(
                        CollectResult(
                            stored: 1, duplicates: 1, rejected: 1, duplicateIndexes: [2], rejectedIndexes: [1],
                            rejectedReasons: ["collector: event contains a NUL character"])))
            if case .refused(400, "invalid_batch", let late) = outcomes[1] {
                #expect(late.contains("receivedAt -1"))
            } else {
                Issue.record("a batch with a bad time: \(outcomes[1])")
            }
            if case .refused(400, "invalid_body", let missing) = outcomes[2] {
                #expect(missing.contains("batches[2].receivedAt is missing"))
            } else {
                Issue.record("a body that is not a batch: \(outcomes[2])")
            }
            #expect(outcomes[3] == .written(CollectResult(stored: 1, duplicates: 1, rejected: 0, duplicateIndexes: [0])))
            #expect(try store.batches.flatMap { try $0.collectRecords().compactMap(\.event) }.sorted() == ["a", "a", "a", "c"])

            // When the store fails, each batch is told to retry; a body that is no group is a 400.
            store.failure.withLock { $0 = ServiceError(.serviceUnavailable, .collectorBusy, "too many batches waiting") }
            let busy = try await client.execute(
                uri: "/v1/batch-groups", method: .post, headers: [.authorization: "Bearer \(Self.token)"], body: ByteBuffer(bytes: body))
            let refused = try CollectGroupResult(jsonBytes: Array(buffer: busy.body)).outcomes
            #expect(refused[0] == .refused(status: 503, error: "collector_busy", message: "too many batches waiting"))
            for text in [#"{"batches":5}"#, #"{}"#, "[]"] {
                let answer = try await client.execute(
                    uri: "/v1/batch-groups", method: .post, headers: [.authorization: "Bearer \(Self.token)"], body: ByteBuffer(string: text))
                #expect(answer.status == .badRequest, "\(text)")
            }
            let anonymous = try await client.execute(uri: "/v1/batch-groups", method: .post, body: ByteBuffer(bytes: body))
            #expect(anonymous.status == .unauthorized)
        }
    }

    @Test("nothing reaches the store without the service token, or from a body that is not a batch")
    func refusedBeforeTheStore() async throws {
        try await Self.withAPI { store, client in
            let batch = CollectBatch(receivedAt: 1_795_273_000_000, records: [Self.record("a")])
            let anonymous = try await client.execute(uri: "/v1/batches", method: .post, body: ByteBuffer(bytes: batch.jsonBytes))
            #expect(anonymous.status == .unauthorized)
            let headers: HTTPFields = [.authorization: "Bearer \(Self.token)"]
            let garbage = try await client.execute(uri: "/v1/batches", method: .post, headers: headers, body: ByteBuffer(string: #"{"records": 5}"#))
            #expect(garbage.status == .badRequest)
            let late = CollectBatch(receivedAt: -1, records: [Self.record("a")])
            #expect(try await Self.post(client, late).status == .badRequest)
            #expect(store.batches.isEmpty)
        }
    }

    @Test("when the store fails, the batch is not acknowledged: the caller gets the store's refusal and retries")
    func failingStore() async throws {
        try await Self.withAPI { store, client in
            store.failure.withLock { $0 = ServiceError(.serviceUnavailable, .collectorBusy, "too many batches waiting") }
            let batch = CollectBatch(receivedAt: 1_795_273_000_000, records: [Self.record("a")])
            let refused = try await Self.post(client, batch)
            #expect(refused.status == .serviceUnavailable)
            #expect(String(buffer: refused.body).contains("collector_busy"))
            store.failure.withLock { $0 = nil }
            let retried = try CollectResult(jsonBytes: Array(buffer: try await Self.post(client, batch).body))
            #expect(retried.stored == 1 && retried.duplicates == 0)
        }
    }
}
