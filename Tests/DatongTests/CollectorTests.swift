import DatongContracts
import DatongJSON
import DatongPostgres
import DatongTestSupport
import Foundation
import Synchronization
import Testing

@testable import Collector

extension PostgresEventStore {
    /// Writes `batch` as the collector's API does, positions in the answer as sent.
    func write(_ batch: CollectBatch) async throws -> CollectResult {
        try await write(try IncomingBatch(batch))
    }

    static func commit(_ batches: [CollectBatch], pool: PostgresPool, partitions: EventPartitions) async throws -> [CollectResult] {
        try await commit(batches.map(IncomingBatch.init), pool: pool, partitions: partitions, catalog: Catalog())
    }

    static func commit(
        _ batches: [CollectBatch], pool: PostgresPool, partitions: EventPartitions, writing: EventWriting
    ) async throws -> [CollectResult] {
        try await commit(batches.map(IncomingBatch.init), pool: pool, partitions: partitions, catalog: CatalogChanges(), writing: writing).0
    }
}

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

    /// A `track` event of one device and user.
    static func event(_ name: String = "E", time: Int64 = base) -> CollectRecord {
        CollectRecord(project: "default", type: "track", event: name, time: time, distinctId: "d", userId: 1, properties: "{}")
    }

    private func profile(_ type: String, user: Int64 = 7, at offset: Int64, _ properties: PropertiesText) -> CollectRecord {
        CollectRecord(project: "default", type: type, event: nil, time: Self.base + offset, distinctId: "u\(user)", userId: user, properties: properties)
    }

    private func item(_ type: String, id: String, at offset: Int64, _ properties: PropertiesText = "{}") -> CollectRecord {
        CollectRecord(
            project: "default", type: type, event: nil, time: Self.base + offset, distinctId: nil, userId: nil,
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

    @Test("every event field of a record has its column in collector.events and analytics.events, and lands in it")
    func everyFieldStored() async throws {
        try await withStore { store, url in
            let columns = { (table: String) in
                try await TestDatabase.rows(
                    url,
                    """
                    SELECT column_name FROM information_schema.columns WHERE table_schema || '.' || table_name = '\(table)'
                    """
                ).compactMap(\.first)
            }
            let eventFields = CollectRecord.Field.allCases.filter(\.isEventColumn)
            let table = try await columns("collector.events")
            let view = try await columns("analytics.events")
            for field in eventFields {
                #expect(table.contains(field.column), "collector.events has no column \(field.column)")
                #expect(view.contains(field.column), "analytics.events does not show \(field.column)")
            }
            // The table has no column the collector does not write (it would be left empty), but
            // those PostgreSQL fills.
            let written = EventRows.columns + EventRows.filledByTable
            #expect(Set(table) == Set(written), "\(Set(table).symmetricDifference(written))")

            let full = Fixtures.fullRecord
            var record = full
            (record.itemType, record.itemId, record.time) = (nil, nil, Self.base)
            let batch = CollectBatch(receivedAt: Self.base + 60_000, records: [record])
            // Through the wire codec, as the gateway sends it.
            #expect(try await store.write(CollectBatch(jsonBytes: batch.jsonBytes)).stored == 1)
            let names = eventFields.map(\.column)
            let stored = try await TestDatabase.rows(
                url,
                """
                SELECT \(names.map { "\($0)::text" }.joined(separator: ", ")) FROM analytics.events
                """)
            #expect(stored.count == 1)
            #expect(try await TestDatabase.rows(url, "SELECT count(*) FROM collector.events WHERE stored_xid IS NOT NULL") == [["1"]])
            let row = Dictionary(uniqueKeysWithValues: zip(names, stored.first ?? []))
            for field in eventFields {
                let expected: String? =
                    switch field {
                    case .project: full.project
                    case .type: full.type
                    case .event: full.event
                    case .time: "2026-11-21 14:56:40+00"  // Self.base
                    case .distinctId: full.distinctId
                    case .userId: full.userId.map(String.init)
                    case .anonymousId: full.anonymousId
                    case .loginId: full.loginId
                    case .lib: full.lib
                    case .libVersion: full.libVersion
                    case .appVersion: full.appVersion
                    case .hybridH5: "true"
                    case .properties: #"{"price": 129.5, "$carrier": "中国移动"}"#
                    case .libMethod: full.libMethod
                    case .libDetail: full.libDetail
                    case .originalId: full.originalId
                    case .identities: #"{"$identity_idfv": "I", "$identity_login_id": "login"}"#
                    case .trackId: full.trackId.map(String.init)
                    case .schema: full.schema
                    case .itemType, .itemId: nil
                    }
                #expect(row[field.column] == expected, "\(field.column): \(String(describing: row[field.column]))")
            }
        }
    }

    @Test("each profile operation applies as Sensors defines it")
    func operations() async throws {
        try await withStore { store, url in
            _ = try await write(
                store,
                [
                    profile("profile_set", at: 0, #"{"name":"Alice","city":"Hangzhou","visits":1,"tags":["a"],"gone":true}"#),
                    profile("profile_set_once", at: 1, #"{"name":"Bob","first_seen":"2026-01-01"}"#),
                    profile("profile_increment", at: 2, #"{"visits":2,"points":5}"#),
                    profile("profile_append", at: 3, #"{"tags":["b","c"],"new_list":["x"]}"#),
                    profile("profile_unset", at: 4, #"{"gone":true}"#),
                ])
            let properties = try #require(try await profileJSON(url))
            #expect(properties["name"] as? String == "Alice")  // set_once does not overwrite
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

    @Test("records an SDK made separately are stored separately, however alike; a retry of them is stored once")
    func trackIDsIdentifyRecords() async throws {
        try await withStore { store, url in
            // Five `profileIncrement("clicks", 1)` in one millisecond, as the Java SDK sends them:
            // alike in everything but the track id.
            var increments: [CollectRecord] = []
            for trackId in Int64(1)...5 {
                var record = profile("profile_increment", at: 0, #"{"clicks":1}"#)
                record.trackId = -2_000_000_000 + trackId
                increments.append(record)
            }
            var events: [CollectRecord] = []
            for trackId: Int64 in [1001, 1002] {
                var event = Self.event("Buy")
                event.trackId = trackId
                events.append(event)
            }
            let first = try await write(store, increments + events)
            #expect(first.stored == 7 && first.duplicates == 0)
            #expect(try await profileJSON(url)?["clicks"] as? Int == 5)
            #expect(try await TestDatabase.rows(url, "SELECT track_id::text FROM analytics.events ORDER BY track_id") == [["1001"], ["1002"]])

            // The SDK retries the whole request (only `_flush_time`, which is not stored, changed).
            let retry = try await write(store, increments + events)
            #expect(retry.stored == 0 && retry.duplicates == 7)
            #expect(try await profileJSON(url)?["clicks"] as? Int == 5)
            #expect(try await TestDatabase.rows(url, "SELECT count(*) FROM analytics.events") == [["2"]])
        }
    }

    @Test("profile and item operations of one millisecond apply in the order sent, and requests in the order they came")
    func sameMillisecondOrder() async throws {
        try await withStore { store, url in
            // Several users, so that no one content-hash order can pass by chance.
            var trackId: Int64 = 0
            func op(_ type: String, user: Int64, _ properties: PropertiesText) -> CollectRecord {
                trackId += 1
                var record = profile(type, user: user, at: 0, properties)
                record.trackId = trackId
                return record
            }
            func itemOp(_ type: String, id: String, _ properties: PropertiesText = "{}") -> CollectRecord {
                trackId += 1
                var record = item(type, id: id, at: 0, properties)
                record.trackId = trackId
                return record
            }
            var records: [CollectRecord] = []
            for user in Int64(1)...6 {
                records += [
                    op("profile_set", user: user, #"{"s":"first"}"#), op("profile_set", user: user, #"{"s":"second"}"#),
                    op("profile_set", user: user, #"{"n":1}"#), op("profile_increment", user: user, #"{"n":2}"#),
                    op("profile_append", user: user, #"{"l":["a"]}"#), op("profile_append", user: user, #"{"l":["b"]}"#),
                    op("profile_append", user: user, #"{"l":["c"]}"#),
                ]
            }
            for id in 1...6 {
                records += [itemOp("item_set", id: "\(id)", #"{"v":1}"#), itemOp("item_delete", id: "\(id)"), itemOp("item_set", id: "\(id)", #"{"v":3}"#)]
            }
            _ = try await write(store, records)
            for user in Int64(1)...6 {
                let properties = try #require(try await profileJSON(url, user: user))
                #expect(properties["s"] as? String == "second", "user \(user)")
                #expect(properties["n"] as? Int == 3, "user \(user)")
                #expect(properties["l"] as? [String] == ["a", "b", "c"], "user \(user)")
            }
            #expect(
                try await TestDatabase.rows(url, "SELECT count(*), min(properties->>'v'), max(properties->>'v') FROM analytics.items") == [["6", "3", "3"]])

            // Two requests received in the same millisecond: the one written later wins.
            for (index, value) in ["x", "y", "z"].enumerated() {
                var set = profile("profile_set", user: 9, at: 0, PropertiesText(#"{"last":"\#(value)"}"#))
                set.trackId = Int64(100 + index)
                _ = try await write(store, [set])
            }
            #expect(try await profileJSON(url, user: 9)?["last"] as? String == "z")

            // A request received earlier but written later (two gateways, or one slow to reach the
            // collector) is still the later one: the order is the order written, not of receipt.
            for (index, (value, receivedLater)) in [("early-written", Int64(5)), ("late-written", Int64(1))].enumerated() {
                var set = profile("profile_set", user: 10, at: 0, PropertiesText(#"{"last":"\#(value)"}"#))
                set.trackId = Int64(200 + index)
                _ = try await store.write(CollectBatch(receivedAt: Self.base + 60_000 + receivedLater, records: [set]))
            }
            #expect(try await profileJSON(url, user: 10)?["last"] as? String == "late-written")
        }
    }

    @Test("writers and replicas racing to send a new property's first values of four types store only values of the type the catalog settles on")
    func firstTypeRace() async throws {
        let url = try await TestDatabase.create()
        let pools = (0..<2).map { _ in PostgresPool(url: url, maxConnections: 4, logger: TestDatabase.logger) }
        do {
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pools[0], logger: TestDatabase.logger)
            // Two replicas, each with its own memory of the catalog and group commit, 4 writers each.
            let replicas = pools.map { PostgresEventStore(pool: $0, writers: 2) }
            let values = ["1.5", #""abc""#, #"["x"]"#, "true"]
            let rounds = 12
            for round in 0..<rounds {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for writer in 0..<8 {
                        group.addTask {
                            let records = (0..<3).map { n in
                                CollectRecord(
                                    project: "default", type: "track", event: "E", time: Self.base + Int64(round * 100 + writer * 10 + n),
                                    distinctId: "d", userId: 1, properties: PropertiesText(#"{"p\#(round)":\#(values[(writer + round) % 4])}"#))
                            }
                            _ = try await replicas[writer % 2].write(CollectBatch(receivedAt: Self.base + 60_000, records: records))
                        }
                    }
                    try await group.waitForAll()
                }
            }
            let misfits = try await TestDatabase.rows(
                url,
                """
                SELECT c.name, c.type, jsonb_typeof(e.properties -> c.name) AS sent, count(*)::text
                FROM collector.catalog_properties c
                JOIN collector.events e ON e.project = c.project AND e.properties ? c.name
                WHERE c.kind = 'event' AND c.name LIKE 'p%'
                  AND jsonb_typeof(e.properties -> c.name) <> CASE c.type WHEN 'NUMBER' THEN 'number' WHEN 'STRING' THEN 'string'
                                                                         WHEN 'LIST' THEN 'array' WHEN 'BOOL' THEN 'boolean' END
                GROUP BY 1, 2, 3 ORDER BY 1, 3
                """)
            #expect(misfits.isEmpty, "rows holding another type than the catalog's: \(misfits)")
            let accounted = try await TestDatabase.rows(
                url,
                "SELECT (SELECT count(*) FROM collector.events) + (SELECT count(*) FROM collector.rejected)")
            #expect(accounted == [[String(rounds * 8 * 3)]], "every record stored or refused")
            #expect(try await TestDatabase.rows(url, "SELECT count(*)::text FROM collector.catalog_properties WHERE name LIKE 'p%'") == [[String(rounds)]])
            for pool in pools { await pool.close() }
        } catch {
            for pool in pools { await pool.close() }
            throw error
        }
    }

    @Test("concurrent requests of one millisecond's profile_set: the profile holds the value of the record numbered last")
    func sameMillisecondRace() async throws {
        try await withStore { store, url in
            // Rounds of 6 writers each setting one user's property in the same millisecond, with
            // receipt times that disagree with the order they reach PostgreSQL in.
            for round in Int64(0)..<20 {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for writer in Int64(0)..<6 {
                        group.addTask {
                            var set = self.profile("profile_set", user: 100 + round, at: round, PropertiesText(#"{"v":"w\#(writer)"}"#))
                            set.trackId = round * 10 + writer
                            _ = try await store.write(CollectBatch(receivedAt: Self.base + 60_000 + (5 - writer), records: [set]))
                        }
                    }
                    try await group.waitForAll()
                }
            }
            let disagreeing = try await TestDatabase.rows(
                url,
                """
                SELECT p.user_id::text, p.properties ->> 'v', last.v FROM collector.profiles p
                JOIN LATERAL (SELECT r.properties ->> 'v' AS v FROM collector.profile_records r
                              WHERE r.project = p.project AND r.user_id = p.user_id ORDER BY r.seq DESC LIMIT 1) last ON true
                WHERE p.properties ->> 'v' IS DISTINCT FROM last.v
                """)
            #expect(try await TestDatabase.rows(url, "SELECT count(*)::text FROM collector.profiles") == [["20"]])
            #expect(disagreeing.isEmpty, "profiles whose value is not the last written record's: \(disagreeing)")
        }
    }

    @Test(
        "a database that stored records before track ids counted finds their retries by the key they were stored with; later records use track ids"
    )
    func upgradeKeepsRetryWindow() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            // The schema as the previous release left it, with one event it stored under its content key.
            try await Migrator.migrate(
                schema: CollectorSchema.name, migrations: Array(CollectorSchema.migrations.prefix(4)), pool: pool, logger: TestDatabase.logger)
            var stored = Self.event("Old")
            stored.trackId = 77
            let contentOnly = KeyRule(contentKeysBefore: .max)
            let oldKey = RecordKey(of: stored, rule: contentOnly)
            try await pool.withConnection { try $0.execute(Self.sharedMonth(MonthPartition(unixMillis: Self.base))) }
            try await pool.withConnection { connection in
                try connection.query(
                    """
                    INSERT INTO collector.events (project, time, event_id, type, event, received_at, distinct_id, properties)
                    VALUES ('default', timestamptz 'epoch' + $1::bigint * interval '1 millisecond', $2::uuid, 'track', 'Old', now(), 'd', '{}')
                    """, [String(Self.base), oldKey.uuidText])
            }
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: TestDatabase.logger)
            let rule = try await StoredKeyRule(pool: pool).current()
            #expect(rule.contentKeysBefore > Self.base && rule.contentKeysBefore != .max)

            let store = PostgresEventStore(pool: pool)
            func write(_ records: [CollectRecord]) async throws -> CollectResult {
                let batch = CollectBatch(receivedAt: Self.base + 60_000, records: records)
                return try await store.write(try IncomingBatch(jsonBytes: batch.jsonBytes, keys: rule))
            }
            // The retry of the stored event, after the upgrade: found.
            #expect(try await write([stored]).duplicates == 1)
            // Records made after the upgrade are identified by their track ids.
            var later = [Self.event("New", time: rule.contentKeysBefore + 1), Self.event("New", time: rule.contentKeysBefore + 1)]
            (later[0].trackId, later[1].trackId) = (1, 2)
            #expect(try await write(later).stored == 2)
            #expect(
                try await TestDatabase.rows(url, "SELECT event, count(*) FROM analytics.events GROUP BY event ORDER BY event") == [
                    ["New", "2"], ["Old", "1"],
                ])
        }
        // A new database keyed nothing by content: track ids count for every record.
        let fresh = try await TestDatabase.create()
        try await TestDatabase.withPool(fresh) { pool in
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: TestDatabase.logger)
            #expect(try await StoredKeyRule(pool: pool).current() == .trackIDs)
        }
    }

    @Test("concurrent writers of one user's profile lose no record")
    func concurrentWriters() async throws {
        try await withStore { store, url in
            _ = try await write(store, [profile("profile_set", at: -1, "{}")])
            // Each write in its own transaction, as separate collector replicas would (group commit
            // inside one process would fold some of them together and hide the race).
            try await TestDatabase.withPool(url) { pool in
                let partitions = EventPartitions(pool: pool)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for writer in 0..<8 {
                        group.addTask {
                            for step in 0..<5 {
                                let batch = CollectBatch(
                                    receivedAt: Self.base,
                                    records: [
                                        profile("profile_increment", at: Int64(writer * 10 + step), #"{"n":1}"#)
                                    ])
                                _ = try await PostgresEventStore.commit([batch], pool: pool, partitions: partitions)
                            }
                        }
                    }
                    try await group.waitForAll()
                }
            }
            #expect(try await profileJSON(url)?["n"] as? Int == 40)
        }
    }

    @Test("items are set in record-time order and a delete is not undone by an older set")
    func items() async throws {
        try await withStore { store, url in
            _ = try await write(
                store,
                [
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
            let event = Self.event()
            var other = event
            other.project = "shop"
            let bad = RejectedRecord(project: "shop", reason: "test", raw: "{}")
            _ = try await write(store, [event, other, profile("profile_set", at: 0, "{}")], rejected: [bad])
            _ = try await write(store, [event, other], rejected: [bad])
            let rows = try await TestDatabase.rows(
                url,
                """
                SELECT project, received, stored, duplicates, rejected, received = stored + duplicates + rejected
                FROM analytics.ingest_counts ORDER BY project
                """)
            #expect(rows == [["default", "3", "2", "1", "0", "t"], ["shop", "4", "1", "1", "2", "t"]])
            let stored = try await TestDatabase.rows(url, "SELECT count(*) FROM analytics.events")
            #expect(stored == [["2"]])
        }
    }

    @Test("the same batch from concurrent writers is stored once; the others count as duplicates")
    func concurrentRetries() async throws {
        try await withStore { store, url in
            let events = (0..<10).map { Self.event(time: Self.base + Int64($0)) }
            let results = try await withThrowingTaskGroup(of: CollectResult.self) { group in
                for _ in 0..<8 { group.addTask { try await write(store, events) } }
                return try await group.reduce(into: [CollectResult]()) { $0.append($1) }
            }
            #expect(results.map(\.stored).reduce(0, +) == 10)
            #expect(results.map(\.duplicates).reduce(0, +) == 70)
            let rows = try await TestDatabase.rows(
                url,
                """
                SELECT (SELECT count(*) FROM analytics.events), sum(received), sum(stored), sum(duplicates) FROM analytics.ingest_counts
                """)
            #expect(rows == [["10", "80", "10", "70"]])
        }
    }

    @Test("far-past and future records get their partitions; retention drops whole old months, and a replica that still knew one writes on")
    func partitionsAndRetention() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: TestDatabase.logger)
            let partitions = EventPartitions(pool: pool)
            let store = PostgresEventStore(pool: pool, partitions: partitions)
            let replica = PostgresEventStore(pool: pool)
            func event(_ time: Int64) -> CollectRecord { Self.event(time: time) }
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let farPast: Int64 = 978_307_200_000  // 2001-01-01
            let future = now + 40 * 86_400_000
            _ = try await store.write(CollectBatch(receivedAt: now, records: [event(farPast), event(now), event(future)]))
            _ = try await replica.write(CollectBatch(receivedAt: now, records: [event(farPast + 1)]))
            let layout = try await partitions.existing()
            #expect(
                Set(layout.split.map(\.tableName)).isSuperset(of: [
                    "events_2001_01", MonthPartition(unixMillis: now).tableName, MonthPartition(unixMillis: future).tableName,
                ]))
            #expect(layout.shared.isEmpty && layout.projectMonths.contains(ProjectMonth(month: MonthPartition(unixMillis: farPast), project: "default")))

            let maintenance = PartitionMaintenance(
                partitions: partitions, settings: RetentionSettings(pool: pool), retentionDays: 30, logger: TestDatabase.logger)
            let dropped = try await maintenance.maintain(nowMillis: now)
            #expect(dropped == ["events_2001_01_default", "events_2001_01"])
            let ahead = MonthPartition(unixMillis: now).next.next
            #expect(try await partitions.existing().split.map(\.tableName).contains(ahead.tableName))
            // The project writing this month has its tables of both months ahead already (the
            // future record made at most one of them).
            let made = try await partitions.existing().projectMonths
            #expect([ahead, MonthPartition(unixMillis: now).next].allSatisfy { made.contains(ProjectMonth(month: $0, project: "default")) })
            let remaining = try await TestDatabase.rows(url, "SELECT count(*) FROM analytics.events")
            #expect(remaining == [["2"]])

            // The replica still believes events_2001_01 exists: its write must not fail.
            let late = try await replica.write(CollectBatch(receivedAt: now, records: [event(farPast + 2)]))
            #expect(late.stored == 1)
        }
    }

    /// A month's table as releases before collector migration 8 made it: one table for every project.
    static func sharedMonth(_ month: MonthPartition) -> String {
        "CREATE TABLE collector.\(month.tableName) PARTITION OF collector.events FOR VALUES FROM ('\(month.lowerBound)') TO ('\(month.next.lowerBound)')"
    }

    @Test("each project keeps its own months: retention drops only its tables, and a month stored before the split once every project in it is past")
    func retentionPerProject() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let current = MonthPartition(unixMillis: now)
            @Sendable func month(_ back: Int) -> MonthPartition { MonthPartition(year: (current.index - back) / 12, month: (current.index - back) % 12 + 1) }
            func event(_ project: String, _ back: Int, _ name: String) -> CollectRecord {
                var record = Self.event(name, time: month(back).startUnixMillis + 86_400_000)
                record.project = project
                return record
            }
            // The previous release: a month with events of both projects, and next month made ahead, empty.
            let previous = Array(CollectorSchema.migrations.prefix { $0.version < 8 })
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: previous, pool: pool, logger: TestDatabase.logger)
            try await pool.withConnection { connection in
                try connection.execute(Self.sharedMonth(month(4)))
                try connection.execute(Self.sharedMonth(current.next))
            }
            let store = PostgresEventStore(pool: pool, catalog: nil)
            _ = try await store.write(CollectBatch(receivedAt: now, records: [event("shop", 4, "Old"), event("news", 4, "Old")]))
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: TestDatabase.logger)
            let partitions = EventPartitions(pool: pool)
            var layout = try await partitions.existing()
            // The month holding events stays one table; the empty one is gone, to come back split.
            #expect(layout.shared == [month(4)] && !layout.months.contains(current.next))

            let writer = PostgresEventStore(pool: pool, partitions: partitions)
            let records = [3, 2, 1, 0].flatMap { back in [event("shop", back, "S\(back)"), event("news", back, "N\(back)")] }
            #expect(try await writer.write(CollectBatch(receivedAt: now, records: records)).stored == 8)
            layout = try await partitions.existing()
            #expect(layout.projectMonths.count == 8 && layout.split.isSuperset(of: [month(3), month(0)]))

            let settings = RetentionSettings(pool: pool)
            let maintenance = PartitionMaintenance(partitions: partitions, settings: settings, retentionDays: 0, logger: TestDatabase.logger)
            func count(_ project: String) async throws -> String? {
                try await TestDatabase.rows(url, "SELECT count(*) FROM analytics.events WHERE project = '\(project)'").first?[0] ?? nil
            }
            // shop keeps this month and the one before; news keeps everything (RETENTION_DAYS 0).
            try await settings.set(ProjectRetention(project: "shop", months: 1))
            var plan = try await maintenance.plan(try await maintenance.policy(), nowMillis: now)
            #expect(plan.projects == [ProjectRetention(project: "shop", months: 1)] && plan.cutoff == nil)
            #expect(plan.partitions.map(\.name) == ["\(month(3).tableName)_shop", "\(month(2).tableName)_shop"])
            #expect(plan.partitions.allSatisfy { $0.project == "shop" && $0.rows == [RetentionPlan.ProjectRows(project: "shop", rows: 1)] })
            var dropped = try await maintenance.maintain(nowMillis: now)
            #expect(dropped == plan.partitions.map(\.name))
            let (shop3, news5) = (try await count("shop"), try await count("news"))
            #expect(shop3 == "3" && news5 == "5")

            // news keeps two months: its month(3) goes, with month(3)'s emptied table, and the shared
            // month, now past for both projects in it.
            try await settings.set(ProjectRetention(project: "news", months: 2))
            plan = try await maintenance.plan(try await maintenance.policy(), nowMillis: now)
            #expect(plan.partitions.map(\.name) == [month(4).tableName, "\(month(3).tableName)_news"])
            #expect(plan.partitions.first?.project == nil && plan.partitions.first?.rows.map(\.project) == ["news", "shop"])
            dropped = try await maintenance.maintain(nowMillis: now)
            #expect(dropped == [month(4).tableName, "\(month(3).tableName)_news", month(3).tableName])
            let (shop2, news3) = (try await count("shop"), try await count("news"))
            #expect(shop2 == "2" && news3 == "3")
            #expect(try await maintenance.plan(try await maintenance.policy(), nowMillis: now).partitions.isEmpty)
        }
    }

    @Test("each way of writing events stores a group's new events once and counts stored and repeated ones as duplicates")
    func eventWritingModes() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: TestDatabase.logger)
            let partitions = EventPartitions(pool: pool)
            func event(_ name: String) -> CollectRecord { Self.event(name) }
            let stored = event("Stored")
            _ = try await PostgresEventStore.commit([CollectBatch(receivedAt: Self.base, records: [stored])], pool: pool, partitions: partitions)
            // Optimistic: an event stored earlier fails the COPY, and the whole transaction with it.
            await #expect(throws: PostgresError.self) {
                try await PostgresEventStore.commit(
                    [CollectBatch(receivedAt: Self.base, records: [stored, event("New")])], pool: pool, partitions: partitions, writing: .optimistic
                )
            }
            for (writing, name) in [(PostgresEventStore.EventWriting.lookUp, "A"), (.staging, "B")] {
                let results = try await PostgresEventStore.commit(
                    [
                        CollectBatch(receivedAt: Self.base, records: [stored, event(name)]),
                        CollectBatch(receivedAt: Self.base, records: [event(name)]),
                    ], pool: pool, partitions: partitions, writing: writing)
                #expect(results.map(\.stored) == [1, 0], "\(writing)")
                #expect(results.map(\.duplicateIndexes) == [[0], [0]], "\(writing)")
            }
            // The retried group as a whole goes on from optimistic to a lookup.
            let retried = try await PostgresEventStore.commit(
                [CollectBatch(receivedAt: Self.base, records: [stored, event("New"), event("New")])], pool: pool, partitions: partitions
            )
            #expect(retried.first?.duplicateIndexes == [0, 2])
            let rows = try await TestDatabase.rows(url, "SELECT event, count(*) FROM analytics.events GROUP BY event ORDER BY event")
            #expect(rows == [["A", "1"], ["B", "1"], ["New", "1"], ["Stored", "1"]])
            let counts = try await TestDatabase.rows(url, "SELECT sum(received), sum(stored), sum(duplicates) FROM analytics.ingest_counts")
            #expect(counts == [["10", "4", "6"]])
        }
    }

    @Test("a connection whose first transaction rolled back still has its staging tables for the retry")
    func stagingTablesAfterRollback() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: TestDatabase.logger)
            let stored = Self.event("Stored")
            _ = try await PostgresEventStore.commit(
                [CollectBatch(receivedAt: Self.base, records: [stored])], pool: pool, partitions: EventPartitions(pool: pool))
        }
        // A fresh connection's first transaction creates the staging tables, then fails (the event is
        // stored already) and rolls back; the retry on the same connection needs the tables.
        let single = PostgresPool(url: url, maxConnections: 1, logger: TestDatabase.logger)
        let retried: [CollectResult]
        do {
            retried = try await PostgresEventStore.commit(
                [CollectBatch(receivedAt: Self.base, records: [Self.event("Stored"), profile("profile_set", at: 1, #"{"plan":"pro"}"#)])],
                pool: single, partitions: EventPartitions(pool: single))
            await single.close()
        } catch {
            await single.close()
            throw error
        }
        #expect(retried.map(\.stored) == [1])
        #expect(retried.map(\.duplicateIndexes) == [[0]])
        let plan = try await TestDatabase.rows(url, "SELECT properties->>'plan' FROM analytics.profiles WHERE user_id = 7")
        #expect(plan == [["pro"]])
    }

    @Test("an event another transaction is storing when the collector writes the same event is counted as a duplicate")
    func raceWithAnotherWriter() async throws {
        try await withStore { store, url in
            let event = Self.event()
            var sameMonth = event
            sameMonth.time += 1
            _ = try await write(store, [sameMonth])
            let id = RecordKey(of: event).uuidText
            // Another writer inserts the same event and commits only after the collector has looked.
            let inserted = Mutex(false)
            let other = Task.detached {
                try await TestDatabase.withPool(url) { pool in
                    try await pool.withConnection { connection in
                        try connection.execute("BEGIN")
                        try connection.query(
                            """
                            INSERT INTO collector.events (project, time, event_id, type, event, received_at, distinct_id, properties)
                            VALUES ('default', timestamptz 'epoch' + $1::bigint * interval '1 millisecond', $2::uuid, 'track', 'E', now(), 'd', '{}')
                            """, [String(Self.base), id])
                        inserted.withLock { $0 = true }
                        Thread.sleep(forTimeInterval: 0.6)
                        try connection.execute("COMMIT")
                    }
                }
            }
            for _ in 0..<500 where !inserted.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(10)) }
            let result = try await write(store, [event])
            try await other.value
            #expect(result.duplicates == 1)
            #expect(result.stored == 0)
            #expect(try await TestDatabase.rows(url, "SELECT count(*) FROM analytics.events") == [["2"]])
        }
    }
}
