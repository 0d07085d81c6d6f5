import DatongJSON
import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Reads the files, sends their records in batches with a bounded number in flight, and moves each
/// file's state forward only over batches acknowledged in order: what the state says was sent was
/// acknowledged, and what was in flight when the run stopped is sent again by the next run.
final class LogImporter {
    struct Settings {
        let paths: [String]
        let statePath: String
        let rejectsPath: String
        let follow: Bool
        let batchRecords: Int
        let batchBytes: Int
        let parallel: Int
        let maxLineBytes: Int
        let pollMilliseconds: Int
        /// Fault injection for the tests: after this many batches are acknowledged, the process kills
        /// itself with SIGKILL before the state records the last of them (DATONG_IMPORT_CRASH_AFTER_ACKS).
        var crashAfterAcknowledgements: Int? = nil
    }

    /// Where reading of one file stands in this run (ahead of the state while batches are in flight).
    private struct Position {
        var offset: Int64
        var line: Int
        /// The size the file had when it was last read to its end (`.gz`: read again only if it changes).
        var sizeRead: Int64 = -1
    }

    private let settings: Settings
    private let uploader: GatewayUploader
    private let reporter: ProgressReporter
    private let stop: StopSignal
    private var state = ImportState()
    private var positions: [String: Position] = [:]
    private var sequence = 0
    /// Batches sent or made, in order, and which of them are acknowledged.
    private var ledger: [(sequence: Int, fileKey: String, path: String, endOffset: Int64, endLine: Int)] = []
    private var acknowledged = Set<Int>()
    private var sent = Set<Int>()
    private var inFlight = 0
    private var rejectsFile: FileHandle?
    private var lastSave = Date()
    private var acknowledgements = 0
    private var counts = ImportCounts()
    /// Files with bytes after their last newline at the end of the run: `path → bytes`.
    private var unterminated: [String: Int] = [:]

    init(settings: Settings, uploader: GatewayUploader, reporter: ProgressReporter, stop: StopSignal) {
        self.settings = settings
        self.uploader = uploader
        self.reporter = reporter
        self.stop = stop
    }

    /// Imports until the files are read (or, following, until stopped); the summary and exit code.
    func run() async -> (output: String, exitCode: Int32) {
        do {
            state = try ImportState.load(settings.statePath)
        } catch let error as ImportError {
            return (error.message, CtlFailure.usage("").exitCode)
        } catch {
            return ("datongctl import: \(error)", CtlFailure.usage("").exitCode)
        }
        var failure: (String, Int32)?
        do {
            try await withThrowingTaskGroup(of: (Int, BatchOutcome).self) { group in
                defer { group.cancelAll() }
                try await self.importAll(&group)
                while let (sequence, outcome) = try await group.next() {
                    try self.finish(sequence, outcome)
                }
            }
        } catch let error as GatewayUploader.Failure {
            switch error {
            case .refused(let message): failure = ("datongctl import: " + message, CtlFailure.refused("").exitCode)
            case .unreachable(let message): failure = ("datongctl import: " + message, CtlFailure.unreachable("").exitCode)
            }
        } catch let error as ImportError {
            failure = (error.message, CtlFailure.usage("").exitCode)
        } catch {
            failure = ("datongctl import: \(error)", CtlFailure.unreachable("").exitCode)
        }
        try? save()
        try? rejectsFile?.close()
        reporter.finish(counts)
        let summary = self.summary()
        if let failure { return (failure.0 + "\n" + summary, failure.1) }
        return (summary, counts.refused > 0 ? CtlFailure.refused("").exitCode : 0)
    }

    private func importAll(_ group: inout ThrowingTaskGroup<(Int, BatchOutcome), any Error>) async throws {
        var first = true
        while !stop.isStopped {
            let own = [settings.statePath, settings.statePath + ".tmp", settings.rejectsPath]
            let (files, missing) = LogFiles.discover(settings.paths, excluding: Set(own))
            if first {
                guard missing.isEmpty || settings.follow else {
                    throw ImportError.unreadable(missing.joined(separator: ", "), "no such file (or nothing matches)")
                }
                counts.bytesToRead = files.reduce(0) { total, file in
                    file.isGzip ? total : total + max(0, file.size - self.startOffset(file))
                }
            }
            first = false
            // Files still there are remembered however long a follow runs (a week unseen forgets one).
            state.saw(files, now: Date().timeIntervalSince1970)
            var readAny = false
            for file in files where !stop.isStopped {
                readAny = try await read(file, &group) || readAny
            }
            counts.files = files.count
            guard settings.follow else { return }
            // Every pass ends with its batches acknowledged; the state is kept fresh (a health check reads its age).
            while let (sequence, outcome) = try await group.next() { try finish(sequence, outcome) }
            if Date().timeIntervalSince(lastSave) > 15 { try save() }
            reporter.tick(counts)
            if !readAny {
                await stop.sleep(milliseconds: settings.pollMilliseconds)
            }
        }
    }

    /// The offset this run starts `file` from (its state entry, checked against the file).
    private func startOffset(_ file: LogFile) -> Int64 {
        if let position = positions[file.key] { return position.offset }
        let start = state.start(for: file, now: Date().timeIntervalSince1970)
        if start.restarted { reporter.say("\(file.path): not the file the state knew (truncated or replaced): reading it from the start") }
        positions[file.key] = Position(offset: start.offset, line: start.line)
        return start.offset
    }

    /// Reads what is new in `file`; whether there was anything.
    private func read(_ file: LogFile, _ group: inout ThrowingTaskGroup<(Int, BatchOutcome), any Error>) async throws -> Bool {
        _ = startOffset(file)
        guard var position = positions[file.key] else { return false }
        if !file.isGzip, file.size < position.offset {
            // Truncated under us (copytruncate rotation): let what is in flight land, then start again.
            while let (sequence, outcome) = try await group.next() { try finish(sequence, outcome) }
            state.files[file.key] = nil
            positions[file.key] = nil
            _ = startOffset(file)
            reporter.say("\(file.path): truncated to \(file.size) bytes: reading it from the start")
            position = positions[file.key]!
        }
        if file.isGzip ? file.size == position.sizeRead : file.size == position.offset { return false }
        let reader = try LogLineReader(file: file, offset: position.offset, line: position.line, maxLineBytes: settings.maxLineBytes)
        var batch = newBatch(file)
        var any = false
        while !stop.isStopped, let line = try reader.next() {
            any = true
            let lineStart = position.offset
            counts.lines += 1
            if !file.isGzip { counts.bytesRead += line.end - lineStart }
            position.offset = line.end
            position.line = line.number + 1
            switch Self.classify(line, maxLineBytes: settings.maxLineBytes) {
            case .blank:
                counts.blank += 1
            case .refused(let reason):
                refuse(file.path, line.number, reason, line.text ?? [])
            case .record(let bytes):
                if batch.records.count == settings.batchRecords || (batch.bytes + bytes.count > settings.batchBytes && !batch.records.isEmpty) {
                    // The full batch ends at the line before this one.
                    try await submit(batch, &group)
                    batch = newBatch(file)
                }
                batch.lines.append(line.number)
                batch.records.append(bytes)
                batch.bytes += bytes.count + 1
            }
            batch.endOffset = line.end
            batch.endLine = line.number
            reporter.tick(counts)
        }
        if batch.endLine > 0 { try await submit(batch, &group) }
        if !stop.isStopped {
            position.sizeRead = file.size
            if reader.unterminatedBytes > 0 { unterminated[file.path] = reader.unterminatedBytes } else { unterminated[file.path] = nil }
            if reader.gzipIncomplete { reporter.say("\(file.path): the gzip stream ends early (cut short, or still being written)") }
        }
        positions[file.key] = position
        return any
    }

    private func newBatch(_ file: LogFile) -> ImportBatch {
        sequence += 1
        return ImportBatch(sequence: sequence, fileKey: file.key, path: file.path)
    }

    /// Sends `batch` once fewer than `parallel` batches are past the state; one with no record is
    /// acknowledged at once (its lines were blank or refused here).
    private func submit(_ batch: ImportBatch, _ group: inout ThrowingTaskGroup<(Int, BatchOutcome), any Error>) async throws {
        // At most `parallel` batches past what the state records, acknowledged or not: a kill sends
        // no more than that again.
        while ledger.count >= settings.parallel, inFlight > 0, let (sequence, outcome) = try await group.next() {
            try finish(sequence, outcome)
        }
        ledger.append((batch.sequence, batch.fileKey, batch.path, batch.endOffset, batch.endLine))
        guard !batch.records.isEmpty else {
            try finish(batch.sequence, BatchOutcome())
            return
        }
        counts.sent += batch.records.count
        inFlight += 1
        sent.insert(batch.sequence)
        let uploader = self.uploader
        group.addTask { (batch.sequence, try await uploader.send(batch)) }
    }

    /// Counts a batch's outcome and moves the state over every batch acknowledged in order.
    private func finish(_ sequence: Int, _ outcome: BatchOutcome) throws {
        guard let batch = ledger.first(where: { $0.sequence == sequence }) else { return }
        if sent.remove(sequence) != nil { inFlight -= 1 }
        acknowledged.insert(sequence)
        counts.stored += outcome.stored
        counts.duplicates += outcome.duplicates
        counts.dropped += outcome.dropped
        for refused in outcome.refused {
            refuse(batch.path, refused.line, refused.reason, refused.text)
        }
        var moved = false
        while let head = ledger.first, acknowledged.contains(head.sequence) {
            ledger.removeFirst()
            acknowledged.remove(head.sequence)
            state.acknowledge(head.fileKey, offset: head.endOffset, line: head.endLine)
            moved = true
            acknowledgements += 1
            if acknowledgements == settings.crashAfterAcknowledgements { kill(getpid(), SIGKILL) }
        }
        if moved { try save() }
    }

    private func save() throws {
        state.forget(before: Date().timeIntervalSince1970)
        try state.save(settings.statePath)
        lastSave = Date()
    }

    private func refuse(_ path: String, _ line: Int, _ reason: String, _ text: [UInt8]) {
        counts.refuse(reason)
        if counts.refused <= 100 {
            reporter.say("\(path):\(line): \(reason)")
        } else if counts.refused == 101 {
            reporter.say("more lines refused: see \(settings.rejectsPath)")
        }
        if rejectsFile == nil {
            if !FileManager.default.fileExists(atPath: settings.rejectsPath) {
                _ = FileManager.default.createFile(atPath: settings.rejectsPath, contents: nil)
            }
            rejectsFile = FileHandle(forWritingAtPath: settings.rejectsPath)
            _ = try? rejectsFile?.seekToEnd()
        }
        let entry = RejectedLine(file: path, line: line, reason: reason, text: String(decoding: text, as: UTF8.self))
        if var bytes = try? JSONEncoder().encode(entry) {
            bytes.append(UInt8(ascii: "\n"))
            try? rejectsFile?.write(contentsOf: bytes)
        }
    }

    enum Classified {
        case blank
        case refused(String)
        case record([UInt8])
    }

    /// A line is a record when it is one JSON object with a string `type`; the gateway checks the rest.
    static func classify(_ line: LogLine, maxLineBytes: Int) -> Classified {
        guard let text = line.text else { return .refused("line longer than \(maxLineBytes) bytes") }
        guard text.contains(where: { $0 != 0x20 && $0 != 0x09 && $0 != 0x0D }) else { return .blank }
        let document: JSONDocument
        do {
            document = try JSONParser.parse(text, maxDepth: 64)
        } catch {
            return .refused("not JSON: \(error.message)")
        }
        guard document.root.isObject else { return .refused("not a record: a JSON value that is not an object") }
        guard document.root["type"]?.kind == .string else { return .refused("not a record: no \"type\"") }
        return .record(text)
    }

    private func summary() -> String {
        var lines: [String] = []
        let seconds = max(counts.elapsed, 0.001)
        lines.append(
            "datongctl import: \(counts.files) file(s), \(counts.lines) line(s) read in \(String(format: "%.1f", seconds)) s (\(Int(Double(counts.lines) / seconds)) lines/s)"
        )
        lines.append(
            "  stored \(counts.stored), duplicates \(counts.duplicates), dropped by the gateway (erased users, bots) \(counts.dropped), refused \(counts.refused), blank \(counts.blank)"
        )
        for (reason, count) in counts.refusedByReason.sorted(by: { ($1.value, $0.key) < ($0.value, $1.key) }).prefix(10) {
            lines.append("    \(count)\t\(reason)")
        }
        if counts.refused > 0 { lines.append("  refused lines are in \(settings.rejectsPath)") }
        for (path, bytes) in unterminated.sorted(by: { $0.key < $1.key }) {
            lines.append("  left for later: \(path) ends with \(bytes) byte(s) after its last newline (a line still being written)")
        }
        lines.append("  state: \(settings.statePath)")
        return lines.joined(separator: "\n")
    }
}

/// One refused line, as the rejects file keeps it.
struct RejectedLine: Codable {
    let file: String
    let line: Int
    let reason: String
    let text: String
}
