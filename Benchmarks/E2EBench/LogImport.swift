import BenchSupport
import Foundation

/// `--import-megabytes N`: `datongctl import` (LogAgent's path, docs/SDKS.md) shipping a log file
/// of N MB (and one of N/10 MB, to show that its memory does not grow with the file) through the
/// four services. It reports lines a second, the importer's peak RSS, and the CPU each process
/// spent: the importer should spend a small share of what the gateway, collector and PostgreSQL
/// spend, so that the gateway, not the importer, is what bounds an import.
enum LogImportLoad {
    struct Report {
        var megabytes = 0.0
        var lines = 0
        var seconds = 0.0
        var peakRSS = 0
        var importerCPU = 0.0
        var servicesCPU: [String: Double] = [:]
        var postgresCPU = 0.0
    }

    /// Writes `megabytes` of server-SDK records (as Java's ConcurrentLoggingConsumer writes them:
    /// one JSON object a line, a `_track_id` each) to `path`; the number of lines.
    static func writeFile(_ path: String, megabytes: Int, seed: Int) throws -> Int {
        guard
            let handle = FileHandle(forWritingAtPath: path)
                ?? {
                    _ = FileManager.default.createFile(atPath: path, contents: nil)
                    return FileHandle(forWritingAtPath: path)
                }()
        else { throw BenchError("cannot write \(path)") }
        defer { try? handle.close() }
        try handle.truncate(atOffset: 0)
        let target = megabytes << 20
        var written = 0
        var lines = 0
        let base: Int64 = Int64(Date().timeIntervalSince1970 * 1000) - 86_400_000
        let events = ["ViewProduct", "AddToCart", "Buy", "Search", "Login"]
        while written < target {
            var chunk = ""
            chunk.reserveCapacity(1 << 20)
            for _ in 0..<4000 {
                let index = lines + seed * 100_000_000
                let event = events[index % events.count]
                chunk +=
                    #"{"_track_id":\#(index),"lib":{"$lib":"Java","$lib_method":"code","$lib_version":"3.6.8","$lib_detail":"com.example.Shop##buy##Shop.java##42"},"distinct_id":"user-\#(index % 50_000)","time":\#(base + Int64(index % 86_400_000)),"type":"track","event":"\#(event)","properties":{"$lib":"Java","$lib_version":"3.6.8","$is_login_id":true,"product_id":"sku-\#(index % 977)","price":\#(index % 500).5,"category":"书籍","order_id":"o-\#(index)"}}"#
                    + "\n"
                lines += 1
            }
            let bytes = Data(chunk.utf8)
            try handle.write(contentsOf: bytes)
            written += bytes.count
        }
        return lines
    }

    static func run(
        binDirectory: String, logDirectory: String, settings: [String: [String: String]], url: String, file: String, megabytes: Double, lines: Int,
        parallel: Int
    ) async throws -> Report {
        let fleet = try ServiceFleet(binDirectory: binDirectory, databaseURL: url, logDirectory: logDirectory, settings: settings, replicas: 1)
        do {
            try await fleet.startAll()
            let servicesBefore = Dictionary(uniqueKeysWithValues: ServiceFleet.names.map { ($0, fleet.cpuSeconds($0) ?? 0) })
            let postgresBefore = CPUTime.processes(named: "postgres")
            let started = Date()
            let importer = Process()
            importer.executableURL = URL(fileURLWithPath: binDirectory + "/datongctl")
            importer.arguments = [
                "import", "--gateway", "http://127.0.0.1:\(fleet.gatewayPort)", "--state", file + ".state", "--progress", "none",
                "--parallel", String(parallel), file,
            ]
            importer.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
            _ = FileManager.default.createFile(atPath: logDirectory + "/import.log", contents: nil)
            importer.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: logDirectory + "/import.log"))
            try importer.run()
            // Sampled while it runs: VmHWM is the peak so far, and the CPU is gone once it exits.
            var peak = 0
            var cpu = 0.0
            while importer.isRunning {
                if let status = try? String(contentsOfFile: "/proc/\(importer.processIdentifier)/status", encoding: .utf8),
                    let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
                    let kilobytes = Int(line.split(separator: " ").dropFirst().first ?? "")
                {
                    peak = max(peak, kilobytes * 1024)
                }
                cpu = CPUTime.process(importer.processIdentifier) ?? cpu
                try await Task.sleep(for: .milliseconds(100))
            }
            let seconds = Date().timeIntervalSince(started)
            guard importer.terminationStatus == 0 else {
                throw BenchError("datongctl import exited \(importer.terminationStatus) (\(logDirectory)/import.log)")
            }
            var report = Report(megabytes: megabytes, lines: lines, seconds: seconds, peakRSS: peak, importerCPU: cpu)
            for name in ServiceFleet.names { report.servicesCPU[name] = (fleet.cpuSeconds(name) ?? 0) - (servicesBefore[name] ?? 0) }
            report.postgresCPU = CPUTime.spent(from: postgresBefore, to: CPUTime.processes(named: "postgres"))
            await fleet.stopAll()
            return report
        } catch {
            await fleet.stopAll()
            throw error
        }
    }
}
