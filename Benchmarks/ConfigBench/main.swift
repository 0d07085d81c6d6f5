// config-bench: requests/s of the request SDKs make most often, a 304 revalidation of a published
// document (`If-None-Match` with its current ETag), next to `GET /health` on the same server in the
// same run (config-service's cheapest route: the ceiling of the HTTP stack here).
//
//   scripts/bench config [--rounds N] [--requests N] [--concurrency N]
//
// (the script starts a throwaway PostgreSQL and sets DATABASE_URL).
import AsyncHTTPClient
import BenchSupport
import ConfigService
import DatongPostgres
import DatongRuntime
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1

let rounds = Bench.option("--rounds", default: 5)
let requestCount = Bench.option("--requests", default: 20_000)
let concurrency = Bench.option("--concurrency", default: 32)
let logger = Bench.quietLogger("config-bench")

guard let adminURL = ProcessInfo.processInfo.environment["DATABASE_URL"] else {
    print("config-bench: set DATABASE_URL to a PostgreSQL server (scripts/bench config starts one)")
    exit(2)
}

let databaseURL = try await Bench.freshDatabase(adminURL: adminURL, logger: logger)

let port = Int.random(in: 20_000...40_000)
let token = "bench-admin-token"
let app = buildConfigApplication(
    settings: ConfigSettings(server: ServerSettings(port: port), database: DatabaseSettings(url: databaseURL), adminToken: token),
    runtime: ServiceRuntime(logger: logger)
)
let server = Task { try await app.runService() }
let client = HTTPClient(
    eventLoopGroupProvider: .singleton,
    configuration: .init(connectionPool: .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: concurrency))
)
let base = "http://127.0.0.1:\(port)"

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
guard ready else { throw BenchError("config-service did not start") }
let published = try await send(
    "/v1/projects/default/remote-config?platform=ios", method: .PUT, headers: [("Authorization", "Bearer \(token)")],
    body: #"{"configs":{"disableSDK":false,"disableDebugMode":false,"autoTrackMode":15,"event_blacklist":["$AppViewScreen"],"effect_mode":0},"v":"1"}"#
)
guard published.status == .created, let etag = (try? await send("/v1/projects/default/remote-config?platform=ios"))?.headers.first(name: "ETag") else {
    throw BenchError("could not publish the document")
}

/// Requests/s of `requestCount` requests, `concurrency` at a time; every answer must have `status`.
func measure(_ path: String, headers: [(String, String)], status: HTTPResponseStatus) async throws -> Double {
    let next = WorkCounter()
    let clock = ContinuousClock()
    let elapsed = try await clock.measure {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<concurrency {
                group.addTask {
                    while next.take(below: requestCount) != nil {
                        let response = try await send(path, headers: headers)
                        guard response.status == status else { throw BenchError("\(path): HTTP \(response.status.code)") }
                    }
                }
            }
            try await group.waitForAll()
        }
    }
    return Double(requestCount) / Bench.seconds(elapsed)
}

print("config-bench: \(requestCount) requests per path and round, \(concurrency) concurrent keep-alive connections, \(rounds) rounds, median")
var health: [Double] = []
var revalidations: [Double] = []
for _ in 0..<rounds {
    health.append(try await measure("/health", headers: [], status: .ok))
    revalidations.append(try await measure("/v1/projects/default/remote-config?platform=ios", headers: [("If-None-Match", etag)], status: .notModified))
}
let healthRate = Bench.median(health)
let revalidationRate = Bench.median(revalidations)
print("path                                        requests/s   vs /health")
print("GET /health (baseline)                      \(String(format: "%10.0f", healthRate))        1.00x")
print(
    "GET document, If-None-Match current → 304   \(String(format: "%10.0f", revalidationRate))        \(String(format: "%.2f", revalidationRate / healthRate))x"
)
try await client.shutdown().get()
server.cancel()
_ = try? await server.value
