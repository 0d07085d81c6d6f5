// failure-drills: the four services as processes on one PostgreSQL, under steady load from a client
// that retries like the SDKs. Each service in turn is killed with SIGKILL and restarted, then
// PostgreSQL is restarted (immediate shutdown: crash recovery); afterwards every acknowledged event
// must be in analytics.events exactly once and analytics.ingest_counts must add up. Then an
// overload beyond what the gateway admits: 503 with Retry-After, bounded memory, no crash.
//
//   scripts/drill [--seconds N] [--workers N] [--records 50|1]
//
// --records 1: web traffic, each record its own request as the JS SDK sends it (image beacon and
// sendBeacon in turn), instead of app SDK batches of 50.
//
// (the script builds the services, starts a throwaway PostgreSQL and passes --bin, --logs,
// --restart-postgres and DATABASE_URL). With --failover, the scale-out drill instead (Failover.swift;
// scripts/drill --failover). Exits 1 when any check fails.
import BenchSupport
import DatongPostgres
import Foundation
import Synchronization

let stepSeconds = Bench.option("--seconds", default: 3)
let workers = Bench.option("--workers", default: 8)
let recordsPerBatch = Bench.option("--records", default: 50)
guard recordsPerBatch == 50 || recordsPerBatch == 1 else {
    print("failure-drills: --records takes 50 (app SDK batches) or 1 (web pages' one-record requests)")
    exit(2)
}
guard let adminURL = ProcessInfo.processInfo.environment["DATABASE_URL"], let binDirectory = Bench.text("--bin") else {
    print("failure-drills: needs DATABASE_URL and --bin DIR; scripts/drill sets them")
    exit(2)
}
let logDirectory = Bench.text("--logs") ?? NSTemporaryDirectory() + "datong-drill-logs"
let logger = Bench.quietLogger("failure-drills")
let memoryLimit = 150 << 20

let checks = Checks()
@MainActor func check(_ condition: Bool, _ message: String) { checks.check(condition, message) }

if CommandLine.arguments.contains("--failover") {
    // With a network (--net SCRIPT --net-id ID --monitor URL): hosts in namespaces and
    // pg_auto_failover; without: --kill-primary COMMAND and --promote COMMAND.
    let network = Bench.text("--net").map { script in
        Network(
            script: script, id: Bench.text("--net-id") ?? "", monitor: PostgresPool(url: Bench.text("--monitor") ?? "", maxConnections: 1, logger: logger))
    }
    let killPrimary = Bench.text("--kill-primary") ?? ""
    let promote = Bench.text("--promote") ?? ""
    guard network != nil || (!killPrimary.isEmpty && !promote.isEmpty) else {
        print(
            "failure-drills --failover: needs --net, --net-id and --monitor, or --kill-primary COMMAND and --promote COMMAND; scripts/drill --failover sets them"
        )
        exit(2)
    }
    try await FailoverDrill(
        adminURL: adminURL, binDirectory: binDirectory, logDirectory: logDirectory, stepSeconds: stepSeconds, workers: workers,
        recordsPerBatch: recordsPerBatch,
        killPrimary: killPrimary, promote: promote, network: network, checks: checks, logger: logger
    ).run()
    await network?.monitor.close()
    checks.finish(logDirectory: logDirectory)
}

guard let restartPostgres = Bench.text("--restart-postgres") else {
    print("failure-drills: needs --restart-postgres COMMAND; scripts/drill sets it")
    exit(2)
}
let url = try await Bench.freshDatabase(adminURL: adminURL, logger: logger)
let fleet = try ServiceFleet(binDirectory: binDirectory, databaseURL: url, logDirectory: logDirectory)
say("starting the four services (logs in \(logDirectory))")
try await fleet.startAll()

// MARK: Kill each service, restart PostgreSQL, under load

let client = SDKClient(port: fleet.gatewayPort, recordsPerBatch: recordsPerBatch)
let load = Task { await client.run(workers: workers) }
func progress(_ label: String) { FailureDrills.progress(client, label) }

say(
    "steady load: \(workers) SDK-like clients, \(recordsPerBatch == 1 ? "one record a request (web pages)" : "\(recordsPerBatch) records a request"), \(stepSeconds) s"
)
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
check(try await shell(restartPostgres), "PostgreSQL restarted")
try await Task.sleep(for: .seconds(stepSeconds))
progress("after PostgreSQL")

say("stopping the load; each client finishes the batch it holds")
client.stop()
await load.value
progress("all")

// MARK: Checks

try await checks.storedExactlyOnce(url: url, client: client, logger: logger)

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
checks.finish(logDirectory: logDirectory)
