import DatongTestSupport
import Foundation
import Gateway
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

/// What two official clients Datong was not built against send keeps its meaning when stored:
/// the Java server SDK 3.6.8 and the WeChat mini-program SDK 1.22.8, replayed from
/// their captures (Tests/Fixtures/sensors/java-sdk-3.6.8.jsonl, miniprogram-sdk-1.22.8.jsonl).
@Suite("records keep their meaning: the Java and mini-program SDKs' own traffic")
struct RecordMeaningTests {
    /// The captures were made on 2026-11-25; a window of 1,500 days keeps them in it until 2031.
    static let limits = UploadLimits(timeWindowPastDays: 1_500)

    static func capture(_ file: String) throws -> [Fixtures.CapturedRequest] {
        let text = try String(contentsOf: Fixtures.directory.appendingPathComponent(file), encoding: .utf8)
        return try text.split(separator: "\n").map { try JSONDecoder().decode(Fixtures.CapturedRequest.self, from: Data($0.utf8)) }
    }

    /// Sends a captured request as the SDK sent it: a GET with its query, or a POST with its body.
    static func send(_ request: Fixtures.CapturedRequest, to gateway: any TestClientProtocol) async throws -> TestResponse {
        let uri = request.path + (request.query.isEmpty ? "" : "?\(request.query)")
        if request.method == "GET" { return try await gateway.execute(uri: uri, method: .get) }
        return try await gateway.execute(uri: uri, method: .post, body: ByteBuffer(string: request.body ?? ""))
    }

    static func sendAll(_ requests: [Fixtures.CapturedRequest], to services: RunningServices) async throws -> [[String: Any]] {
        var answers: [[String: Any]] = []
        for request in requests {
            let answer = try await send(request, to: services.gateway)
            #expect(answer.status == .ok, "\(request.method) \(request.path)?\(request.query.prefix(80)): \(answer.text)")
            if request.path == "/sa", request.method == "POST" {
                let json = try answer.json()
                #expect(json["rejected"] as? Int == 0, "\(answer.text)")
                answers.append(json)
            }
        }
        return answers
    }

    @Test("the Java SDK: one millisecond's profile operations in call order, $track_id-named purchases both stored, its cut strings kept, a retry stored once")
    func javaSDK() async throws {
        let requests = try Self.capture("java-sdk-3.6.8.jsonl")
        try await RunningServices.run(limits: Self.limits) { services in
            let db = services.databaseURL
            let answers = try await Self.sendAll([requests[0], requests[2]], to: services)
            // 5 increments, 3 sets, 1 increment, 3 appends, 3 item records, 2 Buy, Note, $SignUp.
            #expect(answers.first?["stored"] as? Int == 19, "\(answers)")
            #expect(answers.first?["duplicates"] as? Int == 0, "\(answers)")
            let profile = try await TestDatabase.rows(
                db,
                """
                SELECT properties->>'clicks', properties->>'s', properties->>'n', properties->>'l'
                FROM analytics.profiles WHERE distinct_id = 'java-user-1'
                """)
            #expect(profile == [["5", "second", "3", #"["a", "b", "c"]"#]])
            #expect(try await TestDatabase.rows(db, "SELECT properties->>'v' FROM analytics.items WHERE item_id = 'java-item-1'") == [["3"]])
            let buys = try await TestDatabase.rows(db, "SELECT track_id::text FROM analytics.events WHERE event = 'Buy' ORDER BY track_id")
            #expect(buys == [["1001"], ["1002"]])
            // The SDK cut the strings to 8192 characters (list items too); the Chinese text is 3,000.
            let note = try await TestDatabase.rows(
                db,
                """
                SELECT length(properties->>'long'), length(properties->>'chinese'), length(properties->'tags'->>0)
                FROM analytics.events WHERE event = 'Note'
                """)
            #expect(note == [["8192", "3000", "8192"]])
            // The DebugConsumer's record (over the old byte limit) is written.
            #expect(try await TestDatabase.rows(db, "SELECT count(*) FROM analytics.events WHERE event = 'DebugNote'") == [["1"]])

            // The SDK retries the request (a lost answer): every record is a duplicate, nothing changes.
            let retry = try await Self.sendAll([requests[0]], to: services)
            #expect(retry.first?["stored"] as? Int == 0 && retry.first?["duplicates"] as? Int == 19, "\(retry)")
            #expect(
                try await TestDatabase.rows(db, "SELECT properties->>'clicks', properties->>'n' FROM analytics.profiles WHERE distinct_id = 'java-user-1'")
                    == [["5", "3"]])
            #expect(try await TestDatabase.rows(db, "SELECT count(*) FROM analytics.rejected") == [["0"]])
        }
    }

    @Test("the Java SDK's multi-entity records (version 2.0): user events and binds, profiles, items, events on items, details")
    func javaMultiEntity() async throws {
        let requests = try Self.capture("java-sdk-3.6.8.jsonl")
        try await RunningServices.run(limits: Self.limits) { services in
            let db = services.databaseURL
            let answers = try await Self.sendAll([requests[1]], to: services)
            // bind, trackById, then 11 multi-entity records.
            #expect(answers.first?["stored"] as? Int == 13, "\(answers)")
            // A user event names its user inside its properties: stored as the user's, without them.
            let buy = try await TestDatabase.rows(
                db,
                """
                SELECT distinct_id, login_id, schema, properties->>'price', properties ? 'identities', properties ? 'distinct_id',
                       user_id = (SELECT user_id FROM analytics.events WHERE event = 'ViewPage')
                FROM analytics.events WHERE event = 'SchemaBuy'
                """)
            #expect(buy == [["java-user-3", "java-user-3", nil, "12", "f", "f", "t"]])
            // The multi-entity bind linked its two identities to one user.
            let bound = try await TestDatabase.rows(
                db,
                """
                SELECT count(DISTINCT user_id), count(*) FROM identity.identities
                WHERE (key, value) IN (('$identity_login_id', 'java-user-4'), ('$identity_email', 'u4@example.com'))
                """)
            #expect(bound == [["1", "2"]])
            let profile = try await TestDatabase.rows(db, "SELECT properties->>'level' FROM analytics.profiles WHERE distinct_id = 'java-user-4'")
            #expect(profile == [["5"]])
            // Items are keyed by schema and id; p-1 was set, then deleted.
            let items = try await TestDatabase.rows(db, "SELECT item_type, item_id, properties->>'title' FROM analytics.items ORDER BY item_id")
            #expect(items == [["products", "p-2", "Bike"]])
            // An event on an item belongs to no user and says which schema it is of.
            let recall = try await TestDatabase.rows(
                db, "SELECT schema, user_id IS NULL, properties->>'p_id', properties->>'reason' FROM analytics.events WHERE event = 'Recall'")
            #expect(recall == [["products", "t", "p-1", "brakes"]])
            // Details: d-1 was set, then deleted; d-2 belongs to java-user-4, d-3 to the item p-2.
            let details = try await TestDatabase.rows(
                db,
                """
                SELECT d.schema, d.detail_id, d.user_id = (SELECT user_id FROM analytics.profiles WHERE distinct_id = 'java-user-4'),
                       d.properties->>'amount', d.properties->>'p_id', d.properties ? 'identities'
                FROM analytics.details d ORDER BY d.detail_id
                """)
            #expect(details == [["orders_detail", "d-2", "t", "5", nil, "f"], ["parts_detail", "d-3", nil, nil, "p-2", "f"]])
            #expect(try await TestDatabase.rows(db, "SELECT count(*) FROM analytics.rejected") == [["0"]])
        }
    }

    @Test(
        "the mini-program SDK: both builds, batch and plain mode; a second phone's login joins the user, same-millisecond profile calls keep their order",
        arguments: ["wechat-batch", "wechat-plain", "v2-batch"])
    func miniProgramSDK(run: String) async throws {
        let requests = try Self.capture("miniprogram-sdk-1.22.8.jsonl").filter { $0.query.contains("capture=\(run)-") }
        #expect(requests.contains { $0.query.contains("capture=\(run)-1") } && requests.contains { $0.query.contains("capture=\(run)-2") })
        try await RunningServices.run(limits: Self.limits) { services in
            let db = services.databaseURL
            _ = try await Self.sendAll(requests, to: services)
            #expect(try await TestDatabase.rows(db, "SELECT count(*) FROM analytics.rejected") == [["0"]])
            let profile = try await TestDatabase.rows(
                db, "SELECT properties->>'s', properties->>'n', properties->>'l' FROM analytics.profiles WHERE distinct_id = 'mp-user-1'")
            #expect(profile == [["second", "3", #"["a", "b", "c"]"#]])
            // Phone 1's two purchases (alike but for their track ids) and phone 2's one.
            #expect(try await TestDatabase.rows(db, "SELECT count(*) FROM analytics.events WHERE event = 'Buy'") == [["3"]])
            #expect(try await TestDatabase.rows(db, "SELECT length(properties->>'text') FROM analytics.events WHERE event = 'Note'") == [["3000"]])
            // Both phones' events, from before and after each login, are one user's.
            let users = try await TestDatabase.rows(db, "SELECT count(DISTINCT user_id), count(*) FROM analytics.events")
            #expect(users.first?[0] == "1", "\(users)")
            let merges = try await TestDatabase.rows(db, "SELECT count(*) FROM identity.merges")
            #expect(merges == [["1"]])
        }
    }
}
