import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The four Datong services as separate processes on 127.0.0.1, started from their built binaries
/// the way a deployment runs them: the end-to-end benchmark measures them and the failure drills
/// kill and restart them. Each writes its log to `logDirectory/NAME.log` (`NAME-K.log` for replica K).
///
/// With `placements`, each service instance may run on a host of its own (a network namespace,
/// `scripts/net`): it listens on that host's address, and the balancer, on every address of this
/// machine, is reached at `balancerAddress`.
///
/// With `replicas` above 1, the gateway, identity and the collector each run that many replicas
/// behind HAProxy (`deploy/haproxy/local.cfg`, health-checked on `/ready`), and every caller —
/// the load, the gateways, config-service — reaches them through it; config-service stays single.
package final class ServiceFleet: Sendable {
    package static let adminToken = "fleet-admin-token"
    package static let serviceToken = "fleet-service-token"
    /// In the order they start: the gateway needs the other three.
    package static let names = ["identity-service", "collector", "config-service", "bridge-gateway"]
    /// The services that run as replicas behind the balancer when `replicas` > 1.
    package static let replicated: Set<String> = ["identity-service", "collector", "bridge-gateway"]

    /// The port callers use for each service: the balancer's, or the one instance's.
    package let ports: [String: Int]
    package let replicas: Int
    /// The port of each replica (index K-1 for replica K) of each service.
    private let replicaPorts: [String: [Int]]
    private let binDirectory: String
    private let logDirectory: String
    private let environment: [String: [String: String]]
    /// A command each named service runs under (valgrind), its binary's path appended.
    private let launchers: [String: [String]]
    /// Where instances run, by `NAME-K` (replica K) or `NAME` (every replica); 127.0.0.1 otherwise.
    private let placements: [String: Placement]
    /// The address services and config-service reach the balancer (or the one instance) at.
    private let balancerAddress: String
    private let running = Mutex<[Instance: Process]>([:])
    private let balancer = Mutex<Process?>(nil)

    private struct Instance: Hashable {
        let name: String
        let replica: Int
    }

    /// A host an instance runs on: its address, and the command that runs a program there
    /// (`["/usr/bin/ip", "netns", "exec", NAMESPACE]`), the program's path and arguments appended.
    package struct Placement: Sendable {
        package let address: String
        package let launcher: [String]

        package init(address: String, launcher: [String]) {
            self.address = address
            self.launcher = launcher
        }
    }

    /// - Parameters:
    ///   - binDirectory: where `swift build --show-bin-path` put the four executables.
    ///   - databaseURL: the database the three services with storage share (a libpq URI; several
    ///     hosts and `target_session_attrs` work).
    ///   - settings: extra environment per service name (limits, pool sizes).
    ///   - replicas: replicas of each replicated service; above 1 they run behind HAProxy.
    ///   - launchers: a command to run a service under, by name (`["valgrind", "--tool=callgrind"]`).
    ///   - placements: the host each instance runs on, by `NAME-K` or `NAME`; `balancerAddress` is
    ///     where those hosts reach the balancer.
    package init(
        binDirectory: String, databaseURL: String, logDirectory: String, settings: [String: [String: String]] = [:], replicas: Int = 1,
        launchers: [String: [String]] = [:], placements: [String: Placement] = [:], balancerAddress: String = "127.0.0.1"
    ) throws {
        precondition(replicas >= 1, "a fleet runs at least one replica")
        self.binDirectory = binDirectory
        self.logDirectory = logDirectory
        self.launchers = launchers
        self.placements = placements
        self.balancerAddress = balancerAddress
        self.replicas = replicas
        let count = { (name: String) in replicas > 1 && Self.replicated.contains(name) ? replicas + 1 : 1 }
        // Asked for together, so that the system cannot hand out the same port twice.
        var free = try freePorts(Self.names.map(count).reduce(0, +))
        var ports: [String: Int] = [:]
        var replicaPorts: [String: [Int]] = [:]
        for name in Self.names {
            ports[name] = free.removeFirst()
            replicaPorts[name] = count(name) == 1 ? [ports[name]!] : (0..<replicas).map { _ in free.removeFirst() }
        }
        self.ports = ports
        self.replicaPorts = replicaPorts
        let common = [
            "HOST": "127.0.0.1", "LOG_LEVEL": "warning", "SERVICE_TOKEN": Self.serviceToken, "ADMIN_TOKEN": Self.adminToken,
        ]
        // A service that does not run behind the balancer (config-service) is reached on its host.
        let reach = { (name: String) in
            replicas > 1 && Self.replicated.contains(name) ? balancerAddress : (placements["\(name)-1"] ?? placements[name])?.address ?? "127.0.0.1"
        }
        let urls = [
            "IDENTITY_URL": "http://\(reach("identity-service")):\(ports["identity-service"]!)",
            "COLLECTOR_URL": "http://\(reach("collector")):\(ports["collector"]!)",
            "CONFIG_URL": "http://\(reach("config-service")):\(ports["config-service"]!)",
        ]
        var environment: [String: [String: String]] = [:]
        for name in Self.names {
            var values = common
            if name != "bridge-gateway" { values["DATABASE_URL"] = databaseURL }
            if name == "bridge-gateway" { values.merge(urls) { $1 } }
            if name == "config-service" { values.merge(urls.filter { $0.key != "CONFIG_URL" }) { $1 } }
            values.merge(settings[name] ?? [:]) { $1 }
            environment[name] = values
        }
        self.environment = environment
        try FileManager.default.createDirectory(atPath: logDirectory, withIntermediateDirectories: true)
    }

    package var gatewayPort: Int { ports["bridge-gateway"]! }

    /// True when the services run behind the balancer.
    package var balanced: Bool { replicas > 1 }

    /// Starts every service in order (every replica), each once the one before it is ready; the
    /// balancer starts before the gateways, which reach the others through it, and the fleet is
    /// ready once every service answers `/ready` through it.
    package func startAll() async throws {
        for name in Self.names {
            if name == "bridge-gateway", balanced { try startBalancer() }
            for replica in 1...replicaPorts[name]!.count { try await start(name, replica: replica) }
        }
        guard let process = balancer.withLock({ $0 }) else { return }
        for name in Self.replicated {
            try await Self.waitReady(
                host: "127.0.0.1", port: ports[name]!, process: process, what: "haproxy (\(name))", logPath: "\(logDirectory)/haproxy.log")
        }
    }

    /// Starts replica `replica` of `name` and waits until its `/ready` answers 200 (at most 60 s);
    /// `overriding` replaces some of its settings for this start.
    package func start(_ name: String, replica: Int = 1, overriding: [String: String] = [:]) async throws {
        let instance = Instance(name: name, replica: replica)
        let port = replicaPorts[name]![replica - 1]
        let process = Process()
        let binary = "\(binDirectory)/\(name)"
        let placement = placement(name, replica)
        let command = (placement?.launcher ?? []) + (launchers[name] ?? []) + [binary]
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        process.environment = ProcessInfo.processInfo.environment.merging(environment[name]!) { $1 }.merging(overriding) { $1 }
            .merging(["PORT": String(port), "HOST": placement?.address ?? "127.0.0.1"]) { $1 }
        let logPath = "\(logDirectory)/\(replicaPorts[name]!.count == 1 ? name : "\(name)-\(replica)").log"
        try Self.run(process, log: logPath)
        running.withLock { $0[instance] = process }
        try await Self.waitReady(
            host: placement?.address ?? "127.0.0.1", port: port, process: process, what: "\(name) (replica \(replica))", logPath: logPath)
    }

    private func placement(_ name: String, _ replica: Int) -> Placement? { placements["\(name)-\(replica)"] ?? placements[name] }

    /// `kill -9` of every replica of `name`: each ends at once, with whatever it held in flight.
    package func kill(_ name: String) async {
        for replica in 1...replicaPorts[name]!.count { await kill(name, replica: replica) }
    }

    /// `kill -9` of one replica.
    package func kill(_ name: String, replica: Int) async {
        guard let process = running.withLock({ $0.removeValue(forKey: Instance(name: name, replica: replica)) }) else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        await Self.waitForExit(process)
    }

    /// SIGTERM to every service (gateways first) and the balancer, then SIGKILL to any still
    /// running after 10 s.
    package func stopAll() async {
        var order: [Process] = balancer.withLock { $0.take() }.map { [$0] } ?? []
        for name in Self.names.reversed() {
            order += running.withLock { running in
                running.keys.filter { $0.name == name }.sorted { $0.replica < $1.replica }.compactMap { running.removeValue(forKey: $0) }
            }
        }
        for process in order {
            process.terminate()
            let deadline = ContinuousClock.now + .seconds(10)
            while process.isRunning, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(50)) }
            if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
            await Self.waitForExit(process)
        }
    }

    /// True while every replica of `name` runs (none crashed).
    package func isRunning(_ name: String) -> Bool {
        let processes = running.withLock { running in running.filter { $0.key.name == name }.map(\.value) }
        return processes.count == replicaPorts[name]!.count && processes.allSatisfy(\.isRunning)
    }

    /// The most memory any replica of `name` has held resident since it started (`VmHWM`), in bytes.
    package func peakResidentBytes(_ name: String) -> Int? { pids(name).compactMap { Self.statusBytes($0, "VmHWM:") }.max() }

    /// The most memory any replica of `name` holds resident now (`VmRSS`), in bytes.
    package func residentBytes(_ name: String) -> Int? { pids(name).compactMap { Self.statusBytes($0, "VmRSS:") }.max() }

    /// CPU time every replica of `name` has used since it started (user + system), in seconds;
    /// `"haproxy"` is the balancer's.
    package func cpuSeconds(_ name: String) -> Double? {
        let pids = name == "haproxy" ? balancer.withLock { $0.map { [$0.processIdentifier] } ?? [] } : pids(name)
        let times = pids.compactMap { CPUTime.process($0) }
        return times.isEmpty ? nil : times.reduce(0, +)
    }

    /// The process ids of every replica of `name`.
    package func pids(_ name: String) -> [Int32] {
        running.withLock { running in running.filter { $0.key.name == name }.map(\.value.processIdentifier) }
    }

    /// A `kB` field of `/proc/PID/status`, in bytes.
    private static func statusBytes(_ pid: Int32, _ field: String) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field) }),
            let kilobytes = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        else { return nil }
        return kilobytes * 1024
    }

    /// One blocking request to `name` (through the balancer when there is one) on a connection of
    /// its own; `replica` asks that replica directly. An answer must come within 15 s.
    package func get(_ name: String, _ path: String, replica: Int? = nil, headers: [(String, String)] = []) throws -> HTTPLoad.Answer {
        let connection =
            if let replica {
                try HTTPLoad.Connection(
                    host: placement(name, replica)?.address ?? "127.0.0.1", port: replicaPorts[name]![replica - 1], receiveTimeout: 15)
            } else {
                try HTTPLoad.Connection(
                    host: balanced && Self.replicated.contains(name) ? "127.0.0.1" : placement(name, 1)?.address ?? "127.0.0.1", port: ports[name]!,
                    receiveTimeout: 15)
            }
        defer { connection.close() }
        return try connection.exchange(HTTPLoad.Request("GET", path, headers: headers).bytes)
    }

    // MARK: The balancer

    /// The HAProxy configuration of this fleet: `deploy/haproxy/local.cfg` with its ports and one
    /// `server` line per replica filled in.
    package func balancerConfiguration(template: String) -> String {
        var text = template
        for name in Self.replicated {
            let servers = replicaPorts[name]!.enumerated().map {
                "server \(name)-\($0.offset + 1) \(placement(name, $0.offset + 1)?.address ?? "127.0.0.1"):\($0.element) check"
            }
            text = text.replacingOccurrences(of: "{{address}}", with: placements.isEmpty ? "127.0.0.1" : "0.0.0.0")
                .replacingOccurrences(of: "{{port \(name)}}", with: String(ports[name]!))
                .replacingOccurrences(of: "{{servers \(name)}}", with: servers.joined(separator: "\n    "))
        }
        return text
    }

    private func startBalancer() throws {
        let template = try String(contentsOfFile: Self.balancerTemplate, encoding: .utf8)
        let configuration = "\(logDirectory)/haproxy.cfg"
        try balancerConfiguration(template: template).write(toFile: configuration, atomically: true, encoding: .utf8)
        guard let haproxy = ["/usr/sbin/haproxy", "/usr/local/sbin/haproxy"].first(where: FileManager.default.isExecutableFile) else {
            throw BenchError("haproxy is not installed (apt-get install haproxy)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: haproxy)
        process.arguments = ["-db", "-f", configuration]
        try Self.run(process, log: "\(logDirectory)/haproxy.log")
        balancer.withLock { $0 = process }
    }

    /// deploy/haproxy/local.cfg in this checkout (the benches and drills run from it).
    private static var balancerTemplate: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("deploy/haproxy/local.cfg").path
    }

    // MARK: Processes

    private static func run(_ process: Process, log logPath: String) throws {
        if !FileManager.default.fileExists(atPath: logPath) { _ = FileManager.default.createFile(atPath: logPath, contents: nil) }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        log.seekToEndOfFile()
        process.standardOutput = log
        process.standardError = log
        process.standardInput = FileHandle.nullDevice
        try process.run()
    }

    private static func waitReady(host: String, port: Int, process: Process, what: String, logPath: String) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            guard process.isRunning else { throw BenchError("\(what) exited during start-up; see \(logPath)") }
            if let connection = try? HTTPLoad.Connection(host: host, port: port) {
                defer { connection.close() }
                if (try? connection.exchange(HTTPLoad.Request("GET", "/ready").bytes).status) == 200 { return }
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw BenchError("\(what) was not ready within 60 s; see \(logPath)")
    }

    private static func waitForExit(_ process: Process) async {
        while process.isRunning { try? await Task.sleep(for: .milliseconds(20)) }
    }
}

/// `count` distinct TCP ports on 127.0.0.1 that nothing listens on now, all bound at once while
/// asked for, so the system cannot hand out one twice.
package func freePorts(_ count: Int) throws -> [Int] {
    var sockets: [Int32] = []
    defer { for socket in sockets { Glibc.close(socket) } }
    var ports: [Int] = []
    for _ in 0..<count {
        let (socket, port) = try boundSocket()
        sockets.append(socket)
        ports.append(port)
    }
    return ports
}

/// A TCP port on 127.0.0.1 that nothing listens on now.
package func freePort() throws -> Int {
    let (socket, port) = try boundSocket()
    Glibc.close(socket)
    return port
}

/// A socket bound to a port of the system's choosing on 127.0.0.1, and that port.
private func boundSocket() throws -> (Int32, Int) {
    let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard socket >= 0 else { throw BenchError("socket: \(String(cString: strerror(errno)))") }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
            bind(socket, pointer, length) == 0 && getsockname(socket, pointer, &length) == 0
        }
    }
    guard bound else {
        Glibc.close(socket)
        throw BenchError("bind: \(String(cString: strerror(errno)))")
    }
    return (socket, Int(UInt16(bigEndian: address.sin_port)))
}

/// CPU time from `/proc`, in seconds.
package enum CPUTime {
    private static let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// User + system time of process `pid` (`/proc/PID/stat` fields 14 and 15).
    package static func process(_ pid: Int32) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let end = stat.lastIndex(of: ")")
        else { return nil }
        // Fields after the command name (which may hold spaces), from field 3 on.
        let fields = stat[stat.index(after: end)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / ticksPerSecond
    }

    /// This process's user + system time.
    package static var ownProcess: Double { process(getpid()) ?? 0 }

    /// User + system time of every process whose command is `name` (`postgres`: the server and
    /// its backends), by pid.
    package static func processes(named name: String) -> [Int32: Double] {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [:] }
        var times: [Int32: Double] = [:]
        for entry in entries {
            guard let pid = Int32(entry),
                let command = try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8),
                command.trimmingCharacters(in: .whitespacesAndNewlines) == name
            else { continue }
            times[pid] = process(pid)
        }
        return times
    }

    /// The CPU time `processes(named:)` spent between two of its snapshots (a process new in
    /// `after` counts whole; one gone from it is lost).
    package static func spent(from before: [Int32: Double], to after: [Int32: Double]) -> Double {
        after.reduce(0) { $0 + $1.value - (before[$1.key] ?? 0) }
    }

    /// Time all cores spent busy (everything in `/proc/stat`'s cpu line but idle and iowait).
    package static var machineBusy: Double {
        guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
            let line = stat.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") })
        else { return 0 }
        let values = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        guard values.count >= 8 else { return 0 }
        // user nice system idle iowait irq softirq steal
        return (values[0] + values[1] + values[2] + values[5] + values[6] + values[7]) / ticksPerSecond
    }
}
