import DatongContracts
import DatongPostgres
import Foundation
import Logging
import Prometheus
import ServiceLifecycle
import Synchronization

/// The partitions of `collector.events`: a table per month (`events_YYYY_MM`), split into a table
/// per project and month (`ProjectMonth`), so one project's month can be dropped whole. Months
/// stored before the split (collector migration 8) stay one table shared by their projects.
final class EventPartitions: Sendable {
    private let pool: PostgresPool
    private let known = Mutex<Set<ProjectMonth>>([])

    init(pool: PostgresPool) { self.pool = pool }

    /// Creates the tables for `partitions` that this process has not seen yet. Replicas serialise
    /// on an advisory lock, and `IF NOT EXISTS` makes a lost race harmless.
    func ensure(_ partitions: Set<ProjectMonth>) async throws {
        let missing = known.withLock { partitions.subtracting($0) }
        guard !missing.isEmpty else { return }
        try await changing { connection in
            let months = Set(missing.map(\.month))
            let shared = try Self.sharedMonths(among: months, on: connection)
            for month in months where !shared.contains(month) { try connection.execute(month.createStatement) }
            for partition in missing where !shared.contains(partition.month) { try connection.execute(partition.createStatement) }
        }
        known.withLock { $0.formUnion(missing) }
    }

    /// Creates the month tables `months` (split by project) where they do not exist yet.
    func ensure(months: Set<MonthPartition>) async throws {
        try await changing { connection in
            for month in months { try connection.execute(month.createStatement) }
        }
    }

    /// Which of `months` exist as one table for every project (stored before the split).
    private static func sharedMonths(among months: Set<MonthPartition>, on connection: PostgresConnection) throws -> Set<MonthPartition> {
        let names = months.map(\.tableName)
        return Set(
            try connection.query(
                """
                SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = 'collector' AND c.relkind = 'r' AND c.relname = ANY($1::text[])
                """,
                [postgresTextArray(names)]
            ).rows.compactMap { $0[0].flatMap(MonthPartition.init(tableName:)) })
    }

    /// Forgets what this process knew, after a partition was dropped (here or by another replica).
    func forgetAll() {
        known.withLock { $0.removeAll() }
    }

    /// The partitions that exist now.
    func existing() async throws -> Layout {
        try await pool.withConnection { connection in
            var layout = Layout()
            for row in try connection.query(
                """
                SELECT m.relname, m.relkind = 'p', pg_get_expr(l.relpartbound, l.oid)
                FROM pg_inherits i
                JOIN pg_class m ON m.oid = i.inhrelid
                LEFT JOIN pg_inherits li ON li.inhparent = m.oid
                LEFT JOIN pg_class l ON l.oid = li.inhrelid
                WHERE i.inhparent = 'collector.events'::regclass
                """
            ).rows {
                guard let month = row[0].flatMap(MonthPartition.init(tableName:)) else { continue }
                guard row[1] == "t" else {
                    layout.shared.insert(month)
                    continue
                }
                layout.split.insert(month)
                if let project = row[2].flatMap(ProjectMonth.project(ofBound:)) {
                    layout.projectMonths.insert(ProjectMonth(month: month, project: project))
                }
            }
            return layout
        }
    }

    /// The tables of `collector.events` by kind.
    struct Layout {
        /// Months stored before the split: one table holds every project's events.
        var shared: Set<MonthPartition> = []
        /// Months split by project, and their project tables.
        var split: Set<MonthPartition> = []
        var projectMonths: Set<ProjectMonth> = []

        var months: Set<MonthPartition> { shared.union(split) }
    }

    /// The projects with events in a shared month, by a walk of its (project, …) index: a lookup
    /// per project, not a scan of the month.
    func projects(in month: MonthPartition) async throws -> [String] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                WITH RECURSIVE p(project) AS (
                    SELECT min(project) FROM collector.\(month.tableName)
                    UNION ALL
                    SELECT (SELECT min(project) FROM collector.\(month.tableName) WHERE project > p.project) FROM p WHERE p.project IS NOT NULL
                )
                SELECT project FROM p WHERE project IS NOT NULL
                """
            ).rows.compactMap { $0[0] }
        }
    }

    /// The rows of `table` (its SQL name) by project, counted exactly (a dry run says what it would drop).
    func rowsByProject(table: String) async throws -> [RetentionPlan.ProjectRows] {
        try await pool.withConnection { connection in
            try connection.query("SELECT project, count(*) FROM \(table) GROUP BY project ORDER BY project").rows.compactMap {
                row -> RetentionPlan.ProjectRows? in
                guard let project = row[0], let rows = row[1].flatMap(Int.init) else { return nil }
                return RetentionPlan.ProjectRows(project: project, rows: rows)
            }
        }
    }

    /// Drops the tables `tables` (their SQL names; retention): the rows in them are gone, and the
    /// days they held are marked for the report rollups to build again without them.
    func drop(_ tables: [String]) async throws {
        guard !tables.isEmpty else { return }
        try await changing { connection in
            for table in tables where try connection.query("SELECT to_regclass($1) IS NOT NULL", [table]).scalar == "t" {
                try connection.execute(
                    """
                    INSERT INTO collector.report_dirty (project, day)
                    SELECT DISTINCT project, (time AT TIME ZONE collector.report_zone(project))::date FROM \(table);
                    DROP TABLE \(table)
                    """)
            }
        }
        forgetAll()
    }

    /// Runs `change` in a transaction holding the lock that serialises partition changes across
    /// replicas ("events" in ASCII).
    private func changing(_ change: @escaping @Sendable (PostgresConnection) throws -> Void) async throws {
        try await pool.transaction { connection in
            try connection.query("SELECT pg_advisory_xact_lock($1)", [String(0x6576_656E_7473)])
            try change(connection)
        }
    }
}

/// One project's events of one month: a partition of the month's table, `events_YYYY_MM_<project>`.
package struct ProjectMonth: Hashable, Sendable {
    package let month: MonthPartition
    package let project: String

    package init(month: MonthPartition, project: String) {
        self.month = month
        self.project = project
    }

    /// The table's name. One past PostgreSQL's 63 bytes keeps the project's first 32 characters
    /// and adds a hash of the whole name.
    var tableName: String {
        let plain = "\(month.tableName)_\(project)"
        guard plain.utf8.count > 63 else { return plain }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325  // FNV-1a
        for byte in project.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return "\(month.tableName)_\(project.prefix(32))_\(String(hash, radix: 16))"
    }

    /// The table in SQL: quoted, since project names keep their case.
    var sqlName: String { "collector.\"\(tableName)\"" }

    /// Creates the table; its month's table exists already. Project names are letters, digits and
    /// underscores (`ProjectName`), so the literal needs no escaping.
    package var createStatement: String {
        "CREATE TABLE IF NOT EXISTS \(sqlName) PARTITION OF collector.\(month.tableName) FOR VALUES IN ('\(project)')"
    }

    /// The project of a partition bound as PostgreSQL prints it: `FOR VALUES IN ('name')`.
    static func project(ofBound bound: String) -> String? {
        guard bound.hasPrefix("FOR VALUES IN ('"), bound.hasSuffix("')") else { return nil }
        let name = String(bound.dropFirst("FOR VALUES IN ('".count).dropLast(2))
        return ProjectName.isValid(name) ? name : nil
    }
}

/// Monthly range partitions of `collector.events`, named `events_YYYY_MM`.
package struct MonthPartition: Hashable, Sendable, Comparable {
    let year: Int
    let month: Int

    /// The month (UTC) that holds `unixMillis`.
    package init(unixMillis: Int64) {
        let days = Int((unixMillis >= 0 ? unixMillis : unixMillis - 86_399_999) / 86_400_000)
        let civil = Self.civil(fromDays: days)
        year = civil.year
        month = civil.month
    }

    init(year: Int, month: Int) {
        self.year = year
        self.month = month
    }

    /// Months since year 0: `a.index - b.index` is how many months apart they are.
    var index: Int { year * 12 + month - 1 }

    var next: MonthPartition { month == 12 ? .init(year: year + 1, month: 1) : .init(year: year, month: month + 1) }

    package static func < (a: MonthPartition, b: MonthPartition) -> Bool { a.index < b.index }

    var tableName: String { "events_\(year)_\(month < 10 ? "0" : "")\(month)" }

    /// Reads a partition's table name (`events_YYYY_MM`).
    init?(tableName: String) {
        let parts = tableName.split(separator: "_")
        guard parts.count == 3, parts[0] == "events", let year = Int(parts[1]), let month = Int(parts[2]), (1...12).contains(month) else {
            return nil
        }
        self.init(year: year, month: month)
    }

    /// Milliseconds since the Unix epoch at the partition's first instant.
    var startUnixMillis: Int64 { Int64(Self.days(year: year, month: month)) * 86_400_000 }

    var lowerBound: String { Self.timestamp(year, month) }

    /// Creates the month's table, split by project (`ProjectMonth` creates the projects' tables).
    package var createStatement: String {
        let upper = next
        return """
            CREATE TABLE IF NOT EXISTS collector.\(tableName) PARTITION OF collector.events
            FOR VALUES FROM ('\(lowerBound)') TO ('\(upper.lowerBound)') PARTITION BY LIST (project)
            """
    }

    /// The month's table and one table per project in it, for tools that fill a fresh database.
    package static func createStatements(for events: some Sequence<(project: String, unixMillis: Int64)>) -> [String] {
        let partitions = Set(events.map { ProjectMonth(month: MonthPartition(unixMillis: $0.unixMillis), project: $0.project) })
        return Set(partitions.map(\.month)).map(\.createStatement) + partitions.map(\.createStatement)
    }

    private static func timestamp(_ year: Int, _ month: Int) -> String {
        let y = String(year)
        return "\(String(repeating: "0", count: max(0, 4 - y.count)))\(y)-\(month < 10 ? "0" : "")\(month)-01 00:00:00+00"
    }

    /// Howard Hinnant's days-from-civil algorithm: days since 1970-01-01 of the month's first day.
    private static func days(year: Int, month: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian, UTC).
    private static func civil(fromDays days: Int) -> (year: Int, month: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (month <= 2 ? 1 : 0), month)
    }
}

/// How long events are kept: months per project (`collector.retention`), and `RETENTION_DAYS` for
/// the projects without their own (0 keeps them all).
package struct RetentionPolicy: Sendable, Equatable {
    var days: Int
    var months: [String: Int]

    /// Whether every event `project` has in `month` is past its retention: for N months, the month
    /// ended at least N months ago (this month and the N before are kept); for N days, the month
    /// ended at least N days ago.
    func expires(_ month: MonthPartition, of project: String, nowMillis: Int64) -> Bool {
        if let months = months[project] { return month.index <= MonthPartition(unixMillis: nowMillis).index - months - 1 }
        guard days > 0 else { return false }
        return month.next.startUnixMillis <= nowMillis - Int64(days) * 86_400_000
    }
}

/// The per-project retention, kept in `collector.retention` (set through config-service).
struct RetentionSettings: Sendable {
    let pool: PostgresPool

    func all() async throws -> [ProjectRetention] {
        try await pool.withConnection { connection in
            try connection.query("SELECT project, months FROM collector.retention ORDER BY project").rows.compactMap { row in
                guard let project = row[0], let months = row[1].flatMap(Int.init) else { return nil }
                return ProjectRetention(project: project, months: months)
            }
        }
    }

    func set(_ retention: ProjectRetention) async throws {
        try await pool.withConnection { connection in
            try connection.query(
                """
                INSERT INTO collector.retention (project, months) VALUES ($1, $2::integer)
                ON CONFLICT (project) DO UPDATE SET months = excluded.months, updated_at = now()
                """,
                [retention.project, String(retention.months)])
        }
    }

    func clear(project: String) async throws {
        try await pool.withConnection { connection in
            try connection.query("DELETE FROM collector.retention WHERE project = $1", [project])
        }
    }
}

/// Keeps `collector.events` partitioned ahead (this month and the next two) and drops the tables
/// whose every event is past its project's retention (`RetentionPolicy`): a project's month, or a
/// shared month once it is past for every project in it. Runs at start and then hourly; a failed
/// run (the database not there yet) is tried again soon.
final class PartitionMaintenance: Service, Sendable {
    private let partitions: EventPartitions
    let settings: RetentionSettings
    let retentionDays: Int
    private let logger: Logger

    /// `datong_collector_partition_maintenance_last_success_timestamp_seconds`, `…_failures_total`
    /// and `datong_collector_partition_months_ahead` (months after this one with their tables).
    private let lastSuccess: Gauge?
    private let failures: Counter?
    private let monthsAhead: Gauge?
    /// `datong_collector_partition_oldest_start_timestamp_seconds` and `…_newest_end_…`: the span
    /// of months `collector.events` has tables for.
    private let oldest: Gauge?
    private let newest: Gauge?

    init(partitions: EventPartitions, settings: RetentionSettings, retentionDays: Int, logger: Logger, registry: PrometheusCollectorRegistry? = nil) {
        self.partitions = partitions
        self.settings = settings
        self.retentionDays = retentionDays
        self.logger = logger
        func name(_ metric: String, _ unit: String) -> MetricNameDescriptor {
            let help: String
            switch metric {
            case "partition_maintenance_last_success_timestamp":
                help = "When partition maintenance (partitions ahead, retention) last succeeded (Unix time)"
            case "partition_maintenance_failures": help = "Partition maintenance runs that failed (tried again in 10 s)"
            case "partition_oldest_start_timestamp": help = "Where the oldest month with event tables starts (Unix time)"
            case "partition_newest_end_timestamp": help = "Where the newest month with event tables ends (Unix time)"
            default: help = "Months after the current one whose partitions exist (maintenance keeps 2)"
            }
            return MetricNameDescriptor(namespace: "datong", subsystem: "collector", metricName: metric, unitName: unit, helpText: help)
        }
        lastSuccess = registry?.makeGauge(descriptor: name("partition_maintenance_last_success_timestamp", "seconds"))
        failures = registry?.makeCounter(descriptor: name("partition_maintenance_failures", "total"))
        monthsAhead = registry?.makeGauge(descriptor: name("partition_months_ahead", ""))
        oldest = registry?.makeGauge(descriptor: name("partition_oldest_start_timestamp", "seconds"))
        newest = registry?.makeGauge(descriptor: name("partition_newest_end_timestamp", "seconds"))
    }

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while true {
                let succeeded: Bool
                do {
                    let now = Int64(Date().timeIntervalSince1970 * 1000)
                    let dropped = try await self.maintain(nowMillis: now)
                    if !dropped.isEmpty {
                        self.logger.info("partitions.dropped", metadata: ["partitions": "\(dropped)"])
                    }
                    let current = MonthPartition(unixMillis: now)
                    let months = try await self.partitions.existing().months
                    self.monthsAhead?.set(Double(months.filter { current < $0 }.count))
                    if let first = months.min(), let last = months.max() {
                        self.oldest?.set(Double(first.startUnixMillis / 1000))
                        self.newest?.set(Double(last.next.startUnixMillis / 1000))
                    }
                    self.lastSuccess?.set(Date().timeIntervalSince1970)
                    succeeded = true
                } catch {
                    self.logger.warning("partitions.maintenance_failed", metadata: ["error": "\(error)"])
                    self.failures?.increment()
                    succeeded = false
                }
                try await Task.sleep(for: succeeded ? .seconds(3600) : .seconds(10))
            }
        }
    }

    /// The retention in force: `RETENTION_DAYS` and the projects' months.
    func policy() async throws -> RetentionPolicy {
        RetentionPolicy(days: retentionDays, months: Dictionary(try await settings.all().map { ($0.project, $0.months) }) { a, _ in a })
    }

    /// Creates the partitions ahead and drops those past the retention; returns the dropped tables.
    /// The projects with events this month get their tables of the next two months too: creating
    /// a table takes a lock on its month's, which would hold that month's writes at its start.
    @discardableResult
    func maintain(nowMillis: Int64) async throws -> [String] {
        let current = MonthPartition(unixMillis: nowMillis)
        let ahead = [current.next, current.next.next]
        try await partitions.ensure(months: Set([current] + ahead))
        // The tables this adds are ahead, so the layout read before them serves the retention too.
        let layout = try await partitions.existing()
        let active = layout.projectMonths.filter { $0.month == current }.map(\.project)
        try await partitions.ensure(Set(active.flatMap { project in ahead.map { ProjectMonth(month: $0, project: project) } }))
        let expired = try await expired(try await policy(), in: layout, nowMillis: nowMillis)
        try await partitions.drop(expired.map(\.sqlName))
        return expired.map(\.name)
    }

    /// A table `policy` drops.
    struct Expired {
        enum Kind {
            /// One project's events of the month.
            case project(String)
            /// A month stored before the split, past for every project in it.
            case shared
            /// A split month's own table, once no project's table is left in it: holds no rows.
            case emptied
        }

        var kind: Kind
        var month: MonthPartition

        var name: String {
            if case .project(let project) = kind { return ProjectMonth(month: month, project: project).tableName }
            return month.tableName
        }

        var sqlName: String { "collector.\"\(name)\"" }
    }

    /// The tables `policy` drops now, oldest first; a split month's own table after its projects'.
    func expired(_ policy: RetentionPolicy, in layout: EventPartitions.Layout, nowMillis: Int64) async throws -> [Expired] {
        let current = MonthPartition(unixMillis: nowMillis)
        var expired: [Expired] = []
        for month in layout.months.sorted() where month < current {
            if layout.shared.contains(month) {
                let projects = try await partitions.projects(in: month)
                if projects.allSatisfy({ policy.expires(month, of: $0, nowMillis: nowMillis) }) {
                    expired.append(Expired(kind: .shared, month: month))
                }
                continue
            }
            let projects = layout.projectMonths.filter { $0.month == month }.map(\.project).sorted()
            let going = projects.filter { policy.expires(month, of: $0, nowMillis: nowMillis) }
            expired += going.map { Expired(kind: .project($0), month: month) }
            if going.count == projects.count { expired.append(Expired(kind: .emptied, month: month)) }
        }
        return expired
    }

    /// What `policy` would drop now, with each table's rows by project.
    func plan(_ policy: RetentionPolicy, nowMillis: Int64) async throws -> RetentionPlan {
        var planned: [RetentionPlan.Partition] = []
        for table in try await expired(policy, in: try await partitions.existing(), nowMillis: nowMillis) {
            var project: String?
            switch table.kind {
            case .emptied: continue
            case .shared: project = nil
            case .project(let name): project = name
            }
            planned.append(
                .init(
                    name: table.name, project: project, from: table.month.lowerBound, to: table.month.next.lowerBound,
                    rows: try await partitions.rowsByProject(table: table.sqlName)))
        }
        let cutoff = policy.days > 0 ? Date(timeIntervalSince1970: Double(nowMillis - Int64(policy.days) * 86_400_000) / 1000).ISO8601Format() : nil
        return RetentionPlan(
            days: policy.days, retentionDays: retentionDays,
            projects: policy.months.map { ProjectRetention(project: $0.key, months: $0.value) }.sorted { $0.project < $1.project },
            cutoff: cutoff, partitions: planned
        )
    }
}
