import Collector
import ConfigService
import DatongCrypto
import DatongPostgres
import DatongRuntime
import Enrichment
import Foundation
import Gateway
import Hummingbird
import HummingbirdTesting
import Identity
import Logging
import NIOFoundationEssentialsCompat
import Testing

/// A fresh database per test on the throwaway cluster `scripts/test` starts.
enum TestDatabase {
    /// Quiet: the tests assert what happened; shutdown chatter of live test servers is noise.
    static let logger: Logger = {
        var logger = Logger(label: "datong.tests")
        // DATONG_TEST_LOG_LEVEL=warning shows what the services log while a test runs.
        logger.logLevel = ProcessInfo.processInfo.environment["DATONG_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .critical
        return logger
    }()

    /// The admin URL from `scripts/test`. Integration tests need a real PostgreSQL: without one
    /// (a plain `swift test`) each is cancelled, saying so, and the unit tests still run;
    /// `scripts/test` starts a throwaway cluster and sets DATONG_TEST_DATABASE_URL.
    static func adminURL() throws -> String {
        guard let url = ProcessInfo.processInfo.environment["DATONG_TEST_DATABASE_URL"] else {
            try Test.cancel("needs PostgreSQL: DATONG_TEST_DATABASE_URL is not set (./scripts/test starts a throwaway cluster and sets it)")
        }
        return url
    }

    /// Creates an empty database and returns its URL.
    static func create() async throws -> String {
        let admin = try adminURL()
        let name = "datong_test_\(UInt64.random(in: 0...UInt64.max))"
        let pool = PostgresPool(url: admin, maxConnections: 1, logger: logger)
        try await pool.withConnection { try $0.execute("CREATE DATABASE \(name)") }
        await pool.close()
        var components = try #require(URLComponents(string: admin))
        components.path = "/\(name)"
        return try #require(components.string)
    }

    /// Runs `body` with a pool on `url`, closed afterwards.
    static func withPool<T: Sendable>(_ url: String, _ body: (PostgresPool) async throws -> T) async throws -> T {
        let pool = PostgresPool(url: url, maxConnections: 2, logger: logger)
        do {
            let value = try await body(pool)
            await pool.close()
            return value
        } catch {
            await pool.close()
            throw error
        }
    }

    static func rows(_ url: String, _ sql: String, _ parameters: [String?] = []) async throws -> [[String?]] {
        try await withPool(url) { pool in
            try await pool.withConnection { try $0.query(sql, parameters).rows }
        }
    }
}

/// The four services running together on live HTTP ports against one fresh database.
struct RunningServices: Sendable {
    let gateway: any TestClientProtocol
    let config: any TestClientProtocol
    let identity: any TestClientProtocol
    let collector: any TestClientProtocol
    let databaseURL: String
    static let adminToken = "test-admin-token"
    /// Every service runs with it, so every test goes through the checks between services.
    static let serviceToken = "test-service-token"
    /// config-service and the gateway share it, as in a deployment (`ENCRYPTION_MASTER_KEY`).
    static let masterKey = Data((0..<32).map { UInt8($0 * 3 % 256) }).base64EncodedString()
    /// Created in config-service before the gateway starts: the JS fixture's pages and the app
    /// contexts name `production`, the Python fixture's batch names `proj_x`.
    static let fixtureProjects = ["production", "proj_x"]

    static func run(
        limits: UploadLimits = UploadLimits(timeWindowPastDays: 36_500),
        identityURL: String? = nil,
        collectorURL: String? = nil,
        configURL: String? = nil,
        configGatewayURL: String? = nil,
        idleTimeoutSeconds: Int = ServerSettings.defaultIdleTimeoutSeconds,
        databaseSetup: String? = nil,
        gatewayHasMasterKey: Bool = true,
        gatewayIdentityCacheRefreshMilliseconds: Int = GatewaySettings().identityCacheRefreshMilliseconds,
        gatewayIdentityCalls: Int = GatewaySettings().identityCalls,
        gatewayCollectorCalls: Int = GatewaySettings().collectorCalls,
        gatewayUpstreamTimeoutSeconds: Int = 5,
        identityMaxRequestBytes: Int = IdentitySettings(server: ServerSettings(port: 0), database: DatabaseSettings()).maxRequestBytes,
        erasureSettleSeconds: Int = 0,
        erasureBatchRows: Int = 5000,
        gatewayEnrichment: (trustedProxies: String, geoIP: String?, userAgentRules: String?)? = nil,
        _ body: @escaping @Sendable (RunningServices) async throws -> Void
    ) async throws {
        let url = try await TestDatabase.create()
        if let databaseSetup {
            _ = try await TestDatabase.withPool(url) { pool in try await pool.withConnection { try $0.execute(databaseSetup) } }
        }
        let runtime = ServiceRuntime(logger: TestDatabase.logger)
        let database = DatabaseSettings(url: url, poolSize: 2, startupTimeout: 10)
        let server = ServerSettings(port: 0, serviceToken: serviceToken, idleTimeoutSeconds: idleTimeoutSeconds)
        let identity = buildIdentityApplication(
            settings: IdentitySettings(server: server, database: database, maxRequestBytes: identityMaxRequestBytes), runtime: runtime)
        let collector = buildCollectorApplication(settings: CollectorSettings(server: server, database: database), runtime: runtime)
        try await identity.serving { identityClient in
            try await collector.serving { collectorClient in
                // config-service passes the console's reads on to identity-service and the collector.
                let config = buildConfigApplication(
                    settings: ConfigSettings(
                        server: server, database: database, adminToken: adminToken, sealer: try KeySealer(masterKeyBase64: masterKey),
                        identityURL: "http://127.0.0.1:\(identityClient.port!)", collectorURL: "http://127.0.0.1:\(collectorClient.port!)",
                        erasureSettleSeconds: erasureSettleSeconds, erasureBatchRows: erasureBatchRows, gatewayURL: configGatewayURL
                    ),
                    runtime: runtime
                )
                try await config.serving { configClient in
                    // The projects the fixtures upload to (`default` exists from the first migration).
                    for project in fixtureProjects {
                        let created = try await configClient.execute(
                            uri: "/v1/projects/\(project)", method: .put, headers: [.authorization: "Bearer \(adminToken)"]
                        )
                        #expect(created.status == .created)
                    }
                    let gateway = buildGatewayApplication(
                        settings: GatewaySettings(
                            server: server,
                            identityURL: identityURL ?? "http://127.0.0.1:\(identityClient.port!)",
                            collectorURL: collectorURL ?? "http://127.0.0.1:\(collectorClient.port!)",
                            configURL: configURL ?? "http://127.0.0.1:\(configClient.port!)",
                            upstreamTimeoutSeconds: gatewayUpstreamTimeoutSeconds,
                            limits: limits,
                            sealer: gatewayHasMasterKey ? try KeySealer(masterKeyBase64: masterKey) : nil,
                            identityCacheRefreshMilliseconds: gatewayIdentityCacheRefreshMilliseconds,
                            identityCalls: gatewayIdentityCalls,
                            collectorCalls: gatewayCollectorCalls,
                            trustedProxies: try TrustedProxies.parse(gatewayEnrichment?.trustedProxies ?? "").get(),
                            geoIPDatabase: gatewayEnrichment?.geoIP,
                            userAgentRules: gatewayEnrichment?.userAgentRules
                        ),
                        runtime: runtime
                    )
                    try await gateway.serving { gatewayClient in
                        try await body(
                            RunningServices(
                                gateway: gatewayClient, config: configClient, identity: identityClient, collector: collectorClient,
                                databaseURL: url
                            ))
                    }
                }
            }
        }
    }
}

extension ApplicationProtocol where Self: Sendable {
    /// Runs the application on a free port of localhost for `body`, and ends it with a graceful
    /// shutdown whatever `body` does: returns, throws, or is cancelled. The suite's one way to run
    /// a live server (`scripts/check-contracts` refuses a bare `test(.live)` in Tests/).
    ///
    /// A live server must never be cancelled: a connection it accepts in that moment is dropped
    /// unserved, which traps in NIO ("Deinited NIOAsyncWriter without calling finish()",
    /// apple/swift-nio#3481) and ends the whole test run. HummingbirdTesting's `test(.live)` runs
    /// the server in a child task of the task that runs the closure, so cancelling either cancels
    /// the server: `Test.cancel` does (each test needing PostgreSQL cancels itself when
    /// DATONG_TEST_DATABASE_URL is unset, often inside a stand-in server, while the test client is
    /// still connecting), and so does an error leaving the closure (the task group cancels the
    /// server while it shuts down). Here the server and `body` run in two tasks of their own, which
    /// no cancellation of the test or of `body` reaches, and `body`'s error crosses to the server's
    /// side as a value; it is thrown once the server has shut down.
    func serving<T: Sendable>(_ body: @escaping @Sendable (any TestClientProtocol) async throws -> T) async throws -> T {
        let served = Task {
            try await test(.live) { client in await Task { await captured { try await body(client) } }.value }
        }
        return try await served.value.get()
    }
}

/// `body`'s outcome as a value, so that an error can cross a live test server's closure without
/// cancelling the server (`ApplicationProtocol.serving`).
func captured<T>(_ body: () async throws -> T) async -> Result<T, any Error> {
    do {
        return .success(try await body())
    } catch {
        return .failure(error)
    }
}

extension TestResponse {
    var text: String { String(buffer: body) }

    func json() throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(buffer: body)) as? [String: Any])
    }
}

/// A TCP socket on 127.0.0.1 that listens and never accepts: the kernel completes each handshake
/// and nothing ever answers — what a hung server, or one behind a partition, looks like.
struct SilentListener {
    let port: Int
    private let socket: Int32

    init() throws {
        socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(socket >= 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let socket = self.socket
        let listening = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(socket, $0, length) == 0 && listen(socket, 64) == 0 && getsockname(socket, $0, &length) == 0
            }
        }
        try #require(listening)
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() { Glibc.close(socket) }
}
