import DatongContracts
import DatongTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOFoundationEssentialsCompat
import Testing

/// The four services together on live ports and a real PostgreSQL, driven with real SDK traffic.
@Suite("End to end: gateway, identity-service, collector, config-service")
struct EndToEndTests {
    static func send(_ request: Fixtures.CapturedRequest, to client: any TestClientProtocol, extraHeaders: HTTPFields = [:]) async throws -> TestResponse {
        var headers = extraHeaders
        for (name, value) in request.headers where !["Content-Length", "Connection", "Accept-Encoding"].contains(name) {
            headers[HTTPField.Name(name)!] = value
        }
        return try await client.execute(
            uri: request.path + "?" + request.query,
            method: request.method == "POST" ? .post : .get,
            headers: headers,
            body: ByteBuffer(string: request.body ?? "")
        )
    }

    static func form(_ records: String, project: String = "default") -> (String, ByteBuffer) {
        let data = Data(records.utf8).base64EncodedString().addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        return ("/sa?project=\(project)", ByteBuffer(string: "data_list=\(data)"))
    }

    @Test("every Python SDK request is stored with its meaning; dry runs store nothing")
    func pythonSDK() async throws {
        try await RunningServices.run { services in
            for request in try Fixtures.python() {
                let response = try await Self.send(request, to: services.gateway)
                #expect(response.status == .ok, "\(request.path): \(response.text)")
                if request.path == "/debug" { #expect(response.text == "{}") }
            }
            let events = try await TestDatabase.rows(
                services.databaseURL,
                """
                SELECT project, event, distinct_id, type, lib, app_version, hybrid_h5::text, properties->>'price', properties->'tags'->>1
                FROM analytics.events ORDER BY time
                """)
            #expect(
                events == [
                    ["default", "ViewProduct", "user-123", "track", "python", "1.2.3", "false", "9.9", "b"],
                    ["default", "$SignUp", "user-123", "track_signup", "python", "1.2.3", "false", nil, nil],
                    ["proj_x", "ViewProduct", "user-123", "track", "python", "1.2.3", "false", "9.9", "b"],
                    ["proj_x", "$SignUp", "user-123", "track_signup", "python", "1.2.3", "false", nil, nil],
                    ["default", "E1", "u1", "track", "python", nil, "false", nil, nil],
                ])
            let times = try await TestDatabase.rows(
                services.databaseURL, "SELECT pg_typeof(time)::text, pg_typeof(properties)::text FROM analytics.events LIMIT 1")
            #expect(times == [["timestamp with time zone", "jsonb"]])
            let profiles = try await TestDatabase.rows(
                services.databaseURL,
                "SELECT project, type, distinct_id, properties->>'name' FROM collector.profile_records ORDER BY project")
            #expect(profiles == [["default", "profile_set", "user-123", "Alice"], ["proj_x", "profile_set", "user-123", "Alice"]])
            // One user per project holds the login id and the anonymous id the signup named.
            let users = try await TestDatabase.rows(
                services.databaseURL,
                """
                SELECT e.project, count(DISTINCT e.user_id)::text, count(*) FILTER (WHERE e.user_id IS NULL)::text
                FROM analytics.events e WHERE e.distinct_id = 'user-123' GROUP BY e.project ORDER BY e.project
                """)
            #expect(users == [["default", "1", "0"], ["proj_x", "1", "0"]])
            let linked = try await TestDatabase.rows(
                services.databaseURL,
                """
                SELECT count(DISTINCT user_id)::text FROM identity.identities
                WHERE project = 'default' AND value IN ('user-123', 'anon-device-abc')
                """)
            #expect(linked == [["1"]])
        }
    }

    @Test("a retried upload is stored once and counted as a duplicate")
    func retriesAreFree() async throws {
        try await RunningServices.run { services in
            let request = try Fixtures.python()[3]
            let first = try await Self.send(request, to: services.gateway).json()
            let second = try await Self.send(request, to: services.gateway).json()
            #expect(first["stored"] as? Int == 3)
            #expect(second["stored"] as? Int == 0)
            #expect(second["duplicates"] as? Int == 3)
            let count = try await TestDatabase.rows(services.databaseURL, "SELECT count(*)::text FROM analytics.events")
            #expect(count == [["2"]])
        }
    }

    @Test("a bad record is kept in analytics.rejected while the good ones are stored")
    func partialRejection() async throws {
        try await RunningServices.run { services in
            let (uri, body) = Self.form(
                #"[{"type":"track","event":"Good","time":1795273119736,"distinct_id":"d1"},{"type":"track","event":"Bad","time":1795273119736,"distinct_id":"d1","properties":{"user_id":1}}]"#
            )
            let response = try await services.gateway.execute(uri: uri, method: .post, body: body)
            #expect(response.status == .ok)
            let answer = try response.json()
            #expect(answer["stored"] as? Int == 1)
            #expect(answer["rejected"] as? Int == 1)
            let rejected = try await TestDatabase.rows(services.databaseURL, "SELECT project, reason, raw::jsonb->>'event' FROM analytics.rejected")
            #expect(rejected.count == 1)
            #expect(rejected.first?[0] == "default")
            #expect(rejected.first?[1]?.contains("reserved") == true)
            #expect(rejected.first?[2] == "Bad")
        }
    }

    @Test("requests that can never succeed get a 4xx with a reason and store nothing")
    func badRequests() async throws {
        try await RunningServices.run { services in
            let cases: [(String, String, HTTPResponse.Status, String)] = [
                ("/sa?project=default", "data=%%%", .badRequest, "invalid_base64"),
                // An encrypted upload whose envelope list is not JSON (base64 where JSON text belongs).
                ("/sa?project=default&gzip=13", "data=abcd", .badRequest, "invalid_json"),
                ("/sa?project=bad-name", "data=e30", .badRequest, "invalid_project"),
                ("/sa?project=default", "nothing=1", .badRequest, "missing_data"),
                ("/sa?project=default", "data=" + String(repeating: "A", count: 6 << 20), .contentTooLarge, "body_too_large"),
            ]
            for (uri, body, status, code) in cases {
                let response = try await services.gateway.execute(uri: uri, method: .post, body: ByteBuffer(string: body))
                #expect(response.status == status, "\(code)")
                #expect(try response.json()["error"] as? String == code)
            }
            let count = try await TestDatabase.rows(
                services.databaseURL,
                "SELECT (SELECT count(*) FROM analytics.events) + (SELECT count(*) FROM analytics.rejected)")
            #expect(count == [["0"]])
        }
    }

    @Test("a JS image beacon is answered with a GIF and stored")
    func imageBeacon() async throws {
        try await RunningServices.run { services in
            let beacon = try #require(try Fixtures.javascript().first { $0.kind == "img.src" })
            guard case .text(let url) = beacon.payload else {
                Issue.record("the beacon has no URL")
                return
            }
            let components = try #require(URLComponents(string: url))
            let response = try await services.gateway.execute(uri: "/sa.gif?" + components.percentEncodedQuery!, method: .get)
            #expect(response.status == .ok)
            #expect(response.headers[.contentType] == "image/gif")
            #expect(Array(response.body.readableBytesView.prefix(6)) == Array("GIF89a".utf8))
            let rows = try await TestDatabase.rows(services.databaseURL, "SELECT project, event, lib FROM analytics.events")
            #expect(rows == [["production", "BuyProduct", "js"]])
        }
    }

    @Test("the request id travels back to the caller; health, readiness and metrics answer")
    func operations() async throws {
        try await RunningServices.run { services in
            let request = try Fixtures.python()[0]
            let response = try await Self.send(request, to: services.gateway, extraHeaders: [HTTPField.Name("X-Request-Id")!: "trace-42"])
            #expect(response.headers[HTTPField.Name("X-Request-Id")!] == "trace-42")
            let health = try await services.gateway.execute(uri: "/health", method: .get)
            #expect(health.status == .ok)
            let ready = try await services.gateway.execute(uri: "/ready", method: .get)
            #expect(ready.status == .ok)
            #expect(ready.text.contains(#""collector":"ok""#))
            let metrics = try await services.gateway.execute(uri: "/metrics", method: .get)
            #expect(metrics.status == .ok)
            #expect(metrics.headers[.contentType]?.hasPrefix("text/plain") == true)
        }
    }

    @Test("when the collector cannot be reached the SDK is told to retry (503), not to drop")
    func collectorDown() async throws {
        try await RunningServices.run(collectorURL: "http://127.0.0.1:1") { services in
            let response = try await Self.send(try Fixtures.python()[0], to: services.gateway)
            #expect(response.status == .serviceUnavailable)
            #expect(response.headers[.retryAfter] != nil)
            #expect(try response.json()["error"] as? String == "collector_unavailable")
            let ready = try await services.gateway.execute(uri: "/ready", method: .get)
            #expect(ready.status == .serviceUnavailable)
        }
    }

    @Test("config documents are published as versions and revalidated with ETag")
    func configDocuments() async throws {
        try await RunningServices.run { services in
            let admin: HTTPFields = [.authorization: "Bearer \(RunningServices.adminToken)"]
            let document = ByteBuffer(string: #"{"configs":{"disableSDK":false,"autoTrackMode":3}}"#)
            let unauthorized = try await services.config.execute(uri: "/v1/projects/default/remote-config", method: .put, body: document)
            #expect(unauthorized.status == .unauthorized)
            let wrong = try await services.config.execute(
                uri: "/v1/projects/default/remote-config", method: .put,
                headers: [.authorization: "Bearer nope"], body: document)
            #expect(wrong.status == .unauthorized)

            let published = try await services.config.execute(
                uri: "/v1/projects/default/remote-config?platform=ios", method: .put, headers: admin, body: document)
            #expect(published.status == .created)
            let result = try JSONDecoder().decode(PublishResult.self, from: Data(buffer: published.body))
            #expect(result.version == 1)

            let read = try await services.config.execute(uri: "/v1/projects/default/remote-config?platform=ios", method: .get)
            #expect(read.status == .ok)
            #expect(read.headers[.eTag] == result.etag)
            #expect(read.headers[HTTPField.Name("X-Datong-Version")!] == "1")
            #expect(try read.json()["configs"] as? [String: Any] != nil)

            func revalidate(_ etag: String) async throws -> TestResponse {
                try await services.config.execute(uri: "/v1/projects/default/remote-config?platform=ios", method: .get, headers: [.ifNoneMatch: etag])
            }
            #expect(try await revalidate(result.etag).status == .notModified)

            let changed = try await services.config.execute(
                uri: "/v1/projects/default/remote-config?platform=ios", method: .put, headers: admin,
                body: ByteBuffer(string: #"{"configs":{"disableSDK":true}}"#))
            let second = try JSONDecoder().decode(PublishResult.self, from: Data(buffer: changed.body))
            #expect(second.version == 2)
            #expect(second.etag != result.etag)
            #expect(try await revalidate(result.etag).status == .ok)

            let invalid = try await services.config.execute(
                uri: "/v1/projects/default/h5-domain-whitelist", method: .put, headers: admin,
                body: ByteBuffer(string: #"["h5.example.com", 3]"#))
            #expect(invalid.status == .unprocessableContent)
            #expect(invalid.text.contains(#""path":"/1""#))

            let missing = try await services.config.execute(uri: "/v1/projects/default/visual-config", method: .get)
            #expect(missing.status == .notFound)
            let unknown = try await services.config.execute(uri: "/v1/projects/nobody/remote-config", method: .put, headers: admin, body: document)
            #expect(unknown.status == .notFound)

            let created = try await services.config.execute(uri: "/v1/projects/shop", method: .put, headers: admin)
            #expect(created.status == .created)
            let projects = try await services.config.execute(uri: "/v1/projects", method: .get, headers: admin)
            let names = try JSONDecoder().decode([ProjectInfo].self, from: Data(buffer: projects.body)).map(\.name)
            #expect(names == ["default", "production", "proj_x", "shop"])
        }
    }
}
