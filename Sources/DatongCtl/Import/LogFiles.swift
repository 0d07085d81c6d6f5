import CZlib
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A log file found under the importer's paths: where it is now, which file it is (device and inode,
/// which survive a rename), and how big it is.
struct LogFile: Equatable {
    let path: String
    let device: UInt64
    let inode: UInt64
    let size: Int64
    let modified: Double

    var key: String { "\(device):\(inode)" }
    var isGzip: Bool { path.hasSuffix(".gz") }
}

/// Finds the files PATHs name (a file, a directory's files, or a glob), reads the digest of a file's
/// first bytes, and reads complete lines from an offset. No `import` state lives here.
enum LogFiles {
    /// How many first bytes identify a file beside its inode (a reused inode or a file rewritten
    /// in place has other first bytes).
    static let prefixBytes = 4096

    /// Every regular file the paths name now, oldest first (then by name), each once; names starting
    /// with "." (the importer's own state and rejects files by default) are left out of directories
    /// and globs, and so are the files in `excluding` (its state and rejects files wherever they
    /// are). `missing` are the paths that name nothing.
    static func discover(_ paths: [String], excluding: Set<String> = []) -> (files: [LogFile], missing: [String]) {
        let excluded = Set(excluding.map { URL(fileURLWithPath: $0).standardizedFileURL.path })
        var found: [String: LogFile] = [:]
        var missing: [String] = []
        for path in paths {
            var named: [String] = []
            if path.contains(where: { "*?[".contains($0) }) {
                named = glob(path).filter { !(($0 as NSString).lastPathComponent.hasPrefix(".")) }
            } else if let status = status(of: path), status.st_mode & S_IFMT == S_IFDIR {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
                named = names.filter { !$0.hasPrefix(".") }.map { (path as NSString).appendingPathComponent($0) }
            } else {
                named = [path]
            }
            var any = false
            for name in named where !excluded.contains(URL(fileURLWithPath: name).standardizedFileURL.path) {
                guard let status = status(of: name), status.st_mode & S_IFMT == S_IFREG else { continue }
                any = true
                let file = LogFile(
                    path: name, device: UInt64(status.st_dev), inode: UInt64(status.st_ino), size: Int64(status.st_size),
                    modified: Double(status.st_mtim.tv_sec) + Double(status.st_mtim.tv_nsec) / 1e9)
                found[file.key] = found[file.key] ?? file
            }
            if !any { missing.append(path) }
        }
        let files = found.values.sorted { ($0.modified, $0.path) < ($1.modified, $1.path) }
        return (files, missing)
    }

    static func status(of path: String) -> stat? {
        var status = stat()
        return stat(path, &status) == 0 ? status : nil
    }

    private static func glob(_ pattern: String) -> [String] {
        var result = glob_t()
        defer { globfree(&result) }
        guard Glibc.glob(pattern, 0, nil, &result) == 0 else { return [] }
        return (0..<Int(result.gl_pathc)).compactMap { index in result.gl_pathv[index].map { String(cString: $0) } }
    }

    /// FNV-1a (64 bits) of the first `length` bytes of the file, or nil when it has fewer.
    static func prefixDigest(_ path: String, length: Int) -> String? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        // Foundation answers nil, not empty data, for a read at the end: a file met empty has the
        // digest of no bytes (once nil here, it counted as replaced at the next run and was read
        // again from its first line).
        guard let bytes = length == 0 ? Data() : try? handle.read(upToCount: length), bytes.count == length else { return nil }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
        }
        return String(hash, radix: 16)
    }
}

/// One line of a log file: its number (from 1), the offset just past its newline, and its bytes
/// without the newline (nil when it was longer than the limit and skipped).
struct LogLine {
    let number: Int
    let end: Int64
    let text: [UInt8]?
}

/// Reads the complete lines of a file from an offset, a chunk at a time (a `.gz` file inflated as it
/// is read; its offsets count inflated bytes). A last line without its newline is not returned: the
/// file may still be being written. Memory stays within a chunk plus the longest line allowed.
final class LogLineReader {
    static let chunkBytes = 1 << 20

    private let fd: Int32
    private let inflater: StreamInflater?
    private let maxLineBytes: Int
    private var pending: [UInt8] = []
    private var pendingStart: Int64
    private var skippingLongLine = false
    private var nextNumber: Int
    private var chunk: [UInt8] = []
    private var chunkIndex = 0
    private var atEnd = false
    /// How many bytes past the last complete line the file holds (a line still being written).
    private(set) var unterminatedBytes = 0
    /// For `.gz`: the stream ended before its end (cut short or still being written).
    var gzipIncomplete: Bool { inflater.map { !$0.finished } ?? false }

    /// Opens `file` at `offset` (the start of line `line`).
    init(file: LogFile, offset: Int64, line: Int, maxLineBytes: Int) throws {
        fd = open(file.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ImportError.unreadable(file.path, String(cString: strerror(errno))) }
        self.maxLineBytes = maxLineBytes
        nextNumber = line
        pendingStart = offset
        if file.isGzip {
            inflater = try StreamInflater(path: file.path)
            var skip = offset
            while skip > 0 {
                guard let bytes = try readRaw(), !bytes.isEmpty else { break }
                if Int64(bytes.count) <= skip {
                    skip -= Int64(bytes.count)
                } else {
                    chunk = bytes
                    chunkIndex = Int(skip)
                    skip = 0
                }
            }
        } else {
            inflater = nil
            guard lseek(fd, off_t(offset), SEEK_SET) == off_t(offset) else {
                close(fd)
                throw ImportError.unreadable(file.path, "cannot seek to \(offset)")
            }
        }
    }

    deinit { close(fd) }

    /// The next complete line, or nil at the end of what is written so far.
    func next() throws -> LogLine? {
        while true {
            if chunkIndex == chunk.count {
                guard !atEnd, let bytes = try readRaw(), !bytes.isEmpty else {
                    atEnd = true
                    unterminatedBytes = skippingLongLine ? maxLineBytes + 1 : pending.count
                    return nil
                }
                chunk = bytes
                chunkIndex = 0
            }
            let newline = chunk[chunkIndex...].firstIndex(of: UInt8(ascii: "\n"))
            let end = newline ?? chunk.count
            if !skippingLongLine {
                if pending.count + (end - chunkIndex) > maxLineBytes {
                    skippingLongLine = true
                    pending = []
                } else {
                    pending.append(contentsOf: chunk[chunkIndex..<end])
                }
            }
            pendingStart += Int64(end - chunkIndex)
            chunkIndex = end
            guard newline != nil else { continue }
            chunkIndex += 1
            pendingStart += 1
            defer {
                nextNumber += 1
                pending = []
                skippingLongLine = false
            }
            if pending.last == UInt8(ascii: "\r") { pending.removeLast() }
            return LogLine(number: nextNumber, end: pendingStart, text: skippingLongLine ? nil : pending)
        }
    }

    private func readRaw() throws -> [UInt8]? {
        if let inflater {
            return try inflater.next { buffer in read(fd, buffer.baseAddress, buffer.count) }
        }
        var bytes = [UInt8](repeating: 0, count: Self.chunkBytes)
        let count = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count >= 0 else { throw ImportError.unreadable("", String(cString: strerror(errno))) }
        bytes.removeLast(bytes.count - count)
        return bytes
    }
}

/// Inflates a gzip file a chunk at a time: every member of a multi-member file, each checked
/// (CRC-32, length) by zlib; `finished` only once the last member's trailer was read.
final class StreamInflater {
    private static let inputBytes = 1 << 16
    private var stream = z_stream()
    private let input = UnsafeMutablePointer<UInt8>.allocate(capacity: StreamInflater.inputBytes)
    private var inputEnded = false
    private var memberEnded = false
    private(set) var finished = false
    private let path: String

    init(path: String) throws {
        self.path = path
        guard inflateInit2_(&stream, 16 + MAX_WBITS, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            input.deallocate()
            throw ImportError.unreadable(path, "zlib did not start")
        }
    }

    deinit {
        inflateEnd(&stream)
        input.deallocate()
    }

    /// Up to a chunk of inflated bytes; empty at the end of the input.
    func next(read: (UnsafeMutableRawBufferPointer) -> Int) throws -> [UInt8] {
        var output = [UInt8](repeating: 0, count: LogLineReader.chunkBytes)
        var produced = 0
        while produced < output.count {
            if stream.avail_in == 0 {
                guard !inputEnded else { break }
                let count = read(UnsafeMutableRawBufferPointer(start: input, count: Self.inputBytes))
                guard count > 0 else {
                    inputEnded = true
                    break
                }
                stream.next_in = input
                stream.avail_in = uInt(count)
            }
            if memberEnded {
                // More bytes after a member's end: another member.
                guard inflateReset(&stream) == Z_OK else { throw ImportError.unreadable(path, "zlib could not reset") }
                memberEnded = false
                finished = false
            }
            let status = output.withUnsafeMutableBufferPointer { buffer in
                stream.next_out = buffer.baseAddress! + produced
                stream.avail_out = uInt(buffer.count - produced)
                let status = inflate(&stream, Z_NO_FLUSH)
                produced = buffer.count - Int(stream.avail_out)
                return status
            }
            if status == Z_STREAM_END {
                memberEnded = true
                finished = true
                continue
            }
            guard status == Z_OK || (status == Z_BUF_ERROR && stream.avail_in == 0) else {
                throw ImportError.unreadable(path, "not valid gzip")
            }
        }
        output.removeLast(output.count - produced)
        return output
    }
}
