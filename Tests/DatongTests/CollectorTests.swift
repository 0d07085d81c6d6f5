@testable import Collector
import DatongContracts
import DatongPostgres
import Foundation
import Testing

/// The collector's store against a real PostgreSQL: profile and item semantics, and counts that add up.
@Suite("collector: profiles, items and ingest counts")
struct CollectorTests {
    static let base: Int64 = 1_795_273_000_000

    /// A migrated database and a store writing to it.
    private func withStore(_ body: (PostgresEventStore, String) async throws -> Void) async throws {
        let url = try await TestDatabase.create()
        let pool = PostgresPool(url: url, maxConnections: 4, logger: TestDatabase.logger)
        do {
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: TestDatabase.logger)
            try await body(PostgresEventStore(pool: pool), url)
            await pool.close()
        } catch {
            await pool.close()
            throw error
        }
    }

    private func profile(_ type: String, user: Int64 = 7, at offset: Int64, _ properties: String) -> CollectRecord {
        CollectRecord(project: "default", type: type, event: nil, time: Self.base + offset, distinctId: "u\(user)", userId: user, properties: properties)
    }

    private func item(_ type: String, id: String, at offset: Int64, _ properties: String = "{}") -> CollectRecord {
        CollectRecord(project: "default", type: type, event: nil, time: Self.base + offset, distinctId: nil, userId: nil,
                      properties: properties, itemType: "book", itemId: id)
    }

    private func write(_ store: PostgresEventStore, _ records: [CollectRecord], rejected: [RejectedRecord] = []) async throws -> CollectResult {
        try await store.write(CollectBatch(receivedAt: Self.base + 60_000, records: records, rejected: rejected))
    }

    private func profileJSON(_ url: String, user: Int64 = 7) async throws -> [String: Any]? {
        let rows = try await TestDatabase.rows(url, "SELECT properties::text FROM analytics.profiles WHERE user_id = $1", [String(user)])
        guard let text = rows.first?[0] else { return nil }
        return try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
    }

    @Test("each profile operation applies as Sensors defines it")
    func operations() async throws {
        try await withStore { store, url in
            _ = try await write(store, [
                profile("profile_set", at: 0, #"{"name":"Alice","city":"Hangzhou","visits":1,"tags":["a"],"gone":true}"#),
                profile("profile_set_once", at: 1, #"{"name":"Bob","first_seen":"2026-01-01"}"#),
                profile("profile_increment", at: 2, #"{"visits":2,"points":5,"name":3}"#),
                profile("profile_append", at: 3, #"{"tags":["b","c"],"new_list":["x"]}"#),
                profile("profile_unset", at: 4, #"{"gone":true}"#),
            ])
            let properties = try #require(try await profileJSON(url))
            #expect(properties["name"] as? String == "Alice")        // set_once does not overwrite; increment skips text
            #expect(properties["first_seen"] as? String == "2026-01-01")
            #expect(properties["visits"] as? Int == 3)
            #expect(properties["points"] as? Int == 5)
            #expect(properties["tags"] as? [String] == ["a", "b", "c"])
            #expect(properties["new_list"] as? [String] == ["x"])
            #expect(properties["gone"] == nil)
            #expect(properties["city"] as? String == "Hangzhou")

            _ = try await write(store, [profile("profile_delete", at: 5, "{}")])
            #expect(try await profileJSON(url) == nil)
            _ = try await write(store, [profile("profile_set", at: 6, #"{"name":"Carol"}"#)])
            #expect(try await profileJSON(url)?["name"] as? String == "Carol")
            #expect(try await profileJSON(url)?["city"] == nil)
        }
    }

    @Test("records arriving out of order give the profile their times say, not their arrival order")
    func outOfOrder() async throws {
        try await withStore { store, url in
            // The newer value arrives first, in its own batch; the older one arrives later.
            _ = try await write(store, [profile("profile_set", at: 2_000, #"{"plan":"pro"}"#)])
            _ = try await write(store, [profile("profile_set", at: 1_000, #"{"plan":"free","city":"Beijing"}"#)])
            _ = try await write(store, [profile("profile_set_once", at: 500, #"{"source":"ad"}"#)])
            _ = try await write(store, [profile("profile_set_once", at: 100, #"{"source":"search"}"#)])
            let properties = try #require(try await profileJSON(url))
            #expect(properties["plan"] as? String == "pro")
            #expect(properties["city"] as? String == "Beijing")
            #expect(properties["source"] as? String == "search")
            let updated = try await TestDatabase.rows(url, "SELECT (extract(epoch FROM updated_at) * 1000)::bigint FROM analytics.profiles")
            #expect(updated.first?[0] == String(Self.base + 2_000))
        }
    }

    @Test("a retried profile record is not applied twice")
    func retriedIncrement() async throws {
        try await withStore { store, url in
            let increment = profile("profile_increment", at: 0, #"{"visits":1}"#)
            _ = try await write(store, [increment])
            let retry = try await write(store, [increment])
            #expect(retry.duplicates == 1)
            #expect(try await profileJSON(url)?["visits"] as? Int == 1)
        }
    }

    @Test("concurrent writers of one user's profile lose no record")
    func concurrentWriters() async throws {
        try await withStore { store, url in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<8 {
                    group.addTask {
                        for step in 0..<5 {
                            _ = try await write(store, [profile("profile_increment", at: Int64(writer * 10 + step), #"{"n":1}"#)])
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await profileJSON(url)?["n"] as? Int == 40)
        }
    }

    @Test("items are set in record-time order and a delete is not undone by an older set")
    func items() async throws {
        try await withStore { store, url in
            _ = try await write(store, [
                item("item_set", id: "1", at: 0, #"{"title":"Old","price":1}"#),
                item("item_set", id: "1", at: 10, #"{"title":"New"}"#),
                item("item_set", id: "2", at: 0, #"{"title":"Gone"}"#),
                item("item_delete", id: "2", at: 20),
            ])
            _ = try await write(store, [item("item_set", id: "2", at: 5, #"{"title":"Late"}"#)])
            let rows = try await TestDatabase.rows(url, "SELECT item_id, properties->>'title', properties->>'price' FROM analytics.items ORDER BY item_id")
            #expect(rows == [["1", "New", "1"]])
        }
    }

    @Test("ingest counts add up: received = stored + duplicates + rejected, per project and minute")
    func counts() async throws {
        try await withStore { store, url in
            let event = CollectRecord(project: "default", type: "track", event: "E", time: Self.base, distinctId: "d", userId: 1, properties: "{}")
            var other = event
            other.project = "shop"
            let bad = RejectedRecord(project: "shop", reason: "test", raw: "{}")
            _ = try await write(store, [event, other, profile("profile_set", at: 0, "{}")], rejected: [bad])
            _ = try await write(store, [event, other], rejected: [bad])
            let rows = try await TestDatabase.rows(url, """
                SELECT project, received, stored, duplicates, rejected, received = stored + duplicates + rejected
                FROM analytics.ingest_counts ORDER BY project
                """)
            #expect(rows == [["default", "3", "2", "1", "0", "t"], ["shop", "4", "1", "1", "2", "t"]])
            let stored = try await TestDatabase.rows(url, "SELECT count(*) FROM analytics.events")
            #expect(stored == [["2"]])
        }
    }
}
