import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The four Datong services as separate processes on 127.0.0.1, started from their built binaries
/// the way a deployment runs them: the end-to-end benchmark measures them and the failure drills
/// kill and restart them. Each writes its log to `logDirectory/NAME.log`.
package final class ServiceFleet: Sendable {
    package static let adminToken = "fleet-admin-token"
    package static let serviceToken = "fleet-service-token"
    /// In the order they start: the gateway needs the other three.
    package static let names = ["identity-service", "collector", "config-service", "bridge-gateway"]

    package let ports: [String: Int]
    private let binDirectory: String
    private let logDirectory: String
    private let environment: [String: [String: String]]
    private let running = Mutex<[String: Process]>([:])

    /// - Parameters:
    ///   - binDirectory: where `swift build --show-bin-path` put the four executables.
    ///   - databaseURL: the database the three services with storage share.
    ///   - settings: extra environment per service name (limits, pool sizes).
    package init(binDirectory: String, databaseURL: String, logDirectory: String, settings: [String: [String: String]] = [:]) throws {
        self.binDirectory = binDirectory
        self.logDirectory = logDirectory
        var ports: [String: Int] = [:]
        for name in Self.names {
            // The system may hand out a port it just gave, once the first probe closed: keep them distinct.
            var port = try freePort()
            while ports.values.contains(port) { port = try freePort() }
            ports[name] = port
        }
        self.ports = ports
        let common = [
            "HOST": "127.0.0.1", "LOG_LEVEL": "warning", "SERVICE_TOKEN": Self.serviceToken, "ADMIN_TOKEN": Self.adminToken,
        ]
        var environment: [String: [String: String]] = [:]
        for name in Self.names {
            var values = common
            values["PORT"] = String(ports[name]!)
            if name != "bridge-gateway" { values["DATABASE_URL"] = databaseURL }
            values.merge(settings[name] ?? [:]) { $1 }
            environment[name] = values
        }
        environment["bridge-gateway"]!.merge([
            "IDENTITY_URL": "http://127.0.0.1:\(ports["identity-service"]!)",
            "COLLECTOR_URL": "http://127.0.0.1:\(ports["collector"]!)",
            "CONFIG_URL": "http://127.0.0.1:\(ports["config-service"]!)",
        ]) { $1 }
        self.environment = environment
        try FileManager.default.createDirectory(atPath: logDirectory, withIntermediateDirectories: true)
    }

    package var gatewayPort: Int { ports["bridge-gateway"]! }

    /// Starts every service in order, each once the one before it is ready.
    package func startAll() async throws {
        for name in Self.names { try await start(name) }
    }

    /// Starts `name` and waits until its `/ready` answers 200 (at most 60 s); `overriding` replaces
    /// some of its settings for this start.
    package func start(_ name: String, overriding: [String: String] = [:]) async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "\(binDirectory)/\(name)")
        process.environment = ProcessInfo.processInfo.environment.merging(environment[name]!) { $1 }.merging(overriding) { $1 }
        let logPath = "\(logDirectory)/\(name).log"
        if !FileManager.default.fileExists(atPath: logPath) { _ = FileManager.default.createFile(atPath: logPath, contents: nil) }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        log.seekToEndOfFile()
        process.standardOutput = log
        process.standardError = log
        process.standardInput = FileHandle.nullDevice
        try process.run()
        running.withLock { $0[name] = process }
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            guard process.isRunning else { throw BenchError("\(name) exited during start-up; see \(logPath)") }
            if (try? get(name, "/ready").status) == 200 { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw BenchError("\(name) was not ready within 60 s; see \(logPath)")
    }

    /// `kill -9`: the process ends at once, with whatever it held in flight.
    package func kill(_ name: String) async {
        guard let process = running.withLock({ $0.removeValue(forKey: name) }) else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        await Self.waitForExit(process)
    }

    /// SIGTERM to every service (gateway first), then SIGKILL to any still running after 10 s.
    package func stopAll() async {
        for name in Self.names.reversed() {
            guard let process = running.withLock({ $0.removeValue(forKey: name) }) else { continue }
            process.terminate()
            let deadline = ContinuousClock.now + .seconds(10)
            while process.isRunning, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(50)) }
            if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
            await Self.waitForExit(process)
        }
    }

    /// True while `name` runs (it did not crash).
    package func isRunning(_ name: String) -> Bool {
        running.withLock { $0[name]?.isRunning ?? false }
    }

    /// The most memory `name` has held resident since it started (`VmHWM`), in bytes.
    package func peakResidentBytes(_ name: String) -> Int? { statusBytes(name, "VmHWM:") }

    /// Memory `name` holds resident now (`VmRSS`), in bytes.
    package func residentBytes(_ name: String) -> Int? { statusBytes(name, "VmRSS:") }

    /// CPU time `name` has used since it started (user + system), in seconds.
    package func cpuSeconds(_ name: String) -> Double? {
        running.withLock { $0[name]?.processIdentifier }.flatMap { CPUTime.process($0) }
    }

    /// A `kB` field of `/proc/PID/status`, in bytes.
    private func statusBytes(_ name: String, _ field: String) -> Int? {
        guard let pid = running.withLock({ $0[name]?.processIdentifier }),
            let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field) }),
            let kilobytes = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        else { return nil }
        return kilobytes * 1024
    }

    /// One blocking request to `name` on a connection of its own.
    package func get(_ name: String, _ path: String, headers: [(String, String)] = []) throws -> HTTPLoad.Answer {
        let connection = try HTTPLoad.Connection(port: ports[name]!)
        defer { connection.close() }
        return try connection.exchange(HTTPLoad.Request("GET", path, headers: headers).bytes)
    }

    private static func waitForExit(_ process: Process) async {
        while process.isRunning { try? await Task.sleep(for: .milliseconds(20)) }
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on now.
package func freePort() throws -> Int {
    let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard socket >= 0 else { throw BenchError("socket: \(String(cString: strerror(errno)))") }
    defer { Glibc.close(socket) }
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
    guard bound else { throw BenchError("bind: \(String(cString: strerror(errno)))") }
    return Int(UInt16(bigEndian: address.sin_port))
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
