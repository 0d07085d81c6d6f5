/// Monthly range partitions of `collector.events`, named `events_YYYY_MM`.
struct MonthPartition: Hashable, Sendable {
    let year: Int
    let month: Int

    /// The month (UTC) that holds `unixMillis`.
    init(unixMillis: Int64) {
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

    var lowerBound: String { Self.timestamp(year, month) }

    var createStatement: String {
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
