import AsyncHTTPClient
import DatongContracts
import DatongRuntime
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Synchronization
import Testing

@testable import Gateway

/// The gateway's project check (`IngestionAuth`) against a stand-in config-service that answers
/// slowly: uploads that find a project's answer missing at once share one read of it.
@Suite("gateway: the ingestion check reads config-service once for uploads that need it at once")
struct IngestionAuthTests {
    @Test("48 first uploads of a project at once make one call to config-service, and all are checked")
    func oneReadForABurst() async throws {
        let calls = Mutex(0)
        let router = Router()
        router.get("/v1/projects/:project/ingestion") { _, context -> Response in
            calls.withLock { $0 += 1 }
            try await Task.sleep(for: .milliseconds(300))
            let body = try JSONEncoder().encode(ProjectIngestion(project: try context.parameters.require("project"), tokenSHA256: nil))
            return Response(status: .ok, headers: [.contentType: "application/json", .eTag: "\"1\""], body: .init(byteBuffer: ByteBuffer(bytes: body)))
        }
        let stub = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await stub.serving { config in
            let client = ServiceClient(upstream: .config, baseURL: "http://127.0.0.1:\(config.port!)", http: HTTPClient.shared, timeout: .seconds(10))
            let auth = IngestionAuth(config: client, refreshInterval: .seconds(60))
            let logger = Logger(label: "test")
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<48 { group.addTask { try await auth.check(project: "shop", token: nil, logger: logger) } }
                try await group.waitForAll()
            }
            #expect(calls.withLock { $0 } == 1)
            // Another project is a read of its own; the first one's answer is kept.
            try await auth.check(project: "other", token: nil, logger: logger)
            try await auth.check(project: "shop", token: nil, logger: logger)
            #expect(calls.withLock { $0 } == 2)
        }
    }
}
