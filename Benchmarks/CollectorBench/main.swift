// collector-bench: events/s written through the collector's HTTP API (`POST /v1/batches`, group
// commit, dedup, all indexes) into PostgreSQL, next to a raw binary COPY of the same rows into the
// same table in the same run.
//
//   scripts/bench collector [--rounds N] [--batches N] [--records N] [--concurrency N] [--connections N] [--only collector|copy]
//                           [--catalog-pair]   (also without the catalog, to show what keeping it costs)
//                           [--catalog off]    (the collector path without it, e.g. to count instructions)
//   scripts/bench collector --storage [--rounds N] [--batches N]   (what the table's design costs: StorageVariants.swift)
//
// (the script starts a throwaway PostgreSQL and sets DATABASE_URL; the bench creates a fresh
// database in it for each path and round).
import BenchSupport
import Collector
import DatongContracts
import DatongPostgres
import DatongRuntime
import Foundation
import Hummingbird
import Logging
import NIOCore

let rounds = Bench.option("--rounds", default: 3)
let batchCount = Bench.option("--batches", default: 2_000)
let concurrency = Bench.option("--concurrency", default: 64)
let recordsPerBatch = Bench.option("--records", default: 50)
let connections = Bench.option("--connections", default: 4)
/// The collector's internal API always wants the service token.
let serviceToken = "collector-bench-service-token"

guard let adminURL = ProcessInfo.processInfo.environment["DATABASE_URL"] else {
    print("collector-bench: set DATABASE_URL to a PostgreSQL server (scripts/bench collector starts one)")
    exit(2)
}
let logger = Bench.quietLogger("collector-bench")

// MARK: Realistic batches: app events and H5 events relayed by apps, ~600 bytes of properties each.

let now = Int64(Date().timeIntervalSince1970 * 1000)
let properties = [
    #"{"$os":"iOS","$os_version":"17.4","$model":"iPhone15,2","$manufacturer":"Apple","$screen_width":393,"$screen_height":852,"#
        + #""$wifi":true,"$network_type":"WIFI","$carrier":"中国移动","$app_id":"com.example.shop","$app_version":"2.3.0","#
        + #""$timezone_offset":-480,"$is_first_day":false,"$element_content":"加入购物车","$element_type":"UIButton","#
        + #""$screen_name":"ProductViewController","$title":"商品详情","price":129.5,"sku":"SKU-%d","tags":["sale","new"]}"#,
    #"{"$url":"https://h5.example.com/shop/item?id=%d","$title":"Item","$referrer":"https://h5.example.com/","$screen_width":393,"#
        + #""$viewport_width":390,"$latest_traffic_source_type":"引荐流量","$os":"iOS","$model":"iPhone15,2","$app_version":"2.3.0","#
        + #""price":9.9,"paid_at":"2024-01-02 03:04:05.006","$is_first_day":false,"$lib":"js","$lib_version":"1.27.10"}"#,
]
let events = ["$AppClick", "$AppViewScreen", "AddToCart", "$pageview", "ViewProduct"]
func batch(_ number: Int) -> CollectBatch {
    let records = (0..<recordsPerBatch).map { index -> CollectRecord in
        let sequence = number * recordsPerBatch + index
        let user = sequence % 5_000
        let hybrid = sequence % 3 == 0
        return CollectRecord(
            project: "default", type: "track", event: events[sequence % events.count], time: now - Int64(sequence % 86_400_000),
            distinctId: "anon-\(user)", userId: Int64(user + 1), anonymousId: "anon-\(user)", loginId: user % 2 == 0 ? "user-\(user)" : nil,
            lib: hybrid ? "js" : "iOS", libVersion: hybrid ? "1.27.10" : "4.5.0", appVersion: "2.3.0", hybridH5: hybrid,
            properties: PropertiesText(properties[hybrid ? 1 : 0].replacingOccurrences(of: "%d", with: String(sequence)))
        )
    }
    return CollectBatch(receivedAt: now, records: records)
}
let batches = (0..<batchCount).map(batch)
/// The tables the events go in (a month split by project, and the project's table), for fresh databases.
let partitionStatements = MonthPartition.createStatements(for: batches.flatMap { $0.records.map { (project: $0.project, unixMillis: $0.time) } })
// The bodies the gateway sends (its hand-written batch JSON), built once: the load generator should
// cost the machine as little as it can.
let requests = batches.map {
    HTTPLoad.Request(
        "POST", "/v1/batches", body: $0.jsonBytes, headers: [("Content-Type", "application/json"), ("Authorization", "Bearer \(serviceToken)")]
    )
}
let totalEvents = batchCount * recordsPerBatch
print("collector-bench: \(batchCount) batches x \(recordsPerBatch) events = \(totalEvents) events per round, \(rounds) rounds, median")
print("  HTTP: \(concurrency) keep-alive connections, one request in flight on each; collector pool \(connections) connections")

// MARK: Paths

/// A fresh database with the collector's schema (tables, partitions for the corpus, indexes).
func freshDatabase() async throws -> String {
    let url = try await Bench.freshDatabase(adminURL: adminURL, logger: logger)
    let pool = PostgresPool(url: url, maxConnections: 1, logger: logger)
    try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: logger)
    await pool.close()
    return url
}

/// CPU seconds a path spent: this process's (the collector and the load generator) and PostgreSQL's.
struct Spent {
    var process: Double
    var postgres: Double
}

/// Through the collector's HTTP API: every batch posted once, `concurrency` at a time; the time
/// it took and the CPU spent meanwhile.
func throughCollector(keepsCatalog: Bool = true) async throws -> (Duration, cpu: Spent) {
    let url = try await freshDatabase()
    let port = try freePort()
    let settings = CollectorSettings(
        server: ServerSettings(port: port, serviceToken: serviceToken), database: DatabaseSettings(url: url, poolSize: connections)
    )
    let app = buildCollectorApplication(settings: settings, runtime: ServiceRuntime(logger: logger), keepsCatalog: keepsCatalog)
    let server = Task { try await app.runService() }
    // Wait for the server (migrations are already applied).
    for _ in 0..<100 {
        if let connection = try? HTTPLoad.Connection(port: port) {
            connection.close()
            break
        }
        try await Task.sleep(for: .milliseconds(50))
    }
    let own = CPUTime.ownProcess
    let postgres = CPUTime.processes(named: "postgres")
    let outcome = try await HTTPLoad.run(port: port, requests: requests, connections: concurrency) { index, answer in
        guard answer.status == 200 else { throw BenchError("batch \(index): HTTP \(answer.status)") }
    }
    let cpu = Spent(process: CPUTime.ownProcess - own, postgres: CPUTime.spent(from: postgres, to: CPUTime.processes(named: "postgres")))
    server.cancel()
    _ = try? await server.value
    try await check(url)
    return (.seconds(outcome.elapsed), cpu)
}

/// `collector.events` rows of `batches` exactly as the collector encodes them.
func eventRows(_ batches: [CollectBatch]) throws -> [UInt8] {
    var writer = BinaryCopyWriter()
    for batch in batches {
        let incoming = try IncomingBatch(jsonBytes: batch.jsonBytes)
        for record in incoming.records {
            if case .event(let row) = record.content { writer.appendEncodedRow(incoming.eventRows[row]) }
        }
    }
    return writer.finish()
}

/// Raw binary COPY of the same rows into the same table, `connections` at a time, 10,000 rows per
/// COPY and transaction.
func rawCopy() async throws -> Duration {
    let url = try await freshDatabase()
    let chunks = stride(from: 0, to: batches.count, by: 200).map { start in
        Array(batches[start..<min(start + 200, batches.count)])
    }
    let data = try chunks.map(eventRows)
    let pool = PostgresPool(url: url, maxConnections: connections, logger: logger)
    try await pool.withConnection { connection in
        for statement in partitionStatements { try connection.execute(statement) }
    }
    let elapsed = try await StorageBench.copy(data, into: pool, connections: connections)
    await pool.close()
    try await check(url)
    return elapsed
}

/// Every event is in the table exactly once.
func check(_ url: String) async throws {
    let pool = PostgresPool(url: url, maxConnections: 1, logger: logger)
    let count = try await pool.withConnection { try $0.query("SELECT count(*) FROM collector.events").rows.first?[0] ?? nil }
    await pool.close()
    guard count == String(totalEvents) else { throw BenchError("expected \(totalEvents) events in the table, found \(count ?? "none")") }
}

// MARK: Run

// `--storage` measures variants of the events table instead (StorageVariants.swift).
if CommandLine.arguments.contains("--storage") {
    print("storage variants: the collector's COPY rows written \(connections) COPYs at a time into each variant of the table")
    let chunks = try stride(from: 0, to: batches.count, by: 200).map { start in
        try eventRows(Array(batches[start..<min(start + 200, batches.count)]))
    }
    try await StorageBench.run(
        rounds: rounds, chunks: chunks, events: totalEvents, partitions: partitionStatements, connections: connections, adminURL: adminURL, logger: logger)
    exit(0)
}

var collectorRates: [Double] = []
var copyRates: [Double] = []
/// Without the catalog (`--catalog-pair`): what keeping it costs, in the same run.
var plainRates: [Double] = []
var collectorCPU: [Spent] = []
var plainCPU: [Spent] = []
let catalogPair = CommandLine.arguments.contains("--catalog-pair")
/// `--catalog off`: the collector path without the catalog (to count its instructions alone).
let keepsCatalog = Bench.text("--catalog") != "off"
// `--only collector` or `--only copy` runs one path (for profiling it).
let only = Bench.text("--only")
for _ in 0..<rounds {
    if only != "collector" {
        let copy = try await rawCopy()
        copyRates.append(Double(totalEvents) / Bench.seconds(copy))
    }
    if only != "copy" {
        let (http, cpu) = try await throughCollector(keepsCatalog: keepsCatalog)
        collectorRates.append(Double(totalEvents) / Bench.seconds(http))
        collectorCPU.append(cpu)
        if catalogPair {
            let (plain, cpu) = try await throughCollector(keepsCatalog: false)
            plainRates.append(Double(totalEvents) / Bench.seconds(plain))
            plainCPU.append(cpu)
        }
    }
}
guard !copyRates.isEmpty, !collectorRates.isEmpty else {
    print("events/s: \((copyRates + collectorRates).map { Int($0) })")
    exit(0)
}
let copyRate = Bench.median(copyRates)
let collectorRate = Bench.median(collectorRates)
print("path                                                     events/s   vs raw COPY")
print("raw binary COPY of the same rows (baseline)       \(pad(copyRate))        1.00x")
print("collector HTTP API: JSON batches, dedup, commit   \(pad(collectorRate))        \(String(format: "%.2f", collectorRate / copyRate))x")
print("(each round: \(copyRates.map { pad($0) }.joined(separator: " ")) | \(collectorRates.map { pad($0) }.joined(separator: " ")))")
/// Microseconds an event, median over the rounds.
func perEvent(_ spent: [Spent], _ part: (Spent) -> Double) -> String {
    String(format: "%.2f", Bench.median(spent.map { part($0) * 1e6 / Double(totalEvents) }))
}
print("CPU per event: collector and load generator \(perEvent(collectorCPU, \.process)) µs, PostgreSQL \(perEvent(collectorCPU, \.postgres)) µs")
if catalogPair {
    let plainRate = Bench.median(plainRates)
    print("collector without the catalog                     \(pad(plainRate))        \(String(format: "%.2f", plainRate / copyRate))x")
    print("CPU per event without it: collector and load generator \(perEvent(plainCPU, \.process)) µs, PostgreSQL \(perEvent(plainCPU, \.postgres)) µs")
    let differences = zip(collectorCPU, plainCPU).map { Spent(process: $0.process - $1.process, postgres: $0.postgres - $1.postgres) }
    print(
        "the catalog's cost an event (with − without, same round): collector \(perEvent(differences, \.process)) µs, PostgreSQL \(perEvent(differences, \.postgres)) µs"
    )
}

func pad(_ rate: Double) -> String {
    let text = String(Int(rate.rounded()))
    return String(repeating: " ", count: max(0, 9 - text.count)) + text
}
