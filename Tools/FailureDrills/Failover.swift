import BenchSupport
import DatongPostgres
import Foundation
import Logging

/// The scale-out drill (`scripts/drill --failover`): two replicas of the gateway, identity and the
/// collector behind HAProxy, on a PostgreSQL primary with a synchronous hot standby, the services
/// given both hosts (`target_session_attrs=read-write`). Under SDK-like retrying load through the
/// balancer: one replica of each service is killed (and started again), then
/// - with a `network` (hosts in namespaces, pg_auto_failover; Network.swift): network faults, and
///   the primary cut off from the monitor and the standby, the manager deciding the failover;
/// - without: the primary killed and the standby promoted by the drill a second later.
/// Afterwards every acknowledged event is stored exactly once, `ingest_counts` adds up, every
/// replica serves again without having been restarted, and the drill prints how long uploads were
/// refused while there was no primary.
@MainActor
struct FailoverDrill {
    let adminURL: String
    let binDirectory: String
    let logDirectory: String
    let stepSeconds: Int
    let workers: Int
    /// Records a client's request carries: 50 (app SDK batches) or 1 (web pages).
    let recordsPerBatch: Int
    /// Shell commands from the script: kill the primary (an immediate shutdown, as a crash) and
    /// promote the standby.
    let killPrimary: String
    let promote: String
    let network: Network?
    let checks: Checks
    let logger: Logger

    static let replicas = 2

    func run() async throws {
        let url = try await Bench.freshDatabase(adminURL: adminURL, logger: logger)
        var placements: [String: ServiceFleet.Placement] = [:]
        if let network {
            for name in ServiceFleet.names {
                for replica in ServiceFleet.replicated.contains(name) ? Array(1...Self.replicas) : [1] {
                    let host = ServiceFleet.replicated.contains(name) ? "\(name)-\(replica)" : name
                    placements[host] = try network.placement(host)
                }
            }
        }
        let fleet = try ServiceFleet(
            binDirectory: binDirectory, databaseURL: url, logDirectory: logDirectory, replicas: Self.replicas, placements: placements,
            balancerAddress: try network?.address("machine") ?? "127.0.0.1")
        say(
            "starting \(Self.replicas) replicas of the gateway, identity and the collector behind HAProxy, and config-service\(network == nil ? "" : ", each on a host of its own") (logs in \(logDirectory))"
        )
        try await fleet.startAll()
        let serverBefore = try await serverPort(url)

        let client = SDKClient(port: fleet.gatewayPort, recordsPerBatch: recordsPerBatch)
        let load = Task { await client.run(workers: workers) }
        say("steady load through the balancer: \(workers) SDK-like clients, \(recordsPerBatch) records a request, \(stepSeconds) s")
        try await Task.sleep(for: .seconds(stepSeconds))
        progress(client, "steady")

        let metrics = (try? fleet.get("collector", "/metrics").text) ?? ""
        let lag = metrics.split(separator: "\n").first { $0.hasPrefix("datong_postgres_standby_lag_bytes{") }
        checks.check(lag != nil, "the collector exports the standby's replication lag (\(lag.map(String.init) ?? "no datong_postgres_standby_lag_bytes"))")

        for name in ["bridge-gateway", "identity-service", "collector"] {
            say("kill -9 replica 2 of \(name); the other carries the load; start it again after \(stepSeconds) s")
            let before = client.snapshot.acknowledged.count
            await fleet.kill(name, replica: 2)
            try await Task.sleep(for: .seconds(stepSeconds))
            let carried = client.snapshot.acknowledged.count - before
            checks.check(carried > 0, "uploads were acknowledged with one \(name) replica down (\(carried) batches)")
            try await fleet.start(name, replica: 2)
            progress(client, "after \(name)")
        }

        if let network {
            try await networkFaults(network, fleet: fleet, client: client)
        } else {
            try await killAndPromote(client)
        }

        say("stopping the load; each client finishes the batch it holds")
        client.stop()
        await load.value
        progress(client, "all")

        let serverAfter = try await serverPort(url)
        checks.check(serverAfter != serverBefore, "the services now write to the promoted standby (\(serverBefore) before, \(serverAfter) after)")
        for name in ServiceFleet.names {
            for replica in 1...(ServiceFleet.replicated.contains(name) ? Self.replicas : 1) {
                let ready = (try? fleet.get(name, "/ready", replica: replica).status) == 200
                checks.check(fleet.isRunning(name) && ready, "\(name) replica \(replica) is ready on the new primary, not restarted")
            }
        }
        for replica in 1...Self.replicas {
            let metrics = (try? fleet.get("identity-service", "/metrics", replica: replica).text) ?? ""
            let line = metrics.split(separator: "\n").first { $0.hasPrefix("datong_identity_cache_server_changes_total ") }
            let changes = line.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
            checks.check(
                changes >= 1,
                "identity-service replica \(replica) forgot its cache on finding a different database server (\(line.map(String.init) ?? "no counter"))")
        }
        // The gateway answers within UPSTREAM_TIMEOUT_SECONDS (10 s) whatever it waits for.
        let longest = client.snapshot.longestAttempt
        checks.check(
            longest < .seconds(12), String(format: "no request was held past the gateway's 10 s deadline (the longest took %.1f s)", Bench.seconds(longest)))
        try await checks.storedExactlyOnce(url: url, client: client, logger: logger)
        await fleet.stopAll()
    }

    /// The failover without a manager: the primary killed, the standby promoted a second later.
    private func killAndPromote(_ client: SDKClient) async throws {
        say("kill the primary (immediate shutdown), then promote the standby")
        let killed = ContinuousClock.now
        checks.check(try await shell(killPrimary), "the primary is down")
        // The time a failover manager would take to decide.
        try await Task.sleep(for: .seconds(1))
        let promoting = ContinuousClock.now
        checks.check(try await shell(promote), "the standby is promoted")
        let promoted = ContinuousClock.now
        // Uploads flow again once an acknowledgement follows the promotion.
        let ackedBefore = client.snapshot.acknowledged.count
        let deadline = ContinuousClock.now + .seconds(60)
        while client.snapshot.acknowledged.count == ackedBefore, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        try await Task.sleep(for: .seconds(stepSeconds))
        progress(client, "after the promotion")
        let tally = client.snapshot
        let refusals = tally.failedAt.filter { $0 >= killed }
        if let first = refusals.first, let last = refusals.max() {
            Bench.say(
                String(
                    format:
                        "    uploads were refused (retried by the clients) for %.1f s: from %.1f s to %.1f s after the primary died; promotion ran from %.1f s to %.1f s; %d refused attempts",
                    Bench.seconds(last - first), Bench.seconds(first - killed), Bench.seconds(last - killed), Bench.seconds(promoting - killed),
                    Bench.seconds(promoted - killed), refusals.count)
            )
        }
    }

    /// The address and port of the server the multi-host `url` leads to (the primary).
    private func serverPort(_ url: String) async throws -> String {
        let pool = PostgresPool(url: url, maxConnections: 1, logger: logger)
        let port = try? await pool.withConnection { try $0.query("SELECT host(inet_server_addr()) || ':' || inet_server_port()").rows[0][0] ?? "" }
        await pool.close()
        guard let port else { throw BenchError("no PostgreSQL server accepting writes answers at \(url)") }
        return port
    }
}
