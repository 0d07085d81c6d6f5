import DatongPostgres
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

/// The read-only role analysts are given (`deploy/postgres/analyst-role.sql`, run by compose and
/// `scripts/dev`): the documented views, nothing else, nothing writable.
@Suite("analyst role")
struct AnalystRoleTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("deploy/postgres/analyst-role.sql")

    /// The outcome of `sql` run as `datong_analyst`: nil when it ran, else the SQLSTATE.
    static func asAnalyst(_ url: String, _ sql: String) async throws -> String? {
        var components = try #require(URLComponents(string: url))
        components.user = "datong_analyst"
        do {
            _ = try await TestDatabase.rows(try #require(components.string), sql)
            return nil
        } catch let error as PostgresError {
            return error.sqlState ?? "no state"
        }
    }

    /// The rows `sql` gives when run as `datong_analyst`.
    static func rows(asAnalyst url: String, _ sql: String) async throws -> [[String?]] {
        var components = try #require(URLComponents(string: url))
        components.user = "datong_analyst"
        return try await TestDatabase.rows(try #require(components.string), sql)
    }

    @Test("datong_analyst reads every analytics view, made before or after it, and nothing else; it writes nothing")
    func grants() async throws {
        // As compose does: the role first (at the database's first start), the services' migrations after.
        let script = try String(contentsOf: Self.script, encoding: .utf8)
        try await RunningServices.run(databaseSetup: script) { services in
            // Something to read: one event through the gateway.
            let data = Data(#"[{"type":"track","event":"E","time":\#(Int64(Date().timeIntervalSince1970 * 1000)),"distinct_id":"d"}]"#.utf8)
                .base64EncodedString().addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let upload = try await services.gateway.execute(uri: "/sa?project=default", method: .post, body: .init(string: "data_list=\(data)"))
            #expect(try upload.json()["stored"] as? Int == 1)
            // Running it again (scripts/dev does, on every start) changes nothing.
            try await TestDatabase.withPool(services.databaseURL) { pool in try await pool.withConnection { _ = try $0.execute(script) } }

            let views = try await TestDatabase.rows(
                services.databaseURL,
                """
                SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = 'analytics' AND c.relkind IN ('r', 'v', 'm', 'p') ORDER BY 1
                """
            ).compactMap { $0[0] }
            #expect(views.contains("events") && views.contains("rejected") && views.contains("profiles") && views.contains("ingest_counts"))
            #expect(views.contains("catalog_events") && views.contains("catalog_properties") && views.contains("catalog_event_properties"))
            for view in views {
                #expect(try await Self.asAnalyst(services.databaseURL, "SELECT * FROM analytics.\(view) LIMIT 1") == nil, "analytics.\(view)")
            }
            // The typed reads of properties (docs/ANALYTICS.md) run as the analyst too.
            let typed = "SELECT analytics.as_number(properties, 'price'), analytics.as_list(properties, 'tags') FROM analytics.events LIMIT 1"
            #expect(try await Self.asAnalyst(services.databaseURL, typed) == nil)
            #expect(try await TestDatabase.rows(services.databaseURL, "SELECT 1") == [["1"]])
            // 42501: insufficient privilege; 25006: read-only transaction.
            for sql in [
                "SELECT * FROM collector.events LIMIT 1", "SELECT * FROM identity.identities LIMIT 1",
                "SELECT * FROM config.admin_tokens LIMIT 1", "SELECT * FROM config.projects LIMIT 1",
            ] {
                #expect(try await Self.asAnalyst(services.databaseURL, sql) == "42501", "\(sql)")
            }
            for sql in [
                "CREATE TABLE analytics.mine (x int)", "CREATE TABLE public.mine (x int)",
                "INSERT INTO analytics.rejected (project, reason, raw) VALUES ('default', 'x', 'y')", "DELETE FROM analytics.events",
            ] {
                // 55000: a view PostgreSQL cannot write through at all.
                let state = try await Self.asAnalyst(services.databaseURL, sql)
                #expect(["42501", "25006", "55000"].contains(state), "\(sql): \(state ?? "ran")")
            }
            // And the grants themselves: nothing but SELECT on the views, no CREATE anywhere.
            let writable = try await TestDatabase.rows(
                services.databaseURL,
                """
                SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = 'analytics' AND c.relkind IN ('r', 'v', 'm', 'p')
                  AND (has_table_privilege('datong_analyst', c.oid, 'INSERT,UPDATE,DELETE,TRUNCATE')
                       OR NOT has_table_privilege('datong_analyst', c.oid, 'SELECT'))
                """)
            #expect(writable.isEmpty, "\(writable)")
            let creatable = try await TestDatabase.rows(
                services.databaseURL,
                """
                SELECT nspname FROM pg_namespace WHERE has_schema_privilege('datong_analyst', oid, 'CREATE')
                """)
            #expect(creatable.isEmpty, "\(creatable)")
        }
    }
}
