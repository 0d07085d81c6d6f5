// failure-drills: the four services as processes on one PostgreSQL, under steady load from a client
// that retries like the SDKs. Each service in turn is killed with SIGKILL and restarted, then
// PostgreSQL is restarted (immediate shutdown: crash recovery); afterwards every acknowledged event
// must be in analytics.events exactly once and analytics.ingest_counts must add up. Then an
// overload beyond what the gateway admits: 503 with Retry-After, bounded memory, no crash.
//
//   scripts/drill [--seconds N] [--workers N]
//
// (the script builds the services, starts a throwaway PostgreSQL and passes --bin, --logs,
// --restart-postgres and DATABASE_URL). Exits 1 when any check fails.
import BenchSupport
import DatongPostgres
import Foundation
import Synchronization

let stepSeconds = Bench.option("--seconds", default: 3)
let workers = Bench.option("--workers", default: 8)
guard let adminURL = ProcessInfo.processInfo.environment["DATABASE_URL"], let binDirectory = Bench.text("--bin"),
    let restartPostgres = Bench.text("--restart-postgres")
else {
    print("failure-drills: needs DATABASE_URL, --bin DIR and --restart-postgres COMMAND; scripts/drill sets them")
    exit(2)
}
let logDirectory = Bench.text("--logs") ?? NSTemporaryDirectory() + "datong-drill-logs"
let logger = Bench.quietLogger("failure-drills")
let memoryLimit = 150 << 20

var failures: [String] = []
@MainActor func check(_ condition: Bool, _ message: String) {
    Bench.say("  \(condition ? "ok  " : "FAIL") \(message)")
    if !condition { failures.append(message) }
}

func say(_ message: String) { Bench.say("==> \(message)") }

let url = try await Bench.freshDatabase(adminURL: adminURL, logger: logger)
let fleet = try ServiceFleet(binDirectory: binDirectory, databaseURL: url, logDirectory: logDirectory)
say("starting the four services (logs in \(logDirectory))")
try await fleet.startAll()

// MARK: Kill each service, restart PostgreSQL, under load

let client = SDKClient(port: fleet.gatewayPort)
let load = Task { await client.run(workers: workers) }
func progress(_ label: String) {
    let tally = client.snapshot
    let retried = tally.retriedStatuses.sorted { $0.key < $1.key }.map { "\($0.value)×\($0.key)" }.joined(separator: " ")
    Bench.say(
        "    \(label): \(tally.acknowledged.count) batches acknowledged; retried after \(tally.networkErrors) network errors\(retried.isEmpty ? "" : " and " + retried)"
    )
}

say("steady load: \(workers) SDK-like clients, \(stepSeconds) s")
try await Task.sleep(for: .seconds(stepSeconds))
progress("steady")
for name in ServiceFleet.names.reversed() {
    say("kill -9 \(name), restart it after 1 s")
    await fleet.kill(name)
    try await Task.sleep(for: .seconds(1))
    try await fleet.start(name)
    try await Task.sleep(for: .seconds(stepSeconds))
    progress("after \(name)")
}
say("restart PostgreSQL (immediate shutdown, then crash recovery)")
let restarted = Mutex<Int32>(-1)
try await HTTPLoad.onThread { restarted.withLock { $0 = system(restartPostgres) } }
check(restarted.withLock { $0 } == 0, "PostgreSQL restarted")
try await Task.sleep(for: .seconds(stepSeconds))
progress("after PostgreSQL")

say("stopping the load; each client finishes the batch it holds")
client.stop()
await load.value
let tally = client.snapshot
progress("all")

// MARK: Checks

say("checking what is stored")
let pool = PostgresPool(url: url, maxConnections: 1, logger: logger)
let stored = try await pool.withConnection { connection in
    try connection.query("SELECT properties->>'datong_tag' FROM analytics.events").rows.map { $0[0] ?? "" }
}
let counts = try await pool.withConnection { connection in
    try connection.query(
        """
        SELECT (SELECT count(*) FROM collector.events), (SELECT count(*) FROM collector.rejected),
               sum(received), sum(stored), sum(duplicates), sum(rejected) FROM analytics.ingest_counts
        """
    ).rows[0].map { Int($0 ?? "") ?? -1 }
}
await pool.close()
var seen: [String: Int] = [:]
for tag in stored { seen[tag, default: 0] += 1 }
let expected = tally.acknowledged.flatMap(SDKClient.tags(of:))
let missing = expected.filter { seen[$0] == nil }
let repeated = seen.filter { $0.value > 1 }
check(tally.acknowledged.count > 0, "\(tally.acknowledged.count) batches (\(expected.count) events) acknowledged during the drills")
check(
    missing.isEmpty,
    "every acknowledged event is in analytics.events (\(missing.count) missing\(missing.isEmpty ? "" : ", e.g. " + missing.prefix(3).joined(separator: ", ")))")
check(repeated.isEmpty, "no event is stored twice (\(repeated.count) stored more than once)")
check(tally.dropped.isEmpty, "no batch was refused for good (\(tally.dropped.prefix(3).joined(separator: "; ")))")
check(counts[1] == 0, "nothing rejected (\(counts[1]) rejected records)")
check(
    counts[2] == counts[3] + counts[4] + counts[5],
    "ingest_counts: received \(counts[2]) = stored \(counts[3]) + duplicates \(counts[4]) + rejected \(counts[5])")
check(counts[3] == counts[0], "ingest_counts: stored \(counts[3]) = rows in analytics.events \(counts[0])")
check(counts[5] == counts[1], "ingest_counts: rejected \(counts[5]) = rows in analytics.rejected \(counts[1])")
Bench.say(
    "    \(stored.count - expected.count) events stored beyond the acknowledged ones (sent, stored, but the answer was lost to a kill; the SDK would send them again and they would count as duplicates)"
)

// MARK: Overload

say("overload: the gateway admits 16 requests at once, 128 connections send 3,000 batches as fast as they can")
await fleet.kill("bridge-gateway")
try await fleet.start("bridge-gateway", overriding: ["MAX_IN_FLIGHT_REQUESTS": "16"])
// Distinct batches, built before the flood starts, numbered after any the steady load sent.
let flood = (0..<3_000).map { client.batch(10_000_000 + $0) }
let sampler = Task {
    var peaks: [String: Int] = [:]
    while !Task.isCancelled {
        for name in ServiceFleet.names { peaks[name] = max(peaks[name] ?? 0, fleet.residentBytes(name) ?? 0) }
        try? await Task.sleep(for: .milliseconds(100))
    }
    return peaks
}
let statuses = Mutex<[Int: Int]>([:])
let withoutRetryAfter = Atomic<Int>(0)
let outcome = try await HTTPLoad.run(port: fleet.gatewayPort, requests: flood, connections: 128) { _, answer in
    statuses.withLock { $0[answer.status, default: 0] += 1 }
    if answer.status == 503, answer.headers["retry-after"] == nil { withoutRetryAfter.add(1, ordering: .relaxed) }
}
sampler.cancel()
let peaks = await sampler.value
let answered = statuses.withLock { $0 }
Bench.say(
    "    \(answered.sorted { $0.key < $1.key }.map { "\($0.value)×\($0.key)" }.joined(separator: " ")) in \(String(format: "%.1f", outcome.elapsed)) s; p99 \(String(format: "%.0f", outcome.percentile(0.99) * 1000)) ms"
)
check(Set(answered.keys).isSubset(of: [200, 503]), "every answer is 200 or 503")
check((answered[503] ?? 0) > 0, "overload is answered with 503 (\(answered[503] ?? 0) of \(flood.count))")
check(withoutRetryAfter.load(ordering: .relaxed) == 0, "every 503 carries Retry-After")
for name in ServiceFleet.names {
    let peak = peaks[name] ?? 0
    check(peak > 0 && peak <= memoryLimit, "\(name) resident memory stayed at most \(memoryLimit >> 20) MiB (peak \(peak >> 20) MiB)")
}
for name in ServiceFleet.names {
    check(fleet.isRunning(name) && (try? fleet.get(name, "/ready").status) == 200, "\(name) is running and ready")
}

await fleet.stopAll()
if failures.isEmpty {
    say("all drills passed")
} else {
    say("\(failures.count) checks failed (service logs in \(logDirectory)):")
    for failure in failures { print("  - \(failure)") }
    exit(1)
}
