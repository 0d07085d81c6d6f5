import BenchSupport
import Foundation

/// `--callgrind DIR`: what a request costs each service in instructions, which unlike CPU time
/// are the same from run to run on a noisy machine, so two builds or two settings compare exactly.
///
/// bridge-gateway, identity-service and the collector run under `valgrind --tool=callgrind`
/// (config-service natively: no upload calls it once its answers are cached). After the warm-up
/// every counter is zeroed, the measured requests are sent, and each service's count is read;
/// then as long a stretch of idle time is counted and taken off, so that timers and background
/// work do not pass for the requests' cost. Valgrind runs each process some 50 times slower, one
/// thread at a time: what depends on timing (how many uploads a collector call or a transaction
/// carries) differs from a run at full speed, so the report says how many uploads a collector call
/// carried.
enum InstructionCount {
    static let measured = ["bridge-gateway", "identity-service", "collector"]

    struct Outcome {
        /// Instructions per request and per event, by service.
        var perRequest: [String: Double] = [:]
        var perEvent: [String: Double] = [:]
        /// Idle instructions a second, by service (already taken off).
        var idlePerSecond: [String: Double] = [:]
        var batchesPerCollectorCall = 0.0
        var uploadsPerIdentityCall = 0.0
        var seconds = 0.0
    }

    /// - Parameter preload: a shared library preloaded into the services (`DATONG_VALGRIND_PRELOAD`:
    ///   scripts/valgrind/sigsuspend-copy.c, without which valgrind 3.19 cannot run them).
    static func run(
        directory: String, binDirectory: String, databaseURL: String, logDirectory: String, settings: [String: [String: String]],
        preload: String?, warmUp: [HTTPLoad.Request], requests: [HTTPLoad.Request], events: Int, connections: Int,
        check: @escaping @Sendable (Int, HTTPLoad.Answer) throws -> Void
    ) async throws -> Outcome {
        // Valgrind 3.19 cannot read the DWARF 5 this toolchain writes: the services run from copies
        // without debug information.
        let strippedDirectory = "\(directory)/bin"
        try FileManager.default.createDirectory(atPath: strippedDirectory, withIntermediateDirectories: true)
        for name in ServiceFleet.names {
            let copy = "\(strippedDirectory)/\(name)"
            try? FileManager.default.removeItem(atPath: copy)
            try FileManager.default.copyItem(atPath: "\(binDirectory)/\(name)", toPath: copy)
            try run("/usr/bin/objcopy", ["--strip-debug", copy])
        }
        var launchers: [String: [String]] = [:]
        var settings = settings
        for name in measured {
            launchers[name] = [
                "/usr/bin/valgrind", "--tool=callgrind", "--callgrind-out-file=\(directory)/\(name).%p.out", "--dump-instr=no",
                "--dump-line=no",
            ]
            if let preload { settings[name, default: [:]]["LD_PRELOAD"] = preload }
        }
        // Valgrind's pace: calls between the services get time enough.
        settings["bridge-gateway", default: [:]]["UPSTREAM_TIMEOUT_SECONDS"] = "120"
        let fleet = try ServiceFleet(
            binDirectory: strippedDirectory, databaseURL: databaseURL, logDirectory: logDirectory, settings: settings, launchers: launchers)
        do {
            try await fleet.startAll()
            Bench.say("  services started under callgrind; a warm-up of \(warmUp.count) requests")
            _ = try await HTTPLoad.run(port: fleet.gatewayPort, requests: warmUp, connections: connections, check: check)
            let callsBefore = try GatewayCalls(fleet)
            try zero(fleet)
            Bench.say("  measuring \(requests.count) requests")
            let load = try await HTTPLoad.run(port: fleet.gatewayPort, requests: requests, connections: connections, check: check)
            let busy = try dump(fleet, directory: directory)
            let calls = try GatewayCalls(fleet).since(callsBefore)
            let idleSeconds = min(load.elapsed, 30)
            Bench.say(String(format: "  %.0f s; now %.0f s of idle time", load.elapsed, idleSeconds))
            try zero(fleet)
            try await Task.sleep(for: .seconds(idleSeconds))
            let idle = try dump(fleet, directory: directory)
            await fleet.stopAll()

            var outcome = Outcome(seconds: load.elapsed)
            for name in measured {
                let idleRate = Double(idle[name]!) / idleSeconds
                let cost = Double(busy[name]!) - idleRate * load.elapsed
                outcome.idlePerSecond[name] = idleRate
                outcome.perRequest[name] = cost / Double(requests.count)
                outcome.perEvent[name] = cost / Double(events)
            }
            outcome.batchesPerCollectorCall = calls.uploadsPerCollectorCall
            outcome.uploadsPerIdentityCall = calls.uploadsPerIdentityCall
            return outcome
        } catch {
            await fleet.stopAll()
            throw error
        }
    }

    private static func zero(_ fleet: ServiceFleet) throws {
        for name in measured { try control("-z", fleet, name) }
    }

    /// Dumps every measured service's counts and returns each one's instructions since it was zeroed.
    private static func dump(_ fleet: ServiceFleet, directory: String) throws -> [String: Int] {
        var counts: [String: Int] = [:]
        for name in measured {
            let pid = try control("-d", fleet, name)
            // Each dump is a file of its own, `NAME.PID.out.K`; the newest is the one just written.
            let prefix = "\(name).\(pid).out."
            let files = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasPrefix(prefix) }
            guard let newest = files.max(by: { (Int($0.dropFirst(prefix.count)) ?? 0) < (Int($1.dropFirst(prefix.count)) ?? 0) }) else {
                throw BenchError("callgrind wrote no dump for \(name) in \(directory)")
            }
            let text = try String(contentsOfFile: "\(directory)/\(newest)", encoding: .utf8)
            guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("summary: ") }),
                let value = Int(line.dropFirst("summary: ".count).split(separator: " ").first ?? "")
            else { throw BenchError("no summary line in \(directory)/\(newest)") }
            counts[name] = value
        }
        return counts
    }

    /// `callgrind_control OPTION PID` for the service's one process; returns the pid.
    @discardableResult
    private static func control(_ option: String, _ fleet: ServiceFleet, _ name: String) throws -> Int32 {
        guard let pid = fleet.pids(name).first else { throw BenchError("\(name) is not running") }
        // vgdb names its files after $HOST, which the services are given as their address.
        try run("/usr/bin/callgrind_control", [option, String(pid)], environment: ["HOST": "127.0.0.1"])
        return pid
    }

    private static func run(_ command: String, _ arguments: [String], environment: [String: String] = [:]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: command)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw BenchError("\(command) \(arguments.joined(separator: " ")) failed") }
    }
}

/// The gateway's calls to the collector and identity-service and the uploads they carried, as its
/// `/metrics` count them (every replica's, summed).
struct GatewayCalls {
    var collectorCalls = 0.0
    var collectorBatches = 0.0
    var identityCalls = 0.0
    var identityUploads = 0.0

    init(_ fleet: ServiceFleet) throws {
        // Each replica directly: through the balancer, two reads could ask two replicas.
        for replica in 1...fleet.replicas {
            let text = try fleet.get("bridge-gateway", "/metrics", replica: replica).text
            func value(_ metric: String) -> Double {
                text.split(separator: "\n").first { $0.hasPrefix(metric + " ") || $0.hasPrefix(metric + "{") }
                    .flatMap { $0.split(separator: " ").last.flatMap { Double($0) } } ?? 0
            }
            collectorCalls += value("datong_gateway_collector_calls_total")
            collectorBatches += value("datong_gateway_collector_batches_total")
            identityCalls += value("datong_gateway_identity_calls_total")
            identityUploads += value("datong_gateway_identity_uploads_total")
        }
    }

    private init() {}

    /// What was counted since `earlier`.
    func since(_ earlier: GatewayCalls) -> GatewayCalls {
        var difference = GatewayCalls()
        difference.collectorCalls = collectorCalls - earlier.collectorCalls
        difference.collectorBatches = collectorBatches - earlier.collectorBatches
        difference.identityCalls = identityCalls - earlier.identityCalls
        difference.identityUploads = identityUploads - earlier.identityUploads
        return difference
    }

    var uploadsPerCollectorCall: Double { collectorCalls > 0 ? collectorBatches / collectorCalls : 0 }
    var uploadsPerIdentityCall: Double { identityCalls > 0 ? identityUploads / identityCalls : 0 }
}
