import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// What an import did so far: the figures of its progress line and its summary.
struct ImportCounts {
    let started = Date()
    var files = 0
    var lines = 0
    var sent = 0
    var stored = 0
    var duplicates = 0
    var dropped = 0
    var refused = 0
    var blank = 0
    var refusedByReason: [String: Int] = [:]
    /// Bytes of plain files to read when the run started, and read so far (for the ETA).
    var bytesToRead: Int64 = 0
    var bytesRead: Int64 = 0

    var elapsed: Double { Date().timeIntervalSince(started) }

    mutating func refuse(_ reason: String) {
        refused += 1
        // Reasons that name a value are grouped by what comes before it.
        let group = reason.split(separator: "(", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces) } ?? reason
        refusedByReason[String(group.prefix(120)), default: 0] += 1
    }
}

/// Tells people how an import goes: on a terminal a progress line redrawn twice a second, otherwise
/// (a pipe, a log collector) a line every 10 s; messages (`say`) always on standard error.
final class ProgressReporter: Sendable {
    private let lineMode: Bool
    private let interval: Double
    private let silent: Bool
    private let last = Mutex<(at: Double, drawn: Bool)>((0, false))

    init(mode: String) {
        let terminal = isatty(STDERR_FILENO) == 1
        lineMode = mode == "line" || (mode == "auto" && terminal)
        silent = mode == "none"
        interval = lineMode ? 0.5 : 10
    }

    func say(_ message: String) {
        last.withLock { last in
            write((last.drawn ? "\r\u{1B}[K" : "") + message + "\n")
            last.drawn = false
        }
    }

    func tick(_ counts: ImportCounts) {
        guard !silent else { return }
        let now = Date().timeIntervalSince1970
        last.withLock { last in
            guard now - last.at >= interval else { return }
            last.at = now
            let text = Self.describe(counts)
            if lineMode {
                write("\r\u{1B}[K" + text)
                last.drawn = true
            } else {
                write("datongctl import: " + text + "\n")
            }
        }
    }

    func finish(_ counts: ImportCounts) {
        last.withLock { last in
            if last.drawn { write("\r\u{1B}[K") }
            last.drawn = false
        }
    }

    static func describe(_ counts: ImportCounts) -> String {
        let seconds = max(counts.elapsed, 0.001)
        var text =
            "\(counts.files) file(s), \(counts.lines) lines (\(Int(Double(counts.lines) / seconds))/s), \(megabytes(counts.bytesRead)) MB, stored \(counts.stored), duplicates \(counts.duplicates), refused \(counts.refused)"
        if counts.bytesToRead > 0, counts.bytesRead > 0, counts.bytesRead < counts.bytesToRead {
            let left = Double(counts.bytesToRead - counts.bytesRead) / (Double(counts.bytesRead) / seconds)
            text += ", \(megabytes(counts.bytesToRead - counts.bytesRead)) MB left, ETA \(Int(left) / 60)m\(String(format: "%02d", Int(left) % 60))s"
        }
        return text
    }

    private static func megabytes(_ bytes: Int64) -> String { String(format: "%.1f", Double(bytes) / 1_048_576) }

    private func write(_ text: String) {
        FileHandle.standardError.write(Data(text.utf8))
    }
}

/// Set by SIGTERM or SIGINT: the import stops reading, lets the batches in flight land, saves its
/// state and prints its summary.
final class StopSignal: Sendable {
    private final class Flag: Sendable {
        let raised = Mutex(false)
    }

    private let flag = Flag()
    private let sources: Mutex<[any DispatchSourceSignal]>

    init() {
        let flag = self.flag
        sources = Mutex(
            [SIGTERM, SIGINT].map { number in
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
                source.setEventHandler { flag.raised.withLock { $0 = true } }
                source.resume()
                return source
            })
    }

    var isStopped: Bool { flag.raised.withLock { $0 } }

    /// Sleeps up to `milliseconds`, waking early once stopped.
    func sleep(milliseconds: Int) async {
        var left = milliseconds
        while left > 0, !isStopped {
            try? await Task.sleep(for: .milliseconds(min(left, 100)))
            left -= 100
        }
    }

    /// Gives SIGTERM and SIGINT back to their default action.
    func cancel() {
        sources.withLock { sources in
            for source in sources { source.cancel() }
        }
        signal(SIGTERM, SIG_DFL)
        signal(SIGINT, SIG_DFL)
    }
}
