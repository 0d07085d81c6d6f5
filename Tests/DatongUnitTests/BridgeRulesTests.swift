import DatongContracts
import DatongJSON
import DatongTestSupport
import Foundation
import Testing

@testable import Gateway

/// The bridge rules of docs/PROTOCOL.md section 3 as pure functions, on the JS SDK's real bridge messages.
@Suite("Bridge messages: reading, verification and rewriting")
struct BridgeRulesTests {
    static let appServer = "https://sa.example.com/sa?project=production"

    static func app(loginID: String? = nil) -> AppContext {
        AppContext(
            server: ServerTarget(url: appServer)!, anonymousID: "app-anon-1", loginID: loginID,
            identities: ["$identity_idfv": "IDFV-1", "$identity_anonymous_id": "app-anon-1"],
            properties: [
                "$os": .string("iOS"), "$model": .string("iPhone15,2"), "$app_version": .string("2.3.0"),
                "$screen_width": .int(393), "$is_first_day": .bool(false), "$url": .string("https://app.example.com/x"),
            ],
            appVersion: "2.3.0"
        )
    }

    private func record(_ message: String) throws -> JSONRef {
        guard case .success(.record(let record)) = BridgeMessage.read(Array(message.utf8), limits: UploadLimits()) else {
            throw RecordRefusal("not a record: \(message.prefix(80))")
        }
        return record
    }

    /// A record read whole, to be changed by a test and read back with `document(_:)`.
    private func object(_ message: String) throws -> [String: JSONValue] {
        guard case .object(let object) = try record(message).value else { throw RecordRefusal("not an object") }
        return object
    }

    private func document(_ object: [String: JSONValue]) throws -> JSONRef {
        var text: [UInt8] = []
        JSONValue.object(object).write(to: &text)
        return try JSONParser.parse(text, maxDepth: 16).root
    }

    /// What the gateway stores for a bridged record: rewritten for the app, then validated.
    private func stored(_ record: JSONRef, app: inout AppContext) throws -> NormalizedRecord {
        let overrides = try BridgeRewriter.rewrite(record, app: &app, project: "production", whitelists: ProjectWhitelists()).get()
        let normalizer = RecordNormalizer(limits: UploadLimits(timeWindowPastDays: 36_500))
        return try normalizer.normalize(record, bridged: overrides, defaultProject: "production", now: 1_795_273_200_000).get()
    }

    private func properties(_ record: NormalizedRecord) throws -> [String: JSONValue] {
        guard case .object(let object) = try JSONParser.parseValue(Array(record.collect.properties.utf8), maxDepth: 4) else {
            throw RecordRefusal("properties are not an object")
        }
        return object
    }

    @Test("the relay's and the upload's answers are written by hand as JSONEncoder wrote them: keys sorted, the same text")
    func answerText() throws {
        let answer = BridgeAnswer(
            stored: 2, duplicates: 1, rejected: 1, ignored: 1,
            results: [
                MessageResult(index: 0, status: .stored), MessageResult(index: 1, status: .duplicate),
                MessageResult(index: 2, status: .rejected, reason: "a/b \"q\" é\n\u{1}\\"), MessageResult(index: 3, status: .ignored),
            ])
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        #expect(String(decoding: answer.jsonBytes, as: UTF8.self) == String(decoding: try encoder.encode(answer), as: UTF8.self))
        #expect(try JSONDecoder().decode(BridgeAnswer.self, from: Data(answer.jsonBytes)) == answer)
        for upload in [
            UploadAnswer(stored: 3, duplicates: 0, rejected: 0, problems: []),
            UploadAnswer(
                stored: 1, duplicates: 2, rejected: 2,
                problems: [RecordProblem(index: 0, reason: "a/b \"q\" é\n\u{1}\\"), RecordProblem(index: 7, reason: "")]),
        ] {
            #expect(String(decoding: upload.jsonBytes, as: UTF8.self) == String(decoding: try encoder.encode(upload), as: UTF8.self))
        }
    }

    @Test("all three message forms carry the same record", arguments: ["ios", "ios_old", "android"])
    func forms(scenario: String) throws {
        let records = try Fixtures.bridgeMessages(scenario).map(record)
        #expect(records.map { $0["type"]?.stringValue } == ["track", "track_signup", "profile_set"])
        #expect(records.allSatisfy { $0["server_url"]?.stringValue == "https://sa.example.com:8106/sa.gif?project=production" })
        #expect(records[0]["properties"]?["price"]?.value == .number("9.9"))
    }

    @Test(
        "messages that are not events are acknowledged and ignored",
        arguments: [
            "sensorsanalytics://getAppInfo",
            #"{"callType":"visualized_track","data":{"a":1}}"#,
            #"{"callType":"page_info","data":{}}"#,
        ])
    func ignored(message: String) {
        guard case .success(.ignored) = BridgeMessage.read(Array(message.utf8), limits: UploadLimits()) else {
            Issue.record("\(message) was not ignored")
            return
        }
    }

    @Test(
        "unreadable messages fail with a reason",
        arguments: [
            ("{not json", "not valid JSON"),
            ("[1,2]", "not a JSON object"),
            (#"{"callType":"app_h5_track"}"#, "no data object"),
            ("sensorsanalytics://trackEvent?event=%7Bx", "event parameter is not valid JSON"),
            ("sensorsanalytics://trackEvent", "has no query"),
        ])
    func unreadable(message: String, expected: String) {
        guard case .failure(let problem) = BridgeMessage.read(Array(message.utf8), limits: UploadLimits()) else {
            Issue.record("\(message) was read")
            return
        }
        #expect(problem.reason.contains(expected), "\(problem.reason)")
    }

    @Test("a relay's messages are read with their escapes resolved, and a refused one is kept as the page sent it")
    func relayMessageText() throws {
        let event = try Fixtures.bridgeMessages("android")[0]
        // Quotes, a backslash, a \u escape and CJK text inside the message; `data` that is text
        // but not a record, so it is refused.
        let refused = #"{"callType":"app_h5_track","note":"页面 \"引号\" \\ \u00e9 a/b","data":"not a record"}"#
        // Foundation writes the relay (escaping every quote and backslash again, and `/` as `\/`).
        let body = try JSONSerialization.data(withJSONObject: [
            "app": Fixtures.relayApp(anonymousID: "app-anon-1", idfv: "IDFV-1"), "messages": [event, refused],
        ])
        let (app, messages) = try BridgeHandler.parseRelay(Array(body), limits: UploadLimits())
        #expect(messages.map { String(decoding: $0, as: UTF8.self) } == [event, refused])
        let relay = PreparedRelay(
            messages: messages, readings: messages.map { BridgeMessage.read($0, limits: UploadLimits()) }, app: app, project: "production",
            whitelists: ProjectWhitelists(), limits: UploadLimits(), now: 1_795_273_000_000
        )
        #expect(relay.rejected.map(\.raw).contains(refused))
        #expect(relay.results[1].reason?.contains("data is text that is not a JSON object") == true, "\(relay.results[1])")
    }

    @Test("a relayed event is stored with the app's ids and presets, keeps the page's cookie id and loses what an app removes")
    func rewriteEvent() throws {
        var raw = try object(try Fixtures.bridgeMessages("ios")[0])
        raw["_nocache"] = .string("1")
        raw["project"] = .string("elsewhere")
        guard case .object(var sent)? = raw["properties"] else { throw RecordRefusal("no properties") }
        sent["token"] = .string("t")
        sent["project"] = .string("elsewhere")
        sent["$time"] = .int(1_795_273_000_000)
        raw["properties"] = .object(sent)
        var app = Self.app()
        let out = try stored(try document(raw), app: &app)

        #expect(out.collect.project == "production")
        #expect(out.collect.distinctId == "app-anon-1")
        #expect(out.collect.anonymousId == "app-anon-1")
        #expect(out.collect.loginId == nil)
        #expect(
            out.identity?.identities == [
                "$identity_cookie_id": "1a1fe9d7865396-0bb641511e8d2b-774c1751-329160-1a1fe9d7866695",
                "$identity_idfv": "IDFV-1",
                "$identity_anonymous_id": "app-anon-1",
            ])
        #expect(out.collect.time == 1_795_273_000_000)
        let props = try properties(out)
        for key in ["token", "$time", "project"] { #expect(props[key] == nil, "\(key)") }
        // The app's device presets win; page properties the app does not own stay.
        #expect(props["$screen_width"] == .int(393))
        #expect(props["$os"] == .string("iOS"))
        #expect(props["$model"] == .string("iPhone15,2"))
        #expect(props["$is_first_day"] == .bool(false))
        #expect(props["$url"] == .string("https://h5.example.com/shop/item?id=42"))
        #expect(props["$viewport_width"] == .int(390))
        #expect(out.collect.hybridH5)
        #expect(out.collect.lib == "js")
        #expect(out.collect.appVersion == "2.3.0")
    }

    @Test("an H5 $SignUp logs the app in: original_id is the app's anonymous id, and later messages carry the login id")
    func signUp() throws {
        let messages = try Fixtures.bridgeMessages("android").map(record)
        var app = Self.app()
        let signup = try stored(messages[1], app: &app)
        #expect(signup.collect.distinctId == "user-123")
        #expect(signup.collect.loginId == "user-123")
        #expect(signup.collect.event == "$SignUp")
        #expect(signup.identity?.originalId == "app-anon-1")
        #expect(signup.identity?.identities?["$identity_login_id"] == "user-123")
        #expect(app.loginID == "user-123")
        let profile = try stored(messages[2], app: &app)
        #expect(profile.collect.distinctId == "user-123")
        // Profile records get no device presets.
        #expect(try properties(profile) == ["name": .string("Alice")])
    }

    @Test("a page meant for another server or project is rejected unless whitelisted")
    func serverURL() throws {
        var raw = try object(try Fixtures.bridgeMessages("ios")[0])
        var app = Self.app()
        let none = ProjectWhitelists()
        #expect((try? BridgeRewriter.rewrite(try document(raw), app: &app, project: "production", whitelists: none).get()) != nil)

        // The app's server names production, the relay is for staging: only a whitelist lets it in.
        guard case .failure(let otherProject) = BridgeRewriter.rewrite(try document(raw), app: &app, project: "staging", whitelists: none) else {
            Issue.record("a record for production entered staging")
            return
        }
        #expect(otherProject.reason.contains("server-URL whitelist"))

        raw["server_url"] = .string("https://evil.example.net/sa?project=production")
        guard case .failure(let forged) = BridgeRewriter.rewrite(try document(raw), app: &app, project: "production", whitelists: none) else {
            Issue.record("a forged server_url was accepted")
            return
        }
        #expect(forged.reason.contains("evil.example.net"))
        let listed = ProjectWhitelists(serverURLs: ["http://EVIL.example.net:9000/other/sa?project=production"])
        #expect((try? BridgeRewriter.rewrite(try document(raw), app: &app, project: "production", whitelists: listed).get()) != nil)

        raw["server_url"] = nil
        guard case .failure(let missing) = BridgeRewriter.rewrite(try document(raw), app: &app, project: "production", whitelists: none) else {
            Issue.record("a record without server_url was accepted")
            return
        }
        #expect(missing.reason.contains("no server_url"))
    }

    @Test(
        "the H5 domain whitelist admits exact hosts and *.suffix",
        arguments: [
            (["h5.example.com"], true), (["*.example.com"], true), (["https://h5.example.com/path"], true),
            (["*.h5.example.com"], false), (["example.com"], false), (["shop.other.com"], false), ([String](), true),
        ])
    func domains(list: [String], allowed: Bool) throws {
        let raw = try record(try Fixtures.bridgeMessages("ios")[0])
        var app = Self.app()
        let result = BridgeRewriter.rewrite(raw, app: &app, project: "production", whitelists: ProjectWhitelists(h5Domains: list))
        switch result {
        case .success: #expect(allowed)
        case .failure(let problem):
            #expect(!allowed)
            #expect(problem.reason.contains("H5 domain whitelist"))
        }
    }

    @Test("a record without $url is checked against the page the app reports")
    func pageURL() throws {
        let profile = try record(try Fixtures.bridgeMessages("ios")[2])
        let whitelists = ProjectWhitelists(h5Domains: ["*.example.com"])
        var app = Self.app()
        guard case .failure = BridgeRewriter.rewrite(profile, app: &app, project: "production", whitelists: whitelists) else {
            Issue.record("a record with no page was accepted under a domain whitelist")
            return
        }
        app.pageURL = "https://h5.example.com/shop"
        #expect((try? BridgeRewriter.rewrite(profile, app: &app, project: "production", whitelists: whitelists).get()) != nil)
    }

    @Test(
        "server URLs compare by hostname and project only",
        arguments: [
            ("https://SA.example.com:8106/sa.gif?project=production", "sa.example.com", "production"),
            ("http://sa.example.com/a/b/sa", "sa.example.com", "default"),
            ("https://user:pw@sa.example.com/sa?x=1&project=p%5F1#frag", "sa.example.com", "p_1"),
            ("https://[::1]:8106/sa?project=", "[::1]", "default"),
            ("  https://sa.example.com?project=shop  ", "sa.example.com", "shop"),
        ])
    func serverTargets(url: String, host: String, project: String) throws {
        let target = try #require(ServerTarget(url: url))
        #expect(target == ServerTarget(host: host, project: project))
    }

    @Test("what is not a server URL is refused", arguments: ["", "sa.example.com/sa", "https:///", "https://a b/sa", "/sa?project=x"])
    func notServerURLs(url: String) {
        #expect(ServerTarget(url: url) == nil)
    }

    @Test(
        "uploads under any path prefix are routed as the SDKs mean them",
        arguments: [
            ("/api/v2/sa.gif?project=p&data=x", "/sa.gif?project=p&data=x"), ("/collect/sa", "/sa"), ("/a/debug", "/debug"),
            ("/api/config/iOS.conf?v=1", "/config/iOS.conf?v=1"), ("/a/b/config/visualized/Web.conf", "/config/visualized/Web.conf"),
        ])
    func prefixes(path: String, routed: String) {
        #expect(SDKPaths.unprefixed(path) == routed)
    }

    @Test(
        "other paths are left alone",
        arguments: [
            "/sa", "/sa.gif?x=/y/sa", "/v1/bridge", "/health", "/a/sa/b", "/", "/config/iOS.conf", "/a/config/x/y/z.conf", "/a/config/iOS.txt",
        ])
    func unchangedPaths(path: String) {
        #expect(SDKPaths.unprefixed(path) == nil)
    }
}
