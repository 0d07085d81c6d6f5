// e2e-bench: the four services, release builds, each its own process, on one PostgreSQL, driven over
// keep-alive connections with the uploads real SDKs send. Prints and writes (JSON and a Markdown
// table): acknowledged events/s, request latency at full speed and at half of that rate, the peak
// RSS of each service, and in the same run the raw COPY rate of the same rows into the same table.
//
//   scripts/bench e2e [--rounds N] [--requests N] [--records N | --mix web] [--profiles TENTHS] [--connections N] [--replicas N]
//                     [--out DIR] [--volume EVENTS [--volume-identities N]] [--set SERVICE:VARIABLE=VALUE]… [--callgrind DIR]
//
// --mix web: traffic as a site with an app sends it instead of --records: 8 in 10 requests are one
// record each from web pages (the JS SDK's image beacon and sendBeacon), 2 in 10 app uploads of 10
// to 50 records.
//
// --erase N [--erase-heavy EVENTS]: instead of the rounds above, the half-rate latency before and
// while N users are erased through the admin API (Erasure.swift; with --volume, on the volume
// database, the first user given EVENTS more events).
//
// --volume: each round also runs the same traffic on a database already holding EVENTS events over
// three months of partitions and N known identities (loaded once with COPY, timed separately), and
// the report puts both sizes side by side. --set: one service's extra environment, for A/B runs
// (e.g. --set bridge-gateway:IDENTITY_CACHE_ENTRIES=0). --callgrind DIR: instead of rounds, the
// instructions each service spends a request and an event (Instructions.swift), to compare two
// builds or two settings exactly; use fewer requests (e.g. --requests 200 --devices 50).
//
// (the script builds the services, starts a throwaway PostgreSQL and passes --bin and DATABASE_URL).
// --import-megabytes N: instead of rounds, `datongctl import` of a generated log file of N MB and
// of N/10 MB: lines a second, the importer's peak RSS, the CPU of each process (LogImport.swift);
// --import-parallel N: the importer's requests in flight (its --parallel, default 2).
import BenchSupport
import DatongPostgres
import Foundation

let rounds = Bench.option("--rounds", default: 3)
let requestCount = Bench.option("--requests", default: 3_000)
let connections = Bench.option("--connections", default: 64)
let returningDevices = Bench.option("--devices", default: 500)
/// Replicas of the gateway, identity and the collector, behind HAProxy when above 1 (docs/SCALING.md).
let replicas = Bench.option("--replicas", default: 1)
/// Records per request: 50 by default, what the Android SDK uploads at most in one request; the JS
/// SDK sends one a request unless batching is on. Up to the gateway's default `MAX_RECORDS_PER_REQUEST`.
let recordsPerRequest = Bench.option("--records", default: 50)
guard (1...1000).contains(recordsPerRequest) else {
    print("e2e-bench: --records takes 1 to 1000 (the gateway's default MAX_RECORDS_PER_REQUEST)")
    exit(2)
}
/// `--mix web`: most requests one record from a web page, some app uploads of 10 to 50 (`Traffic`).
let webMix: Bool = {
    guard let mix = Bench.text("--mix") else { return false }
    guard mix == "web" else {
        print("e2e-bench: --mix takes web (8 in 10 requests one record from a web page, 2 in 10 app uploads of 10 to 50 records)")
        exit(2)
    }
    if CommandLine.arguments.contains("--records") {
        print("e2e-bench: --mix web sets the records of each request; leave out --records")
        exit(2)
    }
    return true
}()
/// Tenths of an app upload's records that are profile records of the device's user (profile_set,
/// profile_increment, profile_append in turn, all of a request stamped with one millisecond, as the
/// mini-program SDK's v2 build stamps calls in a row): 0 by default, events only.
let profileTenths = Bench.option("--profiles", default: 0)
guard (0...10).contains(profileTenths) else {
    print("e2e-bench: --profiles takes 0 to 10 (tenths of an app upload's records)")
    exit(2)
}
let outDirectory = Bench.text("--out") ?? "docs/benchmarks"
/// Events and identities already stored in the at-volume rounds (0: no such rounds).
let volumeEvents = Bench.option("--volume", default: 0)
let volumeIdentities = Bench.option("--volume-identities", default: 2_000_000)
/// `--set SERVICE:VARIABLE=VALUE`, as often as needed.
let serviceSettings: [String: [String: String]] = {
    var settings: [String: [String: String]] = [:]
    let arguments = CommandLine.arguments
    for (index, argument) in arguments.enumerated() where argument == "--set" && index + 1 < arguments.count {
        let setting = arguments[index + 1]
        guard let colon = setting.firstIndex(of: ":"), let equals = setting.firstIndex(of: "="), colon < equals,
            ServiceFleet.names.contains(String(setting[..<colon]))
        else {
            print("e2e-bench: --set takes SERVICE:VARIABLE=VALUE with SERVICE one of \(ServiceFleet.names.joined(separator: ", ")); got \(setting)")
            exit(2)
        }
        settings[String(setting[..<colon]), default: [:]][String(setting[setting.index(after: colon)..<equals])] = String(
            setting[setting.index(after: equals)...])
    }
    return settings
}()
guard let adminURL = ProcessInfo.processInfo.environment["DATABASE_URL"], let binDirectory = Bench.text("--bin") else {
    print("e2e-bench: needs DATABASE_URL and --bin DIR (the services' release build); scripts/bench e2e sets both")
    exit(2)
}
let logger = Bench.quietLogger("e2e-bench")
let logDirectory = Bench.text("--logs") ?? NSTemporaryDirectory() + "datong-e2e-logs"

// `--import-megabytes N`: instead of rounds, `datongctl import` of a log file (LogImport.swift).
let importMegabytes = Bench.option("--import-megabytes", default: 0)
if importMegabytes > 0 {
    let file = NSTemporaryDirectory() + "datong-import-bench.log"
    try? FileManager.default.createDirectory(atPath: logDirectory, withIntermediateDirectories: true)
    print(
        "\n| file | lines | seconds | lines a second | MB a second | importer peak RSS | importer CPU | gateway CPU | collector CPU | identity CPU | PostgreSQL CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (number, megabytes) in [max(1, importMegabytes / 10), importMegabytes].enumerated() {
        do {
            let lines = try LogImportLoad.writeFile(file, megabytes: megabytes, seed: number)
            try? FileManager.default.removeItem(atPath: file + ".state")
            let url = try await Bench.freshDatabase(adminURL: adminURL, logger: logger)
            let report = try await LogImportLoad.run(
                binDirectory: binDirectory, logDirectory: logDirectory, settings: serviceSettings, url: url, file: file,
                megabytes: Double(megabytes), lines: lines, parallel: Bench.option("--import-parallel", default: 2))
            await VolumeDatabase.drop(url, adminURL: adminURL)
            print(
                String(
                    format: "| %d MB | %d | %.1f | %.0f | %.1f | %.0f MB | %.1f s | %.1f s | %.1f s | %.1f s | %.1f s |", megabytes, report.lines,
                    report.seconds,
                    Double(report.lines) / report.seconds, report.megabytes / report.seconds, Double(report.peakRSS) / 1_048_576, report.importerCPU,
                    report.servicesCPU["bridge-gateway"] ?? 0, report.servicesCPU["collector"] ?? 0, report.servicesCPU["identity-service"] ?? 0,
                    report.postgresCPU))
        } catch {
            print("e2e-bench: the import run failed: \(error) (logs in \(logDirectory))")
            exit(1)
        }
    }
    try? FileManager.default.removeItem(atPath: file)
    try? FileManager.default.removeItem(atPath: file + ".state")
    exit(0)
}

// MARK: Traffic: what the SDKs send

/// The mix of one run: 7 in 10 requests are iOS SDK uploads (4 in 5 of their records app events,
/// 1 in 5 H5 events the app relayed), 3 in 10 are bridge relays of raw H5 messages in their three
/// forms; with `--mix web`, 8 in 10 are one record from a web page (the JS SDK's image beacon and
/// `sendBeacon` in turn) and 2 in 10 iOS SDK uploads of 10 to 50 records. 1 in 5 requests comes
/// from a device never seen before, the others from returning devices (half of them logged in),
/// each of which sent one request during the warm-up.
struct Traffic {
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    let serverURL = "https://sa.example.com/sa?project=default"

    func device(_ number: Int) -> SDKTraffic.Device {
        SDKTraffic.Device(number, login: number % 2 == 0 ? "user-\(number)" : nil)
    }

    /// The records request `index` carries.
    func records(_ index: Int) -> Int {
        guard webMix else { return recordsPerRequest }
        return index % 10 < 8 ? 1 : 10 + (index / 10 % 5) * 10
    }

    /// True when request `index` is an app SDK's upload (the others: relays, or web pages' records).
    func isAppUpload(_ index: Int) -> Bool { webMix ? index % 10 >= 8 : index % 10 < 7 }

    /// Request `index` of the whole run (warm-up and every phase share one numbering, so that every
    /// record is a distinct event).
    func request(_ index: Int, device number: Int) throws -> HTTPLoad.Request {
        let device = device(number)
        let first = index * (webMix ? 50 : recordsPerRequest)
        // The device's public address, as a load balancer in front of the gateways passes it on
        // (read only by a gateway whose TRUSTED_PROXIES names this host: `--set
        // bridge-gateway:TRUSTED_PROXIES=127.0.0.1`, the enrichment cost in docs/BENCHMARKS.md).
        let forwardedFor = ("X-Forwarded-For", "1.2.\(3 + number % 2).\(1 + number % 250)")
        if webMix, index % 10 < 8 {
            let record = SDKTraffic.webEvent(device, sequence: first, time: now - Int64(first))
            let web = SDKTraffic.webRequest(
                record, project: "default", transport: index % 2 == 0 ? .image : .beacon,
                userAgent: SDKTraffic.browserUserAgents[number % SDKTraffic.browserUserAgents.count])
            return HTTPLoad.Request(web.method, web.uri, body: web.body, headers: web.headers + [forwardedFor])
        }
        if !isAppUpload(index) {
            let records = (0..<recordsPerRequest).map {
                SDKTraffic.bridgeRecord(device, sequence: first + $0, time: now - Int64(first + $0), serverURL: serverURL)
            }
            return HTTPLoad.Request(
                "POST", "/v1/bridge?project=default", body: SDKTraffic.relayBody(device, records: records, serverURL: serverURL),
                headers: [("Content-Type", "application/json"), forwardedFor]
            )
        }
        let records = (0..<records(index)).map { position -> [String: Any] in
            let sequence = first + position
            let time = now - Int64(sequence)
            if position % 10 < profileTenths { return SDKTraffic.profileRecord(device, sequence: sequence, time: now - Int64(first)) }
            return position % 5 == 4
                ? SDKTraffic.h5Event(device, sequence: sequence, time: time)
                : SDKTraffic.appEvent(device, sequence: sequence, time: time)
        }
        return HTTPLoad.Request(
            "POST", "/sa?project=default", body: try SDKTraffic.uploadBody(records),
            headers: [("Content-Type", "application/x-www-form-urlencoded"), forwardedFor]
        )
    }

    /// How many of request `index`'s records are profile records, stored as profiles, not events.
    func profileRecords(_ index: Int) -> Int {
        isAppUpload(index) ? (0..<records(index)).filter { $0 % 10 < profileTenths }.count : 0
    }

    /// The records of requests `indices`, and how many of them are events.
    func count(_ indices: Range<Int>) -> (records: Int, events: Int) {
        indices.reduce(into: (0, 0)) { sum, index in
            sum.0 += records(index)
            sum.1 += records(index) - profileRecords(index)
        }
    }

    /// `count` requests numbered from `start`: every fifth from a new device.
    func phase(start: Int, count: Int) throws -> [HTTPLoad.Request] {
        try (start..<(start + count)).map { index in
            try request(index, device: index % 5 == 0 ? 1_000_000 + index : index % returningDevices)
        }
    }
}

let traffic = Traffic()
Bench.say("e2e-bench: building the traffic")
let warmUp = try (0..<returningDevices).map { try traffic.request($0, device: $0) }
let fullSpeed = try traffic.phase(start: returningDevices, count: requestCount)
let halfRate = try traffic.phase(start: returningDevices + requestCount, count: requestCount / 2)
let fullSpeedRecords = traffic.count(returningDevices..<(returningDevices + requestCount)).records
/// Records a request, on average over the full-speed phase.
let recordsPerRequestMean = Double(fullSpeedRecords) / Double(requestCount)
let halfRateRecords = traffic.count((returningDevices + requestCount)..<(returningDevices + requestCount + requestCount / 2)).records
/// Events a round stores (warm-up, full speed and half rate): every record but profile records.
let storedEvents = traffic.count(0..<(returningDevices + requestCount + requestCount / 2)).events
let recordsLabel = webMix ? "of 1 (8 in 10) or 10 to 50 (2 in 10) records" : "x \(recordsPerRequest) records"
let uploadBytes = (fullSpeed + halfRate).map(\.bytes.count).reduce(0, +) / (fullSpeed.count + halfRate.count)
Bench.say(
    "e2e-bench: \(requestCount) requests \(recordsLabel) at full speed, \(requestCount / 2) at half that rate, after a warm-up of \(returningDevices); \(connections) keep-alive connections, \(rounds) rounds, median"
)
Bench.say(
    "  requests average \(uploadBytes) bytes on the wire; "
        + (webMix ? "8/10 web pages' (image beacon, sendBeacon), 2/10 app gzip uploads" : "7/10 gzip uploads, 3/10 bridge relays")
        + "; 1/5 from new devices")

// `--callgrind DIR`: instead of rounds, each service's instructions per request and per event.
if let callgrindDirectory = Bench.text("--callgrind") {
    do {
        let fresh = try await Bench.freshDatabase(adminURL: adminURL, logger: logger)
        let outcome = try await InstructionCount.run(
            directory: callgrindDirectory, binDirectory: binDirectory, databaseURL: fresh, logDirectory: logDirectory,
            settings: serviceSettings, preload: ProcessInfo.processInfo.environment["DATONG_VALGRIND_PRELOAD"], warmUp: warmUp,
            requests: fullSpeed, events: fullSpeedRecords, connections: connections, check: acknowledged)
        print("\n| service | instructions a request | instructions an event | idle instructions a second (taken off) |\n|---|---|---|---|")
        for name in InstructionCount.measured {
            print(
                String(
                    format: "| %@ | %.0f | %.0f | %.0f |", name, outcome.perRequest[name]!, outcome.perEvent[name]!, outcome.idlePerSecond[name]!))
        }
        let total = InstructionCount.measured.map { outcome.perRequest[$0]! }.reduce(0, +)
        print(String(format: "| the three | %.0f | %.0f | |", total, total * Double(fullSpeed.count) / Double(fullSpeedRecords)))
        print(
            String(
                format: "\n%d requests %@ over %d connections, %.0f s under callgrind; %.2f uploads a collector call, %.2f a resolve call",
                fullSpeed.count, recordsLabel, connections, outcome.seconds, outcome.batchesPerCollectorCall, outcome.uploadsPerIdentityCall))
        await VolumeDatabase.drop(fresh, adminURL: adminURL)
        exit(0)
    } catch {
        print("e2e-bench: the callgrind run failed: \(error) (service logs in \(logDirectory))")
        exit(1)
    }
}

// MARK: One round

struct Round {
    /// Records (events and profile records) acknowledged a second at full speed.
    var eventsPerSecond = 0.0
    var requestsPerSecond = 0.0
    /// Uploads a collector call and a resolve call carried at full speed (the gateway's metrics).
    var uploadsPerCollectorCall = 0.0
    var uploadsPerIdentityCall = 0.0
    var fullSpeed: Latency
    var halfRate: Latency
    var halfRateEventsPerSecond = 0.0
    var peakRSS: [String: Int] = [:]
    var rawCopyEventsPerSecond = 0.0
    /// CPU µs per acknowledged event at full speed, by process (see `cpuSnapshot`).
    var cpuMicroseconds: [String: Double] = [:]
}

/// CPU seconds used so far by each service, by this process (the load generator) and by the whole
/// machine; PostgreSQL is what the machine used beyond those.
func cpuSnapshot(_ fleet: ServiceFleet) -> [String: Double] {
    var snapshot: [String: Double] = [:]
    for name in ServiceFleet.names { snapshot[name] = fleet.cpuSeconds(name) ?? 0 }
    if fleet.balanced { snapshot["haproxy"] = fleet.cpuSeconds("haproxy") ?? 0 }
    snapshot["load generator"] = CPUTime.ownProcess
    snapshot["machine"] = CPUTime.machineBusy
    return snapshot
}

let cpuColumns = ServiceFleet.names + (replicas > 1 ? ["haproxy"] : []) + ["load generator", "PostgreSQL and the rest"]

func cpuPerEvent(before: [String: Double], after: [String: Double], events: Int) -> [String: Double] {
    var perEvent: [String: Double] = [:]
    for (name, value) in after where name != "machine" { perEvent[name] = (value - before[name]!) * 1e6 / Double(events) }
    let machine = (after["machine"]! - before["machine"]!) * 1e6 / Double(events)
    perEvent["PostgreSQL and the rest"] = machine - perEvent.values.reduce(0, +)
    return perEvent
}

struct Latency: Codable {
    let p50: Double
    let p99: Double
    let max: Double

    init(_ outcome: HTTPLoad.Outcome) {
        p50 = outcome.percentile(0.5) * 1000
        p99 = outcome.percentile(0.99) * 1000
        max = outcome.percentile(1) * 1000
    }
}

/// Every answer is a 200 with every record stored: none may be refused or lost.
@Sendable func acknowledged(_ index: Int, _ answer: HTTPLoad.Answer) throws {
    guard answer.status == 200 else {
        throw BenchError("request \(index): HTTP \(answer.status): \(String(decoding: answer.body.prefix(300), as: UTF8.self))")
    }
}

/// One round on `url`: on a fresh database it ends with the raw COPY baseline; on a copy of the
/// volume database (`preloaded` events) it checks only that this round's events are stored once.
func runRound(_ number: Int, url: String, preloaded: Int = 0) async throws -> Round {
    let fleet = try ServiceFleet(
        binDirectory: binDirectory, databaseURL: url, logDirectory: logDirectory, settings: serviceSettings, replicas: replicas)
    do {
        try await fleet.startAll()
        _ = try await HTTPLoad.run(port: fleet.gatewayPort, requests: warmUp, connections: connections, check: acknowledged)
        try await settle(url: url)
        let callsBefore = try GatewayCalls(fleet)
        let cpuBefore = cpuSnapshot(fleet)
        let full = try await HTTPLoad.run(port: fleet.gatewayPort, requests: fullSpeed, connections: connections, check: acknowledged)
        try await waitForReportRollups(url: url)
        let cpuAfter = cpuSnapshot(fleet)
        let calls = try GatewayCalls(fleet).since(callsBefore)
        let rate = Double(fullSpeed.count) / full.elapsed
        let half = try await HTTPLoad.run(
            port: fleet.gatewayPort, requests: halfRate, connections: connections, rate: rate / 2, check: acknowledged
        )
        var round = Round(
            eventsPerSecond: Double(fullSpeedRecords) / full.elapsed, requestsPerSecond: rate,
            uploadsPerCollectorCall: calls.uploadsPerCollectorCall, uploadsPerIdentityCall: calls.uploadsPerIdentityCall,
            fullSpeed: Latency(full), halfRate: Latency(half), halfRateEventsPerSecond: Double(halfRateRecords) / half.elapsed
        )
        round.cpuMicroseconds = cpuPerEvent(before: cpuBefore, after: cpuAfter, events: fullSpeedRecords)
        for name in ServiceFleet.names { round.peakRSS[name] = fleet.peakResidentBytes(name) ?? 0 }
        await fleet.stopAll()
        if preloaded > 0 {
            try await checkStoredOnce(url: url, expected: storedEvents)
        } else {
            round.rawCopyEventsPerSecond = try await rawCopy(url: url, expected: storedEvents)
        }
        Bench.say(
            String(
                format:
                    "  round %d%@: %.0f events/s (%.0f requests/s) acknowledged; p50/p99/max %.1f/%.1f/%.1f ms, at half rate %.1f/%.1f/%.1f ms; %.0f µs CPU/event; %.1f uploads a collector call, %.1f a resolve call%@",
                number, preloaded > 0 ? " at volume" : "", round.eventsPerSecond, round.requestsPerSecond, round.fullSpeed.p50, round.fullSpeed.p99,
                round.fullSpeed.max, round.halfRate.p50, round.halfRate.p99, round.halfRate.max,
                round.cpuMicroseconds.values.reduce(0, +), round.uploadsPerCollectorCall, round.uploadsPerIdentityCall,
                preloaded > 0 ? "" : String(format: "; raw COPY %.0f events/s", round.rawCopyEventsPerSecond)
            ))
        return round
    } catch {
        await fleet.stopAll()
        throw error
    }
}

/// Before a round's measured traffic: gives its database the planner statistics a running
/// deployment has, and writes out what setting it up left to write. Autovacuum analyzes a table
/// within a minute of its first rows, but a round is over before then; without statistics the
/// planner takes `project = $1` to match 0.5% of a table, not all of it (one project), and the
/// generic plan it caches for identity-service's owner lookup scans every identity of the project.
/// The checkpoint finishes the one a volume load or database copy started (spread over minutes),
/// which otherwise writes gigabytes during the next round (docs/BENCHMARKS.md).
/// With the report rollups on (the collector's default), an event's CPU includes their look over it,
/// which comes up to `REPORT_ROLLUP_INTERVAL_MS` after the event is stored: waits for two looks to
/// finish after the load (the second began after the last event was stored), so that the CPU
/// measured counts them. `--set collector:REPORT_ROLLUP_INTERVAL_MS=0` measures without them.
func waitForReportRollups(url: String) async throws {
    guard serviceSettings["collector"]?["REPORT_ROLLUP_INTERVAL_MS"] != "0" else { return }
    let pool = PostgresPool(url: url, maxConnections: 1, logger: logger)
    func rounds() async throws -> Int {
        try await pool.withConnection { Int(try $0.query("SELECT rounds FROM collector.report_state").scalar ?? "") ?? 0 }
    }
    do {
        let start = try await rounds()
        let deadline = ContinuousClock.now + .seconds(120)
        while try await rounds() < start + 2 {
            guard ContinuousClock.now < deadline else { throw BenchError("the report rollups made no two looks in 120 s") }
            try await Task.sleep(for: .milliseconds(100))
        }
        await pool.close()
    } catch {
        await pool.close()
        throw error
    }
}

func settle(url: String) async throws {
    try await Bench.administer(adminURL: url, "ANALYZE", logger: logger)
    try await Bench.administer(adminURL: url, "CHECKPOINT", logger: logger)
}

/// Checks that every acknowledged event is stored exactly once (nothing rejected), then takes the
/// stored rows out, empties the table and COPYs the same rows back into it over 4 connections,
/// 10,000 rows per COPY and transaction, as collector-bench's baseline does.
func rawCopy(url: String, expected: Int) async throws -> Double {
    let pool = PostgresPool(url: url, maxConnections: 4, logger: logger)
    do {
        let rate = try await rawCopy(pool: pool, expected: expected)
        await pool.close()
        return rate
    } catch {
        await pool.close()
        throw error
    }
}

/// On a volume database: this round's events (received in the last hours; the loaded ones are a day
/// old at least) are stored exactly once and nothing was rejected.
func checkStoredOnce(url: String, expected: Int) async throws {
    let pool = PostgresPool(url: url, maxConnections: 1, logger: logger)
    let counts = try await pool.withConnection {
        try $0.query(
            """
            SELECT count(*), count(DISTINCT event_id), (SELECT count(*) FROM collector.rejected)
            FROM collector.events WHERE received_at > now() - interval '12 hours'
            """
        ).rows[0]
    }
    await pool.close()
    guard counts == [String(expected), String(expected), "0"] else {
        throw BenchError("expected \(expected) events stored once and none rejected; found events, distinct, rejected = \(counts)")
    }
}

func rawCopy(pool: PostgresPool, expected: Int) async throws -> Double {
    let counts = try await pool.withConnection {
        try $0.query(
            "SELECT (SELECT count(*) FROM collector.events), (SELECT count(DISTINCT event_id) FROM collector.events), (SELECT count(*) FROM collector.rejected)"
        ).rows[0]
    }
    guard counts == [String(expected), String(expected), "0"] else {
        throw BenchError("expected \(expected) events stored once and none rejected; found events, distinct, rejected = \(counts)")
    }
    let data = try await pool.withConnection { try $0.copyOut("COPY (SELECT * FROM collector.events) TO STDOUT (FORMAT binary)", maxBytes: 4 << 30) }
    let chunks = try BinaryCopyChunks(data, rowsPerChunk: 10_000)
    try await pool.withConnection { _ = try $0.execute("TRUNCATE collector.events") }
    let clock = ContinuousClock()
    let elapsed = try await clock.measure {
        try await withThrowingTaskGroup(of: Void.self) { group in
            let next = WorkCounter()
            for _ in 0..<4 {
                group.addTask {
                    while let index = next.take(below: chunks.count) {
                        let rows = chunks.chunk(index)
                        try await pool.transaction { _ = try $0.copyIn("COPY collector.events FROM STDIN (FORMAT binary)", data: rows) }
                    }
                }
            }
            try await group.waitForAll()
        }
    }
    let copied = try await pool.withConnection { try $0.query("SELECT count(*) FROM collector.events").rows[0][0] }
    guard copied == String(expected) else { throw BenchError("raw COPY stored \(copied ?? "none") of \(expected) rows") }
    return Double(expected) / Bench.seconds(elapsed)
}

/// The rows of a binary `COPY … TO STDOUT`, cut into pieces that are each a whole binary COPY stream.
struct BinaryCopyChunks: Sendable {
    private let header: [UInt8]
    private let pieces: [ArraySlice<UInt8>]

    init(_ data: [UInt8], rowsPerChunk: Int) throws {
        // Signature (11 bytes), flags (4), header extension length (4) and the extension.
        guard data.count >= 21 else { throw BenchError("COPY output is too short") }
        let extensionLength = Int(Self.int32(data, 15))
        var offset = 19 + extensionLength
        header = Array(data[..<offset])
        var pieces: [ArraySlice<UInt8>] = []
        var pieceStart = offset
        var rows = 0
        while true {
            let fields = Int16(bitPattern: UInt16(data[offset]) << 8 | UInt16(data[offset + 1]))
            if fields == -1 { break }
            offset += 2
            for _ in 0..<fields {
                let length = Self.int32(data, offset)
                offset += 4 + max(0, Int(length))
            }
            rows += 1
            if rows == rowsPerChunk {
                pieces.append(data[pieceStart..<offset])
                pieceStart = offset
                rows = 0
            }
        }
        if rows > 0 { pieces.append(data[pieceStart..<offset]) }
        self.pieces = pieces
    }

    var count: Int { pieces.count }

    func chunk(_ index: Int) -> [UInt8] { header + pieces[index] + [0xFF, 0xFF] }

    private static func int32(_ data: [UInt8], _ at: Int) -> Int32 {
        Int32(bitPattern: UInt32(data[at]) << 24 | UInt32(data[at + 1]) << 16 | UInt32(data[at + 2]) << 8 | UInt32(data[at + 3]))
    }
}

// MARK: Run and report

var volume: VolumeDatabase?
if volumeEvents > 0 {
    Bench.say("e2e-bench: loading \(volumeEvents) events over \(VolumeDatabase.days) days and \(volumeIdentities) identities with COPY")
    do {
        let loaded = try await VolumeDatabase.build(
            adminURL: adminURL, binDirectory: binDirectory, logDirectory: logDirectory, events: volumeEvents, identities: volumeIdentities)
        Bench.say(
            String(
                format: "  loaded in %.0f s (%.0f events/s), VACUUM ANALYZE %.0f s", loaded.loadSeconds,
                Double(volumeEvents) / loaded.loadSeconds, loaded.vacuumSeconds))
        volume = loaded
    } catch {
        print("e2e-bench: loading the volume database failed: \(error) (service logs in \(logDirectory))")
        exit(1)
    }
}

// `--erase N`: instead of rounds, ingestion latency before and while N users are erased (Erasure.swift).
let eraseUsers = Bench.option("--erase", default: 0)
let duringRequests = try traffic.phase(start: returningDevices + requestCount + requestCount / 2, count: requestCount / 2)
if eraseUsers > 0 {
    let heavy = Bench.option("--erase-heavy", default: 100_000)
    let setup = ErasureLoad.Setup(
        binDirectory: binDirectory, logDirectory: logDirectory, settings: serviceSettings, replicas: replicas, connections: connections,
        warmUp: warmUp, fullSpeed: fullSpeed, halfRate: halfRate, during: duringRequests,
        logins: (0..<returningDevices).compactMap { traffic.device($0).login }, check: acknowledged, settle: { try await settle(url: $0) })
    var reports: [ErasureLoad.Report] = []
    for number in 1...rounds {
        do {
            let url: String
            if let volume { url = try await volume.copy(adminURL: adminURL) } else { url = try await Bench.freshDatabase(adminURL: adminURL, logger: logger) }
            let report = try await ErasureLoad.run(setup, url: url, users: eraseUsers, heavyEvents: heavy, volume: volume != nil)
            await VolumeDatabase.drop(url, adminURL: adminURL)
            Bench.say(
                String(
                    format:
                        "  round %d: half rate p50/p99/max %.1f/%.1f/%.1f ms before, %.1f/%.1f/%.1f ms while erasing; %d users, %d events erased in %.1f s (the longest %.2f s) of the %.1f s phase",
                    number, report.before.p50, report.before.p99, report.before.max, report.during.p50, report.during.p99, report.during.max,
                    report.erasures, report.events, report.seconds, report.longestSeconds, report.duringSeconds))
            reports.append(report)
        } catch {
            print("e2e-bench: the erasure round failed: \(error) (service logs in \(logDirectory))")
            exit(1)
        }
    }
    let middle = { (value: (ErasureLoad.Report) -> Double) in Bench.median(reports.map(value)) }
    print(
        String(
            format:
                "\n| half-rate requests (%@) | p50 | p99 | max |\n|---|---|---|---|\n| before | %.1f ms | %.1f ms | %.1f ms |\n| while erasing %d users (%@) | %.1f ms | %.1f ms | %.1f ms |\n\nerasures: %.1f s for all, the longest %.2f s, %.0f events removed (medians of %d rounds)",
            recordsLabel, middle(\.before.p50), middle(\.before.p99), middle(\.before.max), eraseUsers,
            volume != nil ? "at volume, the first with \(heavy) more events" : "each a bench device's user", middle(\.during.p50),
            middle(\.during.p99), middle(\.during.max), middle(\.seconds), middle(\.longestSeconds), middle { Double($0.events) }, rounds))
    exit(0)
}

var results: [Round] = []
var volumeResults: [Round] = []
for number in 1...rounds {
    do {
        // Fresh and at volume alternate, so that the machine's drift touches both alike.
        let fresh = try await Bench.freshDatabase(adminURL: adminURL, logger: logger)
        results.append(try await runRound(number, url: fresh))
        await VolumeDatabase.drop(fresh, adminURL: adminURL)
        if let volume {
            let copy = try await volume.copy(adminURL: adminURL)
            volumeResults.append(try await runRound(number, url: copy, preloaded: volume.events))
            await VolumeDatabase.drop(copy, adminURL: adminURL)
        }
    } catch {
        print("e2e-bench: round \(number) failed: \(error) (service logs in \(logDirectory))")
        exit(1)
    }
}

let median = { (value: (Round) -> Double) in Bench.median(results.map(value)) }
let rate = median(\.eventsPerSecond)
let copyRate = median(\.rawCopyEventsPerSecond)
let full = (p50: median(\.fullSpeed.p50), p99: median(\.fullSpeed.p99), max: median(\.fullSpeed.max))
let half = (p50: median(\.halfRate.p50), p99: median(\.halfRate.p99), max: median(\.halfRate.max))
let halfRateAchieved = median(\.halfRateEventsPerSecond)
let peaks = Dictionary(uniqueKeysWithValues: ServiceFleet.names.map { name in (name, results.map { $0.peakRSS[name] ?? 0 }.max()!) })
let mebibyte = 1_048_576.0
let cpu = Dictionary(uniqueKeysWithValues: cpuColumns.map { name in (name, median { $0.cpuMicroseconds[name] ?? 0 }) })

struct Report: Codable {
    struct Phase: Codable {
        let eventsPerSecond: Double
        let p50Milliseconds: Double
        let p99Milliseconds: Double
        let maxMilliseconds: Double
    }

    let date: String
    let machine: String
    let rounds: Int
    let requestsPerRound: Int
    let recordsPerRequest: Int
    /// `web` with `--mix web` (then `recordsPerRequest` is the mean).
    let mix: String?
    let connections: Int
    let fullSpeed: Phase
    let halfRate: Phase
    let rawCopyEventsPerSecond: Double
    let ratioToRawCopy: Double
    let peakRSSMegabytes: [String: Double]
    let cpuMicrosecondsPerEvent: [String: Double]
    let eachRound: [Double]
    /// `--set` of this run.
    let settings: [String: [String: String]]
    let atVolume: AtVolume?

    /// The same traffic on a database already holding `events` events and `identities` identities.
    struct AtVolume: Codable {
        let events: Int
        let identities: Int
        let loadSeconds: Double
        let eventsPerSecond: Double
        let ratioToFresh: Double
        let halfRate: Phase
        let cpuMicrosecondsPerEvent: [String: Double]
        let eachRound: [Double]
    }
}

let volumeMedian = { (value: (Round) -> Double) in Bench.median(volumeResults.map(value)) }
let atVolume = volume.map { volume in
    Report.AtVolume(
        events: volume.events, identities: volume.identities, loadSeconds: volume.loadSeconds + volume.vacuumSeconds,
        eventsPerSecond: volumeMedian(\.eventsPerSecond), ratioToFresh: volumeMedian(\.eventsPerSecond) / rate,
        halfRate: .init(
            eventsPerSecond: volumeMedian(\.halfRateEventsPerSecond), p50Milliseconds: volumeMedian(\.halfRate.p50),
            p99Milliseconds: volumeMedian(\.halfRate.p99), maxMilliseconds: volumeMedian(\.halfRate.max)),
        cpuMicrosecondsPerEvent: Dictionary(
            uniqueKeysWithValues: cpuColumns.map { name in (name, volumeMedian { $0.cpuMicroseconds[name] ?? 0 }) }),
        eachRound: volumeResults.map(\.eventsPerSecond)
    )
}

let report = Report(
    date: ISO8601DateFormatter().string(from: Date()),
    machine: "\(ProcessInfo.processInfo.activeProcessorCount) cores, \(ProcessInfo.processInfo.physicalMemory >> 30) GiB",
    rounds: rounds, requestsPerRound: requestCount, recordsPerRequest: webMix ? Int(recordsPerRequestMean.rounded()) : recordsPerRequest,
    mix: webMix ? "web" : nil, connections: connections,
    fullSpeed: .init(eventsPerSecond: rate, p50Milliseconds: full.p50, p99Milliseconds: full.p99, maxMilliseconds: full.max),
    halfRate: .init(eventsPerSecond: halfRateAchieved, p50Milliseconds: half.p50, p99Milliseconds: half.p99, maxMilliseconds: half.max),
    rawCopyEventsPerSecond: copyRate, ratioToRawCopy: rate / copyRate,
    peakRSSMegabytes: peaks.mapValues { Double($0) / mebibyte },
    cpuMicrosecondsPerEvent: cpu,
    eachRound: results.map(\.eventsPerSecond),
    settings: serviceSettings,
    atVolume: atVolume
)

func verdict(_ met: Bool) -> String { met ? "met" : "**not met**" }
/// The targets (docs/BENCHMARKS.md): web traffic (one record a request) at ≥ 0.12x of raw COPY and ≤ 200 µs of
/// the machine's CPU a request; app traffic (50) with no regression: ≥ 0.35x, ≤ 36 µs an event.
let ratioTarget: Double? = webMix ? nil : [1: 0.12, 50: 0.35][recordsPerRequest]
let rssLimit = 150 * mebibyte
let cpuTotal = cpu.values.reduce(0, +)
let cpuPerRequest = cpuTotal * recordsPerRequestMean
var table = """
    | measure | value | target |
    |---|---|---|
    | acknowledged events/s, full speed (\(connections) connections) | \(Int(rate)) (\(Int(median(\.requestsPerSecond))) requests/s) | |
    | request latency p50 / p99 / max, full speed | \(String(format: "%.1f / %.1f / %.1f ms", full.p50, full.p99, full.max)) | |
    | request latency p50 / p99 / max at half that rate (\(Int(halfRateAchieved)) events/s) | \(String(format: "%.1f / %.1f / %.1f ms", half.p50, half.p99, half.max)) | p99 ≤ 15 ms: \(verdict(half.p99 <= 15)) |
    | raw binary COPY of the same rows into the same table | \(Int(copyRate)) events/s | \(String(format: "%.2f", rate / copyRate))x of it\(
        ratioTarget.map { ", ≥ \($0)x: " + verdict(rate / copyRate >= $0) } ?? "") |
    | uploads a call to the collector / to identity-service, full speed | \(String(format: "%.1f / %.1f", median(\.uploadsPerCollectorCall), median(\.uploadsPerIdentityCall))) | |

    """
table +=
    "| CPU per acknowledged event at full speed | \(String(format: "%.1f", cpuTotal)) µs: "
    + cpuColumns.map { "\($0) \(String(format: "%.1f", cpu[$0]!))" }.joined(separator: ", ")
    + (ratioTarget != nil && recordsPerRequest == 50 ? " | ≤ 36 µs: \(verdict(cpuTotal <= 36)) |\n" : " | |\n")
table +=
    "| CPU per request at full speed, the whole machine | \(String(format: "%.0f", cpuPerRequest)) µs: "
    + cpuColumns.map { "\($0) \(String(format: "%.0f", cpu[$0]! * recordsPerRequestMean))" }.joined(separator: ", ")
    + (ratioTarget != nil && recordsPerRequest == 1 ? " | ≤ 200 µs: \(verdict(cpuPerRequest <= 200)) |\n" : " | |\n")
if let atVolume {
    table +=
        "| the same traffic at volume (\(atVolume.events) events over \(VolumeDatabase.days) days, \(atVolume.identities) identities; "
        + "loaded with COPY and vacuumed in \(Int(atVolume.loadSeconds)) s) | \(Int(atVolume.eventsPerSecond)) events/s | "
        + "≥ 0.85x of fresh: \(String(format: "%.2f", atVolume.ratioToFresh))x, \(verdict(atVolume.ratioToFresh >= 0.85)) |\n"
        + "| request latency p50 / p99 / max at half rate, at volume | "
        + String(format: "%.1f / %.1f / %.1f ms", atVolume.halfRate.p50Milliseconds, atVolume.halfRate.p99Milliseconds, atVolume.halfRate.maxMilliseconds)
        + " | |\n"
}
for name in ServiceFleet.names {
    let peak = Double(peaks[name]!)
    table += "| peak RSS \(name) | \(String(format: "%.0f", peak / mebibyte)) MiB | ≤ 150 MB: \(verdict(peak <= rssLimit)) |\n"
}
if let atVolume {
    table += "\nCPU µs per acknowledged event, fresh database and at volume:\n\n| process | fresh | at volume | growth |\n|---|---|---|---|\n"
    for name in cpuColumns {
        let (fresh, loaded) = (cpu[name]!, atVolume.cpuMicrosecondsPerEvent[name]!)
        table += "| \(name) | \(String(format: "%.1f", fresh)) | \(String(format: "%.1f", loaded)) | \(String(format: "%+.1f", loaded - fresh)) |\n"
    }
    let loadedTotal = atVolume.cpuMicrosecondsPerEvent.values.reduce(0, +)
    table += "| total | \(String(format: "%.1f", cpuTotal)) | \(String(format: "%.1f", loadedTotal)) | \(String(format: "%+.1f", loadedTotal - cpuTotal)) |\n"
}
print()
print(table)
try FileManager.default.createDirectory(atPath: outDirectory, withIntermediateDirectories: true)
let encoder = JSONEncoder()
encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
try encoder.encode(report).write(to: URL(fileURLWithPath: "\(outDirectory)/e2e.json"))
let markdown = """
    # End-to-end benchmark: last run

    Written by `scripts/bench e2e` on \(report.date) (\(report.machine); every service, PostgreSQL and the
    load generator on this one machine). \(rounds) rounds, medians; each round: a fresh database, the four
    release-built services as separate processes, a warm-up of \(returningDevices) requests, `ANALYZE` (as
    autovacuum does in a deployment) and `CHECKPOINT`, then \(requestCount) requests \(recordsLabel) as fast as
    \(connections) keep-alive connections are answered, then \(requestCount / 2) more at half that rate. Peak RSS is the highest `VmHWM` of any round.
    Events/s of each round at full speed: \(results.map { String(Int($0.eventsPerSecond)) }.joined(separator: ", "))\(
        volumeResults.isEmpty ? "" : "; at volume: " + volumeResults.map { String(Int($0.eventsPerSecond)) }.joined(separator: ", ")).\(
        serviceSettings.isEmpty ? "" : " Settings: " + serviceSettings.sorted { $0.key < $1.key }.map { service, values in
            values.sorted { $0.key < $1.key }.map { "\(service) \($0.key)=\($0.value)" }.joined(separator: ", ") }.joined(separator: ", ") + ".")

    \(table)
    """
try Data(markdown.utf8).write(to: URL(fileURLWithPath: "\(outDirectory)/e2e.md"))
print("e2e-bench: wrote \(outDirectory)/e2e.json and \(outDirectory)/e2e.md")
