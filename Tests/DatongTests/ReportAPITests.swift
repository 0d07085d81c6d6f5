import DatongContracts
import DatongRuntime
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import NIOFoundationEssentialsCompat
import Testing

@testable import Collector

/// The reports over HTTP (`POST /v1/projects/{p}/reports/{kind}`, what the console and `datongctl
/// report` call): each body's members reach the function as the arguments they name — the answer's
/// rows are those of the same call written positionally in SQL — and a body that is not a report's
/// is refused with what is wrong.
@Suite("reports over HTTP")
struct ReportAPITests {
    static let token = "report-api-test-service-token"

    /// The collector's API over the shop traffic of ReportTests (its first `records`), user 9 merged into 8.
    static func withAPI(
        records: Int = .max, _ body: @escaping @Sendable (ReportTests.World, any TestClientProtocol) async throws -> Void
    ) async throws {
        try await ReportTests.withWorld { world in
            try await ReportTests.store(Array(ReportTests.traffic(seed: 71).prefix(records)), in: world)
            try await world.merge(9, into: 8)
            try await world.settle()
            let router = Router(context: DatongRequestContext.self)
            router.addMiddleware { ErrorMiddleware() }
            CollectorAPI(
                store: world.store, reads: PostgresStoredDataReads(pool: world.pool), serviceToken: ServiceToken(Self.token), maxBatchBytes: 1 << 20,
                reports: ReportQueries(pool: world.pool)
            ).register(on: router)
            try await Application(router: router).test(.router) { client in try await body(world, client) }
        }
    }

    static func ask(_ client: any TestClientProtocol, _ kind: String, _ body: String) async throws -> (status: HTTPResponse.Status, json: Any?) {
        let answer = try await client.execute(
            uri: "/v1/projects/shop/reports/\(kind)", method: .post,
            headers: [.authorization: "Bearer \(token)", .contentType: "application/json"], body: ByteBuffer(string: body))
        return (answer.status, try? JSONSerialization.jsonObject(with: Data(buffer: answer.body)))
    }

    @Test(
        "each report's body reaches its function as the arguments it names",
        arguments: [
            (
                "trend",
                #"{"events": ["Pay", "AddToCart"], "from_day": "2026-08-20", "to_day": "2026-10-08", "unit": "week", "measure": "sum", "property": "price", "group_by": "lib", "filters": [{"property": "price", "op": ">", "value": 100}], "top": 2}"#,
                "analytics.event_trend('shop', ARRAY['Pay', 'AddToCart'], '2026-08-20', '2026-10-08', 'week', 'sum', 'price', 'lib', '[{\"property\": \"price\", \"op\": \">\", \"value\": 100}]', 2)",
                ["bucket", "event", "group_value", "value"]
            ),
            (
                "funnel",
                #"{"steps": ["$AppStart", {"event": "AddToCart", "filters": [{"property": "price", "op": ">=", "value": 50}]}, "Pay"], "from_day": "2026-08-20", "to_day": "2026-09-30", "window_seconds": 172800, "group_by": "$city", "top": 2}"#,
                "analytics.funnel('shop', '[\"$AppStart\", {\"event\": \"AddToCart\", \"filters\": [{\"property\": \"price\", \"op\": \">=\", \"value\": 50}]}, \"Pay\"]', '2026-08-20', '2026-09-30', 172800, '$city', 2)",
                ["group_value", "step", "event", "people", "conversion", "median_seconds"]
            ),
            (
                "retention",
                #"{"start_event": "$AppStart", "return_event": "ViewProduct", "from_day": "2026-08-20", "to_day": "2026-09-20", "unit": "week", "periods": 3, "return_filters": [{"property": "$city", "op": "in", "value": ["北京", "上海"]}]}"#,
                "analytics.retention('shop', '$AppStart', 'ViewProduct', '2026-08-20', '2026-09-20', 'week', 3, '[]', '[{\"property\": \"$city\", \"op\": \"in\", \"value\": [\"北京\", \"上海\"]}]')",
                ["cohort", "people", "period", "returned", "returned_within"]
            ),
            (
                "distribution",
                #"{"event": "ViewProduct", "from_day": "2026-08-20", "to_day": "2026-10-08", "buckets": [1, 3, 5.5, 10]}"#,
                "analytics.distribution('shop', 'ViewProduct', '2026-08-20', '2026-10-08', 'events', NULL, '{1,3,5.5,10}')",
                ["bucket_from", "bucket_to", "people"]
            ),
            (
                "user", #"{"user_id": 9, "page_size": 5}"#, "analytics.user_events('shop', 9, NULL, 5)",
                ["time", "event", "distinct_id", "lib", "hybrid_h5", "stored_user_id", "event_id", "properties", "next"]
            ),
        ])
    func sameAsSQL(kind: String, body: String, call: String, columns: [String]) async throws {
        try await Self.withAPI { world, client in
            let answer = try await Self.ask(client, kind, body)
            #expect(answer.status == .ok, "\(String(describing: answer.json))")
            let json = try #require(answer.json as? [String: Any])
            #expect(json["report"] as? String == kind)
            #expect(json["columns"] as? [String] == columns)
            let rows = try #require(json["rows"] as? [[Any]])
            let row = columns.map { "r.\"\($0)\"" }.joined(separator: ", ")
            let expected = try #require(
                try await world.rows("SELECT coalesce(json_agg(json_build_array(\(row))), '[]')::text FROM \(call) r").first?.first ?? nil)
            let plain = try #require(try JSONSerialization.jsonObject(with: Data(expected.utf8)) as? [[Any]])
            #expect(!plain.isEmpty, "the traffic gives the \(kind) report rows")
            #expect((rows as NSArray).isEqual(to: plain), "\(rows) against \(plain)")
        }
    }

    @Test(
        "a body that is not a report's, or that its function refuses, is a 400 that says what is wrong",
        arguments: [
            ("trend", #"{"events": ["Pay"], "from_day": "2026-09-01"}"#, "to_day is needed: a day, YYYY-MM-DD"),
            ("trend", #"{"events": ["Pay"], "from_day": "2026-09-01", "to_day": "2026-09-02", "colour": "red"}"#, "has no argument 'colour'"),
            ("trend", #"{"events": "Pay", "from_day": "2026-09-01", "to_day": "2026-09-02"}"#, "events is an array of 1 to 100 event names"),
            ("trend", #"{"events": ["Pay"], "from_day": "1 Sept", "to_day": "2026-09-02"}"#, "from_day is a day, YYYY-MM-DD"),
            ("trend", #"{"events": ["Pay"], "from_day": "2026-02-30", "to_day": "2026-09-02"}"#, "2026-02-30"),
            ("trend", #"{"events": ["Pay"], "from_day": "2026-09-01", "to_day": "2026-09-02", "top": 1e12}"#, "top is an integer"),
            ("trend", #"{"events": ["Nope"], "from_day": "2026-09-01", "to_day": "2026-09-02"}"#, "project 'shop' has stored no event 'Nope'"),
            (
                "funnel", #"{"steps": ["Pay","Pay","Pay","Pay","Pay","Pay","Pay","Pay","Pay","Pay","Pay"], "from_day": "2026-09-01", "to_day": "2026-09-02"}"#,
                "11 steps: a funnel has 2 to 10"
            ),
            (
                "retention", #"{"start_event": "Pay", "return_event": "Pay", "from_day": "2026-09-01", "to_day": "2026-09-02", "periods": 31}"#,
                "periods 31: 1 to 30"
            ),
            (
                "distribution", #"{"event": "Pay", "from_day": "2026-09-01", "to_day": "2026-09-02", "buckets": ["a"]}"#,
                "buckets is an array of 1 to 100 numbers"
            ),
            ("user", #"{"user_id": 0}"#, "user_id is a user number"),
            ("user", "[1]", "send a JSON object of the user report's arguments"),
        ])
    func refused(kind: String, body: String, message: String) async throws {
        try await Self.withAPI(records: 300) { _, client in
            let answer = try await Self.ask(client, kind, body)
            #expect(answer.status == .badRequest)
            let json = try #require(answer.json as? [String: Any])
            #expect(json["error"] as? String == "invalid_value" || json["error"] as? String == "invalid_body")
            #expect((json["message"] as? String)?.contains(message) == true, "\(json)")
        }
    }

    @Test("every argument and column the API names is one its function has, in the function's order")
    func namesMatchTheFunctions() async throws {
        try await Self.withAPI(records: 0) { world, _ in
            for kind in ReportKind.allCases {
                let row = try await world.rows(
                    """
                    SELECT array_to_string(proargnames[2:pronargs], ','),
                           array_to_string(proargnames[pronargs + 1:cardinality(proargnames)], ',')
                    FROM pg_proc WHERE oid = $1::regproc
                    """, [kind.function])
                #expect(row.first?[0] == kind.parameters.map(\.name).joined(separator: ","), "\(kind.function)'s arguments")
                #expect(row.first?[1] == kind.columns.joined(separator: ","), "\(kind.function)'s columns")
            }
        }
    }

    /// JIT compiled the generated queries on every call (1.9 s of a 2.3 s funnel query at 1M events), and a
    /// `CREATE OR REPLACE` of a function without `SET jit = off` would silently bring it back.
    @Test("every report function runs without JIT compilation, whatever the caller's session says")
    func reportsWithoutJIT() async throws {
        try await Self.withAPI(records: 0) { world, _ in
            for kind in ReportKind.allCases {
                let row = try await world.rows(
                    "SELECT coalesce(array_to_string(proconfig, ','), '') FROM pg_proc WHERE oid = $1::regproc", [kind.function])
                #expect(row.first?[0]?.contains("jit=off") == true, "\(kind.function): \(row)")
            }
        }
    }

    @Test("an unknown report is a 404 naming the reports there are")
    func unknownReport() async throws {
        try await Self.withAPI(records: 0) { _, client in
            let answer = try await Self.ask(client, "cohorts", "{}")
            #expect(answer.status == .notFound)
            let json = try #require(answer.json as? [String: Any])
            #expect(json["error"] as? String == "unknown_report")
            #expect(json["message"] as? String == "no such report; the reports are trend, funnel, retention, distribution, user")
        }
    }
}
