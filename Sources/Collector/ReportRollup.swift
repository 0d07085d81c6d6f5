import DatongContracts
import DatongPostgres
import Foundation
import Logging
import Prometheus
import ServiceLifecycle

/// Keeps the report rollups (`collector.report_hours`, `collector.report_days`; ReportSchema) up to
/// date, off the acknowledgement path: every `interval` one look (`collector.report_round`) adds
/// the events stored since the last look and builds again the days an erasure, a retention drop or
/// a time zone change marked. A look and the snapshot it read up to commit together, so a crash
/// anywhere loses nothing and counts nothing twice; collectors looking at once serialize on the
/// state row (the loser looks again next time).
///
/// Exports `datong_report_rollup_age_seconds` (since the last finished look, whichever collector
/// made it: how far behind reports are), `datong_report_rollup_days_waiting` (marked days not built
/// yet), `datong_report_rollup_events_total` and `datong_report_rollup_failures_total`.
final class ReportRollup: Service, Sendable {
    private let pool: PostgresPool
    private let interval: Duration
    private let maxDays: Int
    private let countQuiet: Duration
    private let registry: PrometheusCollectorRegistry
    private let logger: Logger

    /// - Parameter maxDays: the most marked days one look builds (again): after an erasure or a
    ///   retention drop, and every day of a project on the first look or in a new time zone. A
    ///   look's work is bounded by what the project stores in that many days.
    /// - Parameter countQuiet: how long a closed day waits after a change (late records, a merge)
    ///   before its distinct people are counted again; meanwhile reports count that day themselves.
    init(
        pool: PostgresPool, interval: Duration, maxDays: Int = 7, countQuiet: Duration = .seconds(60), registry: PrometheusCollectorRegistry,
        logger: Logger
    ) {
        self.pool = pool
        self.interval = interval
        self.maxDays = maxDays
        self.countQuiet = countQuiet
        self.registry = registry
        self.logger = logger
    }

    /// What one look did.
    struct Look: Sendable, Equatable {
        var eventsRead: Int
        var daysRebuilt: Int
        var daysWaiting: Int
        /// Closed days whose distinct people wait to be counted (`collector.report_people_pending`).
        var countsWaiting: Int
    }

    private static func metric(_ name: String, unit: String = "", _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "datong", subsystem: "report_rollup", metricName: name, unitName: unit, helpText: help)
    }

    func run() async throws {
        let age = registry.makeGauge(descriptor: Self.metric("age", unit: "seconds", "Seconds since the report rollups' last finished look"))
        let waiting = registry.makeGauge(descriptor: Self.metric("days_waiting", "Days marked to be built again, or whose people wait to be counted"))
        let events = registry.makeCounter(descriptor: Self.metric("events", unit: "total", "Events the report rollups read"))
        let failures = registry.makeCounter(
            descriptor: Self.metric("failures", unit: "total", "Looks that failed (other than losing a race to another collector)"))
        try? await cancelWhenGracefulShutdown {
            while true {
                do {
                    let look = try await self.look()
                    events.increment(by: Int64(look.eventsRead))
                    if look.daysRebuilt > 0 || look.eventsRead > 100_000 {
                        self.logger.info(
                            "reports.rolled_up",
                            metadata: ["events": "\(look.eventsRead)", "days.rebuilt": "\(look.daysRebuilt)", "days.waiting": "\(look.daysWaiting)"])
                    }
                } catch let error as PostgresError where error.sqlState == "40001" {
                    self.logger.debug("reports.look_overlapped", metadata: ["error": "\(error)"])
                } catch {
                    failures.increment()
                    self.logger.warning("reports.look_failed", metadata: ["error": "\(error)"])
                }
                if let status = try? await self.status() {
                    age.set(status.ageSeconds ?? -1)
                    waiting.set(Double(status.daysWaiting))
                }
                try await Task.sleep(for: self.interval)
            }
        }
    }

    /// Makes one look now.
    func look() async throws -> Look {
        let maxDays = String(self.maxDays)
        let quiet = String(countQuiet.components.seconds)
        return try await pool.transaction { connection in
            try connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            let row = try connection.query(
                "SELECT events_read::text, days_rebuilt::text, days_waiting::text FROM collector.report_round($1::integer)", [maxDays]
            ).rows.first
            let counts = try connection.query(
                "SELECT collector.report_people_round($1::integer, make_interval(secs => $2::integer))::text",
                [maxDays, quiet]
            ).scalar
            return Look(
                eventsRead: row?[0].flatMap(Int.init) ?? 0, daysRebuilt: row?[1].flatMap(Int.init) ?? 0,
                daysWaiting: row?[2].flatMap(Int.init) ?? 0, countsWaiting: counts.flatMap(Int.init) ?? 0)
        }
    }

    /// Seconds since the last finished look (nil: none yet), and the days waiting.
    func status() async throws -> (ageSeconds: Double?, daysWaiting: Int) {
        try await pool.withConnection { connection in
            let row = try connection.query(
                """
                SELECT extract(epoch FROM clock_timestamp() - finished_at)::text,
                       ((SELECT count(*) FROM collector.report_dirty) + collector.report_people_waiting())::text
                FROM collector.report_state
                """
            ).rows.first
            return (row?[0].flatMap(Double.init), row?[1].flatMap(Int.init) ?? 0)
        }
    }
}

/// The projects' time zones (`collector.report_settings`), set through config-service. A change
/// marks the project's rollups to be built again in the new zone.
struct ReportTimeZones: Sendable {
    let pool: PostgresPool

    func zone(of project: String) async throws -> ProjectTimeZone {
        try await pool.withConnection { connection in
            let zone = try connection.query("SELECT collector.report_zone($1)", [project]).scalar
            return ProjectTimeZone(project: project, timeZone: zone ?? ProjectTimeZone.defaultZone)
        }
    }

    /// Sets the zone; false when PostgreSQL knows no such zone (`pg_timezone_names`).
    func set(_ setting: ProjectTimeZone) async throws -> Bool {
        try await pool.transaction { connection in
            let known = try connection.query("SELECT EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = $1)", [setting.timeZone]).scalar
            guard known == "t" else { return false }
            _ = try connection.query(
                """
                WITH old AS (SELECT collector.report_zone($1) AS zone),
                saved AS (
                    INSERT INTO collector.report_settings (project, time_zone) VALUES ($1, $2)
                    ON CONFLICT (project) DO UPDATE SET time_zone = excluded.time_zone, updated_at = now()
                )
                INSERT INTO collector.report_dirty (project, day) SELECT $1, NULL FROM old WHERE old.zone <> $2
                """, [setting.project, setting.timeZone]
            )
            return true
        }
    }
}
