// identity-bench: resolves/s through identity-service's HTTP API, in batches of 50 records as the
// gateway sends them: known identities answered from memory, next to the same resolves with the
// cache turned off (every batch a PostgreSQL transaction) in the same run, and new identities (each
// record makes a user and links its ids).
//
//   scripts/bench identity [--rounds N] [--people N] [--batches N] [--concurrency N]
//
// (the script starts a throwaway PostgreSQL and sets DATABASE_URL).
import AsyncHTTPClient
import BenchSupport
import DatongContracts
import DatongPostgres
import DatongRuntime
import Foundation
import Hummingbird
import Identity
import IdentityCore
import NIOCore
import NIOHTTP1

let rounds = Bench.option("--rounds", default: 3)
let people = Bench.option("--people", default: 20_000)
let batchCount = Bench.option("--batches", default: 2_000)
let concurrency = Bench.option("--concurrency", default: 16)
let batchSize = 50
let logger = Bench.quietLogger("identity-bench")
let serviceToken = "bench-service-token"

guard let adminURL = ProcessInfo.processInfo.environment["DATABASE_URL"] else {
    print("identity-bench: set DATABASE_URL to a PostgreSQL server (scripts/bench identity starts one)")
    exit(2)
}
let databaseURL = try await Bench.freshDatabase(adminURL: adminURL, logger: logger)

/// Two replicas on one database: one with the cache, one without.
func start(cacheEntries: Int) -> (Task<Void, any Error>, String) {
    let port = Int.random(in: 20_000...40_000)
    let app = buildIdentityApplication(
        settings: IdentitySettings(
            server: ServerSettings(port: port, serviceToken: serviceToken),
            database: DatabaseSettings(url: databaseURL, poolSize: 4), cacheEntries: cacheEntries
        ),
        runtime: ServiceRuntime(logger: logger)
    )
    return (Task { try await app.runService() }, "http://127.0.0.1:\(port)")
}
let (cachedServer, cachedURL) = start(cacheEntries: 1_000_000)
let (plainServer, plainURL) = start(cacheEntries: 0)

let client = HTTPClient(
    eventLoopGroupProvider: .singleton,
    configuration: .init(connectionPool: .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: concurrency))
)

/// A person's record as an iOS app sends it: device id, anonymous id, and a login id for half.
@Sendable func record(_ person: Int, tag: String) -> IdentityRecord {
    var identities = ["$identity_idfv": "IDFV-\(tag)-\(person)", "$identity_anonymous_id": "anon-\(tag)-\(person)"]
    if person % 2 == 0 { identities["$identity_login_id"] = "user-\(tag)-\(person)" }
    return IdentityRecord(project: "default", type: "track", distinctId: "anon-\(tag)-\(person)", identities: identities, lib: "iOS")
}

@Sendable func resolve(_ base: String, _ records: [IdentityRecord]) async throws {
    var request = HTTPClientRequest(url: base + "/v1/resolve")
    request.method = .POST
    request.headers.add(name: "Authorization", value: "Bearer \(serviceToken)")
    request.headers.add(name: "Content-Type", value: "application/json")
    request.body = .bytes(ByteBuffer(bytes: ResolveRequest(records: records).jsonBytes))
    let response = try await client.execute(request, timeout: .seconds(30))
    let body = try await response.body.collect(upTo: 1 << 20)
    guard response.status == .ok else { throw BenchError("resolve: HTTP \(response.status.code) \(String(buffer: body))") }
    let answer = try ResolveResponse(jsonBytes: Array(body.readableBytesView))
    guard answer.users.count == records.count, answer.users.allSatisfy({ $0.userId != nil }) else { throw BenchError("resolve: incomplete answer") }
}

/// Records/s of `batches` batches, `concurrency` at a time.
func measure(batches: Int, _ batch: @escaping @Sendable (Int) async throws -> Void) async throws -> Double {
    let next = WorkCounter()
    let elapsed = try await ContinuousClock().measure {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<concurrency {
                group.addTask { while let index = next.take(below: batches) { try await batch(index) } }
            }
            try await group.waitForAll()
        }
    }
    return Double(batches * batchSize) / Bench.seconds(elapsed)
}

for base in [cachedURL, plainURL] {
    var ready = false
    for _ in 0..<200 where !ready {
        var request = HTTPClientRequest(url: base + "/ready")
        request.method = .GET
        ready = (try? await client.execute(request, timeout: .seconds(5)))?.status == .ok
        if !ready { try await Task.sleep(for: .milliseconds(100)) }
    }
    guard ready else { throw BenchError("identity-service did not start") }
}

print("identity-bench: \(batchSize) records per request, \(concurrency) concurrent keep-alive connections, \(people) known people, \(rounds) rounds, median")
// The known people, made through the cached replica (which learns them as it makes them).
_ = try await measure(batches: people / batchSize) { index in
    try await resolve(cachedURL, (index * batchSize..<(index + 1) * batchSize).map { record($0, tag: "known") })
}
// The same resolves in process (no HTTP), through a store with a warm cache: what the graph costs.
let pool = PostgresPool(url: databaseURL, maxConnections: 2, logger: logger)
// A store with a cache and its refresher, as identity-service runs them; one look at the
// invalidation log, then the cache answers.
let cache = IdentityCache(capacity: 1_000_000, maxStaleness: .seconds(3600))
let warmStore = PostgresIdentityStore(pool: pool, cache: cache)
try await CacheFeed(cache: cache, source: PostgresInvalidationLog(pool: pool), interval: .seconds(1), logger: logger).refresh()
_ = try await measure(batches: people / batchSize) { index in
    _ = try await warmStore.resolve((index * batchSize..<(index + 1) * batchSize).map { record($0, tag: "known") })
}
var fromMemory: [Double] = []
var throughPostgres: [Double] = []
var fresh: [Double] = []
var inProcess: [Double] = []
for round in 0..<rounds {
    let known: @Sendable (Int) -> [IdentityRecord] = { _ in (0..<batchSize).map { _ in record(Int.random(in: 0..<people), tag: "known") } }
    throughPostgres.append(try await measure(batches: batchCount / 4) { try await resolve(plainURL, known($0)) })
    fromMemory.append(try await measure(batches: batchCount) { try await resolve(cachedURL, known($0)) })
    inProcess.append(try await measure(batches: batchCount * 4) { _ = try await warmStore.resolve(known($0)) })
    fresh.append(
        try await measure(batches: batchCount / 4) { index in
            try await resolve(cachedURL, (0..<batchSize).map { record(index * batchSize + $0, tag: "new-\(round)") })
        })
}
let baseline = Bench.median(throughPostgres)
func row(_ name: String, _ rates: [Double]) {
    let rate = Bench.median(rates)
    print(name.padding(toLength: 52, withPad: " ", startingAt: 0) + String(format: "%10.0f   %6.2fx", rate, rate / baseline))
}
print("resolve                                               records/s   vs cache off")
row("known identities, cache off (PostgreSQL per batch)", throughPostgres)
row("known identities, from memory", fromMemory)
row("new identities (a user and its links per record)", fresh)
row("known identities, from memory, in process (no HTTP)", inProcess)
print("(records carry 2.5 identities on average: an idfv, an anonymous id and, for half, a login id)")
await pool.close()
try await client.shutdown().get()
cachedServer.cancel()
plainServer.cancel()
