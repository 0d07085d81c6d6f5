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
        #expect(queries.count == 7)
        func query(_ prefix: String) throws -> String {
            try #require(queries.first { $0.key.hasPrefix(prefix) }?.value, "no documented query starting '\(prefix)'")
        }

        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: TestDatabase.logger)
            let store = PostgresEventStore(pool: pool)

            // Three users within a few seconds: an iOS user who views and adds to cart, an H5 page inside
            // an app that only views, an Android user who added to cart before viewing (not a conversion).
            let now = Int64(Date().timeIntervalSince1970 * 1000) - 10_000
            func event(_ name: String, user: Int64, lib: String, at offset: Int64, hybrid: Bool = false, method: String? = nil) -> CollectRecord {
                CollectRecord(
                    project: "default", type: "track", event: name, time: now + offset, distinctId: "d\(user)", userId: user,
                    lib: lib, hybridH5: hybrid, properties: "{}", libMethod: method)
            }
            let records = [
                event("ViewProduct", user: 1, lib: "iOS", at: 0, method: "visual"), event("AddToCart", user: 1, lib: "iOS", at: 1_000, method: "code"),
                event("ViewProduct", user: 2, lib: "js", at: 0, hybrid: true, method: "autoTrack"),
                event("AddToCart", user: 3, lib: "Android", at: 0), event("ViewProduct", user: 3, lib: "Android", at: 2_000),
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
        }
    }
}
