import DatongContracts
import DatongPostgres
import Foundation
import Prometheus
import Testing

@testable import Collector
@testable import Identity

/// Sensors' reports (ReportSchema, docs/ANALYTICS.md "Reports"): each report function's answer
/// against the same report computed by plain SQL over `analytics.events` (or, for the funnel, by
/// a search written apart in Swift), on shop traffic in a project whose days are Shanghai's —
/// first as stored, then after each thing that changes what the raw rows mean: a merge, late
/// records, a retried batch, an erasure, a dropped month, a hidden event, a new time zone.
@Suite("reports")
struct ReportTests {
    static let project = "shop"
    static let events = ["$AppStart", "ViewProduct", "AddToCart", "Pay"]
    static let cities = ["北京", "上海", "长沙"]
    static let libs = ["iOS", "Android", "js"]
    static let hour: Int64 = 3_600_000
    static let day: Int64 = 86_400_000
    /// 2026-08-20 00:00 UTC: the traffic spans 50 days from here, across three months.
    static let start: Int64 = 1_787_184_000_000
    static let from = "2026-08-20"
    static let to = "2026-10-08"

    /// A database with the collector's and identity's schemas, the collector's store and its rollups.
    struct World: Sendable {
        let url: String
        let pool: PostgresPool
        let store: PostgresEventStore
        let rollup: ReportRollup

        func rows(_ sql: String, _ parameters: [String?] = []) async throws -> [[String?]] {
            try await pool.withConnection { try $0.query(sql, parameters).rows }
        }

        func execute(_ sql: String) async throws {
            try await pool.withConnection { _ = try $0.execute(sql) }
        }

        @discardableResult
        func write(_ records: [CollectRecord]) async throws -> CollectResult {
            try await store.write(CollectBatch(receivedAt: ReportTests.start, records: records))
        }

        /// Merges user `merged` into `survivor` as identity-service records it (IdentityGraph).
        func merge(_ merged: Int64, into survivor: Int64) async throws {
            try await pool.transaction { connection in
                _ = try connection.query(
                    "UPDATE identity.user_map SET canonical_user_id = $3 WHERE project = $1 AND canonical_user_id = $2",
                    [ReportTests.project, String(merged), String(survivor)])
                _ = try connection.query(
                    "INSERT INTO identity.user_map (project, user_id, canonical_user_id) VALUES ($1, $2, $3)",
                    [ReportTests.project, String(merged), String(survivor)])
            }
        }

        /// Looks until no marked day and no closed day's people count waits (the first look, or
        /// one after a new time zone, builds `maxDays` days a look); what the looks did together.
        @discardableResult
        func settle() async throws -> ReportRollup.Look {
            var total = ReportRollup.Look(eventsRead: 0, daysRebuilt: 0, daysWaiting: 0, countsWaiting: 0)
            repeat {
                let look = try await rollup.look()
                total.eventsRead += look.eventsRead
                total.daysRebuilt += look.daysRebuilt
                total.daysWaiting = look.daysWaiting
                total.countsWaiting = look.countsWaiting
            } while total.daysWaiting > 0 || total.countsWaiting > 0
            // Every closed day is counted, so that daily people come from the counts.
            let uncounted = try await rows(
                """
                SELECT count(*) FROM (SELECT DISTINCT project, day FROM collector.report_days) d
                WHERE d.day < current_date - 1 AND NOT EXISTS (SELECT 1 FROM collector.report_people_days p
                                                              WHERE p.project = d.project AND p.day = d.day AND p.event = '*' AND p.lib IS NULL)
                """)
            #expect(uncounted.first?[0] == "0", "closed days without people counts after the looks")
            return total
        }

        /// The function's rows and the plain SQL's, each as sorted lines of text.
        func same(_ function: String, _ plain: String, _ parameters: [String?] = []) async throws -> (function: [String], plain: [String]) {
            func lines(_ rows: [[String?]]) -> [String] { rows.map { $0.map { $0 ?? "∅" }.joined(separator: "|") }.sorted() }
            return (lines(try await rows(function, parameters)), lines(try await rows(plain, parameters)))
        }
    }

    static func withWorld(zone: String = "Asia/Shanghai", _ body: (World) async throws -> Void) async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: TestDatabase.logger)
            try await Migrator.migrate(schema: IdentitySchema.name, migrations: IdentitySchema.migrations, pool: pool, logger: TestDatabase.logger)
            let world = World(
                url: url, pool: pool, store: PostgresEventStore(pool: pool),
                rollup: ReportRollup(
                    pool: pool, interval: .seconds(3600), countQuiet: .zero, registry: PrometheusCollectorRegistry(), logger: TestDatabase.logger))
            #expect(try await ReportTimeZones(pool: pool).set(ProjectTimeZone(project: project, timeZone: zone)))
            try await body(world)
        }
    }

    /// Shop traffic: 60 people over 50 days, on iOS, Android and H5 pages, each visit opening the
    /// app and viewing products, some adding to the cart, some of those paying; some people on two
    /// SDKs; a few events with no user (an illegal id); profiles with a gender.
    static func traffic(seed: UInt64) -> [CollectRecord] {
        var random = ResolveDifferentialTests.Seeded(state: seed)
        var records: [CollectRecord] = []
        var trackID = Int64(seed) * 1_000_000
        func record(_ event: String, user: Int64?, at time: Int64, lib: String, price: Int? = nil, city: String) -> CollectRecord {
            trackID += 1
            var properties = #"{"$city":"\#(city)""#
            if let price { properties += #","price":\#(price)"# }
            properties += "}"
            return CollectRecord(
                project: project, type: "track", event: event, time: time, distinctId: user.map { "d\($0)" } ?? "undefined", userId: user,
                lib: lib, appVersion: "1.\(Int(user ?? 0) % 3)", properties: PropertiesText(properties), trackId: trackID)
        }
        for user in Int64(1)...60 {
            let city = cities[Int(user) % cities.count]
            let lib = libs[Int(user) % libs.count]
            for _ in 0..<Int.random(in: 1...6, using: &random) {
                let dayStart = start + Int64.random(in: 0..<50, using: &random) * day
                for _ in 0..<Int.random(in: 1...2, using: &random) {
                    // Hours 0–23 UTC: a visit after 16:00 UTC is the next day in Shanghai.
                    var time = dayStart + Int64.random(in: 0..<(23 * hour), using: &random)
                    let visitLib = Int.random(in: 0..<5, using: &random) == 0 ? "js" : lib
                    records.append(record("$AppStart", user: user, at: time, lib: visitLib, city: city))
                    for _ in 0..<Int.random(in: 1...3, using: &random) {
                        time += Int64.random(in: 1_000...600_000, using: &random)
                        records.append(record("ViewProduct", user: user, at: time, lib: visitLib, city: city))
                    }
                    guard Bool.random(using: &random) else { continue }
                    time += Int64.random(in: 1_000...3 * hour, using: &random)
                    records.append(record("AddToCart", user: user, at: time, lib: visitLib, price: Int.random(in: 1...500, using: &random), city: city))
                    guard Bool.random(using: &random) else { continue }
                    // Sometimes the next day: past a one-day window.
                    time += Int64.random(in: 1_000...30 * hour, using: &random)
                    records.append(record("Pay", user: user, at: time, lib: visitLib, price: Int.random(in: 1...500, using: &random), city: city))
                }
            }
            records.append(
                CollectRecord(
                    project: project, type: "profile_set", event: nil, time: start, distinctId: "d\(user)", userId: user,
                    properties: PropertiesText(#"{"gender":"\#(user % 2 == 0 ? "f" : "m")"}"#), trackId: -user))
        }
        for index in 0..<5 {
            records.append(record("ViewProduct", user: nil, at: start + Int64(index) * 7 * day + 5 * hour, lib: "js", city: "北京"))
        }
        return records
    }

    /// Writes the traffic in batches of 200, as uploads arrive.
    static func store(_ records: [CollectRecord], in world: World) async throws {
        for offset in stride(from: 0, to: records.count, by: 200) {
            try await world.write(Array(records[offset..<min(offset + 200, records.count)]))
        }
    }

    // MARK: Every report against plain SQL

    /// Each comparison: the function call and the plain SQL over `analytics.events` that means the same.
    static func comparisons(zone: String) -> [(name: String, function: String, plain: String)] {
        let local = "(time AT TIME ZONE '\(zone)')"
        let range = "time >= '\(from)'::timestamp AT TIME ZONE '\(zone)' AND time < '\(to)'::timestamp AT TIME ZONE '\(zone)' + interval '1 day'"
        return [
            (
                "events a day",
                "SELECT bucket, event, value FROM analytics.event_trend('shop', ARRAY['ViewProduct', 'Pay'], '\(from)', '\(to)')",
                "SELECT date_trunc('day', \(local)), event, count(*) FROM analytics.events WHERE project = 'shop' AND event IN ('ViewProduct', 'Pay') AND \(range) GROUP BY 1, 2"
            ),
            (
                "events an hour",
                "SELECT bucket, event, value FROM analytics.event_trend('shop', ARRAY['AddToCart'], '2026-09-01', '2026-09-10', 'hour')",
                "SELECT date_trunc('hour', \(local)), event, count(*) FROM analytics.events WHERE project = 'shop' AND event = 'AddToCart' AND time >= '2026-09-01'::timestamp AT TIME ZONE '\(zone)' AND time < '2026-09-11'::timestamp AT TIME ZONE '\(zone)' GROUP BY 1, 2"
            ),
            (
                "people a day",
                "SELECT bucket, event, value FROM analytics.event_trend('shop', ARRAY['$AppStart', 'Pay'], '\(from)', '\(to)', measure => 'people')",
                "SELECT date_trunc('day', \(local)), event, count(DISTINCT user_id) FROM analytics.events WHERE project = 'shop' AND event IN ('$AppStart', 'Pay') AND \(range) GROUP BY 1, 2"
            ),
            (
                "active people a day (any event)",
                "SELECT bucket, event, value FROM analytics.event_trend('shop', ARRAY['*'], '\(from)', '\(to)', measure => 'people')",
                "SELECT date_trunc('day', \(local)), '*', count(DISTINCT user_id) FROM analytics.events WHERE project = 'shop' AND \(range) GROUP BY 1, 2"
            ),
            (
                "active people a day by SDK (any event)",
                "SELECT bucket, event, group_value, value FROM analytics.event_trend('shop', ARRAY['*'], '\(from)', '\(to)', measure => 'people', group_by => 'lib')",
                "SELECT date_trunc('day', \(local)), '*', lib, count(DISTINCT user_id) FROM analytics.events WHERE project = 'shop' AND \(range) GROUP BY 1, 2, 3"
            ),
            (
                "people a week",
                "SELECT bucket, event, value FROM analytics.event_trend('shop', ARRAY['ViewProduct'], '\(from)', '\(to)', 'week', 'people')",
                "SELECT date_trunc('week', \(local)::date::timestamp), event, count(DISTINCT user_id) FROM analytics.events WHERE project = 'shop' AND event = 'ViewProduct' AND \(range) GROUP BY 1, 2"
            ),
            (
                "people a month by SDK",
                "SELECT bucket, event, group_value, value FROM analytics.event_trend('shop', ARRAY['ViewProduct'], '\(from)', '\(to)', 'month', 'people', group_by => 'lib')",
                "SELECT date_trunc('month', \(local)), event, lib, count(DISTINCT user_id) FROM analytics.events WHERE project = 'shop' AND event = 'ViewProduct' AND \(range) AND user_id IS NOT NULL GROUP BY 1, 2, 3"
            ),
            (
                "people a day by gender (a profile property)",
                "SELECT bucket, event, group_value, value FROM analytics.event_trend('shop', ARRAY['Pay'], '\(from)', '\(to)', measure => 'people', group_by => 'user.gender')",
                "SELECT date_trunc('day', \(local)), e.event, p.properties ->> 'gender', count(DISTINCT e.user_id) FROM analytics.events e LEFT JOIN analytics.profiles p ON p.project = e.project AND p.user_id = e.user_id WHERE e.project = 'shop' AND e.event = 'Pay' AND e.\(range) AND e.user_id IS NOT NULL GROUP BY 1, 2, 3"
            ),
            (
                "payers by city over the whole range",
                "SELECT bucket, event, group_value, value FROM analytics.event_trend('shop', ARRAY['Pay'], '\(from)', '\(to)', 'all', 'people', group_by => '$city')",
                "SELECT '\(from)'::timestamp, event, properties ->> '$city', count(DISTINCT user_id) FROM analytics.events WHERE project = 'shop' AND event = 'Pay' AND \(range) GROUP BY 1, 2, 3"
            ),
            (
                "amount paid a week by city, over 100 only",
                "SELECT bucket, event, group_value, value FROM analytics.event_trend('shop', ARRAY['Pay'], '\(from)', '\(to)', 'week', 'sum', 'price', '$city', '[{\"property\": \"price\", \"op\": \">\", \"value\": 100}]')",
                "SELECT date_trunc('week', \(local)), event, properties ->> '$city', sum((properties ->> 'price')::numeric) FROM analytics.events WHERE project = 'shop' AND event = 'Pay' AND \(range) AND (properties ->> 'price')::numeric > 100 GROUP BY 1, 2, 3"
            ),
            (
                "largest cart a day, iOS only",
                "SELECT bucket, event, value FROM analytics.event_trend('shop', ARRAY['AddToCart'], '\(from)', '\(to)', measure => 'max', property => 'price', filters => '[{\"property\": \"lib\", \"op\": \"=\", \"value\": \"iOS\"}]')",
                "SELECT date_trunc('day', \(local)), event, max((properties ->> 'price')::numeric) FROM analytics.events WHERE project = 'shop' AND event = 'AddToCart' AND \(range) AND lib = 'iOS' GROUP BY 1, 2"
            ),
            (
                "visits a person over the whole range",
                "SELECT bucket_from, bucket_to, people FROM analytics.distribution('shop', '$AppStart', '\(from)', '\(to)', buckets => '{1,2,3,5,10}') WHERE people > 0",
                """
                SELECT b.lo, b.hi, count(*) FROM (SELECT user_id, count(*) AS n FROM analytics.events WHERE project = 'shop' AND event = '$AppStart' AND \(range) AND user_id IS NOT NULL GROUP BY 1) v
                JOIN (VALUES (1, 2), (2, 3), (3, 5), (5, 10), (10, NULL)) b(lo, hi) ON v.n >= b.lo AND (b.hi IS NULL OR v.n < b.hi) GROUP BY 1, 2
                """
            ),
            (
                "amount paid a person",
                "SELECT bucket_from, bucket_to, people FROM analytics.distribution('shop', 'Pay', '\(from)', '\(to)', 'sum', 'price', '{0,200,500,1000}') WHERE people > 0",
                """
                SELECT b.lo, b.hi, count(*) FROM (SELECT user_id, sum((properties ->> 'price')::numeric) AS n FROM analytics.events WHERE project = 'shop' AND event = 'Pay' AND \(range) AND user_id IS NOT NULL GROUP BY 1) v
                JOIN (VALUES (0, 200), (200, 500), (500, 1000), (1000, NULL)) b(lo, hi) ON v.n >= b.lo AND (b.hi IS NULL OR v.n < b.hi) GROUP BY 1, 2
                """
            ),
            (
                "day-k retention of daily cohorts",
                "SELECT cohort, people, period, returned, returned_within FROM analytics.retention('shop', '$AppStart', 'ViewProduct', '2026-08-25', '2026-09-20', periods => 7)",
                retentionSQL(zone: zone, start: "$AppStart", returning: "ViewProduct", from: "2026-08-25", to: "2026-09-20", unit: "day", periods: 7)
            ),
            (
                "week-k retention of weekly cohorts, payers on Android",
                "SELECT cohort, people, period, returned, returned_within FROM analytics.retention('shop', 'Pay', '$AppStart', '2026-08-24', '2026-09-20', 'week', 2, '[{\"property\": \"lib\", \"op\": \"=\", \"value\": \"Android\"}]')",
                retentionSQL(
                    zone: zone, start: "Pay", returning: "$AppStart", from: "2026-08-24", to: "2026-09-20", unit: "week", periods: 2,
                    startFilter: "lib = 'Android'")
            ),
            // One event for both: the rollup is read once.
            (
                "day-k retention of one event",
                "SELECT cohort, people, period, returned, returned_within FROM analytics.retention('shop', 'ViewProduct', 'ViewProduct', '2026-08-20', '2026-09-20', periods => 14)",
                retentionSQL(zone: zone, start: "ViewProduct", returning: "ViewProduct", from: "2026-08-20", to: "2026-09-20", unit: "day", periods: 14)
            ),
            (
                "week-k retention of one event",
                "SELECT cohort, people, period, returned, returned_within FROM analytics.retention('shop', '$AppStart', '$AppStart', '2026-08-20', '2026-09-30', 'week', 4)",
                retentionSQL(zone: zone, start: "$AppStart", returning: "$AppStart", from: "2026-08-20", to: "2026-09-30", unit: "week", periods: 4)
            ),
            // Cohorts and periods past what a bigint's bits hold (42 days + 30): the join of starts and returns.
            (
                "day-k retention over 30 days of 42 cohorts",
                "SELECT cohort, people, period, returned, returned_within FROM analytics.retention('shop', '$AppStart', 'ViewProduct', '2026-08-20', '2026-09-30', periods => 30)",
                retentionSQL(zone: zone, start: "$AppStart", returning: "ViewProduct", from: "2026-08-20", to: "2026-09-30", unit: "day", periods: 30)
            ),
        ]
    }

    /// Sensors' retention in plain SQL: a cohort is the people who did the start event on a day
    /// (week); they returned on day k when they did the return event on the k-th day after.
    static func retentionSQL(
        zone: String, start: String, returning: String, from: String, to: String, unit: String, periods: Int, startFilter: String = "true"
    ) -> String {
        let length = unit == "day" ? 1 : 7
        return """
            WITH st AS (SELECT DISTINCT user_id AS u, date_trunc('\(unit)', (time AT TIME ZONE '\(zone)'))::date AS cohort FROM analytics.events
                        WHERE project = 'shop' AND event = '\(start)' AND user_id IS NOT NULL AND \(startFilter)
                          AND (time AT TIME ZONE '\(zone)')::date BETWEEN '\(from)' AND '\(to)'),
            rt AS (SELECT DISTINCT user_id AS u, date_trunc('\(unit)', (time AT TIME ZONE '\(zone)'))::date AS at FROM analytics.events
                   WHERE project = 'shop' AND event = '\(returning)' AND user_id IS NOT NULL),
            sizes AS (SELECT cohort, count(*) AS n FROM st GROUP BY 1)
            SELECT s.cohort, s.n, k,
                   (SELECT count(*) FROM st WHERE st.cohort = s.cohort AND EXISTS (SELECT 1 FROM rt WHERE rt.u = st.u AND rt.at = st.cohort + \(length) * k)),
                   (SELECT count(*) FROM st WHERE st.cohort = s.cohort AND EXISTS (SELECT 1 FROM rt WHERE rt.u = st.u AND rt.at > st.cohort AND rt.at <= st.cohort + \(length) * k))
            FROM sizes s CROSS JOIN generate_series(1, \(periods)) k
            """
    }

    /// Asserts that every comparison agrees; `moment` says when in the test.
    static func expectAllAgree(_ world: World, zone: String = "Asia/Shanghai", _ moment: String) async throws {
        for comparison in comparisons(zone: zone) {
            let (function, plain) = try await world.same(comparison.function, comparison.plain)
            #expect(!plain.isEmpty, "\(moment): \(comparison.name): the plain SQL found nothing, so the comparison would prove nothing")
            #expect(function == plain, "\(moment): \(comparison.name)")
        }
        try await expectFunnelsAgree(world, zoneOffset: zone == "UTC" ? 0 : 8 * hour, moment)
    }

    // MARK: The funnel against a search written apart

    /// How far each person got, by the funnel's definition read literally: for every start (a
    /// first-step event in the range), take each next step's earliest event after the previous
    /// step and within the window of the start; a person reached the deepest step of any start.
    static func oracleFunnel(_ events: [(user: Int64, event: String, time: Int64)], steps: [String], from: Int64, to: Int64, window: Int64) -> [Int] {
        var byUser: [Int64: [(event: String, time: Int64)]] = [:]
        for event in events where steps.contains(event.event) { byUser[event.user, default: []].append((event.event, event.time)) }
        var reached = Array(repeating: 0, count: steps.count)
        for (_, list) in byUser {
            var deepest = 0
            for start in list where start.event == steps[0] && start.time >= from && start.time < to {
                var level = 1
                var last = start.time
                for step in steps.dropFirst() {
                    guard let next = list.filter({ $0.event == step && $0.time > last && $0.time - start.time <= window }).map(\.time).min() else { break }
                    level += 1
                    last = next
                }
                deepest = max(deepest, level)
            }
            for level in 0..<deepest { reached[level] += 1 }
        }
        return reached
    }

    /// - Parameter zoneOffset: the project's zone from UTC (Shanghai has no daylight saving time).
    static func expectFunnelsAgree(_ world: World, zoneOffset: Int64, _ moment: String) async throws {
        let rows = try await world.rows(
            "SELECT user_id::text, event, (extract(epoch FROM time) * 1000)::bigint::text FROM analytics.events WHERE project = 'shop' AND user_id IS NOT NULL")
        let events = rows.compactMap { row -> (user: Int64, event: String, time: Int64)? in
            guard let user = row[0].flatMap(Int64.init), let event = row[1], let time = row[2].flatMap(Int64.init) else { return nil }
            return (user, event, time)
        }
        let funnels: [(steps: [String], window: Int64)] = [
            (Self.events, day), (["$AppStart", "AddToCart", "Pay"], 12 * hour), (["ViewProduct", "ViewProduct", "Pay"], 3 * day),
        ]
        for (steps, window) in funnels {
            // 2026-09-01 to 2026-09-21 in the project's days.
            let from = start + 12 * day - zoneOffset
            let to = from + 21 * day
            let expected = oracleFunnel(events, steps: steps, from: from, to: to, window: window)
            let stepsJSON = "[" + steps.map { "\"\($0)\"" }.joined(separator: ",") + "]"
            let answer = try await world.rows(
                "SELECT people FROM analytics.funnel('shop', $1::jsonb, '2026-09-01', '2026-09-21', $2::integer) ORDER BY step",
                [stepsJSON, String(window / 1000)])
            let people: [Int] = answer.map { row in row[0].flatMap { Int($0) } ?? -1 }
            #expect(people == expected, "\(moment): funnel \(steps) within \(window / 1000) s")
            #expect(expected[0] > 0 && expected[expected.count - 1] > 0, "\(moment): funnel \(steps): the traffic reaches every step")
        }
    }

    // MARK: Tests

    @Test("every report agrees with plain SQL on stored traffic, and after each change to what the rows mean")
    func agreesWithPlainSQL() async throws {
        try await Self.withWorld { world in
            try await Self.store(Self.traffic(seed: 63), in: world)
            let first = try await world.settle()
            #expect(first.eventsRead > 1000)
            try await Self.expectAllAgree(world, "as stored")

            // A merge after the fact: people count under the user their events count under now,
            // with no rollup look in between.
            let before = try await world.rows("SELECT count(DISTINCT user_id) FROM analytics.events WHERE project = 'shop'")
            for (merged, survivor) in [(2, 1), (5, 4), (4, 7), (12, 30), (31, 30)] { try await world.merge(Int64(merged), into: Int64(survivor)) }
            let after = try await world.rows("SELECT count(DISTINCT user_id) FROM analytics.events WHERE project = 'shop'")
            #expect(before != after)
            try await Self.expectAllAgree(world, "after merges")

            // Late and out-of-order records for days the rollups closed, and a batch sent again.
            var late = Self.traffic(seed: 64).filter { $0.userId.map { $0 % 7 == 0 } ?? false }
            late = late.map { record in
                var record = record
                record.trackId = record.trackId.map { $0 + 500_000_000 }
                return record
            }
            try await world.write(Array(late.reversed()))
            try await world.write(Array(late.reversed()))
            let retried = try await world.write(Array(late.prefix(50)))
            #expect(retried.duplicateIndexes.count == 50)
            let look = try await world.settle()
            #expect(look.eventsRead == late.filter { $0.type == "track" }.count)
            try await Self.expectAllAgree(world, "after late records and retries")

            // An erasure: the person leaves every report.
            let erasure = try await UserData(pool: world.pool).eraseStep(
                project: Self.project, CollectorErasureStep(subject: ErasureSubject(users: [30, 31, 12], identities: [])))
            #expect(erasure.events > 0)
            // identity-service's step takes them out of its map (IdentityStore's erasure).
            let named = "SELECT count(*)::text FROM collector.report_canon WHERE user_id IN (30, 31, 12) OR canonical_user_id IN (30, 31, 12)"
            #expect(try await world.rows(named).first?[0] == "2", "the counts' copy of the map has the merges into 30")
            try await world.execute(
                "DELETE FROM identity.user_map WHERE project = 'shop' AND (user_id IN (30, 31, 12) OR canonical_user_id IN (30, 31, 12))")
            let erased = try await world.settle()
            #expect(erased.daysRebuilt > 0)
            #expect(try await world.rows(named).first?[0] == "0", "the counts' copy of the map still names erased users")
            try await Self.expectAllAgree(world, "after an erasure")

            // Retention drops the project's August.
            let august = ProjectMonth(month: MonthPartition(unixMillis: Self.start), project: Self.project)
            try await EventPartitions(pool: world.pool).drop(["collector.\"\(august.tableName)\""])
            #expect(try await world.rows("SELECT count(*) FROM analytics.events WHERE time < '2026-09-01'").first?[0] == "0")
            try await world.settle()
            try await Self.expectAllAgree(world, "after retention dropped a month")

            // A hidden event leaves the reports as it leaves analytics.events: naming it is an error.
            try await world.execute(
                "INSERT INTO collector.catalog_notes (project, kind, name, display_name, description, hidden) VALUES ('shop', 'event', 'AddToCart', '', '', true)"
            )
            await #expect(throws: PostgresError.self) {
                _ = try await world.rows("SELECT * FROM analytics.event_trend('shop', ARRAY['AddToCart'], '2026-09-01', '2026-09-02')")
            }
            try await world.execute("UPDATE collector.catalog_notes SET hidden = false")
        }
    }

    @Test("a closed day changed by late records or merges is counted by the reports themselves until a look counts it again")
    func quietDays() async throws {
        try await Self.withWorld { world in
            try await Self.store(Self.traffic(seed: 71), in: world)
            try await world.settle()
            // A collector's look as deployed: days changed less than a minute ago wait to be counted again.
            let deployed = ReportRollup(pool: world.pool, interval: .seconds(3600), registry: PrometheusCollectorRegistry(), logger: TestDatabase.logger)
            let late = Self.traffic(seed: 72).filter { $0.type == "track" && ($0.userId ?? 0) % 5 == 0 }.map { record in
                var record = record
                record.trackId = record.trackId.map { $0 + 800_000_000 }
                return record
            }
            try await world.write(late)
            for (merged, survivor) in [(3, 6), (9, 6)] { try await world.merge(Int64(merged), into: Int64(survivor)) }
            let look = try await deployed.look()
            #expect(look.eventsRead == late.count && look.countsWaiting > 0, "\(look)")
            // As analysts read it.
            try await world.execute(try String(contentsOf: AnalystRoleTests.script, encoding: .utf8))
            let status = try await AnalystRoleTests.rows(asAnalyst: world.url, "SELECT days_waiting::text, counts_waiting::text FROM analytics.report_status")
            #expect(status.first == ["0", String(look.countsWaiting)])
            #expect(try await deployed.status().daysWaiting == look.countsWaiting)
            try await Self.expectAllAgree(world, "with changed days waiting to be counted")
            try await world.settle()
            try await Self.expectAllAgree(world, "once they are counted")
        }
    }

    @Test("the documented report examples run as written, as datong_analyst")
    func documentedReports() async throws {
        let examples = try AnalystQueryTests.sqlBlock("docs/ANALYTICS.md", after: "## Reports")
        let statements = examples.components(separatedBy: ";\n").filter { $0.contains("SELECT") }
        #expect(statements.count == 7)
        try await Self.withWorld { world in
            try await world.execute(try String(contentsOf: AnalystRoleTests.script, encoding: .utf8))
            try await Self.store(Self.traffic(seed: 69), in: world)
            try await world.merge(9, into: 8)
            try await world.settle()
            for statement in statements {
                let answer = try await AnalystRoleTests.rows(asAnalyst: world.url, statement)
                #expect(!answer.isEmpty, "\(statement)")
            }
        }
    }

    @Test("a new time zone moves every day of the rollups to the project's new days")
    func timeZoneChange() async throws {
        try await Self.withWorld(zone: "UTC") { world in
            try await Self.store(Self.traffic(seed: 65), in: world)
            try await world.settle()
            let utc = try await world.rows("SELECT * FROM analytics.event_trend('shop', ARRAY['$AppStart'], '\(Self.from)', '\(Self.to)')")
            try await Self.expectAllAgree(world, zone: "UTC", "in UTC")
            #expect(try await ReportTimeZones(pool: world.pool).set(ProjectTimeZone(project: Self.project, timeZone: "Asia/Shanghai")))
            #expect(try await ReportTimeZones(pool: world.pool).zone(of: Self.project).timeZone == "Asia/Shanghai")
            // Every day of the project, built again, `maxDays` a look.
            let first = try await world.rollup.look()
            #expect(first.daysRebuilt == 7 && first.daysWaiting > 0)
            let look = try await world.settle()
            #expect(look.daysRebuilt + first.daysRebuilt >= 50)
            let shanghai = try await world.rows("SELECT * FROM analytics.event_trend('shop', ARRAY['$AppStart'], '\(Self.from)', '\(Self.to)')")
            #expect(utc != shanghai)
            try await Self.expectAllAgree(world, "in Shanghai")
            #expect(!(try await ReportTimeZones(pool: world.pool).set(ProjectTimeZone(project: Self.project, timeZone: "Mars/Olympus"))))
        }
    }

    @Test("the first look builds a few days a look; records stored meanwhile, for built days and for days still waiting, count once")
    func boundedFirstLook() async throws {
        try await Self.withWorld { world in
            let traffic = Self.traffic(seed: 70)
            try await Self.store(traffic, in: world)
            let first = try await world.rollup.look()
            #expect(first.daysRebuilt == 7 && first.daysWaiting >= 40, "\(first)")
            // Late records for the first days (built) and for the last ones (still waiting).
            let late = traffic.filter { $0.type == "track" && ($0.time < Self.start + 3 * Self.day || $0.time > Self.start + 45 * Self.day) }
                .prefix(300).map { record in
                    var record = record
                    record.trackId = record.trackId.map { $0 + 700_000_000 }
                    return record
                }
            try await world.write(Array(late))
            let second = try await world.rollup.look()
            #expect(second.daysRebuilt == 7 && second.daysWaiting == first.daysWaiting - 7)
            try await world.settle()
            let counts = try await world.rows(
                """
                SELECT (SELECT sum(events) FROM collector.report_hours)::text, (SELECT sum(events) FROM collector.report_days)::text,
                       (SELECT count(*) FROM collector.events)::text
                """)
            #expect(counts.first?[0] == counts.first?[2] && counts.first?[1] == counts.first?[2], "\(counts)")
            try await Self.expectAllAgree(world, "after a first look in several")
        }
    }

    @Test("two collectors looking at once count every event once")
    func concurrentLooks() async throws {
        try await Self.withWorld { world in
            let traffic = Self.traffic(seed: 66)
            let second = ReportRollup(
                pool: world.pool, interval: .seconds(3600), countQuiet: .zero, registry: PrometheusCollectorRegistry(), logger: TestDatabase.logger)
            // Writes and looks of two collectors interleave; a look that loses the race throws 40001.
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await Self.store(traffic, in: world) }
                for rollup in [world.rollup, second] {
                    group.addTask {
                        for _ in 0..<15 {
                            do { _ = try await rollup.look() } catch let error as PostgresError where error.sqlState == "40001" {}
                        }
                    }
                }
                try await group.waitForAll()
            }
            try await world.settle()
            let counts = try await world.rows(
                """
                SELECT (SELECT sum(events) FROM collector.report_hours)::text, (SELECT sum(events) FROM collector.report_days)::text,
                       (SELECT count(*) FROM collector.events)::text
                """)
            #expect(counts.first?[0] == counts.first?[2] && counts.first?[1] == counts.first?[2])
            try await Self.expectAllAgree(world, "after concurrent looks")
        }
    }

    @Test("a person's events come across their merged users, newest first, page by page")
    func userEvents() async throws {
        try await Self.withWorld { world in
            try await Self.store(Self.traffic(seed: 67), in: world)
            try await world.merge(9, into: 8)
            let expected = try await world.rows(
                "SELECT event_id::text FROM analytics.events WHERE project = 'shop' AND user_id = 8 ORDER BY time DESC, event_id DESC")
            #expect(try await world.rows("SELECT DISTINCT stored_user_id FROM analytics.events WHERE user_id = 8").count == 2)
            var seen: [String] = []
            var before: String? = nil
            repeat {
                let page = try await world.rows("SELECT event_id::text, next FROM analytics.user_events('shop', 9, $1, 7)", [before])
                #expect(page.count <= 7)
                seen += page.compactMap { $0[0] }
                before = page.count == 7 ? page.last?[1] : nil
            } while before != nil
            #expect(seen == expected.compactMap { $0[0] })
        }
    }

    @Test(
        "bad arguments are refused with what is wrong",
        arguments: [
            ("SELECT * FROM analytics.event_trend('nope', ARRAY['Pay'], '2026-09-01', '2026-09-02')", "unknown project 'nope'"),
            ("SELECT * FROM analytics.event_trend('shop', ARRAY['Nope'], '2026-09-01', '2026-09-02')", "project 'shop' has stored no event 'Nope'"),
            ("SELECT * FROM analytics.event_trend('shop', ARRAY['Pay'], '2026-09-02', '2026-09-01')", "to_day 2026-09-01 is before from_day 2026-09-02"),
            ("SELECT * FROM analytics.event_trend('shop', ARRAY['Pay'], '2016-09-01', '2026-09-01')", "this report covers at most 400 days"),
            (
                "SELECT * FROM analytics.event_trend('shop', ARRAY['Pay'], '2026-09-01', '2026-09-02', group_by => 'colour')",
                "project 'shop' has no event property 'colour'"
            ),
            (
                "SELECT * FROM analytics.event_trend('shop', ARRAY['Pay'], '2026-09-01', '2026-09-02', measure => 'sum', property => '$city')",
                "event property '$city' is STRING, not a NUMBER"
            ),
            (
                "SELECT * FROM analytics.event_trend('shop', ARRAY['Pay'], '2026-09-01', '2026-09-02', filters => '[{\"property\": \"price\", \"op\": \"~\", \"value\": 1}]')",
                "unknown op '~'"
            ),
            (
                "SELECT * FROM analytics.funnel('shop', '[\"Pay\",\"Pay\",\"Pay\",\"Pay\",\"Pay\",\"Pay\",\"Pay\",\"Pay\",\"Pay\",\"Pay\",\"Pay\"]', '2026-09-01', '2026-09-02')",
                "11 steps: a funnel has 2 to 10"
            ),
            (
                "SELECT * FROM analytics.funnel('shop', '[\"Pay\",\"Pay\"]', '2026-09-01', '2026-09-02', 315360000)",
                "the conversion window is 1 second to 180 days"
            ),
            ("SELECT * FROM analytics.retention('shop', 'Pay', 'Pay', '2026-09-01', '2026-09-02', periods => 31)", "periods 31: 1 to 30"),
            (
                "SELECT * FROM analytics.distribution('shop', 'Pay', '2026-09-01', '2026-09-02', buckets => '{5,1}')",
                "buckets: 1 to 100 lower bounds, ascending"
            ),
            ("SELECT * FROM analytics.user_events('shop', 0)", "user_id: a user number"),
            ("SELECT * FROM analytics.user_events('shop', 1, 'x')", "before: the next of a row"),
        ])
    func badArguments(sql: String, message: String) async throws {
        try await Self.withWorld { world in
            try await world.write(Array(Self.traffic(seed: 68).prefix(300)))
            do {
                _ = try await world.rows(sql)
                Issue.record("\(sql) was answered")
            } catch let error as PostgresError {
                #expect(error.sqlState == "22023", "\(error)")
                #expect("\(error)".contains(message), "\(error)")
            }
        }
    }

    @Test("the funnel's median time between steps and its groups by a property of the first step")
    func funnelDetails() async throws {
        try await Self.withWorld(zone: "UTC") { world in
            let at = Self.start + 10 * Self.day
            func event(_ name: String, _ user: Int64, _ seconds: Int64, lib: String = "iOS") -> CollectRecord {
                CollectRecord(
                    project: Self.project, type: "track", event: name, time: at + seconds * 1000, distinctId: "d\(user)", userId: user, lib: lib,
                    properties: #"{"price":1}"#, trackId: user * 1000 + seconds)
            }
            try await world.write([
                // 1: views, then pays 60 s later. 2: views twice, the next day too; the second view
                // is the start whose one-day window reaches the payment, 30 s after it. 3 (Android):
                // views, pays two days later: no conversion. 4: pays, then views: not in order.
                event("ViewProduct", 1, 0), event("Pay", 1, 60),
                event("ViewProduct", 2, 0), event("ViewProduct", 2, 90_000), event("Pay", 2, 90_030),
                event("ViewProduct", 3, 0, lib: "Android"), event("Pay", 3, 172_900, lib: "Android"),
                event("Pay", 4, 0), event("ViewProduct", 4, 10),
            ])
            let rows = try await world.rows(
                "SELECT step::text, people::text, conversion::text, median_seconds::text FROM analytics.funnel('shop', '[\"ViewProduct\", \"Pay\"]', '2026-08-30', '2026-08-31')"
            )
            #expect(rows == [["1", "4", "1.0000", nil], ["2", "2", "0.5000", "45.000"]])
            let grouped = try await world.rows(
                "SELECT group_value, step::text, people::text FROM analytics.funnel('shop', '[\"ViewProduct\", \"Pay\"]', '2026-08-30', '2026-08-31', group_by => 'lib')"
            )
            #expect(grouped == [["iOS", "1", "3"], ["iOS", "2", "2"], ["Android", "1", "1"], ["Android", "2", "0"]])
        }
    }
}
