import DatongTestSupport
import Foundation
import HummingbirdTesting
import Testing

@testable import DatongCtl

#if canImport(Glibc)
    import Glibc
#endif

/// `datongctl import` as a process, as people run it, against the four services: the files the
/// official server SDKs write, crashes at any moment, bad lines, rotation while following.
@Suite("datongctl import")
struct LogImportTests {
    /// What one run of the importer did.
    struct Run {
        let status: Int32
        let killed: Bool
        let output: String
        let errors: String

        /// The summary: on standard output, or on standard error (after the progress lines) when the
        /// exit code is not 0.
        var summary: String {
            let text = status == 0 ? output : errors
            guard let read = text.range(of: "line(s) read", options: .backwards) else { return "" }
            return String(text[text.lineRange(for: read).lowerBound...])
        }

        /// A figure of the summary ("stored 12" → 12).
        func figure(_ name: String) -> Int? {
            guard let range = summary.range(of: ", \(name) ") ?? summary.range(of: "  \(name) ") else { return nil }
            return Int(summary[range.upperBound...].prefix { $0.isNumber })
        }
    }

    /// A running importer: the process and where its output goes.
    final class Importer: @unchecked Sendable {
        let process = Process()
        let out: URL
        let err: URL

        /// `datongctl` is built beside the test bundle (`swift build --build-tests` builds every product).
        static let binary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("datongctl").path

        init(_ arguments: [String], environment: [String: String] = [:]) throws {
            let directory = FileManager.default.temporaryDirectory
            out = directory.appendingPathComponent("import-\(UUID().uuidString).out")
            err = directory.appendingPathComponent("import-\(UUID().uuidString).err")
            _ = FileManager.default.createFile(atPath: out.path, contents: nil)
            _ = FileManager.default.createFile(atPath: err.path, contents: nil)
            process.executableURL = URL(fileURLWithPath: Self.binary)
            process.arguments = ["import", "--progress", "log"] + arguments
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
            process.standardOutput = try FileHandle(forWritingTo: out)
            process.standardError = try FileHandle(forWritingTo: err)
            try process.run()
        }

        func signal(_ number: Int32) { kill(process.processIdentifier, number) }

        /// Waits for the process to end (polling: no thread of the test pool blocks on it).
        func finish(within seconds: Double = 120) async throws -> Run {
            let deadline = Date().addingTimeInterval(seconds)
            while process.isRunning {
                if Date() > deadline {
                    signal(SIGKILL)
                    Issue.record("datongctl import still ran after \(seconds) s")
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            return Run(
                status: process.terminationStatus, killed: process.terminationReason == .uncaughtSignal,
                output: (try? String(contentsOf: out, encoding: .utf8)) ?? "", errors: (try? String(contentsOf: err, encoding: .utf8)) ?? "")
        }
    }

    static func gatewayURL(_ services: RunningServices) -> String { "http://127.0.0.1:\(services.gateway.port!)" }

    static func importing(_ services: RunningServices, _ arguments: [String], environment: [String: String] = [:]) async throws -> Run {
        try await Importer(["--gateway", gatewayURL(services)] + arguments, environment: environment).finish()
    }

    static func directory() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("logs-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    static func count(_ services: RunningServices, _ sql: String = "SELECT count(*) FROM analytics.events") async throws -> Int {
        Int(try await TestDatabase.rows(services.databaseURL, sql)[0][0] ?? "") ?? -1
    }

    /// Waits until `sql` counts `expected` (what an import following files does in its own time).
    static func waitForCount(_ services: RunningServices, _ expected: Int, _ sql: String = "SELECT count(*) FROM analytics.events") async throws {
        let deadline = Date().addingTimeInterval(60)
        var seen = -1
        while Date() < deadline {
            seen = try await count(services, sql)
            if seen >= expected { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(seen == expected, "\(sql)")
    }

    /// `count` distinct records, one a line; every fourth has no `_track_id` (Python's SDK writes none).
    static func records(_ range: Range<Int>, prefix: String = "user") -> String {
        range.map { index in
            let trackID = index % 4 == 3 ? "" : #""_track_id":\#(index * 7919 % 1_000_003),"#
            return
                #"{"type":"track",\#(trackID)"event":"Buy","time":\#(1_795_161_675_000 + Int64(index) * 1000),"distinct_id":"\#(prefix)-\#(index % 97)","lib":{"$lib":"Java","$lib_version":"3.6.8"},"properties":{"n":\#(index),"sku":"s-\#(index % 13)"}}"#
        }.joined(separator: "\n") + "\n"
    }

    static func write(_ text: String, to path: String, append: Bool = false) throws {
        if append, let handle = FileHandle(forWritingAtPath: path) {
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(text.utf8))
            try handle.close()
        } else {
            try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        }
    }

    @Test("the files the Go, Java, PHP and Python SDKs write are stored as they mean")
    func sdkFiles() async throws {
        let root = Fixtures.directory.appendingPathComponent("logs")
        let sdks = try FileManager.default.contentsOfDirectory(atPath: root.path).sorted()
        #expect(sdks.count == 4, "\(sdks)")
        try await RunningServices.run { services in
            for sdk in sdks {
                // A copy: the state and rejects files go beside the files.
                let copy = try Self.directory()
                for name in try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent(sdk).path) {
                    try FileManager.default.copyItem(atPath: root.appendingPathComponent(sdk).appendingPathComponent(name).path, toPath: copy + "/" + name)
                }
                let lines = try FileManager.default.contentsOfDirectory(atPath: copy).flatMap { name in
                    try String(contentsOfFile: copy + "/" + name, encoding: .utf8).split(separator: "\n").map(String.init)
                }
                let run = try await Self.importing(services, ["--project", "default", copy])
                #expect(run.status == 0, "\(sdk): \(run.output) \(run.errors)")
                #expect(run.figure("stored") == lines.count, "\(sdk): \(run.output)")
                #expect(run.figure("refused") == 0, "\(sdk): \(run.output)")
                #expect(FileManager.default.fileExists(atPath: copy + "/.datong-import.state"))

                // Every event line is an event, under its name, id and time.
                var expected: [String] = []
                for line in lines {
                    let record = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                    guard (record["type"] as? String)?.hasPrefix("track") == true, let event = record["event"] as? String else { continue }
                    expected.append("\(event)|\(record["distinct_id"] as? String ?? "")|\((record["time"] as? NSNumber)?.int64Value ?? 0)")
                }
                let lib = sdk.split(separator: "-")[0]
                let stored = try await TestDatabase.rows(
                    services.databaseURL,
                    """
                    SELECT event || '|' || distinct_id || '|' || (extract(epoch FROM time) * 1000)::bigint FROM analytics.events
                    WHERE distinct_id LIKE $1 || '-log-%' ORDER BY 1
                    """, [lib == "python" ? "py" : String(lib)]
                ).map { $0[0] ?? "" }
                #expect(stored == expected.sorted(), "\(sdk)")
                #expect(expected.count >= 5, "\(sdk): the scenario's events")
                // The profile and the item as the SDK set them.
                let profile = try await TestDatabase.rows(
                    services.databaseURL,
                    "SELECT properties->>'name', properties->>'orders' FROM analytics.profiles WHERE properties->>'name' LIKE '% Log'"
                        + " AND distinct_id LIKE $1 || '-log-%'", [lib == "python" ? "py" : String(lib)])
                #expect(profile.count == 1 && profile.first?[1] == "3", "\(sdk): \(profile)")
                let items = try await TestDatabase.rows(
                    services.databaseURL, "SELECT properties->>'title' FROM analytics.items WHERE item_id = $1",
                    ["\(lib == "python" ? "py" : String(lib))-log-isbn"])
                #expect(items.map { $0[0] } == ["Logs"], "\(sdk)")

                // A second run finds nothing new.
                let again = try await Self.importing(services, ["--project", "default", copy])
                #expect(again.status == 0 && again.output.contains(" 0 line(s) read"), "\(sdk): \(again.output)")
            }
        }
    }

    @Test("killed after the gateway acknowledged a batch and before the state said so: every line stored once")
    func killedBetweenAcknowledgementAndState() async throws {
        try await RunningServices.run { services in
            let directory = try Self.directory()
            try Self.write(Self.records(0..<1200), to: directory + "/service_log.2026-11-20")
            let options = ["--batch-records", "40", "--parallel", "1", directory]
            let crashed = try await Self.importing(services, options, environment: ["DATONG_IMPORT_CRASH_AFTER_ACKS": "5"])
            #expect(crashed.killed && crashed.status == SIGKILL, "\(crashed.output) \(crashed.errors)")
            let state = try String(contentsOfFile: directory + "/.datong-import.state", encoding: .utf8)
            #expect(state.contains(#""lines" : 160"#), "four batches of 40 were recorded: \(state)")

            let resumed = try await Self.importing(services, options)
            #expect(resumed.status == 0, "\(resumed.output) \(resumed.errors)")
            // The fifth batch was acknowledged and not recorded: sent again, the gateway knew it.
            // Nothing before it was sent again.
            #expect(resumed.figure("duplicates") == 40, "\(resumed.output)")
            #expect(resumed.figure("stored") == 1200 - 200, "\(resumed.output)")
            #expect(try await Self.count(services) == 1200)
            #expect(try await Self.count(services, "SELECT count(DISTINCT properties->>'n') FROM analytics.events") == 1200)
        }
    }

    @Test("SIGKILL at random moments, restarted until done: every line stored once")
    func killedAnywhere() async throws {
        try await RunningServices.run { services in
            let directory = try Self.directory()
            try Self.write(Self.records(0..<3000), to: directory + "/a.log")
            try Self.write(Self.records(3000..<4000), to: directory + "/b.log")
            let options = ["--batch-records", "25", "--parallel", "4", directory]
            var kills = 0
            var duplicates = 0
            for attempt in 0..<40 {
                let importer = try Importer(["--gateway", Self.gatewayURL(services)] + options)
                try await Task.sleep(for: .milliseconds(150 + (attempt * 37) % 400))
                importer.signal(SIGKILL)
                let run = try await importer.finish()
                if run.killed {
                    kills += 1
                    continue
                }
                #expect(run.status == 0, "\(run.output) \(run.errors)")
                duplicates = run.figure("duplicates") ?? -1
                break
            }
            #expect(kills >= 2, "the importer was killed mid-run \(kills) times")
            let finalRun = try await Self.importing(services, options)
            #expect(finalRun.output.contains("0 line(s) read"), "\(finalRun.output)")
            #expect(try await Self.count(services) == 4000)
            #expect(try await Self.count(services, "SELECT count(DISTINCT properties->>'n') FROM analytics.events") == 4000)
            // At most the batches in flight at the last kill were sent again.
            #expect(duplicates <= 4 * 25, "duplicates of the last run: \(duplicates)")
        }
    }

    @Test("bad lines are reported with file:line and kept in the rejects file; a line being written waits")
    func badLines() async throws {
        try await RunningServices.run { services in
            let directory = try Self.directory()
            let path = directory + "/mixed.log"
            let good = Self.records(0..<3).split(separator: "\n").map(String.init)
            let lines = [
                good[0],
                "not json at all",
                "[1,2,3]",
                #"{"distinct_id":"x","event":"NoType"}"#,
                #"{"type":"track","event":"Buy","time":1795161675000,"distinct_id":"","properties":{}}"#,
                "",
                good[1],
                #"{"type":"track","event":"Long","distinct_id":"a","properties":{"text":""# + String(repeating: "x", count: 400) + #""}}"#,
                good[2],
            ]
            let partial = Self.records(3..<4).dropLast()
            try Self.write(lines.joined(separator: "\n") + "\n" + partial, to: path)
            let run = try await Self.importing(services, ["--max-line-bytes", "300", path])
            #expect(run.status == 1, "some lines were refused: \(run.output)")
            #expect(run.figure("stored") == 3, "\(run.summary)")
            #expect(run.figure("refused") == 5, "\(run.output)")
            #expect(run.figure("blank") == 1, "\(run.output)")
            for (line, reason) in [(2, "not JSON"), (3, "not a record"), (4, "not a record: no \"type\""), (5, "distinct_id"), (8, "longer than 300 bytes")] {
                #expect(
                    run.errors.contains("\(path):\(line): ")
                        && run.errors.split(separator: "\n").contains { $0.hasPrefix("\(path):\(line): ") && $0.contains(reason) },
                    "line \(line): \(run.errors)")
            }
            #expect(run.summary.contains("ends with \(partial.utf8.count) byte(s) after its last newline"), "\(run.summary)")
            let rejects = try String(contentsOfFile: directory + "/.datong-import.rejects", encoding: .utf8).split(separator: "\n")
            #expect(rejects.count == 5)
            let first = try #require(try JSONSerialization.jsonObject(with: Data(rejects[0].utf8)) as? [String: Any])
            #expect(first["line"] as? Int == 2 && first["text"] as? String == "not json at all" && first["file"] as? String == path)

            // The writer finishes its line: only that line is sent.
            try Self.write("\n", to: path, append: true)
            let next = try await Self.importing(services, ["--max-line-bytes", "300", path])
            #expect(next.status == 0, "\(next.output)")
            #expect(next.figure("stored") == 1 && next.figure("duplicates") == 0 && next.output.contains(" 1 line(s) read"), "\(next.output)")
            #expect(try await Self.count(services) == 4)
        }
    }

    @Test("following: new lines, a rotated file, a new file, a truncated one, gzip, SIGTERM and a restart")
    func follow() async throws {
        try await RunningServices.run { services in
            let directory = try Self.directory()
            let live = directory + "/service.log"
            try Self.write(Self.records(0..<100), to: live)
            let follower = try Importer([
                "--gateway", Self.gatewayURL(services), "--follow", "--poll-ms", "100", "--state", directory + "/.state", directory + "/service.log*",
            ])
            try await Self.waitForCount(services, 100)

            // Rotation by rename, as Python's handler does: the old file gets one more line from the
            // writer that still has it open, the new file its own.
            try FileManager.default.moveItem(atPath: live, toPath: live + ".1")
            try Self.write(Self.records(100..<101), to: live + ".1", append: true)
            try Self.write(Self.records(101..<150), to: live)
            try await Self.waitForCount(services, 150)

            // copytruncate: the file is emptied and written again from the start.
            let truncated = try #require(FileHandle(forWritingAtPath: live))
            try truncated.truncate(atOffset: 0)
            try truncated.write(contentsOf: Data(Self.records(150..<160).utf8))
            try truncated.close()
            try await Self.waitForCount(services, 160)

            // A rotated file compressed by logrotate appears.
            let gzipped = directory + "/service.log.2.gz"
            try Self.write(Self.records(160..<200), to: directory + "/plain")
            let gzip = Process()
            gzip.executableURL = URL(fileURLWithPath: "/bin/sh")
            gzip.arguments = ["-c", "gzip -c '\(directory)/plain' > '\(gzipped).tmp' && mv '\(gzipped).tmp' '\(gzipped)'"]
            try gzip.run()
            gzip.waitUntilExit()
            try await Self.waitForCount(services, 200)

            follower.signal(SIGTERM)
            let stopped = try await follower.finish(within: 30)
            #expect(stopped.status == 0 && !stopped.killed, "\(stopped.output) \(stopped.errors)")
            #expect(stopped.errors.contains("truncated"), "the truncation was told: \(stopped.errors)")
            #expect(try await Self.count(services) == 200)
            #expect(try await Self.count(services, "SELECT count(DISTINCT properties->>'n') FROM analytics.events") == 200)

            // Restarted, it sends nothing again and goes on with what came meanwhile.
            try Self.write(Self.records(200..<210), to: live, append: true)
            let restarted = try Importer([
                "--gateway", Self.gatewayURL(services), "--follow", "--poll-ms", "100", "--state", directory + "/.state", directory + "/service.log*",
            ])
            try await Self.waitForCount(services, 210)
            restarted.signal(SIGTERM)
            let second = try await restarted.finish(within: 30)
            #expect(second.status == 0, "\(second.output)")
            #expect(second.figure("stored") == 10 && second.figure("duplicates") == 0, "\(second.output)")
        }
    }
}

/// The importer's reading of files, without services: gzip members, a stream cut short, lines too
/// long to hold, CRLF.
@Suite("datongctl import: reading files")
struct LogReadingTests {
    static func file(_ bytes: [UInt8], name: String) throws -> LogFile {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("read-\(UUID().uuidString)-\(name)").path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return try #require(LogFiles.discover([path]).files.first)
    }

    static func lines(_ file: LogFile, from offset: Int64 = 0, line: Int = 1, maxLineBytes: Int = 1 << 20) throws -> ([LogLine], LogLineReader) {
        let reader = try LogLineReader(file: file, offset: offset, line: line, maxLineBytes: maxLineBytes)
        var lines: [LogLine] = []
        while let next = try reader.next() { lines.append(next) }
        return (lines, reader)
    }

    static func gzip(_ text: String) throws -> [UInt8] { Array(try GatewayUploader.gzip(Array(text.utf8))) }

    @Test("every member of a multi-member .gz; a cut-short stream gives its complete lines and says so")
    func gzipMembers() throws {
        let whole = try Self.gzip("a\nb\n") + Self.gzip("c\n")
        let (lines, reader) = try Self.lines(try Self.file(whole, name: "whole.gz"))
        #expect(lines.map { String(decoding: $0.text ?? [], as: UTF8.self) } == ["a", "b", "c"])
        #expect(lines.map(\.end) == [2, 4, 6] && !reader.gzipIncomplete)

        let third = try Self.gzip(String(repeating: "x", count: 5000) + "\nlast\n")
        let cut = whole + third.prefix(third.count - 12)
        let (partial, cutReader) = try Self.lines(try Self.file(Array(cut), name: "cut.gz"))
        #expect(cutReader.gzipIncomplete)
        #expect(partial.prefix(3).map { String(decoding: $0.text ?? [], as: UTF8.self) } == ["a", "b", "c"])
        #expect(!partial.contains { $0.text.map { String(decoding: $0, as: UTF8.self) } == "last" })

        // Resuming inside a .gz skips what was read (offsets count inflated bytes).
        let (resumed, _) = try Self.lines(try Self.file(whole, name: "again.gz"), from: 4, line: 3)
        #expect(resumed.map(\.number) == [3] && resumed.first?.text == Array("c".utf8))
        #expect(throws: ImportError.self) { try Self.lines(try Self.file(Array("not gzip at all\n".utf8), name: "bad.gz")) }
    }

    @Test("a line over the limit is skipped without being held; CRLF ends a line; an unfinished last line waits")
    func longLines() throws {
        let long = String(repeating: "y", count: 3 * LogLineReader.chunkBytes)
        let file = try Self.file(Array("first\r\n\(long)\nthird\nunfinished".utf8), name: "long.log")
        let (lines, reader) = try Self.lines(file, maxLineBytes: 1000)
        #expect(lines.map(\.number) == [1, 2, 3])
        #expect(lines[0].text == Array("first".utf8) && lines[1].text == nil && lines[2].text == Array("third".utf8))
        #expect(lines[2].end == Int64(7 + long.utf8.count + 1 + 6))
        #expect(reader.unterminatedBytes == "unfinished".utf8.count)
    }

    @Test("a file followed for longer than a week keeps its place; one gone for a week is forgotten")
    func stateRemembersFilesStillThere() throws {
        let file = try Self.file(Array("a\n".utf8), name: "kept.log")
        let gone = try Self.file(Array("b\n".utf8), name: "gone.log")
        var state = ImportState()
        let start = 1_000_000.0
        _ = state.start(for: file, now: start)
        _ = state.start(for: gone, now: start)
        state.acknowledge(file.key, offset: 2, line: 1)
        // Eight days of following: the importer sees the file at every look, the other never again.
        for day in 1...8 { state.saw([file], now: start + Double(day) * 86_400) }
        state.forget(before: start + 8 * 86_400)
        #expect(state.files[file.key]?.offset == 2)
        #expect(state.files[gone.key] == nil)
    }

    @Test("a file first met empty (a new log file, or one copytruncated) keeps its place once written; a restart does not read it again")
    func emptyWhenFirstMet() throws {
        let empty = try Self.file([], name: "new.log")
        var state = ImportState()
        #expect(state.start(for: empty, now: 1).offset == 0)
        try Data("a\nb\n".utf8).write(to: URL(fileURLWithPath: empty.path))
        let written = try #require(LogFiles.discover([empty.path]).files.first)
        state.acknowledge(written.key, offset: 4, line: 2)
        // The next run: the same file, longer now. (Before: the empty prefix had no digest, so the
        // file counted as replaced and was sent again from its first line.)
        var next = state
        let start = next.start(for: written, now: 2)
        #expect(start.offset == 4 && start.line == 3 && !start.restarted)
    }
}
