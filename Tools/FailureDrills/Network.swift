import BenchSupport
import DatongPostgres
import Foundation
import Logging

/// The hosts of `scripts/drill --failover` when this machine can make them: every service replica,
/// config-service, the two PostgreSQL nodes and pg_auto_failover's monitor on a network namespace
/// of its own (`scripts/net`), so that the drill's faults are network faults — packets dropped,
/// delayed, lost — and the failover is decided by the manager, not by the drill.
struct Network {
    /// `scripts/net` and the network's ID.
    let script: String
    let id: String
    /// The monitor's database (`pgautofailover.node` says which node is what), polled every
    /// 250 ms during a failover: one connection for the whole drill.
    let monitor: PostgresPool

    /// The host `name` (`bridge-gateway-1`, `pg1`, `machine` …): its address, and the command that
    /// runs a program there.
    func placement(_ host: String) throws -> ServiceFleet.Placement {
        ServiceFleet.Placement(address: try address(host), launcher: [script, "exec", id, host])
    }

    func address(_ host: String) throws -> String {
        let process = Process()
        let output = Pipe()
        process.executableURL = URL(fileURLWithPath: script)
        process.arguments = ["ip", id, host]
        process.standardOutput = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw BenchError("scripts/net ip \(id) \(host) failed") }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Runs `scripts/net COMMAND ID ARGUMENTS…`; true when it succeeded.
    func run(_ command: String, _ arguments: String...) async throws -> Bool {
        try await shell(([script, command, id] + arguments).joined(separator: " "))
    }

    /// Each node as the monitor sees it: name, host, port, reported state, goal state.
    struct Node: Equatable {
        let name: String
        let host: String
        let port: String
        let reported: String
        let goal: String

        /// A node that accepts writes now.
        var isPrimary: Bool { ["primary", "wait_primary", "single"].contains(reported) }
    }

    func nodes() async throws -> [Node] {
        let rows = try await monitor.withConnection {
            try $0.query("SELECT nodename, nodehost, nodeport::text, reportedstate::text, goalstate::text FROM pgautofailover.node ORDER BY nodeid")
                .rows
        }
        return rows.map { Node(name: $0[0] ?? "", host: $0[1] ?? "", port: $0[2] ?? "", reported: $0[3] ?? "", goal: $0[4] ?? "") }
    }
}

extension FailoverDrill {
    /// The network's faults under load: a collector cut off from the balancer, a slow and lossy link
    /// from the gateways to the collectors and from identity-service to PostgreSQL, then the primary
    /// isolated from the monitor and the standby, and the old primary rejoining as a standby.
    func networkFaults(_ network: Network, fleet: ServiceFleet, client: SDKClient) async throws {
        say("partition: collector replica 2 cut off from the balancer (so from every gateway) for \(2 * stepSeconds) s")
        var before = client.snapshot.acknowledged.count
        checks.check(try await network.run("partition", "collector-2", "machine"), "collector replica 2 is cut off")
        try await Task.sleep(for: .seconds(2 * stepSeconds))
        checks.check(client.snapshot.acknowledged.count > before, "uploads were acknowledged while one collector was cut off")
        checks.check(try await network.run("heal"), "the partition healed")
        try await waitUntil(seconds: 30) { (try? fleet.get("collector", "/ready", replica: 2).status) == 200 }
        checks.check((try? fleet.get("collector", "/ready", replica: 2).status) == 200, "collector replica 2 is ready again once the partition healed")
        progress(client, "after the collector partition")

        let collectorPort = String(fleet.ports["collector"]!)
        try await degraded(
            "the gateways' link to the collectors: 200 ms delay and 5% loss on their packets to the collectors, 5% loss on the answers",
            client: client,
            on: (1...Self.replicas).map { ("bridge-gateway-\($0)", "machine", collectorPort) }, network: network, delay: 200, loss: 5)

        let primary = try await network.nodes().first(where: \.isPrimary)
        if let primary {
            try await degraded(
                "identity-service's link to the PostgreSQL primary (\(primary.name)): 50 ms delay on its packets to it, 5% loss each way", client: client,
                on: (1...Self.replicas).map { ("identity-service-\($0)", primary.name, primary.port) }, network: network, delay: 50, loss: 5)
        }

        // MARK: The primary isolated

        let nodes = try await network.nodes()
        guard let old = nodes.first(where: \.isPrimary), let standby = nodes.first(where: { $0.name != old.name }) else {
            checks.check(false, "pg_auto_failover has a primary and a standby (\(nodes))")
            return
        }
        say("partition: the primary \(old.name) cut off from the monitor and the standby \(standby.name); services still reach it")
        before = client.snapshot.acknowledged.count
        let fault = ContinuousClock.now
        checks.check(try await network.run("partition", old.name, "monitor", standby.name), "the primary is cut off")
        var timeline: [(Duration, String)] = []
        var last: [Network.Node] = []
        var promoted: ContinuousClock.Instant?
        while promoted == nil, ContinuousClock.now - fault < .seconds(150) {
            let now = try await network.nodes()
            if now != last {
                timeline.append((ContinuousClock.now - fault, now.map { "\($0.name) \($0.reported)/\($0.goal)" }.joined(separator: ", ")))
                last = now
            }
            if now.contains(where: { $0.name == standby.name && $0.isPrimary }) { promoted = .now }
            try await Task.sleep(for: .milliseconds(250))
        }
        for (at, states) in timeline { Bench.say(String(format: "    %5.1f s  ", Bench.seconds(at)) + states) }
        guard let promoted else {
            checks.check(false, "pg_auto_failover promoted \(standby.name) within 150 s of the partition")
            return
        }
        try await waitUntil(seconds: 60) { client.snapshot.acknowledgedAt.contains { $0 > promoted } }
        let tally = client.snapshot
        let firstOnNew = tally.acknowledgedAt.filter { $0 > promoted }.min()
        let meanwhile = tally.acknowledgedAt.filter { $0 > fault && $0 <= promoted }
        let refused = tally.failedAt.filter { $0 > fault && $0 <= (firstOnNew ?? .now) }.count
        Bench.say(
            "    the manager promoted \(standby.name) "
                + String(
                    format:
                        "%.1f s after the partition; the first upload was acknowledged on it %.1f s after the partition; %d attempts refused (and retried) meanwhile; %d uploads acknowledged between the partition and the promotion (the last %.1f s after the partition)",
                    Bench.seconds(promoted - fault), firstOnNew.map { Bench.seconds($0 - fault) } ?? -1, refused, meanwhile.count,
                    meanwhile.max().map { Bench.seconds($0 - fault) } ?? 0))
        checks.check(firstOnNew != nil, "uploads are acknowledged again on the new primary \(standby.name)")
        try await Task.sleep(for: .seconds(stepSeconds))
        progress(client, "after the failover")

        say("the partition heals; the old primary \(old.name) must rejoin as a standby by itself")
        let healed = ContinuousClock.now
        checks.check(try await network.run("heal"), "the partition healed")
        try await waitUntil(seconds: 120) {
            let nodes = (try? await network.nodes()) ?? []
            return nodes.contains { $0.name == old.name && $0.reported == "secondary" && $0.goal == "secondary" }
                && nodes.contains { $0.name == standby.name && $0.reported == "primary" && $0.goal == "primary" }
        }
        let states = try await network.nodes()
        checks.check(
            states.contains { $0.name == old.name && $0.reported == "secondary" } && states.contains { $0.name == standby.name && $0.reported == "primary" },
            "\(old.name) is a standby again and \(standby.name) the primary, "
                + String(format: "%.1f s after the partition healed", Bench.seconds(ContinuousClock.now - healed))
                + " (\(states.map { "\($0.name) \($0.reported)" }.joined(separator: ", ")))")
    }

    /// Runs `seconds` of load with each `(host, peer, port)` link degraded, and reports throughput
    /// and the 99th percentile of the SDK's wait against the seconds before.
    private func degraded(
        _ what: String, client: SDKClient, on links: [(String, String, String)], network: Network, delay: Int, loss: Int
    ) async throws {
        let seconds = 3 * stepSeconds
        say("slow, lossy link for \(seconds) s: \(what)")
        let start = ContinuousClock.now
        // The seconds before: after the last fault's pause.
        let steady = client.snapshot.acknowledged(in: (start - .seconds(stepSeconds))..<start)
        for (host, peer, port) in links {
            checks.check(try await network.run("degrade", host, peer, port, String(delay), String(loss)), "\(host)'s link to \(peer):\(port) degraded")
        }
        try await Task.sleep(for: .seconds(seconds))
        let end = ContinuousClock.now
        for (host, _, _) in Set(links.map(\.0)).sorted().map({ ($0, "", "") }) {
            checks.check(try await network.run("restore", host), "\(host)'s link restored")
        }
        let during = client.snapshot.acknowledged(in: start..<end)
        Bench.say(
            String(
                format: "    %.0f uploads/s acknowledged (%.0f before), p99 wait %.0f ms (%.0f ms before)", Double(during.count) / Double(seconds),
                Double(steady.count) / Double(stepSeconds), Bench.seconds(during.p99) * 1000, Bench.seconds(steady.p99) * 1000))
        checks.check(during.count > 0, "uploads were acknowledged over the degraded link")
        try await Task.sleep(for: .seconds(stepSeconds))
    }

    private func waitUntil(seconds: Int, _ condition: () async -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while await !condition(), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(250)) }
    }
}
