import BenchSupport
import Collector
import DatongPostgres
import Foundation

/// A database that already holds what a deployment accumulates: `events` stored events spread over
/// the three months before today (in their monthly partitions, with every index) and `identities`
/// known identities (one user per device, each with an IDFV and an anonymous id), loaded with COPY
/// after the services' migrations made the schema. Each at-volume round runs on a copy of it.
struct VolumeDatabase {
    let name: String
    let url: String
    let events: Int
    let identities: Int
    /// Seconds the COPYs took, and the VACUUM ANALYZE after them (what autovacuum would have done).
    let loadSeconds: Double
    let vacuumSeconds: Double

    static let days = 90
    static let rowsPerCopy = 50_000

    /// Makes the schema with the services' own migrations (a fleet started once), then loads.
    static func build(adminURL: String, binDirectory: String, logDirectory: String, events: Int, identities: Int) async throws -> VolumeDatabase {
        let url = try await Bench.freshDatabase(adminURL: adminURL, logger: logger)
        let fleet = try ServiceFleet(binDirectory: binDirectory, databaseURL: url, logDirectory: logDirectory)
        do {
            try await fleet.startAll()
        } catch {
            await fleet.stopAll()
            throw error
        }
        await fleet.stopAll()

        let pool = PostgresPool(url: url, maxConnections: 2, logger: logger)
        do {
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let first = now - Int64(days) * 86_400_000
            var months: Set<MonthPartition> = []
            var day = first
            while day <= now {
                months.insert(MonthPartition(unixMillis: day))
                day += 86_400_000
            }
            let partitions = months
            try await pool.withConnection { connection in
                for month in partitions {
                    try connection.execute(month.createStatement)
                    try connection.execute(ProjectMonth(month: month, project: "default").createStatement)
                }
            }
            let devices = max(1, identities / 2)
            let clock = ContinuousClock()
            let loading = try await clock.measure {
                try await copy(pool: pool, "COPY identity.users (project) FROM STDIN", rows: devices) { _, out in
                    out.append(contentsOf: "default\n".utf8)
                }
                try await copy(pool: pool, "COPY identity.identities (project, key, value, user_id) FROM STDIN", rows: devices * 2) { row, out in
                    let device = row / 2
                    out.append(contentsOf: (row % 2 == 0 ? "default\t$identity_idfv\tvolume-device-" : "default\t$identity_anonymous_id\tvolume-device-").utf8)
                    out.append(contentsOf: String(device).utf8)
                    out.append(contentsOf: "\t\(device + 1)\n".utf8)
                }
                let step = max(1, (now - first - 86_400_000) / Int64(max(1, events)))
                try await copy(pool: pool, "COPY collector.events FROM STDIN", rows: events) { row, out in
                    appendEvent(row, device: row % devices, time: first + Int64(row) * step, to: &out)
                }
            }
            let vacuum = try await clock.measure {
                try await pool.withConnection { connection in
                    try connection.execute("VACUUM ANALYZE collector.events")
                    try connection.execute("VACUUM ANALYZE identity.identities")
                    try connection.execute("VACUUM ANALYZE identity.users")
                }
            }
            await pool.close()
            return VolumeDatabase(
                name: databaseName(in: url)!, url: url, events: events, identities: devices * 2,
                loadSeconds: Bench.seconds(loading), vacuumSeconds: Bench.seconds(vacuum)
            )
        } catch {
            await pool.close()
            throw error
        }
    }

    /// A copy of the loaded database for one round (`CREATE DATABASE … TEMPLATE`, file by file).
    func copy(adminURL: String) async throws -> String {
        let copy = "\(name)_r\(UInt32.random(in: 0...UInt32.max))"
        try await Bench.administer(adminURL: adminURL, "CREATE DATABASE \(copy) TEMPLATE \(name) STRATEGY FILE_COPY", logger: logger)
        // The copy's gigabytes reach the disk now, not as stalls of the round's commits.
        sync()
        return try Bench.replacingDatabase(in: adminURL, with: copy)
    }

    /// Drops a round's copy.
    static func drop(_ url: String, adminURL: String) async {
        guard let name = databaseName(in: url) else { return }
        try? await Bench.administer(adminURL: adminURL, "DROP DATABASE IF EXISTS \(name)", logger: logger)
        sync()
    }

    /// The name of the bench database `url` names (`Bench.freshDatabase` made it).
    static func databaseName(in url: String) -> String? {
        url.range(of: "datong_bench_").map { String(url[$0.lowerBound...].prefix { $0 != "?" }) }
    }

    /// COPYs `rows` text rows made by `make`, `rowsPerCopy` per COPY and transaction, over the
    /// pool's two connections.
    private static func copy(
        pool: PostgresPool, _ statement: String, rows: Int, make: @escaping @Sendable (Int, inout [UInt8]) -> Void
    )
        async throws
    {
        let chunks = (rows + rowsPerCopy - 1) / rowsPerCopy
        let next = WorkCounter()
        let done = WorkCounter()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<2 {
                group.addTask {
                    var out: [UInt8] = []
                    while let chunk = next.take(below: chunks) {
                        out.removeAll(keepingCapacity: true)
                        for row in (chunk * rowsPerCopy)..<min(rows, (chunk + 1) * rowsPerCopy) { make(row, &out) }
                        let data = out
                        try await pool.transaction { _ = try $0.copyIn(statement, data: data) }
                        if let finished = done.take(below: Int.max), (finished + 1) % max(1, chunks / 10) == 0 {
                            Bench.say("  loaded \((finished + 1) * 100 / chunks)% of \(rows) rows: \(statement.prefix(40))…")
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
    }

    /// One stored event as the collector would have written it from an iOS SDK upload (the same
    /// columns, a similar property set, its `_track_id`; no item schema), in COPY's text format.
    private static func appendEvent(_ row: Int, device: Int, time: Int64, to out: inout [UInt8]) {
        let timestamp = Self.timestamp(time)
        let id = String(row, radix: 16)
        out.append(contentsOf: "default\t\(timestamp)\t00000000-0000-4000-8000-".utf8)
        out.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: max(0, 12 - id.utf8.count)))
        out.append(contentsOf: id.utf8)
        let event = ["$AppClick", "$AppViewScreen", "AddToCart", "$AppStart"][row % 4]
        out.append(
            contentsOf: "\ttrack\t\(event)\t\(timestamp)\tvolume-device-\(device)\t\(device + 1)\tvolume-device-\(device)\t\\N\tiOS\t4.5.0\t2.3.0\tf\t".utf8)
        out.append(
            contentsOf: #"""
                {"$os":"iOS","$os_version":"17.4","$model":"iPhone15,2","$manufacturer":"Apple","$screen_width":393,"$screen_height":852,"$wifi":true,"$network_type":"WIFI","$carrier":"中国移动","$app_id":"com.example.shop","$app_name":"Shop","$app_version":"2.3.0","$timezone_offset":-480,"$is_first_day":false,"$element_content":"加入购物车","$element_type":"UIButton","$screen_name":"ProductViewController","$title":"商品详情","price":129.5,"sku":"SKU-\#(row)","tags":["sale","new"]}
                """#.utf8)
        out.append(
            contentsOf:
                "\tautoTrack\t\\N\t\\N\t{\"$identity_idfv\":\"volume-device-\(device)\",\"$identity_anonymous_id\":\"volume-device-\(device)\"}\t\(row)\t\\N\n"
                .utf8)
    }

    /// `unixMillis` as a UTC timestamp PostgreSQL reads (`2026-09-01 12:00:00.123+00`).
    private static func timestamp(_ unixMillis: Int64) -> String {
        let days = Int(unixMillis / 86_400_000)
        let milliseconds = Int(unixMillis % 86_400_000)
        // Civil from days (H. Hinnant), for days since 1970-01-01 ≥ 0.
        let z = days + 719_468
        let era = z / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let seconds = milliseconds / 1000
        let fraction = milliseconds % 1000
        return
            "\(year)-\(two(month))-\(two(day)) \(two(seconds / 3600)):\(two(seconds / 60 % 60)):\(two(seconds % 60)).\(fraction < 100 ? "0" : "")\(two(fraction))+00"
    }
}
