import BenchSupport
import DatongPostgres
import Foundation
import Synchronization

/// `--erase N`: what erasing users costs ingestion (docs/PRIVACY.md). After the warm-up and the
/// full-speed phase fill the database, the half-rate traffic runs twice at the same pace: once
/// alone (before), once while config-service erases N users (during), each through the admin API
/// as an operator would, one after another. The report gives the request latency of both, how
/// long the erasures took and what they removed, and checks that the erased users' events are gone.
///
/// With `--volume`, the database is a copy of the volume database and the first user erased is a
/// heavy one: device 0 of the volume load, given `--erase-heavy` (100,000) more events, so that
/// each step of its erasure removes a full batch of rows.
enum ErasureLoad {
    struct Report {
        var before: Latency
        var during: Latency
        var erasures = 0
        var events = 0
        var seconds = 0.0
        var longestSeconds = 0.0
        var duringSeconds = 0.0
    }

    /// What a run needs of the bench's setup (main.swift).
    struct Setup {
        let binDirectory: String
        let logDirectory: String
        let settings: [String: [String: String]]
        let replicas: Int
        let connections: Int
        let warmUp: [HTTPLoad.Request]
        let fullSpeed: [HTTPLoad.Request]
        let halfRate: [HTTPLoad.Request]
        let during: [HTTPLoad.Request]
        /// The login ids of the bench's returning devices that have one, in device order.
        let logins: [String]
        let check: @Sendable (Int, HTTPLoad.Answer) throws -> Void
        let settle: (String) async throws -> Void
    }

    static func run(_ setup: Setup, url: String, users: Int, heavyEvents: Int, volume: Bool) async throws -> Report {
        let (connections, warmUp, fullSpeed, halfRate, acknowledged) = (setup.connections, setup.warmUp, setup.fullSpeed, setup.halfRate, setup.check)
        var settings = setup.settings
        settings["config-service", default: [:]]["ERASURE_SETTLE_SECONDS"] = settings["config-service"]?["ERASURE_SETTLE_SECONDS"] ?? "1"
        if volume, heavyEvents > 0 { try await addHeavyUser(url: url, events: heavyEvents) }
        let fleet = try ServiceFleet(
            binDirectory: setup.binDirectory, databaseURL: url, logDirectory: setup.logDirectory, settings: settings, replicas: setup.replicas)
        do {
            try await fleet.startAll()
            _ = try await HTTPLoad.run(port: fleet.gatewayPort, requests: warmUp, connections: connections, check: acknowledged)
            let full = try await HTTPLoad.run(port: fleet.gatewayPort, requests: fullSpeed, connections: connections, check: acknowledged)
            try await setup.settle(url)
            let rate = Double(fullSpeed.count) / full.elapsed / 2
            let before = try await HTTPLoad.run(port: fleet.gatewayPort, requests: halfRate, connections: connections, rate: rate, check: acknowledged)
            // Who goes: the heavy volume user first, then logged-in returning devices of the bench.
            var targets: [(key: String, value: String)] = volume && heavyEvents > 0 ? [("$identity_anonymous_id", "volume-device-0")] : []
            for login in setup.logins where targets.count < users { targets.append(("$identity_login_id", login)) }
            let configPort = fleet.ports["config-service"]!
            let erasingDone = Flag()
            let erasing = Task {
                defer { erasingDone.set() }
                return try await erase(targets, port: configPort)
            }
            // The traffic goes on at the same pace for as long as the erasures take (a pass again
            // repeats its records: duplicates, answered 200 like the rest).
            var latencies: [Double] = []
            var duringSeconds = 0.0
            repeat {
                let pass = try await HTTPLoad.run(port: fleet.gatewayPort, requests: setup.during, connections: connections, rate: rate, check: acknowledged)
                latencies += pass.latencies
                duringSeconds += pass.elapsed
            } while !erasingDone.value
            let during = HTTPLoad.Outcome(latencies: latencies, elapsed: duringSeconds)
            let erased = try await erasing.value
            let logins = targets.filter { $0.key == "$identity_login_id" }.map(\.value)
            let left = try await Bench.withPool(url: url, logger: Bench.quietLogger("e2e-bench")) { pool in
                try await pool.withConnection { connection in
                    try connection.query(
                        "SELECT count(*) FROM collector.events WHERE project = 'default' AND (login_id = ANY($1::text[]) OR distinct_id = 'volume-device-0')",
                        [postgresTextArray(logins)]
                    ).scalar.flatMap(Int.init) ?? -1
                }
            }
            guard left == 0 else { throw BenchError("\(left) events of erased users are still stored") }
            await fleet.stopAll()
            return Report(
                before: Latency(before), during: Latency(during), erasures: erased.count, events: erased.events, seconds: erased.seconds,
                longestSeconds: erased.longest, duringSeconds: duringSeconds)
        } catch {
            await fleet.stopAll()
            throw error
        }
    }

    /// Asks for every erasure at once, as an operator with a batch of requests would, then waits
    /// until each job is done; the longest is the longest from a job's request to its end.
    static func erase(_ targets: [(key: String, value: String)], port: Int) async throws -> (count: Int, events: Int, seconds: Double, longest: Double) {
        try await HTTPLoad.onThread {
            let connection = try HTTPLoad.Connection(port: port)
            defer { connection.close() }
            let headers = [("Authorization", "Bearer \(ServiceFleet.adminToken)"), ("Content-Type", "application/json")]
            let start = ContinuousClock.now
            var asked: [(id: Int, at: ContinuousClock.Instant)] = []
            for target in targets {
                let body = try JSONSerialization.data(withJSONObject: ["user": ["key": target.key, "value": target.value]])
                let answer = try connection.exchange(HTTPLoad.Request("POST", "/v1/projects/default/erasures", body: Array(body), headers: headers).bytes)
                guard answer.status == 202, let job = try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any],
                    let id = job["erasureId"] as? Int
                else { throw BenchError("erasing \(target.value): HTTP \(answer.status) \(answer.text.prefix(200))") }
                asked.append((id, ContinuousClock.now))
            }
            var (events, longest) = (0, 0.0)
            for job in asked {
                while true {
                    let answer = try connection.exchange(HTTPLoad.Request("GET", "/v1/projects/default/erasures/\(job.id)", headers: headers).bytes)
                    let state = try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any]
                    if state?["state"] as? String == "done" {
                        events += (state?["collector"] as? [String: Any])?["events"] as? Int ?? 0
                        longest = max(longest, Bench.seconds(ContinuousClock.now - job.at))
                        break
                    }
                    Thread.sleep(forTimeInterval: 0.02)
                }
            }
            return (targets.count, events, Bench.seconds(ContinuousClock.now - start), longest)
        }
    }

    /// Gives the volume database's device 0 (user 1) `events` more events over the last 90 days.
    static func addHeavyUser(url: String, events: Int) async throws {
        try await Bench.withPool(url: url, logger: Bench.quietLogger("e2e-bench")) { pool in
            try await pool.withConnection { connection in
                try connection.execute(
                    """
                    INSERT INTO collector.events
                    SELECT project, time + (n || ' seconds')::interval, gen_random_uuid(), type, event, received_at, distinct_id, user_id,
                           anonymous_id, login_id, lib, lib_version, app_version, hybrid_h5, properties, lib_method, lib_detail, original_id,
                           identities, track_id, schema
                    FROM (SELECT * FROM collector.events WHERE project = 'default' AND user_id = 1 LIMIT 1) AS one,
                         generate_series(1, \(events)) AS n
                    """)
                try connection.execute("ANALYZE collector.events")
            }
        }
    }
}

/// Set once, read from any thread.
final class Flag: Sendable {
    private let state = Mutex(false)
    func set() { state.withLock { $0 = true } }
    var value: Bool { state.withLock { $0 } }
}
