import ArgumentParser
import AsyncHTTPClient
import Foundation
import NIOCore

/// `datongctl import`: ships the log files of Sensors' server SDKs (and any file of Sensors records,
/// one JSON record a line) through the gateway, as Sensors' LogAgent does.
struct ImportCommand: ParsableCommand {
    static let stateName = ".datong-import.state"
    static let rejectsName = ".datong-import.rejects"

    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Send the records of log files (one JSON record a line, as Sensors' server SDKs write them) through the gateway.",
        discussion: """
            PATH is a file, a directory (its files) or a quoted glob ('/var/log/sa/service_log.*'); .gz files are \
            inflated. Records go to the gateway's POST /sa in gzipped batches, as an SDK sends them: the same \
            checks, deduplication and answers. How far each file got is kept in a state file (default \
            \(stateName) in the directory of the first PATH), written after each batch the gateway \
            acknowledged and recognising a file by device, inode and its first bytes, so renamed (rotated) \
            files go on where they were and truncated or replaced ones start again; a run that is killed \
            sends again at most the batches that were in flight, which the gateway recognises as duplicates. \
            Lines that are not records, or that the gateway refuses, are reported as FILE:LINE and written to \
            a rejects file (default \(rejectsName) beside the state), one JSON object each with the line in \
            "text". A last line without its newline is left for a later run. With --follow, new lines and \
            new files are picked up every --poll-ms until SIGTERM or SIGINT, which stop after the batches in \
            flight. Exit codes: 0 every line stored or a duplicate, 1 some lines refused (or the gateway \
            refused the project or token), 2 wrong command line or unreadable state, 3 the gateway could not \
            be reached for --give-up-after seconds.
            """
    )

    @Option(help: "Gateway base URL (default: DATONG_GATEWAY_URL or http://127.0.0.1:8106).")
    var gateway: String?
    @Option(help: "The project the records go to (the gateway's ?project=; records may name their own).")
    var project: String?
    @Option(help: "The project's ingestion token, when it has one (default: DATONG_INGEST_TOKEN).")
    var token: String?
    @Option(help: "The state file (default: \(stateName) in the directory of the first PATH).")
    var state: String?
    @Option(help: "The rejects file (default: \(rejectsName) beside the state file).")
    var rejects: String?
    @Flag(help: "Keep running: follow the files as they grow and pick up new ones.")
    var follow = false
    @Option(name: .customLong("batch-records"), help: "Records in one request at most (1–1000).")
    var batchRecords = 500
    @Option(name: .customLong("batch-bytes"), help: "Bytes of records in one request at most, before gzip.")
    var batchBytes = 1 << 20
    @Option(help: "Requests in flight at once (1–16).")
    var parallel = 2
    @Option(name: .customLong("max-line-bytes"), help: "Longer lines are refused without being read into memory.")
    var maxLineBytes = 1 << 20
    @Option(name: .customLong("poll-ms"), help: "With --follow: how often to look for new lines and files.")
    var pollMilliseconds = 1000
    @Option(name: .customLong("give-up-after"), help: "Seconds to keep retrying an unreachable or failing gateway (default 300; with --follow, forever).")
    var giveUpAfter: Double?
    @Option(name: .customLong("progress"), help: "auto (a progress line on a terminal, a log line every 10 s otherwise), line, log or none.")
    var progress = "auto"
    @Argument(help: "Files, directories or globs.")
    var paths: [String]

    func run() throws {}

    func validate() throws {
        guard (1...1000).contains(batchRecords) else { throw ValidationError("--batch-records must be 1 to 1000") }
        guard (1024...(16 << 20)).contains(batchBytes) else { throw ValidationError("--batch-bytes must be 1024 to 16777216") }
        guard (1...16).contains(parallel) else { throw ValidationError("--parallel must be 1 to 16") }
        guard (64...(16 << 20)).contains(maxLineBytes) else { throw ValidationError("--max-line-bytes must be 64 to 16777216") }
        guard (10...600_000).contains(pollMilliseconds) else { throw ValidationError("--poll-ms must be 10 to 600000") }
        guard ["auto", "line", "log", "none"].contains(progress) else { throw ValidationError("--progress is auto, line, log or none") }
        if let giveUpAfter, !(giveUpAfter >= 1 && giveUpAfter <= 86400 * 365) {
            throw ValidationError("--give-up-after must be 1 to 31536000 seconds")
        }
    }

    /// The state file's path when none is given: beside the files.
    var statePath: String {
        if let state { return state }
        let first = paths[0]
        var isDirectory: ObjCBool = false
        if !first.contains(where: { "*?[".contains($0) }), FileManager.default.fileExists(atPath: first, isDirectory: &isDirectory),
            isDirectory.boolValue
        {
            return (first as NSString).appendingPathComponent(Self.stateName)
        }
        let directory = (first as NSString).deletingLastPathComponent
        return ((directory.isEmpty ? "." : directory) as NSString).appendingPathComponent(Self.stateName)
    }

    func execute(environment: [String: String]) async -> (output: String, exitCode: Int32) {
        let base = (gateway ?? environment["DATONG_GATEWAY_URL"] ?? "http://127.0.0.1:8106").trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        guard URL(string: base)?.host != nil else { return ("datongctl import: \(base) is not a URL", CtlFailure.usage("").exitCode) }
        let statePath = self.statePath
        let rejectsPath = rejects ?? ((statePath as NSString).deletingLastPathComponent as NSString).appendingPathComponent(Self.rejectsName)
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(timeout: .init(connect: .seconds(5))))
        let reporter = ProgressReporter(mode: progress)
        let stop = StopSignal()
        let uploader = GatewayUploader(
            baseURL: base, project: project, token: token ?? environment["DATONG_INGEST_TOKEN"], http: client,
            giveUpAfter: follow ? giveUpAfter : (giveUpAfter ?? 300), stop: stop, say: { reporter.say($0) })
        let settings = LogImporter.Settings(
            paths: paths, statePath: statePath, rejectsPath: rejectsPath, follow: follow, batchRecords: batchRecords,
            batchBytes: batchBytes, parallel: parallel, maxLineBytes: maxLineBytes, pollMilliseconds: pollMilliseconds,
            crashAfterAcknowledgements: environment["DATONG_IMPORT_CRASH_AFTER_ACKS"].flatMap(Int.init))
        let importer = LogImporter(settings: settings, uploader: uploader, reporter: reporter, stop: stop)
        let result = await importer.run()
        stop.cancel()
        try? await client.shutdown()
        return result
    }
}
