import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// How far `datongctl import` got in each file: the offset just past the last line whose batch the
/// gateway acknowledged, per file identity (device, inode and a digest of its first bytes). Written
/// to a temporary file, synced and renamed over the old one after each acknowledged batch, so a
/// crash at any moment leaves either the old state or the new one.
struct ImportState: Codable, Equatable {
    struct Entry: Codable, Equatable {
        var device: UInt64
        var inode: UInt64
        /// How many first bytes `prefixDigest` covers (up to `LogFiles.prefixBytes`).
        var prefixBytes: Int
        var prefixDigest: String
        /// Bytes (inflated bytes for `.gz`) of complete lines acknowledged.
        var offset: Int64
        /// Lines acknowledged (the next line's number is `lines + 1`).
        var lines: Int
        /// Where the file was last seen, for people reading the state.
        var path: String
        /// When the file was last seen (seconds since 1970); entries of files gone for a week are dropped.
        var seen: Double

        enum CodingKeys: String, CodingKey {
            case device, inode, offset, lines, path, seen
            case prefixBytes = "prefix_bytes"
            case prefixDigest = "prefix_digest"
        }
    }

    var version = 1
    var files: [String: Entry] = [:]

    static let forgetAfter: Double = 7 * 24 * 3600

    /// The state in `path`, or an empty one when there is none yet.
    static func load(_ path: String) throws -> ImportState {
        guard FileManager.default.fileExists(atPath: path) else { return ImportState() }
        do {
            let state = try JSONDecoder().decode(ImportState.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
            guard state.version == 1 else { throw ImportError.badState(path, "version \(state.version) is not one this datongctl reads") }
            return state
        } catch let error as ImportError {
            throw error
        } catch {
            throw ImportError.badState(path, "\(error)")
        }
    }

    /// Writes the state to `path` atomically and durably.
    func save(_ path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        let bytes = try encoder.encode(self)
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw ImportError.badState(path, "cannot write: \(String(cString: strerror(errno)))") }
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        close(fd)
        guard written == bytes.count, synced, rename(temporary, path) == 0 else {
            throw ImportError.badState(path, "cannot write: \(String(cString: strerror(errno)))")
        }
        // The rename itself is durable once the directory is synced.
        let directory = open((path as NSString).deletingLastPathComponent.isEmpty ? "." : (path as NSString).deletingLastPathComponent, O_RDONLY | O_CLOEXEC)
        if directory >= 0 {
            fsync(directory)
            close(directory)
        }
    }

    /// Where to start reading `file`: its entry's offset when the entry is this file (same first
    /// bytes, not shorter than what was read), otherwise the start (a new file, a reused inode, or a
    /// file truncated or rewritten). The entry is made or mended to match the file as it is now.
    mutating func start(for file: LogFile, now: Double) -> (offset: Int64, line: Int, restarted: Bool) {
        let length = Int(min(Int64(LogFiles.prefixBytes), file.size))
        if var entry = files[file.key] {
            let intact =
                (file.isGzip || file.size >= entry.offset)
                && LogFiles.prefixDigest(file.path, length: entry.prefixBytes) == entry.prefixDigest
            if intact {
                if length > entry.prefixBytes, let digest = LogFiles.prefixDigest(file.path, length: length) {
                    entry.prefixBytes = length
                    entry.prefixDigest = digest
                }
                entry.path = file.path
                entry.seen = now
                files[file.key] = entry
                return (entry.offset, entry.lines + 1, false)
            }
        }
        let restarted = files[file.key] != nil
        files[file.key] = Entry(
            device: file.device, inode: file.inode, prefixBytes: length,
            prefixDigest: LogFiles.prefixDigest(file.path, length: length) ?? "", offset: 0, lines: 0, path: file.path, seen: now)
        return (0, 1, restarted)
    }

    /// Records that the lines of `key` up to `offset` (line `line`) are acknowledged.
    mutating func acknowledge(_ key: String, offset: Int64, line: Int) {
        guard var entry = files[key], offset > entry.offset else { return }
        entry.offset = offset
        entry.lines = line
        files[key] = entry
    }

    /// Marks the entries of `files` (found now) as seen now, under the path each has now.
    mutating func saw(_ files: [LogFile], now: Double) {
        for file in files {
            self.files[file.key]?.seen = now
            self.files[file.key]?.path = file.path
        }
    }

    /// Drops entries of files not seen for a week.
    mutating func forget(before now: Double) {
        files = files.filter { now - $0.value.seen < Self.forgetAfter }
    }
}

/// Why an import could not go on.
enum ImportError: Error {
    case unreadable(String, String)
    case badState(String, String)

    var message: String {
        switch self {
        case .unreadable(let path, let why): return "datongctl import: cannot read \(path): \(why)"
        case .badState(let path, let why): return "datongctl import: state file \(path): \(why)"
        }
    }
}
