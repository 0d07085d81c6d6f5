// config-bench: requests/s of the request SDKs make most often, a 304 revalidation of a published
// document (`If-None-Match` with its current ETag), next to `GET /health` on the same server in the
// same run (config-service's cheapest route: the ceiling of the HTTP stack here).
//
//   scripts/bench config [--rounds N] [--requests N] [--concurrency N]
//
// (the script starts a throwaway PostgreSQL and sets DATABASE_URL).
import AsyncHTTPClient
import ConfigService
import DatongPostgres
import DatongRuntime
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

let arguments = CommandLine.arguments
func option(_ name: String, default value: Int) -> Int {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count, let parsed = Int(arguments[index + 1]), parsed > 0 else {
        return value
    }
    return parsed
}
let rounds = option("--rounds", default: 5)
let requestCount = option("--requests", default: 20_000)
let concurrency = option("--concurrency", default: 32)
let logger: Logger = {
    var logger = Logger(label: "config-bench")
    logger.logLevel = .error
    return logger
}()

guard let adminURL = ProcessInfo.processInfo.environment["DATABASE_URL"] else {
    print("config-bench: set DATABASE_URL to a PostgreSQL server (scripts/bench config starts one)")
    exit(2)
}

// A fresh database for config-service.
let admin = PostgresPool(url: adminURL, maxConnections: 1, logger: logger)
let name = "datong_bench_\(UInt64.random(in: 0...UInt64.max))"
try await admin.withConnection { try $0.execute("CREATE DATABASE \(name)") }
await admin.close()
var components = URLComponents(string: adminURL)!
components.path = "/\(name)"
let databaseURL = components.string!

let port = Int.random(in: 20_000...40_000)
let token = "bench-admin-token"
let app = buildConfigApplication(
    settings: ConfigSettings(server: ServerSettings(port: port, logLevel: "error"), database: DatabaseSettings(url: databaseURL), adminToken: token),
    runtime: ServiceRuntime(logger: logger)
)
let server = Task { try await app.runService() }
let client = HTTPClient(
    eventLoopGroupProvider: .singleton,
    configuration: .init(connectionPool: .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: concurrency))
)
let base = "http://127.0.0.1:\(port)"

struct BenchError: Error, CustomStringConvertible {
    let description: String
}

func send(_ path: String, method: HTTPMethod = .GET, headers: [(String, String)] = [], body: String? = nil) async throws -> HTTPClientResponse {
    var request = HTTPClientRequest(url: base + path)
    request.method = method
    for (name, value) in headers { request.headers.add(name: name, value: value) }
    if let body { request.body = .bytes(ByteBuffer(string: body)) }
    let response = try await client.execute(request, timeout: .seconds(30))
    _ = try await response.body.collect(upTo: 1 << 20)
    return response
}

// Wait for the server, then publish a realistic remote config.
var ready = false
for _ in 0..<200 where !ready {
    ready = (try? await send("/health"))?.status == .ok
    if !ready { try await Task.sleep(for: .milliseconds(50)) }
}
guard ready else { throw BenchError(description: "config-service did not start") }
let published = try await send(
    "/v1/projects/default/remote-config?platform=ios", method: .PUT, headers: [("Authorization", "Bearer \(token)")],
    body: #"{"configs":{"disableSDK":false,"disableDebugMode":false,"autoTrackMode":15,"event_blacklist":["$AppViewScreen"],"effect_mode":0},"v":"1"}"#
)
guard published.status == .created, let etag = (try? await send("/v1/projects/default/remote-config?platform=ios"))?.headers.first(name: "ETag") else {
    throw BenchError(description: "could not publish the document")
}

/// Hands out 0, 1, 2, … to concurrent workers.
final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    func take() -> Int { value.add(1, ordering: .relaxed).oldValue }
}

/// Requests/s of `requestCount` requests, `concurrency` at a time; every answer must have `status`.
func measure(_ path: String, headers: [(String, String)], status: HTTPResponseStatus) async throws -> Double {
    let next = Counter()
    let clock = ContinuousClock()
    let elapsed = try await clock.measure {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<concurrency {
                group.addTask {
                    while next.take() < requestCount {
                        let response = try await send(path, headers: headers)
                        guard response.status == status else { throw BenchError(description: "\(path): HTTP \(response.status.code)") }
                    }
                }
            }
            try await group.waitForAll()
        }
    }
    return Double(requestCount) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
}

print("config-bench: \(requestCount) requests per path and round, \(concurrency) concurrent keep-alive connections, \(rounds) rounds, median")
var health: [Double] = []
var revalidations: [Double] = []
for _ in 0..<rounds {
    health.append(try await measure("/health", headers: [], status: .ok))
    revalidations.append(try await measure("/v1/projects/default/remote-config?platform=ios", headers: [("If-None-Match", etag)], status: .notModified))
}
func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
let healthRate = median(health), revalidationRate = median(revalidations)
print("path                                        requests/s   vs /health")
print("GET /health (baseline)                      \(String(format: "%10.0f", healthRate))        1.00x")
print("GET document, If-None-Match current → 304   \(String(format: "%10.0f", revalidationRate))        \(String(format: "%.2f", revalidationRate / healthRate))x")
try await client.shutdown()
server.cancel()
_ = try? await server.value
