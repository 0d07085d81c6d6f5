import DatongContracts
import Foundation
import Testing

/// The hand-written JSON of batches between the services is the same document Codable reads and writes.
@Suite("Batch JSON between the services")
struct ContractJSONTests {
    static let batch = CollectBatch(receivedAt: 1_795_273_200_000, records: [
        CollectRecord(
            project: "default", type: "track", event: "$AppClick", time: 1_795_273_119_736, distinctId: "a\"b\\c", userId: 42,
            anonymousId: "anon", loginId: nil, lib: "iOS", libVersion: "4.5.0", appVersion: "2.3.0", hybridH5: true,
            properties: #"{"$carrier":"中国移动","price":129.5,"s":"tab\there \"quoted\" 😀"}"#
        ),
        CollectRecord(project: "shop", type: "item_set", event: nil, time: 1, distinctId: nil, userId: nil,
                      properties: "{}", itemType: "book", itemId: "42"),
    ], rejected: [RejectedRecord(project: "default", reason: "bad\nreason", raw: "{\u{1}}")])

    @Test("what the gateway writes, Codable reads; what Codable writes, the collector reads")
    func agreesWithCodable() throws {
        let ours = Self.batch.jsonBytes
        #expect(try JSONDecoder().decode(CollectBatch.self, from: Data(ours)) == Self.batch)
        // Properties travel as the object itself, not as a string holding its text.
        #expect(String(decoding: ours, as: UTF8.self).contains(#""properties":{"$carrier":"中国移动","price":129.5,"#))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let theirs = try encoder.encode(Self.batch)
        #expect(try CollectBatch(jsonBytes: Array(theirs)) == Self.batch)
        #expect(try CollectBatch(jsonBytes: ours) == Self.batch)
    }

    @Test("the collector keeps a record's properties text exactly as sent")
    func propertiesAsSent() throws {
        let body = #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false,"properties":{"b" : 1.50,"a":"\u00e9"}}]}"#
        #expect(try CollectBatch(jsonBytes: Array(body.utf8)).records.first?.properties == #"{"b" : 1.50,"a":"\u00e9"}"#)
        // A gateway from before the object form sends the text as a string: still read.
        let older = #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false,"properties":"{\"a\":1}"}]}"#
        #expect(try CollectBatch(jsonBytes: Array(older.utf8)).records.first?.properties == #"{"a":1}"#)
    }

    @Test("a body that is not a batch is refused naming the field", arguments: [
        ("[]", "not a JSON object"),
        (#"{"records":[]}"#, "receivedAt is missing"),
        (#"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false}]}"#, "records[0].properties is missing"),
        (#"{"receivedAt":1,"records":[{"project":1,"type":"track","time":1,"hybridH5":false,"properties":{}}]}"#, "records[0].project is not a string"),
        (#"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false,"properties":"[1]"}]}"#, "records[0].properties is not an object"),
        (#"{"receivedAt":1.5,"records":[]}"#, "receivedAt is not an integer"),
        (#"{"receivedAt":1,"records":[],"rejected":[{"project":"p"}]}"#, "rejected[0] needs project, reason and raw"),
        ("{", "not valid JSON"),
    ])
    func refused(body: String, expected: String) {
        do {
            _ = try CollectBatch(jsonBytes: Array(body.utf8))
            Issue.record("\(body) was read")
        } catch {
            #expect(error.message.contains(expected), "\(error.message)")
        }
    }

    static let resolve = ResolveRequest(records: [
        IdentityRecord(
            project: "default", type: "track_signup", distinctId: "user-\"1\"", originalId: "anon",
            identities: ["$identity_login_id": "user-\"1\"", "$identity_cookie_id": "c\u{1}😀"], isLoginId: true, lib: "js"
        ),
        IdentityRecord(project: "shop", type: "track", distinctId: "d", identities: nil, isLoginId: false, lib: nil),
    ])

    @Test("resolve requests and answers read and write the same documents as Codable")
    func resolveAgreesWithCodable() throws {
        #expect(try JSONDecoder().decode(ResolveRequest.self, from: Data(Self.resolve.jsonBytes)) == Self.resolve)
        #expect(try ResolveRequest(jsonBytes: Array(try JSONEncoder().encode(Self.resolve))) == Self.resolve)
        let answer = ResolveResponse(users: [ResolvedUser(userId: 7, created: true), ResolvedUser(userId: nil, created: false)])
        #expect(try JSONDecoder().decode(ResolveResponse.self, from: Data(answer.jsonBytes)) == answer)
        #expect(try ResolveResponse(jsonBytes: Array(try JSONEncoder().encode(answer))) == answer)
        for (body, expected) in [
            (#"{"records":[{"project":"p","type":"track"}]}"#, "records[0].distinctId is missing"),
            (#"{"records":[{"project":"p","type":"track","distinctId":"d","identities":{"k":1}}]}"#, "not a string"),
            (#"{"records":{}}"#, "records is not an array"),
        ] {
            do {
                _ = try ResolveRequest(jsonBytes: Array(body.utf8))
                Issue.record("\(body) was read")
            } catch {
                #expect(error.message.contains(expected), "\(error.message)")
            }
        }
    }
}
