import DatongTestSupport
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import Gateway

/// What the gateway adds to stored events from the request, through the real services: the
/// tests' connections come from 127.0.0.1, which `TRUSTED_PROXIES` names as the balancer.
@Suite(
    "The server's presets: $ip behind a proxy, region, browser, $url_host, privacy settings",
    .enabled(if: GeoFixtures.available && UAPCore.available, "scripts/test writes the test databases and installs uap-core"))
struct EnrichmentEndToEndTests {
    static let wechat =
        "Mozilla/5.0 (iPhone; CPU iPhone OS 9_3 like Mac OS X) AppleWebKit/601.1.46 (KHTML, like Gecko) Mobile/13E233 MicroMessenger/6.3.15 NetType/WIFI Language/zh_CN"
    static let googlebot = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
    static var behindBalancer: (trustedProxies: String, geoIP: String?, userAgentRules: String?) {
        ("127.0.0.0/8", GeoFixtures.mmdb, UAPCore.regexes)
    }

    static func record(_ event: String, lib: String, properties: [String: Any] = [:], trackID: Int) -> [String: Any] {
        var properties = properties
        properties["$lib"] = lib
        return [
            "type": "track", "event": event, "distinct_id": "d-\(trackID)", "time": Int(Date().timeIntervalSince1970 * 1000),
            "lib": ["$lib": lib, "$lib_version": "1.0"], "properties": properties, "_track_id": trackID,
        ]
    }

    static func upload(
        _ records: [[String: Any]], forwardedFor: String?, userAgent: String, to client: any TestClientProtocol
    ) async throws -> TestResponse {
        let json = String(decoding: try JSONSerialization.data(withJSONObject: records), as: UTF8.self)
        let (uri, body) = EndToEndTests.form(json)
        var headers: HTTPFields = [.contentType: "application/x-www-form-urlencoded", .userAgent: userAgent]
        if let forwardedFor { headers[HTTPField.Name("X-Forwarded-For")!] = forwardedFor }
        return try await client.execute(uri: uri, method: .post, headers: headers, body: body)
    }

    /// The stored events' presets, by event name.
    static func stored(_ services: RunningServices) async throws -> [String: [String?]] {
        let rows = try await TestDatabase.rows(
            services.databaseURL,
            """
            SELECT event, properties->>'$ip', properties->>'$country', properties->>'$province', properties->>'$city',
                   properties->>'$browser', properties->>'$os', properties->>'$url_host', properties->>'$is_bot'
            FROM analytics.events
            """)
        return Dictionary(rows.map { ($0[0] ?? "", Array($0.dropFirst())) }, uniquingKeysWith: { a, _ in a })
    }

    static func setEnrichment(_ settings: String, _ services: RunningServices) async throws {
        let response = try await services.config.execute(
            uri: "/v1/projects/default/enrichment", method: .put, headers: [.authorization: "Bearer \(RunningServices.adminToken)"],
            body: ByteBuffer(string: settings))
        #expect(response.status == .ok, "\(String(buffer: response.body))")
        // The gateway reads a project's settings again within WHITELIST_REFRESH_SECONDS (2 s).
        try await Task.sleep(for: .milliseconds(2_300))
    }

    @Test("a browser's events get the client's $ip, region, browser and $url_host; a server SDK's keep only their own")
    func defaults() async throws {
        try await RunningServices.run(gatewayEnrichment: Self.behindBalancer) { services in
            let response = try await Self.upload(
                [
                    Self.record("Page", lib: "js", properties: ["$url": "https://shop.example.com/p?x=1"], trackID: 1),
                    Self.record("Server", lib: "python", trackID: 2),
                    Self.record("ServerWithIP", lib: "Java", properties: ["$ip": "1.2.4.7"], trackID: 3),
                    Self.record("OwnBrowser", lib: "js", properties: ["$browser": "Custom", "$province": "自填"], trackID: 4),
                    Self.record("App", lib: "iOS", trackID: 5),
                    Self.record("$pageview", lib: "js", trackID: 6),
                ],
                // The device sent a made-up address first; the balancer appended the one it saw.
                forwardedFor: "6.6.6.6, 1.2.3.4", userAgent: Self.wechat, to: services.gateway)
            #expect(response.status == .ok, "\(String(buffer: response.body))")
            let events = try await Self.stored(services)
            #expect(events["Page"] == ["1.2.3.4", "中国", "湖南", "长沙", "WeChat", "iOS", "shop.example.com", nil])
            #expect(events["Server"] == [nil, nil, nil, nil, nil, nil, nil, nil])
            #expect(events["ServerWithIP"] == ["1.2.4.7", "中国", "广西", "南宁", nil, nil, nil, nil])
            #expect(events["OwnBrowser"] == ["1.2.3.4", "中国", "自填", "长沙", "Custom", "iOS", nil, nil])
            // An app's own record gets the address and region, never a browser from its HTTP client.
            #expect(events["App"] == ["1.2.3.4", "中国", "湖南", "长沙", nil, nil, nil, nil])

            // docs/ANALYTICS.md's queries on what the server adds, as written there.
            let documented = try AnalystQueryTests.sqlBlock("docs/ANALYTICS.md", after: "## What the server adds")
            let statements = documented.components(separatedBy: ";\n").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
                .filter { !$0.isEmpty }
            #expect(statements.count == 2)
            let byProvince = try await TestDatabase.rows(services.databaseURL, statements[0])
            #expect(byProvince == [["湖南", "3"], ["广西", "1"], ["自填", "1"]] || byProvince == [["湖南", "3"], ["自填", "1"], ["广西", "1"]])
            #expect(try await TestDatabase.rows(services.databaseURL, statements[1]) == [["WeChat", "1"]])

            // A relay of a real page's message: the app's device, the page's URL; the request's
            // User-Agent is the app's HTTP client, never read as a browser.
            let message = try Fixtures.bridgeMessages("ios")[0]
            let pageURL = try #require(
                ((try JSONSerialization.jsonObject(with: Data(message.utf8)) as? [String: Any])?["data"] as? [String: Any])
                    .flatMap { ($0["properties"] as? [String: Any])?["$url"] as? String })
            let relayed = try await GatewayTests.relay(
                [message], app: Fixtures.relayApp(anonymousID: "app-anon", idfv: "IDFV-9"), to: services.gateway,
                headers: [.userAgent: "okhttp/4.9.0", HTTPField.Name("X-Forwarded-For")!: "1.2.3.4"])
            #expect(try GatewayTests.statuses(relayed) == ["stored"], "\(String(buffer: relayed.body))")
            let rows = try await TestDatabase.rows(
                services.databaseURL,
                """
                SELECT properties->>'$ip', properties->>'$province', properties->>'$browser', properties->>'$os', properties->>'$url_host'
                FROM analytics.events WHERE project = 'production'
                """)
            #expect(rows == [["1.2.3.4", "湖南", nil, "iOS", URL(string: pageURL)?.host]])
        }
    }

    @Test("the JS SDK's image beacon (GET /sa.gif) is enriched as its POST is")
    func imageBeacon() async throws {
        try await RunningServices.run(gatewayEnrichment: Self.behindBalancer) { services in
            let record = Self.record("Beacon", lib: "js", properties: ["$url": "https://m.example.cn/a?b=1"], trackID: 1)
            let data = try JSONSerialization.data(withJSONObject: record).base64EncodedString()
                .addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let response = try await services.gateway.execute(
                uri: "/sa.gif?project=default&data=\(data)", method: .get,
                headers: [.userAgent: Self.wechat, HTTPField.Name("X-Forwarded-For")!: "1.2.4.9"])
            #expect(response.status == .ok)
            #expect(try await Self.stored(services)["Beacon"] == ["1.2.4.9", "中国", "广西", "南宁", "WeChat", "iOS", "m.example.cn", nil])
        }
    }

    @Test("an X-Forwarded-For from a peer that is not a trusted proxy changes nothing")
    func untrustedPeer() async throws {
        try await RunningServices.run(gatewayEnrichment: ("10.0.0.0/8", GeoFixtures.mmdb, UAPCore.regexes)) { services in
            let response = try await Self.upload(
                [Self.record("Page", lib: "js", trackID: 1)], forwardedFor: "1.2.3.4", userAgent: Self.wechat, to: services.gateway)
            #expect(response.status == .ok)
            // The peer itself, loopback: no region for it.
            #expect(try await Self.stored(services)["Page"] == ["127.0.0.1", nil, nil, nil, "WeChat", "iOS", nil, nil])
        }
    }

    @Test("each privacy setting stores what docs/PRIVACY.md says, and crawlers are kept, marked or dropped")
    func privacy() async throws {
        try await RunningServices.run(gatewayEnrichment: Self.behindBalancer) { services in
            try await Self.setEnrichment(#"{"ip": "truncated"}"#, services)
            _ = try await Self.upload(
                [Self.record("Truncated", lib: "js", trackID: 1), Self.record("TruncatedOwn", lib: "python", properties: ["$ip": "1.2.4.7"], trackID: 2)],
                forwardedFor: "1.2.3.4", userAgent: Self.wechat, to: services.gateway)
            try await Self.setEnrichment(#"{"ip": "none", "region": false, "userAgent": false}"#, services)
            _ = try await Self.upload(
                [Self.record("Nothing", lib: "js", trackID: 3), Self.record("NothingOwn", lib: "python", properties: ["$ip": "1.2.4.7"], trackID: 4)],
                forwardedFor: "1.2.3.4", userAgent: Self.wechat, to: services.gateway)
            try await Self.setEnrichment(#"{"ip": "full", "region": true, "userAgent": true, "bots": "mark"}"#, services)
            _ = try await Self.upload([Self.record("Marked", lib: "js", trackID: 5)], forwardedFor: "1.2.3.4", userAgent: Self.googlebot, to: services.gateway)
            try await Self.setEnrichment(#"{"bots": "drop"}"#, services)
            let dropped = try await Self.upload(
                [Self.record("Dropped", lib: "js", trackID: 6), Self.record("DroppedNot", lib: "python", trackID: 7)],
                forwardedFor: "1.2.3.4", userAgent: Self.googlebot, to: services.gateway)
            let answer = try dropped.json()
            #expect(answer["bots"] as? Int == 1 && answer["stored"] as? Int == 1, "\(answer)")

            let events = try await Self.stored(services)
            // The region comes from the full address; the address is stored truncated.
            #expect(events["Truncated"] == ["1.2.3.0", "中国", "湖南", "长沙", "WeChat", "iOS", nil, nil])
            #expect(events["TruncatedOwn"] == ["1.2.4.0", "中国", "广西", "南宁", nil, nil, nil, nil])
            #expect(events["Nothing"] == [nil, nil, nil, nil, nil, nil, nil, nil])
            #expect(events["NothingOwn"] == [nil, nil, nil, nil, nil, nil, nil, nil])
            #expect(events["Marked"]?[7] == "true")
            #expect(events["Dropped"] == nil)
            #expect(events["DroppedNot"] != nil)

            // Read back, refused when wrong, audited.
            let shown = try await services.config.execute(
                uri: "/v1/projects/default/enrichment", method: .get, headers: [.authorization: "Bearer \(RunningServices.adminToken)"])
            #expect(String(buffer: shown.body) == #"{"bots":"drop","ip":"full","region":true,"userAgent":true}"#)
            for bad in [#"{"ip": "half"}"#, #"{"region": "yes"}"#, #"{"colour": 1}"#, "{}", "nonsense"] {
                let refused = try await services.config.execute(
                    uri: "/v1/projects/default/enrichment", method: .put, headers: [.authorization: "Bearer \(RunningServices.adminToken)"],
                    body: ByteBuffer(string: bad))
                #expect(refused.status == .badRequest, "\(bad): \(String(buffer: refused.body))")
            }
            let unknown = try await services.config.execute(
                uri: "/v1/projects/nope/enrichment", method: .get, headers: [.authorization: "Bearer \(RunningServices.adminToken)"])
            #expect(unknown.status == .notFound)
            let audit = try await TestDatabase.rows(
                services.databaseURL, "SELECT count(*)::text FROM config.audit WHERE action = 'project.enrichment_set' AND project = 'default'")
            #expect(audit == [["4"]])

            // A record naming a project of its own goes by that project's settings, whichever
            // project's URL it came through (here: default, which stores $ip in full).
            let elsewhere = try await services.config.execute(
                uri: "/v1/projects/proj_x/enrichment", method: .put, headers: [.authorization: "Bearer \(RunningServices.adminToken)"],
                body: ByteBuffer(string: #"{"ip": "none"}"#))
            #expect(elsewhere.status == .ok)
            var page = Self.record("Elsewhere", lib: "js", trackID: 8)
            page["project"] = "proj_x"
            var server = Self.record("ElsewhereOwn", lib: "python", properties: ["$ip": "1.2.4.7"], trackID: 9)
            server["project"] = "proj_x"
            let mixed = try await Self.upload([page, server], forwardedFor: "1.2.3.4", userAgent: Self.wechat, to: services.gateway)
            #expect(try mixed.json()["stored"] as? Int == 2, "\(String(buffer: mixed.body))")
            let inOther = try await TestDatabase.rows(
                services.databaseURL,
                "SELECT event, properties->>'$ip', properties->>'$province', properties->>'$browser' FROM analytics.events WHERE project = 'proj_x' ORDER BY event"
            )
            #expect(inOther == [["Elsewhere", nil, "湖南", "WeChat"], ["ElsewhereOwn", nil, "广西", nil]])
        }
    }
}
