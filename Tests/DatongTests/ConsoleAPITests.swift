import DatongContracts
import DatongPostgres
import DatongRuntime
import DatongStorage
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import NIOFoundationEssentialsCompat
import Testing

@testable import Collector
@testable import ConfigService

/// What the console reads and does, through config-service's admin API, against the four services
/// and a real database: the live view's events, rejected records and counts (the collector's),
/// identity lookups and a merge undo (identity-service's), and the console's own files.
@Suite("console: the admin API's live data and identity calls, and the console's files")
struct ConsoleAPITests {
    static let admin: HTTPFields = [.authorization: "Bearer \(RunningServices.adminToken)"]
    static let service: HTTPFields = [.authorization: "Bearer \(RunningServices.serviceToken)"]
    static let time = Int64(Date().timeIntervalSince1970 * 1000)

    static func event(_ name: String, device: String, at offset: Int64 = 0) -> String {
        #"{"type":"track","event":"\#(name)","time":\#(time + offset),"distinct_id":"\#(device)","lib":{"$lib":"iOS","$lib_version":"4.8.0"},"properties":{"n":\#(offset)}}"#
    }

    static func json(_ answer: TestResponse) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(buffer: answer.body)) as? [String: Any], "\(answer.text)")
    }

    @Test("newest events page by page with filters, rejected records with their reasons, and the per-minute counts add up")
    func liveData() async throws {
        try await RunningServices.run { services in
            let config = services.config
            var records = (0..<5).map { Self.event("Buy", device: "dev-a", at: Int64($0) * 1000) }
            records.append(Self.event("View", device: "dev-b", at: 500))
            records.append(#"{"type":"track","event":"Buy","time":\#(Self.time),"properties":{}}"#)  // no distinct_id
            let upload = try await HardeningTests.upload(services, records)
            #expect(upload["stored"] as? Int == 6 && upload["rejected"] as? Int == 1, "\(upload)")

            // Newest first, two at a time, following `next` to the end.
            var seen: [Int] = []
            var next: String? = nil
            repeat {
                let cursor = next.map { "&before=\($0)" } ?? ""
                let page = try await config.execute(uri: "/v1/projects/default/events?event=Buy&limit=2\(cursor)", method: .get, headers: Self.admin)
                #expect(page.status == .ok, "\(page.text)")
                let body = try Self.json(page)
                let events = try #require(body["events"] as? [[String: Any]])
                seen += events.compactMap { ($0["properties"] as? [String: Any])?["n"] as? Int }
                #expect(events.allSatisfy { $0["distinct_id"] as? String == "dev-a" && $0["lib"] as? String == "iOS" && $0["hybrid_h5"] as? Bool == false })
                next = body["next"] as? String
            } while next != nil && seen.count < 10
            #expect(seen == [4000, 3000, 2000, 1000, 0], "every Buy event once, newest first")

            let byDevice = try Self.json(
                try await config.execute(uri: "/v1/projects/default/events?distinct_id=dev-b", method: .get, headers: Self.admin))
            #expect((byDevice["events"] as? [[String: Any]])?.map { $0["event"] as? String } == ["View"])
            #expect(byDevice["next"] is NSNull, "a page that is not full has no next")

            let rejected = try Self.json(try await config.execute(uri: "/v1/projects/default/rejected", method: .get, headers: Self.admin))
            let entries = try #require(rejected["rejected"] as? [[String: Any]])
            #expect(entries.count == 1)
            #expect((entries.first?["reason"] as? String)?.contains("distinct_id") == true, "\(entries)")
            #expect((entries.first?["raw"] as? String)?.contains(#""event":"Buy""#) == true)

            let counts = try Self.json(try await config.execute(uri: "/v1/projects/default/ingest-counts?hours=1", method: .get, headers: Self.admin))
            let minutes = try #require(counts["minutes"] as? [[String: Any]])
            let total = { (name: String) in minutes.reduce(0) { $0 + ($1[name] as? Int ?? 0) } }
            #expect(total("received") == 7 && total("stored") == 6 && total("rejected") == 1 && total("duplicates") == 0)

            // The admin token guards it; the collector itself only answers the services.
            let anonymous = try await config.execute(uri: "/v1/projects/default/events", method: .get)
            #expect(anonymous.status == .unauthorized)
            let wrong = try await config.execute(uri: "/v1/projects/default/events", method: .get, headers: [.authorization: "Bearer nope"])
            #expect(wrong.status == .unauthorized && wrong.text.contains("not valid"))
            let direct = try await services.collector.execute(uri: "/v1/projects/default/events", method: .get, headers: Self.admin)
            #expect(direct.status == .unauthorized, "the collector does not take admin tokens")
            // The owner's refusal comes back as it is.
            let bad = try await config.execute(uri: "/v1/projects/default/events?limit=5000", method: .get, headers: Self.admin)
            #expect(bad.status == .badRequest && bad.text.contains("invalid_limit"))
        }
    }

    @Test("an id leads to its user; events follow a merge and stop following it once the console undoes it")
    func identityAndUndo() async throws {
        try await RunningServices.run { services in
            let config = services.config
            _ = try await HardeningTests.upload(services, [Self.event("Open", device: "dev-a"), Self.event("Open", device: "dev-b", at: 10)])
            func user(_ device: String) async throws -> Int64 {
                let answer = try await config.execute(
                    uri: "/v1/projects/default/identities?key=%24identity_anonymous_id&value=\(device)", method: .get, headers: Self.admin)
                #expect(answer.status == .ok, "\(answer.text)")
                return try JSONDecoder().decode(UserAnswer.self, from: Data(buffer: answer.body)).userId
            }
            let (a, b) = (try await user("dev-a"), try await user("dev-b"))
            #expect(a != b)
            let unknown = try await config.execute(
                uri: "/v1/projects/default/identities?key=%24identity_anonymous_id&value=nobody", method: .get, headers: Self.admin)
            #expect(unknown.status == .notFound && unknown.text.contains("unknown_identity"))

            // A wrong merge (made through identity-service's own API), seen and undone from the console.
            let merged = try await services.identity.execute(
                uri: "/v1/projects/default/merges", method: .post, headers: Self.service,
                body: ByteBuffer(string: #"{"fromUser":\#(b),"intoUser":\#(a),"actor":"test"}"#))
            #expect(merged.status == .created, "\(merged.text)")
            let merge = try JSONDecoder().decode(MergeRecord.self, from: Data(buffer: merged.body))
            func eventsOf(_ user: Int64) async throws -> [String] {
                let page = try Self.json(try await config.execute(uri: "/v1/projects/default/events?user_id=\(user)", method: .get, headers: Self.admin))
                return (page["events"] as? [[String: Any]] ?? []).compactMap { $0["distinct_id"] as? String }.sorted()
            }
            #expect(try await eventsOf(a) == ["dev-a", "dev-b"], "the merged user's events count under the user it joined")

            let history = try await config.execute(uri: "/v1/projects/default/users/\(a)/history", method: .get, headers: Self.admin)
            #expect(try JSONDecoder().decode(UserHistory.self, from: Data(buffer: history.body)).merges.map(\.mergeId) == [merge.mergeId])
            let undone = try await config.execute(uri: "/v1/projects/default/merges/\(merge.mergeId)/undo", method: .post, headers: Self.admin)
            #expect(undone.status == .ok, "\(undone.text)")
            #expect(try JSONDecoder().decode(MergeRecord.self, from: Data(buffer: undone.body)).undoneBy == "admin:bootstrap")
            #expect(try await eventsOf(a) == ["dev-a"])
            #expect(try await eventsOf(b) == ["dev-b"])
            let again = try await config.execute(uri: "/v1/projects/default/merges/\(merge.mergeId)/undo", method: .post, headers: Self.admin)
            #expect(again.status == .conflict, "undoing twice is refused by identity-service, and the refusal passed on: \(again.text)")
            let user = try await config.execute(uri: "/v1/projects/default/users/\(b)", method: .get, headers: Self.admin)
            #expect(try JSONDecoder().decode(UserRecord.self, from: Data(buffer: user.body)).identities.contains { $0.value == "dev-b" })
        }
    }

    @Test("a read that runs past its time is stopped by PostgreSQL and answered 503 query_timeout, not 500")
    func readTimeout() async throws {
        try await RunningServices.run { services in
            try await TestDatabase.withPool(services.databaseURL) { pool in
                // Another session holds the table, so the read waits until its statement timeout.
                let holder = Task {
                    try await pool.transaction { connection in
                        try connection.execute("LOCK TABLE collector.rejected IN ACCESS EXCLUSIVE MODE")
                        try connection.execute("SELECT pg_sleep(6)")
                    }
                }
                // Until the lock is held (a fixed sleep lost the race on a loaded machine).
                let held = """
                    SELECT count(*) FROM pg_locks
                    WHERE relation = 'collector.rejected'::regclass AND mode = 'AccessExclusiveLock' AND granted
                    """
                while try await TestDatabase.rows(services.databaseURL, held) != [["1"]] { try await Task.sleep(for: .milliseconds(20)) }
                let reads = PostgresStoredDataReads(pool: pool, statementTimeoutMillis: 200)
                let started = ContinuousClock.now
                await #expect {
                    _ = try await reads.rejected(project: "default", before: nil, limit: 10)
                } throws: { error in
                    let answer = (error as? PostgresError)?.serviceError(logger: TestDatabase.logger)
                    return answer?.status == .serviceUnavailable && answer?.code == .queryTimeout
                }
                #expect(ContinuousClock.now - started < .seconds(4), "stopped at its timeout, not when the lock went")
                try await holder.value
            }
        }
    }

    @Test("an owner that cannot be reached is a 503 naming it, not a 500; an owner's own 503 comes back with its reason and Retry-After")
    func ownerDown() async throws {
        // identity-service stands in as an owner that is up but cannot answer now.
        let busy = Router(context: DatongRequestContext.self)
        busy.addMiddleware { ErrorMiddleware() }
        busy.get("/v1/projects/:project/users/:user") { _, _ -> Response in
            throw ServiceError(.serviceUnavailable, .queryTimeout, "the query took too long", retryAfterSeconds: 7)
        }
        try await Application(router: busy).serving { owner in
            let files = ConsoleFiles(directory: nil)
            let api = OwnedDataAPI(
                auth: AdminAuth(bootstrapToken: "t0ken", pool: .init(url: "postgresql://127.0.0.1:1/none", maxConnections: 1, logger: TestDatabase.logger)),
                collector: .init(upstream: .collector, baseURL: "http://127.0.0.1:1", serviceToken: "s", timeout: .seconds(1)),
                identity: .init(upstream: .identity, baseURL: "http://127.0.0.1:\(owner.port!)", serviceToken: "s", timeout: .seconds(1)),
                requireProject: { _ in })
            let router = Router(context: DatongRequestContext.self)
            router.addMiddleware { ErrorMiddleware() }
            api.register(on: router)
            files.register(on: router)
            try await Application(router: router).test(.router) { client in
                let auth: HTTPFields = [.authorization: "Bearer t0ken"]
                let answer = try await client.execute(uri: "/v1/projects/default/events", method: .get, headers: auth)
                #expect(answer.status == .serviceUnavailable)
                #expect(answer.text.contains("collector_unavailable") && answer.text.contains("127.0.0.1:1"))
                let passed = try await client.execute(uri: "/v1/projects/default/users/1", method: .get, headers: auth)
                #expect(passed.status == .serviceUnavailable && passed.text.contains("query_timeout") && passed.headers[.retryAfter] == "7")
                let noFiles = try await client.execute(uri: "/console/", method: .get)
                #expect(noFiles.status == .notFound && noFiles.text.contains("no_console"))
            }
        }
    }

    @Test("the console's files are served with their type, a strict content policy and an ETag that revalidates")
    func files() async throws {
        try await RunningServices.run { services in
            let config = services.config
            let bare = try await config.execute(uri: "/console", method: .get)
            #expect(bare.status == .movedPermanently && bare.headers[.location] == "/console/")
            let page = try await config.execute(uri: "/console/", method: .get)
            #expect(page.status == .ok && page.headers[.contentType] == "text/html; charset=utf-8")
            #expect(page.text.contains(#"<script type="module" src="js/app.js">"#))
            #expect(page.headers[.contentSecurityPolicy]?.contains("script-src 'self'") == true)
            #expect(page.headers[.contentSecurityPolicy]?.contains("frame-ancestors 'none'") == true)
            // Every module the page loads is there, with the type a browser runs as a module.
            for module in ["app", "api", "dom", "projects", "tracking", "documents", "live", "identity", "audit"] {
                let script = try await config.execute(uri: "/console/js/\(module).js", method: .get)
                #expect(script.status == .ok && script.headers[.contentType] == "text/javascript; charset=utf-8", "\(module).js")
            }
            let style = try await config.execute(uri: "/console/console.css", method: .get)
            let etag = try #require(style.headers[.eTag])
            #expect(style.headers[.cacheControl] == "no-cache")
            let revalidated = try await config.execute(uri: "/console/console.css", method: .get, headers: [.ifNoneMatch: etag])
            #expect(revalidated.status == .notModified && revalidated.body.readableBytes == 0)
            #expect(try await config.execute(uri: "/console/js/missing.js", method: .get).status == .notFound)
            #expect(try await config.execute(uri: "/console/../Package.swift", method: .get).status == .notFound)
            // The admin API answers no other origin's preflight: no CORS headers at all.
            let preflight = try await config.execute(
                uri: "/v1/projects", method: .options, headers: [.origin: "https://evil.example", .accessControlRequestMethod: "GET"])
            #expect(preflight.headers[.accessControlAllowOrigin] == nil)
        }
    }
}

extension ConsoleAPITests {
    @Test("reads about an unknown project answer 404 as writes do; retention months without a project and a replay before 0 are refused")
    func unknownProjectsAndRanges() async throws {
        try await RunningServices.run { services in
            let auth: HTTPFields = [.authorization: "Bearer \(RunningServices.adminToken)"]
            for path in ["erasures", "suppressions", "metadata", "events", "rejected", "ingest-counts", "identities?key=$identity_login_id&value=u"] {
                let answer = try await services.config.execute(uri: "/v1/projects/nosuchproject/\(path)", method: .get, headers: auth)
                #expect(answer.status == .notFound && answer.text.contains("unknown_project"), "\(path): \(answer.status) \(answer.text)")
                let known = try await services.config.execute(uri: "/v1/projects/default/\(path)", method: .get, headers: auth)
                #expect(!known.text.contains("unknown_project") && known.status != .internalServerError, "\(path): \(known.status) \(known.text)")
            }
            let months = try await services.config.execute(uri: "/v1/retention?months=5", method: .get, headers: auth)
            #expect(months.status == .badRequest && months.text.contains("?project="), "\(months.text)")
            let oneProject = try await services.config.execute(uri: "/v1/retention?project=default&months=5", method: .get, headers: auth)
            #expect(oneProject.status == .ok, "\(oneProject.text)")
            for body in [#"{"after":0,"before":-5,"limit":10}"#, #"{"after":10,"before":10,"limit":10}"#] {
                let replay = try await services.config.execute(
                    uri: "/v1/projects/default/rejected/replay", method: .post, headers: auth, body: ByteBuffer(string: body))
                #expect(replay.status == .badRequest && replay.text.contains("before"), "\(body): \(replay.status) \(replay.text)")
            }
            let fine = try await services.config.execute(
                uri: "/v1/projects/default/rejected/replay", method: .post, headers: auth, body: ByteBuffer(string: #"{"after":0,"before":5,"limit":10}"#))
            #expect(fine.status == .ok, "\(fine.text)")
        }
    }
}
