import BenchSupport
import Collector
import DatongPostgres
import Foundation
import Logging

/// What `collector.events`' design costs on writing and on reading (`--storage`): the collector's
/// COPY rows written into variants of the table, each measured for events/s, the bytes the table
/// and its indexes take, the WAL written, and the time of three queries analysts run. The
/// trade-offs are in docs/BENCHMARKS.md; the shipped schema is the first row.
struct StorageVariant: Sendable {
    let name: String
    /// Why the variant is not shipped, when it cannot be (printed beside it).
    let caveat: String
    /// Run after the migrations, before the partitions are created (which inherit the indexes).
    let schema: String
    /// `ALTER DATABASE … SET` settings, which the COPY connections pick up.
    let settings: [String]
    /// `properties` and `identities` are `json`: the rows' jsonb fields lose their version byte.
    let jsonColumns: Bool

    init(_ name: String, caveat: String = "", schema: String = "", settings: [String] = [], jsonColumns: Bool = false) {
        self.name = name
        self.caveat = caveat
        self.schema = schema
        self.settings = settings
        self.jsonColumns = jsonColumns
    }

    static let secondaryIndexes = "DROP INDEX collector.events_project_event_time; DROP INDEX collector.events_project_user;"
    static let all: [StorageVariant] = [
        StorageVariant("as shipped (jsonb, primary key, 2 indexes)"),
        StorageVariant("without the 2 secondary indexes", schema: secondaryIndexes),
        StorageVariant(
            "without any index", caveat: "no dedup: not an option",
            schema: secondaryIndexes + " ALTER TABLE collector.events DROP CONSTRAINT events_pkey;"),
        StorageVariant(
            "properties and identities as json", caveat: "no ? or @> operators, no GIN",
            schema: """
                DROP VIEW analytics.events CASCADE;
                ALTER TABLE collector.events ALTER COLUMN properties TYPE json, ALTER COLUMN identities TYPE json;
                """,
            jsonColumns: true),
        StorageVariant("wal_compression = lz4", settings: ["wal_compression = 'lz4'"]),
        StorageVariant("synchronous_commit = off", caveat: "acknowledges before durable: not an option", settings: ["synchronous_commit = off"]),
    ]

    /// The analysts' queries timed on each variant, with what each one reads.
    static let queries: [(name: String, sql: String)] = [
        (
            "a property summed per event (every row's properties)",
            "SELECT event, count(*), sum((properties->>'price')::numeric) FROM collector.events WHERE project = 'default' GROUP BY event"
        ),
        (
            "one event's users over 6 hours (project, event, time index)",
            """
            SELECT count(DISTINCT user_id) FROM collector.events
            WHERE project = 'default' AND event = 'AddToCart' AND time >= now() - interval '6 hours'
            """
        ),
        ("one user's events (project, user_id index)", "SELECT count(*) FROM collector.events WHERE project = 'default' AND user_id = 42"),
    ]
}

/// One variant's figures from one round.
struct StorageFigures: Sendable {
    var eventsPerSecond: Double
    var tableBytes: Double
    var walBytes: Double
    var queryMillis: [Double]
}

enum StorageBench {
    /// Writes `chunks` (binary COPY data of `events` events, as the collector encodes it) into a
    /// fresh database shaped as `variant`, `connections` COPYs at a time; drops the database after.
    static func measure(
        _ variant: StorageVariant, chunks: [[UInt8]], events: Int, partitions: [String], connections: Int, adminURL: String, logger: Logger
    ) async throws -> StorageFigures {
        let database = "datong_storage_\(UInt64.random(in: 0...UInt64.max))"
        try await Bench.administer(adminURL: adminURL, "CREATE DATABASE \(database)", logger: logger)
        for setting in variant.settings {
            try await Bench.administer(adminURL: adminURL, "ALTER DATABASE \(database) SET \(setting)", logger: logger)
        }
        let url = try Bench.replacingDatabase(in: adminURL, with: database)
        let data = variant.jsonColumns ? try chunks.map(jsonColumnRows) : chunks
        let pool = PostgresPool(url: url, maxConnections: connections, logger: logger)
        do {
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: logger)
            let walStart = try await pool.withConnection { connection in
                if !variant.schema.isEmpty { _ = try connection.execute(variant.schema) }
                for statement in partitions { _ = try connection.execute(statement) }
                // Each variant starts after a checkpoint, so each pays the same full-page writes.
                _ = try connection.execute("CHECKPOINT")
                return try connection.query("SELECT pg_current_wal_lsn()::text").rows.first?[0] ?? "0/0"
            }
            let elapsed = try await copy(data, into: pool, connections: connections)
            let figures = try await pool.withConnection { connection in
                func number(_ sql: String) throws -> Double {
                    guard let text = try connection.query(sql).rows.first?[0] ?? nil, let value = Double(text) else {
                        throw BenchError("no number from \(sql)")
                    }
                    return value
                }
                let wal = try number("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '\(walStart)')")
                let count = try number("SELECT count(*) FROM collector.events")
                guard Int(count) == events else { throw BenchError("\(variant.name): expected \(events) events, found \(Int(count))") }
                let size = try number(
                    """
                    SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits
                    WHERE inhparent = 'collector.events'::regclass
                    """)
                _ = try connection.execute("VACUUM ANALYZE collector.events")
                var millis: [Double] = []
                for query in StorageVariant.queries {
                    _ = try connection.query(query.sql)  // warm the cache
                    var runs: [Double] = []
                    for _ in 0..<5 {
                        let start = ContinuousClock.now
                        _ = try connection.query(query.sql)
                        runs.append(Bench.seconds(ContinuousClock.now - start) * 1000)
                    }
                    millis.append(Bench.median(runs))
                }
                return StorageFigures(
                    eventsPerSecond: Double(events) / Bench.seconds(elapsed), tableBytes: size / Double(events), walBytes: wal / Double(events),
                    queryMillis: millis)
            }
            await pool.close()
            try await Bench.administer(adminURL: adminURL, "DROP DATABASE \(database)", logger: logger)
            return figures
        } catch {
            await pool.close()
            throw error
        }
    }

    /// COPYs each of `data` into `collector.events` in its own transaction, `connections` at a
    /// time; returns how long it took.
    static func copy(_ data: [[UInt8]], into pool: PostgresPool, connections: Int) async throws -> Duration {
        try await ContinuousClock().measure {
            try await withThrowingTaskGroup(of: Void.self) { group in
                let next = WorkCounter()
                for _ in 0..<connections {
                    group.addTask {
                        while let index = next.take(below: data.count) {
                            let rows = data[index]
                            try await pool.transaction { _ = try $0.copyIn(EventRows.copyIntoEvents, data: rows) }
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
    }

    /// `data` (binary COPY of `collector.events` rows) with the jsonb fields as json: binary jsonb
    /// is a version byte before the text, binary json the text alone.
    static func jsonColumnRows(_ data: [UInt8]) throws -> [UInt8] {
        let jsonb = Set(["properties", "identities"].compactMap { EventRows.columns.firstIndex(of: $0) })
        // Signature (11 bytes), flags (4), header extension length (4) and the extension.
        guard data.count >= 19 else { throw BenchError("COPY data without a header") }
        func int(_ at: Int, _ size: Int) throws -> Int {
            guard at + size <= data.count else { throw BenchError("COPY data cut short") }
            return data[at..<at + size].reduce(0) { $0 << 8 | Int($1) }
        }
        var position = 19 + (try int(15, 4))
        var out = Array(data[..<position])
        out.reserveCapacity(data.count)
        while true {
            let fields = try int(position, 2)
            out.append(contentsOf: data[position..<position + 2])
            position += 2
            if fields == 0xFFFF { break }  // the trailer (-1)
            for field in 0..<fields {
                var length = try int(position, 4)
                position += 4
                if length == 0xFFFF_FFFF {  // NULL
                    out.append(contentsOf: [0xFF, 0xFF, 0xFF, 0xFF])
                    continue
                }
                var start = position
                if jsonb.contains(field) {
                    start += 1
                    length -= 1
                }
                out.append(contentsOf: [UInt8(length >> 24 & 0xFF), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)])
                out.append(contentsOf: data[start..<start + length])
                position = start + length
            }
        }
        return out
    }

    /// Runs every variant `rounds` times, interleaved (so drift in the machine touches each alike),
    /// and prints the medians, with events/s relative to the shipped schema.
    static func run(
        rounds: Int, chunks: [[UInt8]], events: Int, partitions: [String], connections: Int, adminURL: String, logger: Logger
    ) async throws {
        var figures = Array(repeating: [StorageFigures](), count: StorageVariant.all.count)
        for round in 1...rounds {
            for (index, variant) in StorageVariant.all.enumerated() {
                Bench.say("  round \(round)/\(rounds): \(variant.name)")
                figures[index].append(
                    try await measure(
                        variant, chunks: chunks, events: events, partitions: partitions, connections: connections, adminURL: adminURL, logger: logger))
            }
        }
        func median(_ index: Int, _ value: (StorageFigures) -> Double) -> Double { Bench.median(figures[index].map(value)) }
        let shipped = median(0, \.eventsPerSecond)
        print("")
        print(
            "variant of collector.events                 events/s  vs shipped  bytes/event  WAL/event  query ms: "
                + (1...StorageVariant.queries.count).map { "Q\($0)" }.joined(separator: "      "))
        for (index, variant) in StorageVariant.all.enumerated() {
            let rate = median(index, \.eventsPerSecond)
            let queries = (0..<StorageVariant.queries.count).map { query in
                String(format: "%6.1f", median(index) { $0.queryMillis[query] })
            }
            print(
                variant.name.padding(toLength: 42, withPad: " ", startingAt: 0)
                    + String(format: " %9.0f  %9.2fx  %11.0f  %9.0f            ", rate, rate / shipped, median(index, \.tableBytes), median(index, \.walBytes))
                    + queries.joined(separator: "  ")
                    + (variant.caveat.isEmpty ? "" : "   (\(variant.caveat))"))
        }
        for (index, query) in StorageVariant.queries.enumerated() { print("Q\(index + 1): \(query.name)") }
    }
}
