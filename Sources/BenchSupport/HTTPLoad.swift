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
        package let headers: [String: String]
        package let body: [UInt8]

        package var text: String { String(decoding: body, as: UTF8.self) }
    }

    /// What a run measured: every request's latency (same order as sent, in seconds), and the
    /// wall time.
    package struct Outcome: Sendable {
        package let latencies: [Double]
        package let elapsed: Double

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

        /// Connects to 127.0.0.1:`port`; with `receiveTimeout` (seconds), a read that waits longer
        /// throws instead of blocking for ever.
        package init(port: Int, receiveTimeout: Double? = nil) throws {
            socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard socket >= 0 else { throw BenchError("socket: \(String(cString: strerror(errno)))") }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else {
                Glibc.close(socket)
                throw BenchError("connect to 127.0.0.1:\(port): \(String(cString: strerror(errno)))")
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
            var headEnd: Int?
            while true {
                if let end = Self.find([13, 10, 13, 10], in: buffer) {
                    headEnd = end
                    break
                }
                guard buffer.count < 1 << 16 else { throw BenchError("an answer's head is over 64 KiB") }
                try fill()
            }
            let head = String(decoding: buffer[..<headEnd!], as: UTF8.self)
            let lines = head.split(separator: "\r\n")
            guard let statusLine = lines.first, statusLine.hasPrefix("HTTP/1.1 "),
                let status = Int(statusLine.dropFirst(9).prefix(3))
            else {
                throw BenchError("not an HTTP/1.1 answer: \(head.prefix(80))")
            }
            var headers: [String: String] = [:]
            for line in lines.dropFirst() {
                let parts = line.split(separator: ":", maxSplits: 1)
                if parts.count == 2 { headers[parts[0].lowercased()] = parts[1].trimmingCharacters(in: .whitespaces) }
            }
            let length = headers["content-length"].flatMap { Int($0) }
            guard let length else { throw BenchError("an answer without Content-Length (status \(status))") }
            let bodyStart = headEnd! + 4
            while buffer.count < bodyStart + length { try fill() }
            let body = Array(buffer[bodyStart..<(bodyStart + length)])
            buffer.removeFirst(bodyStart + length)
            return Answer(status: status, headers: headers, body: body)
        }

        private func fill() throws {
            let count = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { throw BenchError(count == 0 ? "the server closed the connection" : "recv: \(String(cString: strerror(errno)))") }
            buffer.append(contentsOf: chunk[..<count])
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
