import DatongContracts
import DatongPostgres
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// The monthly partitions of `collector.events` this process knows exist, created on demand.
final class EventPartitions: Sendable {
    private let pool: PostgresPool
    private let known = Mutex<Set<MonthPartition>>([])

    init(pool: PostgresPool) { self.pool = pool }

    /// Creates the partitions for `months` that this process has not seen yet. Replicas serialise
    /// on an advisory lock, and `IF NOT EXISTS` makes a lost race harmless.
    func ensure(_ months: Set<MonthPartition>) async throws {
        let missing = known.withLock { months.subtracting($0) }
        guard !missing.isEmpty else { return }
        try await pool.transaction { connection in
            try connection.query("SELECT pg_advisory_xact_lock($1)", [String(Self.lockKey)])
            for month in missing { try connection.execute(month.createStatement) }
        }
        known.withLock { $0.formUnion(missing) }
    }

    /// Forgets what this process knew, after a partition was dropped (here or by another replica).
    func forgetAll() {
        known.withLock { $0.removeAll() }
    }

    /// The partitions that exist now.
    func existing() async throws -> [MonthPartition] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT c.relname FROM pg_inherits i
                JOIN pg_class c ON c.oid = i.inhrelid
                JOIN pg_class p ON p.oid = i.inhparent
                JOIN pg_namespace n ON n.oid = p.relnamespace
                WHERE n.nspname = 'collector' AND p.relname = 'events'
                """
            ).rows.compactMap { $0[0].flatMap(MonthPartition.init(tableName:)) }
        }
    }

    /// The rows of one partition by project, counted exactly (a dry run says what it would drop).
    func rowsByProject(_ month: MonthPartition) async throws -> [RetentionPlan.ProjectRows] {
        try await pool.withConnection { connection in
            try connection.query("SELECT project, count(*) FROM collector.\(month.tableName) GROUP BY project ORDER BY project").rows.compactMap {
                row -> RetentionPlan.ProjectRows? in
                guard let project = row[0], let rows = row[1].flatMap(Int.init) else { return nil }
                return RetentionPlan.ProjectRows(project: project, rows: rows)
            }
        }
    }

    /// Drops `months` (retention); the rows in them are gone.
    func drop(_ months: [MonthPartition]) async throws {
        guard !months.isEmpty else { return }
        try await pool.transaction { connection in
            try connection.query("SELECT pg_advisory_xact_lock($1)", [String(Self.lockKey)])
            for month in months { try connection.execute("DROP TABLE IF EXISTS collector.\(month.tableName)") }
        }
        forgetAll()
    }

    /// "events" in ASCII: the advisory lock key for partition changes.
    static let lockKey = 0x6576_656E_7473
}

/// Monthly range partitions of `collector.events`, named `events_YYYY_MM`.
package struct MonthPartition: Hashable, Sendable {
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

    var next: MonthPartition { month == 12 ? .init(year: year + 1, month: 1) : .init(year: year, month: month + 1) }

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

    package var createStatement: String {
        let upper = next
        return """
            CREATE TABLE IF NOT EXISTS collector.\(tableName) PARTITION OF collector.events
            FOR VALUES FROM ('\(lowerBound)') TO ('\(upper.lowerBound)')
            """
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

/// Keeps `collector.events` partitioned ahead (this month and the next two) and, when a retention
/// is set (`RETENTION_DAYS`), drops partitions whose every row is older than it. Runs at start and
/// then hourly; a failed run (the database not there yet) is tried again soon.
final class PartitionMaintenance: Service, Sendable {
    private let partitions: EventPartitions
    let retentionDays: Int
    private let logger: Logger

    init(partitions: EventPartitions, retentionDays: Int, logger: Logger) {
        self.partitions = partitions
        self.retentionDays = retentionDays
        self.logger = logger
    }

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while true {
                let succeeded: Bool
                do {
                    let dropped = try await self.maintain(nowMillis: Int64(Date().timeIntervalSince1970 * 1000))
                    if !dropped.isEmpty {
                        self.logger.info("partitions.dropped", metadata: ["partitions": "\(dropped.map(\.tableName))"])
                    }
                    succeeded = true
                } catch {
                    self.logger.warning("partitions.maintenance_failed", metadata: ["error": "\(error)"])
                    succeeded = false
                }
                try await Task.sleep(for: succeeded ? .seconds(3600) : .seconds(10))
            }
        }
    }

    /// Creates the partitions ahead and drops those past the retention; returns the dropped ones.
    @discardableResult
    func maintain(nowMillis: Int64) async throws -> [MonthPartition] {
        let current = MonthPartition(unixMillis: nowMillis)
        try await partitions.ensure([current, current.next, current.next.next])
        guard retentionDays > 0 else { return [] }
        let expired = try await expired(days: retentionDays, nowMillis: nowMillis)
        try await partitions.drop(expired)
        return expired
    }

    /// The partitions a retention of `days` drops: those whose every row is older than it.
    func expired(days: Int, nowMillis: Int64) async throws -> [MonthPartition] {
        let cutoff = nowMillis - Int64(days) * 86_400_000
        return try await partitions.existing().filter { $0.next.startUnixMillis <= cutoff }.sorted { $0.startUnixMillis < $1.startUnixMillis }
    }

    /// What a retention of `days` would drop now, with each partition's rows by project.
    func plan(days: Int, nowMillis: Int64) async throws -> RetentionPlan {
        let expired = try await expired(days: days, nowMillis: nowMillis)
        var planned: [RetentionPlan.Partition] = []
        for month in expired {
            let rows = try await partitions.rowsByProject(month)
            planned.append(.init(name: month.tableName, from: month.lowerBound, to: month.next.lowerBound, rows: rows))
        }
        let cutoff = Date(timeIntervalSince1970: Double(nowMillis - Int64(days) * 86_400_000) / 1000)
        return RetentionPlan(days: days, retentionDays: retentionDays, cutoff: cutoff.ISO8601Format(), partitions: planned)
    }
}
