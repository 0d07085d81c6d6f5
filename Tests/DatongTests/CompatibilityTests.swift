import BenchSupport
import DatongRuntime
import DatongTestSupport
import Foundation
import Gateway
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

/// Every official SDK's records keep their meaning: the Go SDK's own traffic
/// (Tests/Fixtures/sensors/go-sdk-2.1.6.jsonl), relayed unbinds and app context, the H5 domain
/// whitelist on app uploads of relayed records, pages that talk to Datong directly with the app's id.
@Suite("SDK compatibility in depth")
struct CompatibilityTests {
    /// The captures were made on 2026-11-22; a window of 1,500 days keeps them in it until 2031,
    /// while the history import of 2020 in the Go capture (over 2,400 days old) still needs its time_free.
    static let limits = UploadLimits(timeWindowPastDays: 1_500)
    static let now = Int64(Date().timeIntervalSince1970 * 1000)

    static func goCapture() throws -> [Fixtures.CapturedRequest] {
        let text = try String(contentsOf: Fixtures.directory.appendingPathComponent("go-sdk-2.1.6.jsonl"), encoding: .utf8)
        return try text.split(separator: "\n").map { try JSONDecoder().decode(Fixtures.CapturedRequest.self, from: Data($0.utf8)) }
    }

    static func send(_ request: Fixtures.CapturedRequest, to gateway: any TestClientProtocol) async throws -> TestResponse {
        var headers: HTTPFields = [:]
        for (name, value) in request.headers where name.lowercased() == "dry-run" { headers[.dryRun] = value }
        let uri = request.path + (request.query.isEmpty ? "" : "?\(request.query)")
        return try await gateway.execute(uri: uri, method: .post, headers: headers, body: ByteBuffer(string: request.body ?? ""))
    }

    static func upload(_ records: [[String: Any]], to gateway: any TestClientProtocol, project: String = "production") async throws -> [String: Any] {
        let answer = try await gateway.execute(
            uri: "/sa?project=\(project)", method: .post, body: ByteBuffer(bytes: try SDKTraffic.uploadBody(records))
        )
        #expect(answer.status == .ok, "\(answer.text)")
        return try answer.json()
    }

    @Test("the Go SDK's own traffic is stored with the meaning it had: empty project, its date-times, $is_login_id, time_free, IDM 3")
    func goSDK() async throws {
        try await RunningServices.run(limits: Self.limits) { services in
            for request in try Self.goCapture() {
                let answer = try await Self.send(request, to: services.gateway)
                #expect(answer.status == .ok, "\(request.path)?\(request.query): \(answer.text)")
                if request.path == "/sa" {
                    #expect(try answer.json()["rejected"] as? Int == 0, "\(answer.text)")
                }
            }
            let db = services.databaseURL
            #expect(try await TestDatabase.rows(db, "SELECT count(*) FROM analytics.rejected") == [["0"]])
            // 2 BuyProduct, $SignUp, $BindID, ViewProduct, $UnbindID, OldOrder, 3 BatchEvent, 1 written DebugEvent.
            let events = try await TestDatabase.rows(db, "SELECT event, count(*) FROM analytics.events GROUP BY 1 ORDER BY 1")
            #expect(
                events == [
                    ["$BindID", "1"], ["$SignUp", "1"], ["$UnbindID", "1"], ["BatchEvent", "3"], ["BuyProduct", "2"], ["DebugEvent", "1"],
                    ["OldOrder", "1"], ["ViewProduct", "1"],
                ])
            // Go trims trailing zeros: .67 is 670 ms, .6 is 600 ms; whole seconds get .000.
            let times = try await TestDatabase.rows(
                db,
                """
                SELECT properties->>'paid_at', properties->>'shipped_at', properties->>'packed_at', properties->>'ordered_at'
                FROM analytics.events WHERE event = 'BuyProduct' AND distinct_id = 'go-anon-1'
                """)
            #expect(times == [["2026-11-20 08:30:15.670", "2026-11-20 08:30:15.600", "2026-11-20 08:30:15.006", "2026-11-20 08:30:15.000"]])
            // $is_login_id is a flag, never a stored property.
            let flags = try await TestDatabase.rows(
                db,
                """
                SELECT (SELECT count(*) FROM analytics.events WHERE properties ? '$is_login_id'),
                       (SELECT count(*) FROM analytics.profiles WHERE properties ? '$is_login_id')
                """)
            #expect(flags == [["0", "0"]])
            let profile = try await TestDatabase.rows(
                db,
                """
                SELECT properties->>'name', properties->>'joined_at', properties->>'orders', properties->>'tags', properties ? 'first_seen'
                FROM analytics.profiles WHERE distinct_id = 'go-user-1'
                """)
            #expect(profile == [["Ada", "2026-11-20 08:30:15.670", "1", #"["vip"]"#, "f"]])
            // The logged-in event carries its login id; the $SignUp its original id.
            let login = try await TestDatabase.rows(db, "SELECT login_id FROM analytics.events WHERE event = 'BuyProduct' AND distinct_id = 'go-user-1'")
            #expect(login == [["go-user-1"]])
            let signup = try await TestDatabase.rows(db, "SELECT original_id, lib, lib_method FROM analytics.events WHERE event = '$SignUp'")
            #expect(signup == [["go-anon-1", "Golang", "code"]])
            // time_free: the order of 2020 is stored at its own time.
            let old = try await TestDatabase.rows(db, "SELECT to_char(time AT TIME ZONE 'UTC', 'YYYY-MM-DD') FROM analytics.events WHERE event = 'OldOrder'")
            #expect(old == [["2020-03-01"]])
            // IDM 3: identities kept on the event; the bind linked the mobile, the unbind detached it.
            let bound = try await TestDatabase.rows(db, "SELECT identities->>'$identity_mobile' FROM analytics.events WHERE event = '$BindID'")
            #expect(bound == [["13800000000"]])
            let mobile = try await TestDatabase.rows(db, "SELECT count(*) FROM identity.identities WHERE key = '$identity_mobile'")
            #expect(mobile == [["0"]])
            let details = try await TestDatabase.rows(db, "SELECT count(*) FROM analytics.events WHERE lib_detail LIKE '##main.main##%'")
            #expect(details == [["11"]])
            // One user for go-user-2's bind, track and profile.
            let users = try await TestDatabase.rows(db, "SELECT count(DISTINCT user_id) FROM analytics.events WHERE event IN ('$BindID', 'ViewProduct')")
            #expect(users == [["1"]])
            let counts = try await TestDatabase.rows(db, "SELECT sum(received), sum(stored), sum(duplicates), sum(rejected) FROM analytics.ingest_counts")
            #expect(counts.first?[3] == "0")
        }
    }

    @Test("the Ruby SDK's documented sign-up, which has no login flag: the login id's later events and profile are the signed-up user's")
    func rubySignUpWithoutFlag() async throws {
        try await RunningServices.run(limits: Self.limits) { services in
            // Requests 2 to 6: track(device), track_signup(login, device), track(login),
            // profile_set(login), then a BatchConsumer's track(login) and profile_increment(login).
            _ = try await RecordMeaningTests.sendAll(Array(try Fixtures.ruby().dropFirst()), to: services)
            let db = services.databaseURL
            let users = try await TestDatabase.rows(
                db,
                """
                SELECT event, distinct_id, user_id::text FROM analytics.events
                WHERE event IN ('BrowseBeforeSignup', '$SignUp', 'BuyAfterSignup', 'Batched') ORDER BY time
                """)
            #expect(users.count == 4 && Set(users.map { $0[2] }).count == 1, "one user for the device and its login: \(users)")
            let profile = try await TestDatabase.rows(
                db, "SELECT user_id::text, properties->>'name', properties->>'orders' FROM analytics.profiles WHERE distinct_id = 'ruby-login-2'")
            #expect(profile == [[users.first?[2] ?? "?", "Bob", "1"]], "the profile is the signed-up user's")
            // No second user was made of the login id read as a device id.
            #expect(try await TestDatabase.rows(db, "SELECT count(*)::text FROM identity.users") == [["1"]])
            #expect(
                try await TestDatabase.rows(db, "SELECT key FROM identity.identities WHERE value = 'ruby-login-2'") == [["$identity_login_id"]])

            // A device that never signed up keeps the device-id rule; a later sign-up of an id an
            // old record already used as a device id wins from then on, in every cache.
            func track(_ distinct: String, _ event: String, lib: String = "Ruby") -> [String: Any] {
                ["type": "track", "event": event, "time": Self.now, "distinct_id": distinct, "lib": ["$lib": lib], "properties": [:] as [String: Any]]
            }
            for _ in 0..<2 { _ = try await CompatibilityTests.upload([track("ruby-device-9", "Before")], to: services.gateway, project: "default") }
            let signup: [String: Any] = [
                "type": "track_signup", "event": "$SignUp", "time": Self.now, "distinct_id": "ruby-device-9", "original_id": "ruby-device-8",
                "lib": ["$lib": "Ruby"], "properties": [:] as [String: Any],
            ]
            _ = try await CompatibilityTests.upload([track("ruby-device-8", "Browse"), signup], to: services.gateway, project: "default")
            _ = try await CompatibilityTests.upload([track("ruby-device-9", "After")], to: services.gateway, project: "default")
            let byEvent = try await TestDatabase.rows(
                db, "SELECT event, user_id::text FROM analytics.events WHERE event IN ('Before', 'Browse', 'After') ORDER BY time, event")
            let user = Dictionary(byEvent.map { ($0[0] ?? "", $0[1] ?? "") }, uniquingKeysWith: { a, _ in a })
            #expect(user["After"] == user["Browse"] && user["Before"] != user["Browse"], "\(byEvent)")
            // The gateway knows the login id's owner from the sign-up: a later record of the
            // login id alone is answered from its memory, without a call to identity-service.
            let hits = try await GatewayIdentityCacheTests.metric("datong_gateway_identity_cache_hits_total", services.gateway)
            _ = try await CompatibilityTests.upload([track("ruby-device-9", "Again")], to: services.gateway, project: "default")
            #expect(try await GatewayIdentityCacheTests.metric("datong_gateway_identity_cache_hits_total", services.gateway) == hits + 1)
            #expect(
                try await TestDatabase.rows(db, "SELECT user_id::text FROM analytics.events WHERE event = 'Again'") == [[user["Browse"] ?? "?"]])
        }
    }

    @Test("the PHP SDK's own traffic: one user across its sign-up, its profile operations in order, its bind and unbind")
    func phpSDK() async throws {
        try await RunningServices.run(limits: Self.limits) { services in
            let answers = try await RecordMeaningTests.sendAll(try Fixtures.requests("php-sdk-2.0.4.jsonl"), to: services)
            #expect(answers.map { $0["stored"] as? Int } == [3, 3, 1, 3])
            let db = services.databaseURL
            let users = try await TestDatabase.rows(db, "SELECT event, user_id::text FROM analytics.events ORDER BY time, event")
            #expect(users.count == 6 && Set(users.map { $0[1] }).count == 1, "one user for the device, its login and its mobile: \(users)")
            #expect(
                try await TestDatabase.rows(
                    db,
                    "SELECT properties->>'paid_at', properties->>'shipped_at', properties->>'price', login_id FROM analytics.events WHERE event = 'BuyAfterSignup'"
                )
                    == [["2026-11-20 08:30:15.123", "2026-11-21 09:10:11.456", "9.9", "php-login-1"]], "a PHP DateTime is the date-time it holds")
            #expect(
                try await TestDatabase.rows(db, "SELECT name, type FROM analytics.catalog_properties WHERE name IN ('paid_at', 'shipped_at') ORDER BY name")
                    == [["paid_at", "DATETIME"], ["shipped_at", "DATETIME"]])
            #expect(
                try await TestDatabase.rows(db, "SELECT properties->>'tags' FROM analytics.events WHERE event = 'BrowseBeforeSignup'") == [[#"["a", "b"]"#]])
            #expect(
                try await TestDatabase.rows(
                    db, "SELECT properties->>'name', properties->>'orders', properties->>'labels' FROM analytics.profiles WHERE distinct_id = 'php-login-1'")
                    == [["Ann", "2", #"["vip"]"#]])
            #expect(try await TestDatabase.rows(db, "SELECT properties->>'title' FROM analytics.items WHERE item_id = 'php-item-1'") == [["Datong"]])
            // The unbind detached the mobile the bind linked; $is_login_id is a flag, not a property.
            #expect(try await TestDatabase.rows(db, "SELECT count(*)::text FROM identity.identities WHERE key = '$identity_mobile'") == [["0"]])
            #expect(try await TestDatabase.rows(db, "SELECT count(*)::text FROM analytics.events WHERE properties ? '$is_login_id'") == [["0"]])
        }
    }

    @Test("the C++ SDK's own traffic: its date-times, its login, one millisecond's profile operations in the order called")
    func cppSDK() async throws {
        try await RunningServices.run(limits: Self.limits) { services in
            let answers = try await RecordMeaningTests.sendAll(try Fixtures.requests("cpp-sdk-1.0.3.jsonl"), to: services)
            #expect(answers.map { $0["stored"] as? Int } == [7])
            let db = services.databaseURL
            #expect(try await TestDatabase.rows(db, "SELECT count(DISTINCT user_id)::text FROM analytics.events") == [["1"]])
            #expect(
                try await TestDatabase.rows(
                    db,
                    """
                    SELECT properties->>'paid_at', properties->>'shipped_at', properties->>'count', properties->>'price',
                           properties->>'member', properties->>'name', properties->>'tags'
                    FROM analytics.events WHERE event = 'BuyBeforeLogin'
                    """) == [["2026-11-21 22:58:39.007", "2026-11-20 08:30:15.670", "3", "3.14", "true", "测试字符串", #"["a", "b"]"#]])
            #expect(
                try await TestDatabase.rows(
                    db, "SELECT original_id, login_id FROM analytics.events WHERE event = '$SignUp'") == [["cpp-device-1", "cpp-login-1"]])
            #expect(
                try await TestDatabase.rows(
                    db, "SELECT properties->>'nick', properties->>'orders', properties->>'hobby' FROM analytics.profiles WHERE distinct_id = 'cpp-login-1'")
                    == [["Ann", "2", #"["movie"]"#]])
            #expect(try await TestDatabase.rows(db, "SELECT properties->>'title' FROM analytics.items WHERE item_id = 'cpp-item-1'") == [["Datong"]])
            let paidAt = try await TestDatabase.rows(
                db, "SELECT type FROM analytics.catalog_properties WHERE name IN ('paid_at', 'shipped_at', 'tags', 'member') ORDER BY name")
            #expect(paidAt == [["BOOL"], ["DATETIME"], ["DATETIME"], ["LIST"]])
        }
    }

    @Test("an empty project or token in a record means 'not given', in uploads and in /debug")
    func emptyProject() async throws {
        try await RunningServices.run(limits: Self.limits) { services in
            let record: [String: Any] = [
                "type": "track", "event": "E", "time": Self.now, "distinct_id": "d", "project": "", "token": "", "properties": [:] as [String: Any],
            ]
            let answer = try await Self.upload([record], to: services.gateway, project: "default")
            #expect(answer["stored"] as? Int == 1)
            let data = Data(SDKTraffic.json(record)).base64EncodedString().addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let debug = try await services.gateway.execute(uri: "/debug?project=default", method: .post, body: ByteBuffer(string: "data=\(data)"))
            #expect(debug.status == .ok, "\(debug.text)")
        }
    }

    @Test("without time_free an old record is refused, saying what would let it in")
    func timeWindow() async throws {
        try await RunningServices.run(limits: Self.limits) { services in
            let old: [String: Any] = ["type": "track", "event": "OldOrder", "time": 1_583_064_000_000, "distinct_id": "d"]
            let refused = try await Self.upload([old], to: services.gateway)
            #expect(refused["rejected"] as? Int == 1)
            let reason = ((refused["problems"] as? [[String: Any]])?.first?["reason"] as? String) ?? ""
            #expect(reason.contains("time_free"))
            var free = old
            free["time_free"] = true
            #expect(try await Self.upload([free], to: services.gateway)["stored"] as? Int == 1)
            var absurd = free
            absurd["time"] = 253_402_300_800_000  // year 10000
            #expect(try await Self.upload([absurd], to: services.gateway)["rejected"] as? Int == 1)
        }
    }

    @Test("a page that sends directly with the app's anonymous id (bridge schemes 1 and 2) belongs to the app's user, before and after login")
    func pageWithAppID() async throws {
        try await RunningServices.run(limits: Self.limits) { services in
            let appID = "app-anon-scheme"
            let app: [String: Any] = [
                "type": "track", "event": "$AppStart", "time": Self.now, "distinct_id": appID, "lib": ["$lib": "iOS"],
                "identities": ["$identity_idfv": appID, "$identity_anonymous_id": appID],
            ]
            // The page's own records: old-style, the app's id as distinct_id, no identities.
            func page(_ event: String) -> [String: Any] {
                [
                    "type": "track", "event": event, "time": Self.now, "distinct_id": appID, "lib": ["$lib": "js"],
                    "properties": ["$url": "https://h5.example.com/x"],
                ]
            }
            #expect(try await Self.upload([app], to: services.gateway)["stored"] as? Int == 1)
            #expect(try await Self.upload([page("PageBefore")], to: services.gateway)["stored"] as? Int == 1)
            let signup: [String: Any] = [
                "type": "track_signup", "event": "$SignUp", "time": Self.now, "distinct_id": "member-7", "original_id": appID,
                "lib": ["$lib": "iOS"], "identities": ["$identity_idfv": appID, "$identity_anonymous_id": appID, "$identity_login_id": "member-7"],
            ]
            #expect(try await Self.upload([signup], to: services.gateway)["stored"] as? Int == 1)
            #expect(try await Self.upload([page("PageAfter")], to: services.gateway)["stored"] as? Int == 1)
            let users = try await TestDatabase.rows(services.databaseURL, "SELECT event, user_id FROM analytics.events ORDER BY event")
            #expect(users.count == 4)
            #expect(Set(users.map { $0[1] }).count == 1, "\(users)")
        }
    }

    @Test("a relayed $UnbindID does what the app SDK does with it: the page's one pair, under the app's user")
    func relayedUnbind() async throws {
        try await RunningServices.run(limits: Self.limits) { services in
            let device = SDKTraffic.Device(11)
            let server = "https://sa.example.com/sa?project=production"
            let bind: [String: Any] = [
                "type": "track_id_bind", "event": "$BindID", "time": Self.now, "distinct_id": device.idfv, "lib": ["$lib": "iOS"],
                "identities": ["$identity_idfv": device.idfv, "$identity_anonymous_id": device.idfv, "$identity_mobile": "139"],
            ]
            #expect(try await Self.upload([bind], to: services.gateway)["stored"] as? Int == 1)
            var unbind = SDKTraffic.bridgeRecord(device, sequence: 1, time: Self.now, serverURL: server)
            unbind["type"] = "track_id_unbind"
            unbind["event"] = "$UnbindID"
            unbind["identities"] = ["$identity_mobile": "139"]
            let relay = try await services.gateway.execute(
                uri: "/v1/bridge?project=production", method: .post,
                body: ByteBuffer(bytes: SDKTraffic.relayBody(device, records: [unbind], serverURL: server))
            )
            #expect(try relay.json()["stored"] as? Int == 1, "\(relay.text)")
            let mobile = try await TestDatabase.rows(services.databaseURL, "SELECT count(*) FROM identity.identities WHERE key = '$identity_mobile'")
            #expect(mobile == [["0"]])
            let refusals = try await TestDatabase.rows(services.databaseURL, "SELECT count(*) FROM identity.history WHERE kind = 'refused'")
            #expect(refusals == [["0"]])
            let stored = try await TestDatabase.rows(
                services.databaseURL, "SELECT identities::text, anonymous_id FROM analytics.events WHERE event = '$UnbindID'"
            )
            #expect(stored == [[#"{"$identity_mobile": "139"}"#, nil]])
        }
    }

    @Test("a relay applies everything the app sends over the page's properties, keeping what the page says of itself")
    func relayedAppContext() async throws {
        try await RunningServices.run(limits: Self.limits) { services in
            let device = SDKTraffic.Device(12)
            let server = "https://sa.example.com/sa?project=production"
            let record = SDKTraffic.bridgeRecord(device, sequence: 1, time: Self.now, serverURL: server)
            let app: [String: Any] = [
                "server_url": server, "anonymous_id": device.idfv,
                "properties": ["$carrier": "CMCC", "$os": "iOS", "member_level": "gold", "$lib": "iOS", "$url": "https://app/x", "$screen_width": 393],
            ]
            let body = SDKTraffic.json(["app": app, "messages": [String(decoding: SDKTraffic.json(record), as: UTF8.self)]] as [String: Any])
            let relay = try await services.gateway.execute(uri: "/v1/bridge?project=production", method: .post, body: ByteBuffer(bytes: body))
            #expect(try relay.json()["stored"] as? Int == 1, "\(relay.text)")
            let stored = try await TestDatabase.rows(
                services.databaseURL,
                """
                SELECT properties->>'$carrier', properties->>'member_level', properties->>'$os', properties->>'$lib', properties->>'$url', lib
                FROM analytics.events
                """)
            let pageURL = (record["properties"] as? [String: Any])?["$url"] as? String
            #expect(pageURL != nil)
            #expect(stored == [["CMCC", "gold", "iOS", "js", pageURL, "js"]])
        }
    }

    @Test("an app's upload of relayed records meets the H5 domain whitelist as a relay does")
    func relayedUploadsAndWhitelist() async throws {
        try await RunningServices.run(limits: Self.limits) { services in
            let published = try await services.config.execute(
                uri: "/v1/projects/production/h5-domain-whitelist", method: .put,
                headers: [.authorization: "Bearer \(RunningServices.adminToken)"], body: ByteBuffer(string: #"["h5.example.com"]"#)
            )
            #expect(published.status == .created)
            // No wait for the gateway's revalidation (every 2 s): it has not met the project yet, so
            // it reads the project's lists at its first record.
            func relayed(_ url: String) -> [String: Any] {
                [
                    "type": "track", "event": "H5View", "time": Self.now, "distinct_id": "app-anon-w", "_hybrid_h5": true,
                    "lib": ["$lib": "js"], "properties": ["$url": url],
                ]
            }
            let answer = try await Self.upload([relayed("https://h5.example.com/a"), relayed("https://evil.example.org/b")], to: services.gateway)
            #expect(answer["stored"] as? Int == 1)
            #expect(answer["rejected"] as? Int == 1)
            let reasons = try await TestDatabase.rows(services.databaseURL, "SELECT reason FROM analytics.rejected")
            #expect(reasons == [["bridge: the page's host evil.example.org is not on project production's H5 domain whitelist"]])
        }
    }

    @Test("GET /sa with the payload in the query is an upload, under any prefix")
    func getUpload() async throws {
        try await RunningServices.run(limits: Self.limits) { services in
            let record: [String: Any] = ["type": "track", "event": "GetFallback", "time": Self.now, "distinct_id": "d", "lib": ["$lib": "js"]]
            let data = Data(SDKTraffic.json(record)).base64EncodedString().addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            for path in ["/sa", "/prefix/sa"] {
                let answer = try await services.gateway.execute(uri: "\(path)?project=production&data=\(data)", method: .get)
                #expect(answer.status == .ok)
                #expect(answer.headers[.contentType] == "image/gif")
            }
            #expect(try await TestDatabase.rows(services.databaseURL, "SELECT count(*) FROM analytics.events") == [["1"]])
        }
    }
}
