import DatongContracts
import DatongPostgres
import Foundation
import Testing

@testable import Collector

/// The documented analyst queries (docs/ANALYTICS.md, and the one in the README), run as written
/// against a database the collector filled.
@Suite("documented analyst queries")
struct AnalystQueryTests {
    /// The first SQL block after `heading` in `file` (a path from the repository's root).
    static func sqlBlock(_ file: String, after heading: String) throws -> String {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../\(file)")
        let text = try String(contentsOf: url, encoding: .utf8)
        let section = try #require(text.range(of: heading), "no '\(heading)' in \(file)").upperBound
        let block = try #require(text.range(of: "```sql\n", range: section..<text.endIndex))
        let close = try #require(text.range(of: "```", range: block.upperBound..<text.endIndex))
        return String(text[block.upperBound..<close.lowerBound])
    }

    /// The statements of docs/ANALYTICS.md's "Queries" SQL block, keyed by their leading comment.
    static func readmeQueries() throws -> [String: String] {
        var queries: [String: String] = [:]
        for statement in try sqlBlock("docs/ANALYTICS.md", after: "## Queries").components(separatedBy: ";\n") {
            let lines = statement.split(separator: "\n", omittingEmptySubsequences: true)
            guard let first = lines.first, first.hasPrefix("-- ") else { continue }
            queries[String(first.dropFirst(3))] = lines.dropFirst().joined(separator: "\n")
        }
        return queries
    }

    @Test("the README's query is one of the documented ones, as written there")
    func readmeQueryIsDocumented() throws {
        let readme = try Self.sqlBlock("README.md", after: "## What analysts query")
        let documented = try Self.sqlBlock("docs/ANALYTICS.md", after: "## Queries")
        #expect(!readme.isEmpty && documented.contains(readme))
    }

    @Test("every documented query runs and answers what it says")
    func readmeQueriesAnswer() async throws {
        let queries = try Self.readmeQueries()
        #expect(queries.count == 8)
        func query(_ prefix: String) throws -> String {
            try #require(queries.first { $0.key.hasPrefix(prefix) }?.value, "no documented query starting '\(prefix)'")
        }

        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: TestDatabase.logger)
            // Stored as a release before type checks stored them (or as a property whose type an
            // admin changed holds values of both): the price as a number, a number's text, and text.
            let store = PostgresEventStore(pool: pool, catalog: nil)

            // Three users within a few seconds: an iOS user who views and adds to cart, an H5 page inside
            // an app that only views, an Android user who added to cart before viewing (not a conversion).
            let now = Int64(Date().timeIntervalSince1970 * 1000) - 10_000
            func event(
                _ name: String, user: Int64, lib: String, at offset: Int64, hybrid: Bool = false, method: String? = nil, properties: PropertiesText = "{}"
            ) -> CollectRecord {
                CollectRecord(
                    project: "default", type: "track", event: name, time: now + offset, distinctId: "d\(user)", userId: user,
                    lib: lib, hybridH5: hybrid, properties: properties, libMethod: method)
            }
            // One SDK sends the price as a number, another as text, a third text that is no number.
            let records = [
                event("ViewProduct", user: 1, lib: "iOS", at: 0, method: "visual"),
                event("AddToCart", user: 1, lib: "iOS", at: 1_000, method: "code", properties: #"{"price":9.9}"#),
                event("ViewProduct", user: 2, lib: "js", at: 0, hybrid: true, method: "autoTrack"),
                event("AddToCart", user: 3, lib: "Android", at: 0, properties: #"{"price":"9.90"}"#),
                event("ViewProduct", user: 3, lib: "Android", at: 2_000, properties: #"{"price":"n/a"}"#),
                CollectRecord(project: "default", type: "profile_set", event: nil, time: now, distinctId: "d1", userId: 1, properties: #"{"name":"Alice"}"#),
            ]
            _ = try await store.write(
                CollectBatch(
                    receivedAt: now, records: records,
                    rejected: [
                        RejectedRecord(project: "default", reason: "property 'user_id': 'user_id' is a reserved name", raw: "{}")
                    ]))
            _ = try await store.write(CollectBatch(receivedAt: now, records: [records[0]]))

            func run(_ sql: String) async throws -> [[String?]] {
                try await pool.withConnection { try $0.query(sql).rows }
            }
            let active = try await run(try query("daily active users"))
            var usersByPlatform: [String: Int] = [:]
            for row in active { usersByPlatform[row[1] ?? "", default: 0] += Int(row[2] ?? "") ?? 0 }
            #expect(usersByPlatform == ["iOS": 1, "js": 1, "Android": 1])

            let share = try await run(try query("share of events"))
            #expect(share.map { [$0[1], $0[2]] } == [["5", "20.0"]])

            #expect(try await run(try query("two-step funnel")) == [["3", "1"]])

            let rejected = try await run(try query("rejected records"))
            #expect(rejected.map { [$0[0], $0[2]] } == [["default", "1"]])

            let methods = try await run(try query("codeless events"))
            #expect(methods == [["AddToCart", "0", "0", "2"], ["ViewProduct", "1", "1", "1"]])

            let minutes = try await run(try query("what arrived"))
            let totals = minutes.reduce(into: [0, 0, 0, 0]) { sums, row in
                for column in 0..<4 { sums[column] += Int(row[column + 1] ?? "") ?? 0 }
            }
            #expect(totals == [8, 6, 1, 1])

            let profiles = try await run(try query("the newest profiles"))
            #expect(profiles.map { [$0[0], $0[1], $0[3]] } == [["1", "Alice", "2"]])

            let revenue = try await run(try query("revenue per day"))
            let total = revenue.compactMap { $0[1].flatMap(Double.init) }.reduce(0, +)
            #expect(abs(total - 19.8) < 1e-9, "\(revenue)")
            #expect(revenue.allSatisfy { $0[2] == "0" })
            // The cast the typed read replaces fails the whole query on the text price.
            await #expect(throws: PostgresError.self) {
                _ = try await run("SELECT sum((properties ->> 'price')::numeric) FROM analytics.events WHERE properties ->> 'price' IS NOT NULL")
            }
        }
    }

    @Test("typed reads give a property's value as the type asked, or NULL, and never fail a query")
    func typedReads() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: TestDatabase.logger)
            // Each case: a value, then what as_number, as_string, as_bool, as_datetime, as_date and
            // as_list read from it (NULL as nil). Read from a table, and again from literals (which
            // the planner folds to constants: a cast there must not fail either).
            let digits = String(repeating: "9", count: 401)
            let cases: [(String, [String?])] = [
                ("9.9", ["9.9", "9.9", nil, nil, nil, nil]),
                (#""9.90""#, ["9.90", "9.90", nil, nil, nil, nil]),
                (#"" -12 ""#, ["-12", " -12 ", nil, nil, nil, nil]),
                (#""1e5""#, ["100000", "1e5", nil, nil, nil, nil]),
                (#""1e99999""#, [nil, "1e99999", nil, nil, nil, nil]),
                ("\"\(digits)\"", [nil, digits, nil, nil, nil, nil]),
                (#""free""#, [nil, "free", nil, nil, nil, nil]),
                ("true", [nil, "true", "true", nil, nil, nil]),
                (#""TRUE""#, [nil, "TRUE", "true", nil, nil, nil]),
                ("null", [nil, nil, nil, nil, nil, nil]),
                (#""2026-11-27 10:20:30.123""#, [nil, "2026-11-27 10:20:30.123", nil, "2026-11-27 10:20:30.123", "2026-11-27", nil]),
                (#""2024-02-29""#, [nil, "2024-02-29", nil, "2024-02-29 00:00:00", "2024-02-29", nil]),
                (#""2026-02-29 10:00:00""#, [nil, "2026-02-29 10:00:00", nil, nil, nil, nil]),
                (#""2026-13-01""#, [nil, "2026-13-01", nil, nil, nil, nil]),
                (#""0000-01-01""#, [nil, "0000-01-01", nil, nil, nil, nil]),
                (#""27/11/2026""#, [nil, "27/11/2026", nil, nil, nil, nil]),
                (#"["a","b"]"#, [nil, nil, nil, nil, nil, "{a,b}"]),
                (#"["a",1]"#, [nil, nil, nil, nil, nil, nil]),
                ("[]", [nil, nil, nil, nil, nil, "{}"]),
                (#"{"a":1}"#, [nil, nil, nil, nil, nil, nil]),
            ]
            let reads = ["as_number", "as_string", "as_bool", "as_datetime", "as_date", "as_list"]
            let columns = reads.map { "analytics.\($0)(p, 'v')::text" }.joined(separator: ", ")
            @Sendable func literal(_ json: String) -> String { "'{\"v\": \(json.replacingOccurrences(of: "'", with: "''"))}'::jsonb" }
            let table = cases.enumerated().map { "(\($0.offset), \(literal($0.element.0)))" }.joined(separator: ", ")
            let rows = try await pool.withConnection {
                try $0.query("SELECT \(columns) FROM (VALUES \(table)) AS t(n, p) ORDER BY n").rows
            }
            for (row, (value, expected)) in zip(rows, cases) { #expect(row == expected, "\(value)") }
            #expect(rows.count == cases.count)
            for (value, expected) in cases {
                let folded = try await pool.withConnection { try $0.query("SELECT \(columns) FROM (SELECT \(literal(value)) AS p) t").rows }
                #expect(folded == [expected], "\(value), folded")
            }
            // A property that is absent reads as NULL whatever the type.
            let absent = try await pool.withConnection { try $0.query("SELECT \(columns) FROM (SELECT '{}'::jsonb AS p) t").rows }
            #expect(absent == [[nil, nil, nil, nil, nil, nil]])
        }
    }
}
