import DatongPostgres
import DatongRuntime
import DatongStorage
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import ServiceLifecycle
import Synchronization
import Testing

@Suite("PostgreSQL layer against a real server")
struct PostgresTests {
    @Test("parameters are sent apart from the SQL, never interpolated")
    func parameters() async throws {
        let url = try await TestDatabase.create()
        let hostile = "x'); DROP TABLE t; --"
        let rows = try await TestDatabase.withPool(url) { pool in
            try await pool.withConnection { connection in
                try connection.execute("CREATE TABLE t (v text)")
                try connection.query("INSERT INTO t VALUES ($1), ($2)", [hostile, nil])
                return try connection.query("SELECT v FROM t ORDER BY v NULLS LAST").rows
            }
        }
        #expect(rows == [[hostile], [nil]])
    }

    @Test("a list sent as one text[] parameter arrives unchanged, whatever its characters")
    func textArrays() async throws {
        let url = try await TestDatabase.create()
        let values = ["plain", "quote\"d", "back\\slash", "{braces,comma}", "", "NULL", "中国移动 😀", " spaced "]
        let rows = try await TestDatabase.withPool(url) { pool in
            try await pool.withConnection {
                try $0.query("SELECT v FROM unnest($1::text[]) WITH ORDINALITY AS u(v, n) ORDER BY n", [postgresTextArray(values)]).rows
            }
        }
        #expect(rows.map { $0[0] } == values)
    }

    @Test("a transaction that throws is rolled back")
    func rollback() async throws {
        let url = try await TestDatabase.create()
        struct Planned: Error {}
        let count = try await TestDatabase.withPool(url) { pool in
            try await pool.withConnection { try $0.execute("CREATE TABLE t (v int)") }
            await #expect(throws: Planned.self) {
                try await pool.transaction { connection in
                    try connection.query("INSERT INTO t VALUES ($1)", ["1"])
                    throw Planned()
                }
            }
            return try await pool.withConnection { try $0.query("SELECT count(*) FROM t").scalar }
        }
        #expect(count == "0")
    }

    @Test("a transaction's BEGIN travels with its first statement and its COMMIT with its last, and it still rolls back whole")
    func fewerRoundTrips() async throws {
        let url = try await TestDatabase.create()
        struct Planned: Error {}
        var writer = BinaryCopyWriter()
        writer.beginRow(fieldCount: 1)
        writer.bigint(1)
        let row = writer.finish()
        let (sameMessage, copiedWithBegin, counts) = try await TestDatabase.withPool(url) { pool in
            try await pool.withConnection { try $0.execute("CREATE TABLE t (v bigint, at timestamptz DEFAULT statement_timestamp())") }
            // now() is when BEGIN ran, statement_timestamp() when the statement's message came:
            // equal only when both came in one message.
            let sameMessage = try await pool.transaction { try $0.execute("SELECT now() = statement_timestamp()").scalar }
            let copiedWithBegin = try await pool.transaction { connection in
                _ = try connection.copyIn("COPY t (v) FROM STDIN (FORMAT binary)", data: row)
                return try connection.query("SELECT bool_and(at = now()) FROM t").scalar
            }
            var counts: [String?] = []
            // Two statements, two messages: the first carries BEGIN, the last COMMIT.
            let trace = FileManager.default.temporaryDirectory.appendingPathComponent("datong-trace-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: trace) }
            try await pool.withConnection { connection in
                guard let file = fopen(trace, "w") else { throw PostgresError.unexpectedResult("cannot open \(trace)") }
                defer { fclose(file) }
                connection.traceMessages(to: file)
                defer { connection.traceMessages(to: nil) }
                try connection.transaction { connection in
                    try connection.execute("INSERT INTO t (v) VALUES (2)")
                    try connection.commit(after: "INSERT INTO t (v) VALUES (\(try connection.literal("3")))")
                }
            }
            // Each round trip ends with the server's ReadyForQuery, which says whether a transaction
            // is open (T) or not (I): the first leaves it open, the second has committed it.
            let lines = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n")
            let ready = lines.filter { $0.hasPrefix("B\t") && $0.contains("\tReadyForQuery\t") }.map { String($0.suffix(1)) }
            #expect(ready == ["T", "I"], "\(lines)")
            #expect(lines.contains { $0.hasPrefix("B\t") && $0.hasSuffix("CommandComplete\t \"COMMIT\"") })
            counts.append(try await pool.withConnection { try $0.query("SELECT count(*) FROM t").scalar })
            // A failing last statement takes the whole transaction with it, COMMIT included.
            await #expect(throws: PostgresError.self) {
                try await pool.transaction { connection in
                    try connection.execute("INSERT INTO t (v) VALUES (4)")
                    try connection.commit(after: "INSERT INTO t (v) VALUES ('four')")
                }
            }
            // So does a failing first statement, and an error after a statement with parameters.
            await #expect(throws: PostgresError.self) {
                try await pool.transaction { try $0.execute("INSERT INTO t (v) VALUES (5); INSERT INTO t (v) VALUES ('five')") }
            }
            await #expect(throws: Planned.self) {
                try await pool.transaction { connection in
                    try connection.query("INSERT INTO t (v) VALUES ($1)", ["6"])
                    throw Planned()
                }
            }
            counts.append(try await pool.withConnection { try $0.query("SELECT count(*) FROM t WHERE v > 3").scalar })
            // Nothing is left open: the connections take autocommitted statements.
            try await pool.withConnection { try $0.execute("INSERT INTO t (v) VALUES (7)") }
            counts.append(try await pool.withConnection { try $0.query("SELECT count(*) FROM t").scalar })
            return (sameMessage, copiedWithBegin, counts)
        }
        #expect(sameMessage == "t")
        #expect(copiedWithBegin == "t")
        #expect(counts == ["3", "0", "4"])
    }

    @Test("binary COPY stores every column type exactly")
    func binaryCopy() async throws {
        let url = try await TestDatabase.create()
        var writer = BinaryCopyWriter()
        writer.beginRow(fieldCount: 6)
        writer.text("héllo 你好")
        writer.bigint(-42)
        writer.boolean(true)
        writer.timestamp(unixMillis: 1_795_273_119_736)
        Array(#"{"a": [1, "b"]}"#.utf8).withUnsafeBufferPointer { writer.jsonb(utf8: $0) }
        writer.uuid(Array(0..<16))
        writer.beginRow(fieldCount: 6)
        for _ in 0..<6 { writer.null() }
        let data = writer.finish()
        let rows = try await TestDatabase.withPool(url) { pool in
            try await pool.withConnection { connection in
                try connection.execute("SET TIME ZONE 'UTC'; CREATE TABLE t (s text, n bigint, b boolean, at timestamptz, j jsonb, u uuid)")
                let copied = try connection.copyIn("COPY t FROM STDIN (FORMAT binary)", data: data)
                #expect(copied == 2)
                return try connection.query("SELECT s, n::text, b::text, at::text, j::text, u::text FROM t ORDER BY s NULLS LAST").rows
            }
        }
        #expect(rows[0] == ["héllo 你好", "-42", "true", "2026-11-21 14:58:39.736+00", #"{"a": [1, "b"]}"#, "00010203-0405-0607-0809-0a0b0c0d0e0f"])
        #expect(rows[1] == [nil, nil, nil, nil, nil, nil])
    }

    @Test("COPY TO STDOUT returns what COPY FROM STDIN takes back, within a size limit")
    func copyOutRoundTrip() async throws {
        let url = try await TestDatabase.create()
        let (copied, rows) = try await TestDatabase.withPool(url) { pool in
            try await pool.withConnection { connection in
                try connection.execute("CREATE TABLE t (s text, n bigint); INSERT INTO t VALUES ('héllo', 1), (NULL, 2); CREATE TABLE u (LIKE t)")
                let data = try connection.copyOut("COPY t TO STDOUT (FORMAT binary)", maxBytes: 1 << 20)
                #expect(throws: PostgresError.self) { try connection.copyOut("COPY t TO STDOUT (FORMAT binary)", maxBytes: 16) }
                let copied = try connection.copyIn("COPY u FROM STDIN (FORMAT binary)", data: data)
                return (copied, try connection.query("SELECT s, n::text FROM u ORDER BY n").rows)
            }
        }
        #expect(copied == 2)
        #expect(rows == [["héllo", "1"], [nil, "2"]])
    }

    @Test("a connection the server dropped is re-established on its next use")
    func reconnect() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            let first = try await pool.withConnection { try $0.query("SELECT pg_backend_pid()").scalar }
            let killer = PostgresPool(url: url, maxConnections: 1, logger: TestDatabase.logger)
            try await killer.withConnection { try $0.query("SELECT pg_terminate_backend($1::int)", [first]) }
            await killer.close()
            let second = try await pool.withConnection { try $0.query("SELECT pg_backend_pid()").scalar }
            #expect(second != nil)
            #expect(second != first)
        }
    }

    @Test("an unreachable database is reported as unavailable, not as a bug")
    func unreachable() async throws {
        let port = try #require(URLComponents(string: try TestDatabase.adminURL())?.port)
        let pool = PostgresPool(url: "postgresql://postgres@127.0.0.1:\(port == 1 ? 2 : 1)/x?connect_timeout=2", maxConnections: 1, logger: TestDatabase.logger)
        await #expect { try await pool.withConnection { try $0.execute("SELECT 1") } } throws: {
            ($0 as? PostgresError)?.isUnavailable == true
        }
        await pool.close()
    }

    @Test("a server that accepts the connection and never answers is given up on after 5 s, not waited for")
    func silentServer() async throws {
        // A server that accepts and never answers: libpq's startup message waits for an answer —
        // what a host behind a partition, or a hung server, looks like. libpq's own default waits
        // for ever; the URL says nothing about timeouts.
        let listener = try SilentListener()
        defer { listener.close() }
        let port = listener.port
        let pool = PostgresPool(url: "postgresql://postgres@127.0.0.1:\(port)/x", maxConnections: 1, logger: TestDatabase.logger)
        let outcome = Mutex<(any Error)??>(nil)
        let started = ContinuousClock.now
        Task {
            let result: (any Error)? = await {
                do {
                    try await pool.withConnection { try $0.execute("SELECT 1") }
                    return nil
                } catch { return error }
            }()
            outcome.withLock { $0 = .some(result) }
        }
        while outcome.withLock({ $0 }) == nil, ContinuousClock.now - started < .seconds(30) {
            try await Task.sleep(for: .milliseconds(100))
        }
        let elapsed = ContinuousClock.now - started
        // Still waiting after 30 s: the pool's thread is stuck in libpq, so the pool is left open.
        let error = try #require(outcome.withLock { $0 }, "the connection attempt was still waiting after 30 s")
        #expect((error as? PostgresError)?.isUnavailable == true)
        #expect(elapsed >= .seconds(4) && elapsed < .seconds(12), "gave up after \(elapsed)")
        await pool.close()
    }

    @Test("a session with temporary tables ends without waiting for a standby, and every commit it makes for callers still waits")
    func temporaryTablesEndLocally() async throws {
        let url = try await TestDatabase.create()
        // What each commit asks for: the session's own (its end's), and a caller's in and out of a
        // transaction. COPY TO is read-only: it shows the session's own level.
        let (own, inTransaction, alone, afterRollback) = try await TestDatabase.withPool(url) { pool in
            try await pool.withConnection { connection in
                try connection.transaction {
                    try $0.setUpTemporaryTables("test.staging", "CREATE TEMP TABLE staged (v int) ON COMMIT DELETE ROWS")
                    try $0.execute("INSERT INTO staged VALUES (1)")
                }
                let own = String(
                    decoding: try connection.copyOut("COPY (SELECT current_setting('synchronous_commit')) TO STDOUT", maxBytes: 100), as: UTF8.self)
                let inTransaction = try connection.transaction { try $0.query("SELECT current_setting('synchronous_commit')").scalar }
                let alone = try connection.query("SELECT current_setting('synchronous_commit')").scalar
                // A set-up rolled back takes the session's level back with it.
                struct Planned: Error {}
                try connection.execute("DISCARD TEMP")
                try connection.execute("RESET synchronous_commit")
                _ = try? connection.transaction { connection -> Void in
                    try connection.setUpTemporaryTables("test.again", "CREATE TEMP TABLE staged (v int)")
                    throw Planned()
                }
                let afterRollback = String(
                    decoding: try connection.copyOut("COPY (SELECT current_setting('synchronous_commit')) TO STDOUT", maxBytes: 100), as: UTF8.self)
                return (own, inTransaction, alone, afterRollback)
            }
        }
        #expect(own == "local\n")
        #expect(inTransaction == "on")
        #expect(alone == "on")
        #expect(afterRollback == "on\n")
    }

    @Test("replicas starting at once apply each migration exactly once")
    func concurrentMigrations() async throws {
        let url = try await TestDatabase.create()
        let migrations = [
            Migration(version: 1, name: "table", sql: "CREATE TABLE demo.runs (n int)"),
            Migration(version: 2, name: "row", sql: "INSERT INTO demo.runs VALUES (1)"),
        ]
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    try await TestDatabase.withPool(url) { pool in
                        try await Migrator.migrate(schema: "demo", migrations: migrations, pool: pool, logger: TestDatabase.logger)
                    }
                }
            }
            try await group.waitForAll()
        }
        let rows = try await TestDatabase.rows(url, "SELECT (SELECT count(*) FROM demo.runs), (SELECT count(*) FROM demo.schema_migrations)")
        #expect(rows == [["1", "2"]])
    }

    @Test("many concurrent borrowers share a small pool without deadlock")
    func poolContention() async throws {
        let url = try await TestDatabase.create()
        let total = try await TestDatabase.withPool(url) { pool in
            try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<64 {
                    group.addTask {
                        try await pool.withConnection { try Int($0.query("SELECT $1::int", [String(index)]).scalar ?? "0") ?? 0 }
                    }
                }
                return try await group.reduce(0, +)
            }
        }
        #expect(total == (0..<64).reduce(0, +))
    }
}

/// The services a database service runs beside its server (partition maintenance, the identity
/// cache's refresher) begin once the schema is migrated, not against missing tables.
@Suite("a database service's background work starts after its migrations")
struct MigrationOrderTests {
    struct NoRoutes: ServiceAPI {
        func register(on router: Router<DatongRequestContext>) {}
    }

    /// Records whether the migrated table existed when it began.
    final class Probe: Service, Sendable {
        let pool: PostgresPool
        let sawTable = Mutex<Bool?>(nil)

        init(pool: PostgresPool) { self.pool = pool }

        func run() async throws {
            let exists = try await pool.withConnection { try $0.query("SELECT to_regclass('probe.t') IS NOT NULL").scalar }
            sawTable.withLock { $0 = exists == "t" }
            try? await gracefulShutdown()
        }
    }

    @Test("a background service sees the migrated schema from its first moment")
    func afterMigrations() async throws {
        let url = try await TestDatabase.create()
        let database = ServiceDatabase(settings: DatabaseSettings(url: url, poolSize: 2, startupTimeout: 10), logger: TestDatabase.logger)
        let probe = Probe(pool: database.pool)
        // A migration that takes a moment, as real ones do against a large database.
        let slow = Migration(version: 1, name: "probe", sql: "SELECT pg_sleep(0.3); CREATE TABLE probe.t (v int)")
        let app = database.application(
            name: "probe", api: NoRoutes(), schema: "probe", migrations: [slow], server: ServerSettings(port: 0),
            runtime: ServiceRuntime(logger: TestDatabase.logger), services: [probe])
        try await app.serving { _ in
            let deadline = ContinuousClock.now + .seconds(5)
            while probe.sawTable.withLock({ $0 }) == nil, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(probe.sawTable.withLock { $0 } == true)
    }
}
