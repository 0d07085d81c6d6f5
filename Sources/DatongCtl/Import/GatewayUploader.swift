import AsyncHTTPClient
import CZlib
import DatongJSON
import Foundation
import NIOCore
import NIOHTTP1

/// Records of one file on their way to the gateway: each line's number and text, and the offset
/// and line number the file's state moves to once the gateway acknowledged them.
struct ImportBatch: Sendable {
    let sequence: Int
    let fileKey: String
    let path: String
    var lines: [Int] = []
    var records: [[UInt8]] = []
    var bytes = 0
    var endOffset: Int64 = 0
    var endLine = 0
}

/// What the gateway made of a batch: its counts, and each refused line with the gateway's reason.
struct BatchOutcome: Sendable {
    var stored = 0
    var duplicates = 0
    var dropped = 0
    var refused: [(line: Int, reason: String, text: [UInt8])] = []
}

/// Sends batches through the gateway's ordinary upload path, as the server SDKs do: `POST /sa` with
/// `gzip=1&data_list=` base64 of the gzipped JSON array. Connection errors, 408, 429 and 5xx are
/// retried with backoff (and `Retry-After`); a batch refused as a whole (400, 413, 415) is split in
/// halves until the line that is refused is found; 401, 403 and 404 stop the import.
struct GatewayUploader: Sendable {
    let baseURL: String
    let project: String?
    let token: String?
    let http: HTTPClient
    /// How long to keep retrying one batch before giving up (nil: forever, as `--follow` does).
    let giveUpAfter: Double?
    let stop: StopSignal
    let say: @Sendable (String) -> Void

    enum Failure: Error {
        /// The gateway refuses every batch (unknown project, wrong token): nothing will pass.
        case refused(String)
        /// The gateway could not be reached or failed for longer than `giveUpAfter`.
        case unreachable(String)
    }

    func send(_ batch: ImportBatch) async throws -> BatchOutcome {
        try await send(lines: batch.lines, records: batch.records, path: batch.path)
    }

    private func send(lines: [Int], records: [[UInt8]], path: String) async throws -> BatchOutcome {
        let answer = try await post(records)
        switch answer.status {
        case 200..<300:
            return Self.outcome(of: answer.body, lines: lines, records: records)
        case 400, 413, 415:
            guard records.count > 1 else {
                return BatchOutcome(refused: [(lines[0], Self.reason(answer.status, answer.body), records[0])])
            }
            let half = records.count / 2
            var first = try await send(lines: Array(lines[..<half]), records: Array(records[..<half]), path: path)
            let second = try await send(lines: Array(lines[half...]), records: Array(records[half...]), path: path)
            first.stored += second.stored
            first.duplicates += second.duplicates
            first.dropped += second.dropped
            first.refused += second.refused
            return first
        default:
            throw Failure.refused("the gateway refused \(path) (HTTP \(answer.status)): \(Self.reason(answer.status, answer.body))")
        }
    }

    /// Posts one request until it gets an answer that is not "try again".
    private func post(_ records: [[UInt8]]) async throws -> (status: UInt, body: [UInt8]) {
        let body = try Self.form(records)
        var url = baseURL + "/sa"
        var query: [String] = []
        if let project { query.append("project=" + String(decoding: Self.escape(Array(project.utf8)), as: UTF8.self)) }
        if let token { query.append("token=" + String(decoding: Self.escape(Array(token.utf8)), as: UTF8.self)) }
        if !query.isEmpty { url += "?" + query.joined(separator: "&") }
        let started = Date()
        var delay = 0.5
        while true {
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
            request.headers.add(name: "User-Agent", value: "datongctl-import")
            request.body = .bytes(ByteBuffer(bytes: body))
            var wait: Double
            var problem: String
            do {
                let response = try await http.execute(request, timeout: .seconds(120))
                let payload = Array(try await response.body.collect(upTo: 1 << 20).readableBytesView)
                let status = response.status.code
                guard status == 408 || status == 429 || status >= 500 else { return (status, payload) }
                problem = "HTTP \(status) \(Self.reason(status, payload))"
                wait = response.headers.first(name: "Retry-After").flatMap(Double.init).map { min(max($0, 0.1), 300) } ?? delay
            } catch {
                problem = "\(error)"
                wait = delay
            }
            if stop.isStopped {
                throw Failure.unreachable("stopped while the gateway at \(baseURL) was not taking a batch: \(problem)")
            }
            if let giveUpAfter, Date().timeIntervalSince(started) + wait > giveUpAfter {
                throw Failure.unreachable("the gateway at \(baseURL) did not take a batch for \(Int(giveUpAfter)) s: \(problem)")
            }
            say("gateway: \(problem); trying again in \(String(format: "%.1f", wait)) s")
            await stop.sleep(milliseconds: Int(wait * 1000))
            delay = min(delay * 2, 30) * Double.random(in: 0.8...1.2)
        }
    }

    /// `gzip=1&data_list=` and the form-escaped base64 of the gzipped JSON array of `records`.
    static func form(_ records: [[UInt8]]) throws -> [UInt8] {
        var json: [UInt8] = [UInt8(ascii: "[")]
        json.reserveCapacity(records.reduce(2) { $0 + $1.count + 1 })
        for (index, record) in records.enumerated() {
            if index > 0 { json.append(UInt8(ascii: ",")) }
            json.append(contentsOf: record)
        }
        json.append(UInt8(ascii: "]"))
        var body = Array("gzip=1&data_list=".utf8)
        body.append(contentsOf: escape(Array(try gzip(json).base64EncodedData())))
        return body
    }

    /// Percent-escapes what a form value cannot hold as it is (base64's `+`, `/` and `=` among it).
    static func escape(_ bytes: [UInt8]) -> [UInt8] {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + bytes.count / 8)
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                out.append(byte)
            default:
                out += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 15)]]
            }
        }
        return out
    }

    /// Gzip (level 1: the gateway, not the importer, should be what limits an import).
    static func gzip(_ bytes: [UInt8]) throws -> Data {
        var stream = z_stream()
        guard deflateInit2_(&stream, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK
        else { throw ImportError.unreadable("", "zlib did not start") }
        defer { deflateEnd(&stream) }
        var output = [UInt8](repeating: 0, count: Int(deflateBound(&stream, uLong(bytes.count))) + 32)
        let status = bytes.withUnsafeBufferPointer { input in
            output.withUnsafeMutableBufferPointer { out in
                stream.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
                stream.avail_in = uInt(input.count)
                stream.next_out = out.baseAddress
                stream.avail_out = uInt(out.count)
                return deflate(&stream, Z_FINISH)
            }
        }
        guard status == Z_STREAM_END else { throw ImportError.unreadable("", "zlib could not compress a batch") }
        return Data(output[..<Int(stream.total_out)])
    }

    /// The counts of a 200 answer (`UploadAnswer`), each refused record matched to its line.
    static func outcome(of body: [UInt8], lines: [Int], records: [[UInt8]]) -> BatchOutcome {
        guard let answer = (try? JSONValue(parsing: body))?.objectValue else {
            // 200 means every record is stored, a duplicate, or kept as rejected: count them as taken.
            return BatchOutcome(stored: records.count)
        }
        func count(_ name: String) -> Int { Int(answer[name]?.integerValue ?? 0) }
        var outcome = BatchOutcome(
            stored: count("stored"), duplicates: count("duplicates"), dropped: count("suppressed") + count("bots"))
        for problem in answer["problems"]?.arrayValue ?? [] {
            guard let index = problem["index"]?.integerValue, index >= 0, index < records.count else { continue }
            outcome.refused.append((lines[Int(index)], problem["reason"]?.stringValue ?? "rejected", records[Int(index)]))
        }
        return outcome
    }

    /// The gateway's message for a refused request (`{"error","message"}`), or its status.
    static func reason(_ status: UInt, _ body: [UInt8]) -> String {
        guard let problem = (try? JSONValue(parsing: body))?.objectValue else { return "HTTP \(status)" }
        let code = problem["error"]?.stringValue ?? "HTTP \(status)"
        guard let message = problem["message"]?.stringValue, !message.isEmpty else { return code }
        return "\(code): \(message)"
    }
}
