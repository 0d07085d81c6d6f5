import CompressNIO
import DatongTestSupport
import Foundation
import Gateway
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import NIOFoundationEssentialsCompat
import Testing

/// bridge-gateway against the other three services on a real PostgreSQL: every JS SDK capture, the
/// bridge relay endpoint with its whitelists, CORS, encodings and limits.
@Suite("bridge-gateway: uploads and relayed H5 bridge messages")
struct GatewayTests {
    static let iosCookie = "1a1fe9d7865396-0bb641511e8d2b-774c1751-329160-1a1fe9d7866695"
    static let admin: HTTPFields = [.authorization: "Bearer \(RunningServices.adminToken)"]

    static func relay(
        _ messages: [String], app: [String: Any], project: String = "production", to client: any TestClientProtocol,
        headers: HTTPFields = [:], gzip: Bool = false
    ) async throws -> TestResponse {
        var body = try JSONSerialization.data(withJSONObject: ["app": app, "messages": messages])
        var headers = headers
        if gzip {
            var buffer = ByteBuffer(bytes: body)
            body = Data(buffer: try buffer.compress(with: .gzip()))
            headers[.contentEncoding] = "gzip"
        }
        return try await client.execute(uri: "/v1/bridge?project=\(project)", method: .post, headers: headers, body: ByteBuffer(bytes: body))
    }

    static func statuses(_ response: TestResponse) throws -> [String] {
        let results = try #require(try response.json()["results"] as? [[String: Any]])
        return results.map { ($0["status"] as? String) ?? "?" }
    }

    /// Sends a direct JS SDK emission (image beacon, ajax, sendBeacon, batch, debug) under a path prefix.
    static func sendDirect(_ emission: Fixtures.JSEmission, prefix: String, to client: any TestClientProtocol) async throws -> TestResponse {
        switch emission.payload {
        case .text(let url):
            let components = try #require(URLComponents(string: url))
            return try await client.execute(uri: prefix + components.path + "?" + components.percentEncodedQuery!, method: .get)
        case .request(let request):
            let components = try #require(URLComponents(string: request["url"] ?? ""))
            var headers: HTTPFields = [:]
            if let text = request["headers"], let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: String] {
                for (name, value) in object { headers[HTTPField.Name(name)!] = value }
            }
            if emission.kind == "sendBeacon" { headers[.contentType] = "text/plain;charset=UTF-8" }
            let method: HTTPRequest.Method = request["method"] == "GET" ? .get : .post
            return try await client.execute(
                uri: prefix + components.path + "?" + (components.percentEncodedQuery ?? ""), method: method, headers: headers,
                body: ByteBuffer(string: request["body"] ?? "")
            )
        }
    }

    @Test("every JS SDK capture is stored with its meaning: bridged through the app, or sent directly under any path prefix")
    func javascriptFixtures() async throws {
        try await RunningServices.run { services in
            let emissions = try Fixtures.javascript()
            for (number, scenario) in ["ios", "ios_old", "android"].enumerated() {
                let messages = try Fixtures.bridgeMessages(scenario)
                let response = try await Self.relay(
                    messages, app: Fixtures.relayApp(anonymousID: "app-anon-\(number)", idfv: "IDFV-\(number)"), to: services.gateway
                )
                #expect(response.status == .ok, "\(scenario): \(response.text)")
                #expect(try Self.statuses(response) == ["stored", "stored", "stored"], "\(scenario)")
            }
            for emission in emissions where !["ios", "ios_old", "android"].contains(emission.scenario) {
                let response = try await Self.sendDirect(emission, prefix: "/collect/v2", to: services.gateway)
                #expect(response.status == .ok, "\(emission.scenario): \(response.text)")
                if emission.kind == "img.src" { #expect(response.headers[.contentType] == "image/gif") }
                if emission.scenario == "debug" { #expect(response.text == "{}") }
            }

            let url = services.databaseURL
            let counts = try await TestDatabase.rows(
                url,
                """
                SELECT hybrid_h5::text, count(*)::text, count(*) FILTER (WHERE user_id IS NULL)::text
                FROM analytics.events WHERE project = 'production' GROUP BY hybrid_h5 ORDER BY hybrid_h5
                """)
            // 5 direct scenarios and 3 bridged ones, each a BuyProduct and a $SignUp, every one with a user.
            #expect(counts == [["false", "10", "0"], ["true", "6", "0"]])
            let bridged = try await TestDatabase.rows(
                url,
                """
                SELECT event, distinct_id, anonymous_id, login_id, lib, app_version, properties->>'$os', properties->>'$screen_width',
                       properties->>'$viewport_width', properties->>'paid_at', (properties ? 'server_url')::text
                FROM analytics.events WHERE hybrid_h5 AND anonymous_id = 'app-anon-0' ORDER BY time
                """)
            #expect(
                bridged == [
                    ["BuyProduct", "app-anon-0", "app-anon-0", nil, "js", "2.3.0", "iOS", "393", "390", "2024-01-02 03:04:05.006", "false"],
                    ["$SignUp", "user-123", "app-anon-0", "user-123", "js", "2.3.0", "iOS", "393", "390", nil, "false"],
                ])
            let direct = try await TestDatabase.rows(
                url,
                """
                SELECT DISTINCT properties->>'paid_at', properties->'tags'->>1, properties->>'price', lib
                FROM analytics.events WHERE NOT hybrid_h5 AND event = 'BuyProduct'
                """)
            #expect(direct == [["2024-01-02 03:04:05.006", "b", "9.9", "js"]])
            let profiles = try await TestDatabase.rows(
                url,
                "SELECT count(*)::text, count(user_id)::text FROM collector.profile_records WHERE properties->>'name' = 'Alice'")
            #expect(profiles == [["8", "8"]])

            // The iOS page's cookie id now belongs to the app's user: the same page sending directly
            // (an image beacon with only its cookie id) lands on that user.
            let appUser = try await TestDatabase.rows(
                url,
                "SELECT DISTINCT user_id::text FROM analytics.events WHERE anonymous_id = 'app-anon-0'")
            #expect(appUser.count == 1)
            let beacon =
                #"{"type":"track","event":"PageLeave","time":1795273099000,"distinct_id":"\#(Self.iosCookie)","lib":{"$lib":"js"},"identities":{"$identity_cookie_id":"\#(Self.iosCookie)"},"properties":{"$url":"https://h5.example.com/shop/item?id=42"}}"#
            let data = Data(beacon.utf8).base64EncodedString().addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let sent = try await services.gateway.execute(uri: "/sa.gif?project=production&data=\(data)", method: .get)
            #expect(sent.status == .ok)
            let pageUser = try await TestDatabase.rows(url, "SELECT user_id::text FROM analytics.events WHERE event = 'PageLeave'")
            #expect(pageUser == appUser)
        }
    }

    @Test("an app SDK's own upload of relayed H5 records is not rewritten again; its cookie id joins the app user")
    func appRelayedUpload() async throws {
        try await RunningServices.run { services in
            let record =
                #"{"type":"track","event":"BuyProduct","time":1795273095276,"distinct_id":"app-anon-9","anonymous_id":"app-anon-9","_hybrid_h5":true,"lib":{"$lib":"js","$app_version":"2.3.0"},"identities":{"$identity_cookie_id":"cookie-9","$identity_idfv":"IDFV-9","$identity_anonymous_id":"app-anon-9"},"properties":{"$url":"https://h5.example.com/a"}}"#
            let (uri, body) = EndToEndTests.form("[\(record)]", project: "production")
            #expect(try await services.gateway.execute(uri: uri, method: .post, body: body).status == .ok)
            let direct =
                #"{"type":"track","event":"Direct","time":1795273096000,"distinct_id":"cookie-9","lib":{"$lib":"js"},"identities":{"$identity_cookie_id":"cookie-9"}}"#
            let (uri2, body2) = EndToEndTests.form("[\(direct)]", project: "production")
            #expect(try await services.gateway.execute(uri: uri2, method: .post, body: body2).status == .ok)
            let rows = try await TestDatabase.rows(
                services.databaseURL,
                "SELECT event, distinct_id, hybrid_h5::text, (user_id IS NOT NULL)::text FROM analytics.events ORDER BY time")
            #expect(rows == [["BuyProduct", "app-anon-9", "true", "true"], ["Direct", "cookie-9", "false", "true"]])
            let users = try await TestDatabase.rows(services.databaseURL, "SELECT count(DISTINCT user_id)::text FROM analytics.events")
            #expect(users == [["1"]])
        }
    }

    @Test("forged or foreign server URLs are rejected with a reason; a published whitelist applies within 5 seconds")
    func whitelists() async throws {
        try await RunningServices.run { services in
            let messages = try Fixtures.bridgeMessages("android")
            let foreign = messages[0].replacingOccurrences(of: "sa.example.com:8106", with: "sa.partner.com")
            let app = Fixtures.relayApp(anonymousID: "app-anon-w", idfv: "IDFV-w")
            let first = try await Self.relay([foreign, "sensorsanalytics://getAppInfo"], app: app, to: services.gateway)
            #expect(first.status == .ok)
            #expect(try Self.statuses(first) == ["rejected", "ignored"])
            let rejected = try await TestDatabase.rows(services.databaseURL, "SELECT project, reason, raw = $1 FROM analytics.rejected", [foreign])
            #expect(rejected.count == 1)
            #expect(rejected.first?[0] == "production")
            #expect(rejected.first?[1]?.contains("sa.partner.com") == true)
            #expect(rejected.first?[2] == "t")
            // The gateway now knows project default has no whitelist; publishing one must reach it.
            let before = try await Self.relay([foreign], app: app, project: "default", to: services.gateway)
            #expect(try Self.statuses(before) == ["rejected"])

            let publish = try await services.config.execute(
                uri: "/v1/projects/default/server-url-whitelist", method: .put, headers: Self.admin,
                body: ByteBuffer(string: #"["https://sa.partner.com/sa?project=production"]"#)
            )
            #expect(publish.status == .created)
            let clock = ContinuousClock()
            let start = clock.now
            var accepted = false
            // The gateway reads the whitelists every WHITELIST_REFRESH_SECONDS (2); the rest is slack
            // for a loaded 2-core machine.
            while clock.now - start < .seconds(12) {
                let retry = try await Self.relay([foreign], app: app, project: "default", to: services.gateway)
                if try Self.statuses(retry) == ["stored"] {
                    accepted = true
                    break
                }
                try await Task.sleep(for: .milliseconds(250))
            }
            #expect(accepted, "the whitelist was not applied within 12 seconds")
            #expect(clock.now - start < .seconds(10))

            // An H5 domain whitelist keeps pages of other domains out.
            #expect(try await services.config.execute(uri: "/v1/projects/production", method: .put, headers: Self.admin).status == .ok)
            let domains = try await services.config.execute(
                uri: "/v1/projects/production/h5-domain-whitelist", method: .put, headers: Self.admin,
                body: ByteBuffer(string: #"["*.shop.example.org"]"#)
            )
            #expect(domains.status == .created)
            let published = clock.now
            var refused: TestResponse?
            while clock.now - published < .seconds(12) {
                let page = try await Self.relay([messages[0]], app: app, to: services.gateway)
                if try Self.statuses(page) == ["rejected"] {
                    refused = page
                    break
                }
                try await Task.sleep(for: .milliseconds(250))
            }
            #expect(refused?.text.contains("H5 domain whitelist") == true)
            #expect(clock.now - published < .seconds(10))
            let events = try await TestDatabase.rows(
                services.databaseURL,
                "SELECT count(*)::text FROM analytics.events WHERE project = 'default'")
            #expect(events == [["1"]])
        }
    }

    @Test("a relay for a project nobody could check yet (config-service never reached) is retried (503), handshakes alike")
    func configUnreachable() async throws {
        try await RunningServices.run(configURL: "http://127.0.0.1:1") { services in
            let app = Fixtures.relayApp(anonymousID: "app-anon-u", idfv: "IDFV-u")
            // Authentication comes before the body is read, whatever the messages are.
            let handshake = try await Self.relay(["sensorsanalytics://getAppInfo"], app: app, to: services.gateway)
            #expect(handshake.status == .serviceUnavailable)
            let records = try await Self.relay(try Fixtures.bridgeMessages("ios"), app: app, to: services.gateway)
            #expect(records.status == .serviceUnavailable)
            #expect(records.headers[.retryAfter] != nil)
            let stored = try await TestDatabase.rows(
                services.databaseURL,
                "SELECT (SELECT count(*) FROM analytics.events) + (SELECT count(*) FROM analytics.rejected)")
            #expect(stored == [["0"]])
        }
    }

    @Test("a retried relay is recognised message by message; gzip bodies are accepted and bombs refused")
    func retriesAndEncodings() async throws {
        try await RunningServices.run(limits: UploadLimits(maxDecompressedBytes: 64 << 10, timeWindowPastDays: 36_500)) { services in
            let messages = try Fixtures.bridgeMessages("ios_old")
            let app = Fixtures.relayApp(anonymousID: "app-anon-r", idfv: "IDFV-r")
            let first = try await Self.relay(Array(messages.prefix(2)), app: app, to: services.gateway, gzip: true)
            #expect(first.status == .ok, "\(first.text)")
            #expect(try Self.statuses(first) == ["stored", "stored"])
            let second = try await Self.relay(messages, app: app, to: services.gateway, gzip: true)
            #expect(try Self.statuses(second) == ["duplicate", "duplicate", "stored"])
            #expect(try second.json()["duplicates"] as? Int == 2)

            var bomb = ByteBuffer(bytes: [UInt8](repeating: 0x20, count: 1 << 20))
            let compressed = try bomb.compress(with: .gzip())
            let refused = try await services.gateway.execute(
                uri: "/v1/bridge?project=production", method: .post, headers: [.contentEncoding: "gzip"], body: compressed
            )
            #expect(refused.status == .contentTooLarge)
            let brotli = try await services.gateway.execute(
                uri: "/v1/bridge?project=production", method: .post, headers: [.contentEncoding: "br"], body: ByteBuffer(string: "{}")
            )
            #expect(brotli.status == .unsupportedMediaType)
        }
    }

    @Test(
        "bad relays get a 4xx naming the problem",
        arguments: [
            (#"{"messages":[]}"#, "invalid_app_context"),
            (#"{"app":{"server_url":"not a url","anonymous_id":"a"},"messages":[]}"#, "invalid_app_context"),
            (#"{"app":{"server_url":"https://sa.example.com/sa","anonymous_id":""},"messages":[]}"#, "invalid_app_context"),
            (#"{"app":{"server_url":"https://sa.example.com/sa","anonymous_id":"a"},"messages":"x"}"#, "invalid_messages"),
            (#"{"app":{"server_url":"https://sa.example.com/sa","anonymous_id":"a"},"messages":[{"type":"track"}]}"#, "invalid_messages"),
            (#"[1]"#, "invalid_body"),
            (#"{"app":"#, "invalid_json"),
        ])
    func badRelays(body: String, code: String) async throws {
        try await RunningServices.run { services in
            let response = try await services.gateway.execute(uri: "/v1/bridge?project=production", method: .post, body: ByteBuffer(string: body))
            #expect(response.status == .badRequest)
            #expect(try response.json()["error"] as? String == code)
        }
    }

    @Test("a debug dry run names each bad record and writes nothing")
    func debugDryRun() async throws {
        try await RunningServices.run { services in
            let (_, body) = EndToEndTests.form(
                #"[{"type":"track","event":"Ok","time":1795273119736,"distinct_id":"d"},{"type":"track","event":"Bad","time":1795273119736,"distinct_id":"d","properties":{"event":1}}]"#
            )
            let response = try await services.gateway.execute(
                uri: "/prefix/debug?project=default", method: .post, headers: [HTTPField.Name("Dry-Run")!: "true"], body: body
            )
            #expect(response.status == .badRequest)
            let problems = try #require(try response.json()["problems"] as? [[String: Any]])
            #expect(problems.count == 1)
            #expect(problems.first?["index"] as? Int == 1)
            #expect((problems.first?["reason"] as? String)?.contains("reserved") == true)
            let written = try await TestDatabase.rows(
                services.databaseURL,
                "SELECT (SELECT count(*) FROM analytics.events) + (SELECT count(*) FROM analytics.rejected)")
            #expect(written == [["0"]])
        }
    }

    @Test("browsers get CORS answers, preflight included, with credentials for their origin")
    func cors() async throws {
        try await RunningServices.run { services in
            let origin = "https://h5.example.com"
            let preflight = try await services.gateway.execute(
                uri: "/collect/sa.gif?project=production", method: .options,
                headers: [
                    .origin: origin, .accessControlRequestMethod: "POST", .accessControlRequestHeaders: "content-type",
                ])
            #expect(preflight.status == .noContent)
            #expect(preflight.headers[.accessControlAllowOrigin] == origin)
            #expect(preflight.headers[.accessControlAllowCredentials] == "true")
            #expect(preflight.headers[.accessControlAllowMethods]?.contains("POST") == true)
            #expect(preflight.headers[.accessControlAllowHeaders]?.lowercased().contains("content-type") == true)

            let ajax = try #require(try Fixtures.javascript().first { $0.scenario == "ajax" })
            guard case .request(let request) = ajax.payload else {
                Issue.record("no ajax request")
                return
            }
            let response = try await services.gateway.execute(
                uri: "/sa.gif?project=production", method: .post,
                headers: [.origin: origin, .contentType: "application/x-www-form-urlencoded"], body: ByteBuffer(string: request["body"] ?? "")
            )
            #expect(response.status == .ok)
            #expect(response.headers[.accessControlAllowOrigin] == origin)
            let refused = try await services.gateway.execute(
                uri: "/sa.gif?project=production", method: .post,
                headers: [.origin: origin], body: ByteBuffer(string: "data=%%%"))
            #expect(refused.status == .badRequest)
            #expect(refused.headers[.accessControlAllowOrigin] == origin)
        }
    }

    @Test(
        "each upload limit is enforced with a reason",
        arguments: [
            ("deep", HTTPResponse.Status.badRequest, "json_too_deep"),
            ("utf8", .badRequest, "invalid_utf8"),
            ("records", .contentTooLarge, "too_many_records"),
            ("gzip9", .badRequest, "invalid_json"),
            ("crc", .badRequest, "crc_mismatch"),
        ])
    func limits(kind: String, status: HTTPResponse.Status, code: String) async throws {
        try await RunningServices.run(limits: UploadLimits(maxRecordsPerRequest: 2, maxJSONDepth: 8, timeWindowPastDays: 36_500)) { services in
            let record = #"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d"}"#
            let payload: [UInt8]
            var extra = ""
            switch kind {
            case "deep": payload = Array((String(repeating: "[", count: 9) + String(repeating: "]", count: 9)).utf8)
            case "utf8": payload = Array(#"{"type":"track","event":"E","time":1795273119736,"distinct_id":""#.utf8) + [0xFF, 0x22, 0x7D]
            case "records": payload = Array("[\(record),\(record),\(record)]".utf8)
            case "gzip9":
                payload = Array(record.utf8)
                extra = "&gzip=9"
            default:
                payload = Array(record.utf8)
                extra = "&crc=12345"
            }
            let data = Data(payload).base64EncodedString().addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let response = try await services.gateway.execute(uri: "/sa?project=default\(extra)", method: .post, body: ByteBuffer(string: "data=\(data)"))
            #expect(response.status == status)
            #expect(try response.json()["error"] as? String == code)
            #expect(try response.json()["message"] as? String != nil)
        }
    }
}
