import DatongContracts
import DatongTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import NIOFoundationEssentialsCompat
import Testing

/// One person across app and H5, through the gateway with the real SDK captures: what analysts
/// see in `analytics.events`, and the identity API that explains and undoes a merge.
@Suite("identity end to end: one user across app and H5")
struct IdentityEndToEndTests {
    static let cookie = GatewayTests.iosCookie
    static let service: HTTPFields = [.authorization: "Bearer \(RunningServices.serviceToken)"]

    /// The JS SDK's captured image beacon, as the iOS bridge fixture's page would send it
    /// directly (its cookie id), `shift` ms later than captured so each one is a new event.
    static func beacon(shift: Int) throws -> String {
        let emission = try #require(try Fixtures.javascript().first { $0.kind == "img.src" })
        guard case .text(let url) = emission.payload else { throw BeaconProblem() }
        let components = try #require(URLComponents(string: url))
        let data = try #require(components.queryItems?.first { $0.name == "data" }?.value)
        let decoded = try #require(Data(base64Encoded: data))
        var record = try #require(try JSONSerialization.jsonObject(with: decoded) as? [String: Any])
        record["identities"] = ["$identity_cookie_id": cookie, "$identity_anonymous_id": cookie]
        record["distinct_id"] = cookie
        record["time"] = (record["time"] as? Int ?? 0) + shift
        let encoded = try JSONSerialization.data(withJSONObject: record).base64EncodedString()
        return "/sa.gif?project=production&data=" + encoded.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
    }

    struct BeaconProblem: Error {}

    /// The SQL block of docs/ANALYTICS.md's "One user across app and H5" section.
    static func readmeQuery() throws -> String {
        try AnalystQueryTests.sqlBlock("docs/ANALYTICS.md", after: "## One user across app and H5")
    }

    static func get<T: Decodable>(_ type: T.Type, _ uri: String, _ client: any TestClientProtocol) async throws -> T {
        let response = try await client.execute(uri: uri, method: .get, headers: service)
        #expect(response.status == .ok, "\(uri): \(response.text)")
        return try JSONDecoder().decode(T.self, from: Data(buffer: response.body))
    }

    @Test("a page's direct beacon, the app, the bridged page, the beacon again and the page's $SignUp count as one user; the merge is explained and undone")
    func oneUserAcrossAppAndH5() async throws {
        try await RunningServices.run { services in
            let gateway = services.gateway
            // 1. The page, opened in a browser before the app existed on this phone.
            #expect(try await gateway.execute(uri: try Self.beacon(shift: 0), method: .get).status == .ok)
            // 2. The app's own event.
            let (uri, body) = EndToEndTests.form(
                #"""
                [{"type":"track","event":"AppStart","time":1795273119000,"distinct_id":"app-anon-1",
                  "identities":{"$identity_idfv":"IDFV-1","$identity_anonymous_id":"app-anon-1"},
                  "lib":{"$lib":"iOS","$lib_version":"4.5.0"},"properties":{"$app_version":"2.3.0"}}]
                """#, project: "production")
            #expect(try await gateway.execute(uri: uri, method: .post, body: body).status == .ok)
            // 3. The same page inside the app: the app relays its bridge message.
            let messages = try Fixtures.bridgeMessages("ios")
            let app = Fixtures.relayApp(anonymousID: "app-anon-1", idfv: "IDFV-1")
            let relayed = try await GatewayTests.relay([messages[0]], app: app, to: gateway, headers: [.init("X-Request-Id")!: "relay-1"])
            #expect(try GatewayTests.statuses(relayed) == ["stored"])
            // 4. The page sends directly again, 5. then logs in inside the app.
            #expect(try await gateway.execute(uri: try Self.beacon(shift: 60_000), method: .get).status == .ok)
            let signup = try await GatewayTests.relay([messages[1]], app: app, to: gateway)
            #expect(try GatewayTests.statuses(signup) == ["stored"])

            let url = services.databaseURL
            #expect(
                try await TestDatabase.rows(
                    url,
                    """
                    SELECT count(*), count(DISTINCT user_id), count(DISTINCT stored_user_id), count(*) FILTER (WHERE hybrid_h5)
                    FROM analytics.events WHERE project = 'production'
                    """) == [["5", "1", "2", "2"]])
            let user = try #require(try await TestDatabase.rows(url, "SELECT DISTINCT user_id FROM analytics.events").first?[0].flatMap(Int64.init))
            // The documented query counts this person once, as someone who used both the app and H5
            // (run on this project, with the captures' clock).
            let readme = try Self.readmeQuery()
                .replacingOccurrences(of: "'default'", with: "'production'")
                .replacingOccurrences(of: "now()", with: "to_timestamp(1795273200)")
            #expect(try await TestDatabase.rows(url, readme) == [["1", "0", "0"]])

            // The identity API: the page's cookie id and the login id belong to the app's user.
            let identity = services.identity
            for (key, value) in [("$identity_cookie_id", Self.cookie), ("$identity_login_id", "user-123"), ("$identity_idfv", "IDFV-1")] {
                let found = try await Self.get(
                    UserAnswer.self, "/v1/projects/production/identities?key=\(key.replacingOccurrences(of: "$", with: "%24"))&value=\(value)", identity)
                #expect(found.userId == user, "\(key)")
            }
            let history = try await Self.get(UserHistory.self, "/v1/projects/production/users/\(user)/history", identity)
            let merge = try #require(history.merges.first)
            #expect(history.merges.count == 1)
            #expect(merge.intoUser == user)
            #expect(merge.cause.requestId == "relay-1" && merge.cause.type == "track")
            #expect(merge.identities.contains(IdentityPair(key: "$identity_cookie_id", value: Self.cookie)))
            let web = merge.fromUser

            // Without the service token nothing is shown or changed.
            let refused = try await identity.execute(uri: "/v1/projects/production/merges/\(merge.mergeId)/undo", method: .post)
            #expect(refused.status == .unauthorized)
            // An undo puts the page's first event back under its own user; later events stay.
            let undo = try await identity.execute(
                uri: "/v1/projects/production/merges/\(merge.mergeId)/undo", method: .post, headers: Self.service,
                body: ByteBuffer(string: #"{"actor":"ops:wang"}"#)
            )
            #expect(undo.status == .ok, "\(undo.text)")
            #expect(
                try await TestDatabase.rows(
                    url,
                    """
                    SELECT user_id, count(*) FROM analytics.events WHERE project = 'production' GROUP BY user_id ORDER BY user_id
                    """) == [[String(user), "4"], [String(web), "1"]].sorted { $0[0]! < $1[0]! })
            let again = try await identity.execute(
                uri: "/v1/projects/production/merges/\(merge.mergeId)/undo", method: .post, headers: Self.service
            )
            #expect(again.status == .conflict)
            #expect(try again.json()["error"] as? String == "already_undone")
        }
    }

    @Test("the identity API answers 4xx with a reason: a link that would merge two login ids, unknown users and merges, forbidden unbinds")
    func apiRefusals() async throws {
        try await RunningServices.run { services in
            let identity = services.identity
            func post(_ uri: String, _ body: String) async throws -> TestResponse {
                try await identity.execute(uri: uri, method: .post, headers: Self.service, body: ByteBuffer(string: body))
            }
            let linked = try await post("/v1/projects/default/links", #"{"identities":{"$identity_login_id":"amy","$identity_idfv":"P1"}}"#)
            #expect(linked.status == .ok, "\(linked.text)")
            let amy = try #require(try linked.json()["userId"] as? Int)
            let other = try await post("/v1/projects/default/links", #"{"identities":{"$identity_login_id":"ben","$identity_android_id":"P2"}}"#)
            let ben = try #require(try other.json()["userId"] as? Int)

            let cases: [(String, String, HTTPResponse.Status, String)] = [
                ("/v1/projects/default/links", #"{"identities":{"$identity_login_id":"ben","$identity_idfv":"P1"}}"#, .conflict, "login_conflict"),
                ("/v1/projects/default/links", #"{"identities":{"$identity_login_id":"undefined"}}"#, .unprocessableContent, "illegal_identity"),
                ("/v1/projects/default/links", #"{"identities":{}}"#, .unprocessableContent, "no_identities"),
                ("/v1/projects/default/links", #"{"identities":"amy"}"#, .badRequest, "invalid_body"),
                ("/v1/projects/default/unbind", #"{"key":"$identity_login_id","value":"amy"}"#, .unprocessableContent, "cannot_unbind"),
                ("/v1/projects/default/unbind", #"{"key":"$identity_idfv","value":"nobody"}"#, .notFound, "unknown_identity"),
                ("/v1/projects/default/merges", #"{"fromUser":\#(amy),"intoUser":\#(amy)}"#, .unprocessableContent, "same_user"),
                ("/v1/projects/default/merges", #"{"fromUser":999999,"intoUser":\#(amy)}"#, .notFound, "unknown_user"),
                ("/v1/projects/default/merges/999999/undo", "", .notFound, "unknown_merge"),
                ("/v1/projects/bad-name/links", #"{"identities":{"$identity_idfv":"x"}}"#, .badRequest, "invalid_project"),
            ]
            for (uri, body, status, code) in cases {
                let response = try await post(uri, body)
                #expect(response.status == status, "\(uri) \(body): \(response.text)")
                #expect(try response.json()["error"] as? String == code, "\(uri) \(body)")
            }
            #expect(try await identity.execute(uri: "/v1/projects/default/users/999999", method: .get, headers: Self.service).status == .notFound)
            #expect(try await identity.execute(uri: "/v1/projects/default/users/abc", method: .get, headers: Self.service).status == .badRequest)

            // An operator may merge two login users on purpose; the merge is then shown and undoable.
            let merged = try await post("/v1/projects/default/merges", #"{"fromUser":\#(ben),"intoUser":\#(amy),"actor":"ops:li"}"#)
            #expect(merged.status == .created, "\(merged.text)")
            let record = try JSONDecoder().decode(MergeRecord.self, from: Data(buffer: merged.body))
            #expect(record.actor == "ops:li" && record.cause.api == "merge")
            let ben2 = try await Self.get(UserRecord.self, "/v1/projects/default/users/\(ben)", identity)
            #expect(ben2.mergedInto == Int64(amy) && ben2.canonicalUserId == Int64(amy) && ben2.identities.isEmpty)
            let shown = try await Self.get(MergeRecord.self, "/v1/projects/default/merges/\(record.mergeId)", identity)
            #expect(shown == record)
        }
    }
}
