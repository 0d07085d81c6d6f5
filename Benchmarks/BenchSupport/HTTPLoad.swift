import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A load generator as lean as `wrk`: each connection is a blocking keep-alive socket on its own
/// thread that writes prebuilt HTTP/1.1 requests and reads the answers, so the machine's CPU goes
/// to the services under test rather than to the client.
package enum HTTPLoad {
    /// One request, serialized once (request line, headers and body).
    package struct Request: Sendable {
        package let bytes: [UInt8]

        /// `method path` with `body`; `headers` are added as given (name, value).
        package init(_ method: String = "POST", _ path: String, body: [UInt8] = [], headers: [(String, String)] = []) {
            var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: \(body.count)\r\n"
            for (name, value) in headers { head += "\(name): \(value)\r\n" }
            head += "\r\n"
            bytes = Array(head.utf8) + body
        }
    }

    /// One answer: its status, headers (names lowercased) and body.
    package struct Answer: Sendable {
        package let status: Int
        /// The head's header lines as received (without the status line), parsed only when asked:
        /// the load generator shares the machine with what it measures.
        let head: [UInt8]
        package let body: [UInt8]

        package var text: String { String(decoding: body, as: UTF8.self) }

        package var headers: [String: String] {
            var headers: [String: String] = [:]
            for line in String(decoding: head, as: UTF8.self).split(separator: "\r\n") {
                let parts = line.split(separator: ":", maxSplits: 1)
                if parts.count == 2 { headers[parts[0].lowercased()] = parts[1].trimmingCharacters(in: .whitespaces) }
            }
            return headers
        }
    }

    /// What a run measured: every request's latency (same order as sent, in seconds), and the
    /// wall time.
    package struct Outcome: Sendable {
        package let latencies: [Double]
        package let elapsed: Double

        package init(latencies: [Double], elapsed: Double) {
            self.latencies = latencies
            self.elapsed = elapsed
        }

        /// The latency at `fraction` (0.5 = median, 0.99 = p99).
        package func percentile(_ fraction: Double) -> Double {
            let sorted = latencies.sorted()
            guard !sorted.isEmpty else { return 0 }
            return sorted[min(sorted.count - 1, Int((Double(sorted.count) * fraction).rounded(.up)) - 1)]
        }
    }

    /// Sends every request once over `connections` keep-alive connections to 127.0.0.1:`port`;
    /// `check` sees each answer and throws to stop the run.
    ///
    /// Without `rate`, as fast as the server answers. With `rate` (requests/s), request `i` is due
    /// at `i / rate` seconds after the start, and its latency counts from when it was due, not from
    /// when a connection got free to send it (as `wrk2` does): a server that falls behind shows
    /// it in the latencies instead of slowing the client down.
    package static func run(
        port: Int, requests: [Request], connections: Int, rate: Double? = nil,
        check: @escaping @Sendable (Int, Answer) throws -> Void
    ) async throws -> Outcome {
        let next = WorkCounter()
        let latencies = Latencies(count: requests.count)
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<max(1, connections) {
                group.addTask {
                    try await onThread {
                        let connection = try Connection(port: port)
                        defer { connection.close() }
                        while let index = next.take(below: requests.count) {
                            var sent = ContinuousClock.now
                            if let rate {
                                let due = start + .seconds(Double(index) / rate)
                                if due > sent { Thread.sleep(forTimeInterval: Bench.seconds(due - sent)) }
                                sent = due
                            }
                            let answer = try connection.exchange(requests[index].bytes)
                            let latency = Bench.seconds(ContinuousClock.now - sent)
                            latencies.record(latency, at: index)
                            try check(index, answer)
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        return Outcome(latencies: latencies.all, elapsed: Bench.seconds(ContinuousClock.now - start))
    }

    private final class Latencies: Sendable {
        private let values: Mutex<[Double]>

        init(count: Int) { values = Mutex([Double](repeating: 0, count: count)) }

        func record(_ latency: Double, at index: Int) { values.withLock { $0[index] = latency } }

        var all: [Double] { values.withLock { $0 } }
    }

    /// Runs blocking `work` on a thread of its own, not on the cooperative pool: that pool has one
    /// thread per core, and a blocking read there can starve the very server it waits for when
    /// that server runs in the same process (as in the tests).
    @discardableResult
    package static func onThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let thread = Thread {
                do {
                    continuation.resume(returning: try work())
                } catch {
                    continuation.resume(throwing: error)
                }
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    /// A blocking keep-alive HTTP/1.1 connection. Answers must carry `Content-Length` (the
    /// services' do).
    package final class Connection {
        private let socket: Int32
        private var buffer: [UInt8] = []
        private var chunk = [UInt8](repeating: 0, count: 1 << 16)

        /// Connects to `host`:`port` (an IPv4 address); with `receiveTimeout` (seconds), a read that
        /// waits longer throws instead of blocking for ever.
        package init(host: String = "127.0.0.1", port: Int, receiveTimeout: Double? = nil) throws {
            socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard socket >= 0 else { throw BenchError("socket: \(String(cString: strerror(errno)))") }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr(host)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else {
                Glibc.close(socket)
                throw BenchError("connect to \(host):\(port): \(String(cString: strerror(errno)))")
            }
            var one: Int32 = 1
            setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            if let receiveTimeout {
                var limit = timeval(tv_sec: Int(receiveTimeout), tv_usec: Int((receiveTimeout - receiveTimeout.rounded(.down)) * 1e6))
                setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            }
            buffer.reserveCapacity(1 << 16)
        }

        package func close() { Glibc.close(socket) }

        /// Writes `request` and reads one answer.
        package func exchange(_ request: [UInt8]) throws -> Answer {
            try write(request)
            return try readAnswer()
        }

        /// Writes `bytes` (a request, or a part of one).
        package func write(_ bytes: [UInt8]) throws {
            try bytes.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count {
                    let written = send(socket, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                    guard written > 0 else { throw BenchError("send: \(String(cString: strerror(errno)))") }
                    offset += written
                }
            }
        }

        /// Reads one answer.
        package func readAnswer() throws -> Answer {
            // The head: up to the blank line.
            var found: Int?
            while true {
                if let end = Self.find([13, 10, 13, 10], in: buffer) {
                    found = end
                    break
                }
                guard buffer.count < 1 << 16 else { throw BenchError("an answer's head is over 64 KiB") }
                try fill()
            }
            let headEnd = found!
            guard headEnd >= 12, buffer[..<9].elementsEqual("HTTP/1.1 ".utf8), let status = Self.number(buffer[9..<12]) else {
                throw BenchError("not an HTTP/1.1 answer: \(String(decoding: buffer.prefix(80), as: UTF8.self))")
            }
            let linesStart = (Self.find([13, 10], in: buffer).map { $0 + 2 }) ?? headEnd
            let head = Array(buffer[min(linesStart, headEnd)..<headEnd])
            guard let length = Self.contentLength(head) else { throw BenchError("an answer without Content-Length (status \(status))") }
            let bodyStart = headEnd + 4
            while buffer.count < bodyStart + length { try fill() }
            let body = Array(buffer[bodyStart..<(bodyStart + length)])
            buffer.removeFirst(bodyStart + length)
            return Answer(status: status, head: head, body: body)
        }

        private func fill() throws {
            let count = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { throw BenchError(count == 0 ? "the server closed the connection" : "recv: \(String(cString: strerror(errno)))") }
            buffer.append(contentsOf: chunk[..<count])
        }

        /// The decimal number `digits` spell, nil for anything else.
        private static func number(_ digits: some Collection<UInt8>) -> Int? {
            guard !digits.isEmpty, digits.count <= 18 else { return nil }
            var value = 0
            for digit in digits {
                guard (48...57).contains(digit) else { return nil }
                value = value * 10 + Int(digit - 48)
            }
            return value
        }

        /// The value of the `Content-Length` line of `head` (header lines, CRLF between them).
        private static func contentLength(_ head: [UInt8]) -> Int? {
            let name = Array("content-length:".utf8)
            var lineStart = 0
            while lineStart < head.count {
                let lineEnd = (lineStart..<head.count).first { head[$0] == 13 } ?? head.count
                if lineEnd - lineStart > name.count,
                    zip(head[lineStart..<(lineStart + name.count)], name).allSatisfy({ ($0 | 0x20) == $1 || $0 == $1 })
                {
                    return number(head[(lineStart + name.count)..<lineEnd].drop { $0 == 32 || $0 == 9 }.reversed().drop { $0 == 32 || $0 == 9 }.reversed())
                }
                lineStart = lineEnd + 2
            }
            return nil
        }

        private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
            guard haystack.count >= needle.count else { return nil }
            for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
                if haystack[start..<(start + needle.count)].elementsEqual(needle) { return start }
            }
            return nil
        }
    }
}
