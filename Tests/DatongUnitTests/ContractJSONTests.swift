import DatongContracts
import DatongTestSupport
import Testing

/// The one codec of each contract between the services: every field travels, and what is not the contract is refused naming the field.
@Suite("Batch JSON between the services")
struct ContractJSONTests {
    static let batch = CollectBatch(
        receivedAt: 1_795_273_200_000,
        records: [
            CollectRecord(
                project: "default", type: "track", event: "$AppClick", time: 1_795_273_119_736, distinctId: "a\"b\\c", userId: 42,
                anonymousId: "anon", loginId: nil, lib: "iOS", libVersion: "4.5.0", appVersion: "2.3.0", hybridH5: true,
                properties: #"{"$carrier":"中国移动","price":129.5,"s":"tab\there \"quoted\" 😀"}"#
            ),
            CollectRecord(
                project: "shop", type: "item_set", event: nil, time: 1, distinctId: nil, userId: nil,
                properties: "{}", itemType: "book", itemId: "42"),
        ], rejected: [RejectedRecord(project: "default", reason: "bad\nreason", raw: "{\u{1}}")])

    @Test("every field a record declares is written, and what is written reads back the same")
    func everyFieldTravels() throws {
        let text = String(decoding: CollectBatch(receivedAt: 1, records: [Fixtures.fullRecord]).jsonBytes, as: UTF8.self)
        for field in CollectRecord.Field.allCases {
            #expect(text.contains("\"\(field.name)\":"), "\(field.name) is not written")
        }
        // Properties travel as the object itself, not as a string holding its text.
        #expect(text.contains(#""properties":{"$carrier":"中国移动","price":129.5}"#))
        #expect(try CollectBatch(jsonBytes: Self.batch.jsonBytes) == Self.batch)
        let full = CollectBatch(receivedAt: 1, records: [Fixtures.fullRecord])
        #expect(try CollectBatch(jsonBytes: full.jsonBytes) == full)
        // A group of batches, and its answer of one outcome per batch.
        let group = CollectBatchGroup(batches: [Self.batch, full])
        #expect(try CollectBatchGroup(jsonBytes: group.jsonBytes) == group)
        let answer = CollectGroupResult(outcomes: [
            .written(CollectResult(stored: 1, duplicates: 1, rejected: 0, duplicateIndexes: [1])),
            .refused(status: 503, error: "collector_busy", message: "retry \"soon\""),
        ])
        #expect(try CollectGroupResult(jsonBytes: answer.jsonBytes) == answer)
        for bad in [#"{"outcomes":[{"error":"x","status":200,"message":"m"}]}"#, #"{"outcomes":[{"error":"x"}]}"#, #"{}"#] {
            #expect(throws: ContractDecodingError.self) { try CollectGroupResult(jsonBytes: Array(bad.utf8)) }
        }
    }

    @Test("a field's column is its name in snake_case; item fields have none in collector.events")
    func columns() {
        #expect(CollectRecord.Field.distinctId.column == "distinct_id")
        #expect(CollectRecord.Field.hybridH5.column == "hybrid_h5")
        #expect(CollectRecord.Field.libVersion.column == "lib_version")
        #expect(CollectRecord.Field.allCases.filter { !$0.isEventColumn } == [.itemType, .itemId])
        #expect(CollectRecord.Field.named(ArraySlice("originalId".utf8)) == .originalId)
        #expect(CollectRecord.Field.named(ArraySlice("original_id".utf8)) == nil)
        // The name a field is written under is the one it is read by: the case's name.
        for field in CollectRecord.Field.allCases {
            #expect(field.staticName.description == String(describing: field))
            #expect(
                CollectRecord.Field.named(ArraySlice(field.staticName.description.utf8), expected: (field.rawValue + 3) % CollectRecord.Field.all.count)
                    == field)
        }
    }

    @Test("the collector keeps a record's properties text exactly as sent")
    func propertiesAsSent() throws {
        let body = #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false,"properties":{"b" : 1.50,"a":"\u00e9"}}]}"#
        #expect(try CollectBatch(jsonBytes: Array(body.utf8)).records.first?.properties == #"{"b" : 1.50,"a":"\u00e9"}"#)
    }

    @Test("the collector's answer: one outcome per record, read back as written; a 0.4 answer's positions read the same")
    func result() throws {
        let result = CollectResult(
            stored: 3, duplicates: 2, rejected: 1, records: [.duplicate, .stored, .refused(reason: "collector: \"x\" is NUL"), .stored, .duplicate, .stored])
        #expect(
            String(decoding: result.jsonBytes, as: UTF8.self)
                == #"{"stored":3,"duplicates":2,"rejected":1,"records":["duplicate","stored",{"refused":"collector: \"x\" is NUL"},"stored","duplicate","stored"],"#
                + #""duplicateIndexes":[0,4],"rejectedIndexes":[2],"rejectedReasons":["collector: \"x\" is NUL"]}"#)
        #expect(try CollectResult(jsonBytes: result.jsonBytes) == result)
        // What a collector of 0.4 answers (positions only) is the same result for a gateway of 0.5.
        let older = #"{"stored":3,"duplicates":2,"rejected":1,"duplicateIndexes":[0,4],"rejectedIndexes":[2],"rejectedReasons":["collector: \"x\" is NUL"]}"#
        #expect(try CollectResult(jsonBytes: Array(older.utf8)) == result)
        #expect(try CollectResult(jsonBytes: Array(#"{"stored":1,"duplicates":0,"rejected":0}"#.utf8)).records == [.stored])
        #expect(result.outcome(at: 2) == .refused(reason: #"collector: "x" is NUL"#) && result.outcome(at: 9) == .stored)
        for (body, expected) in [
            (#"{"stored":1,"duplicates":0}"#, "rejected is missing"),
            (#"{"stored":-1,"duplicates":0,"rejected":0}"#, "stored is not a count"),
            (#"{"stored":1,"duplicates":0,"rejected":0,"duplicateIndexes":[-3]}"#, "duplicateIndexes[0] is not a position"),
            (#"{"stored":1,"duplicates":0,"rejected":0,"records":["kept"]}"#, #"records[0] is not "stored""#),
            (#"{"stored":1,"duplicates":0,"rejected":0,"records":[{"refused":3}]}"#, "records[0].refused"),
        ] {
            do {
                _ = try CollectResult(jsonBytes: Array(body.utf8))
                Issue.record("\(body) was read")
            } catch {
                #expect(error.message.contains(expected), "\(error.message)")
            }
        }
    }

    @Test(
        "a body that is not a batch is refused naming the field",
        arguments: [
            ("[]", "not a JSON object"),
            (#"{"records":[]}"#, "receivedAt is missing"),
            (#"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false}]}"#, "records[0].properties is missing"),
            (#"{"receivedAt":1,"records":[{"project":1,"type":"track","time":1,"hybridH5":false,"properties":{}}]}"#, "records[0].project is not a string"),
            (
                #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false,"properties":"[1]"}]}"#,
                "records[0].properties is not an object"
            ),
            // The text of an object in a string (gateways before 2026-11) is not the contract.
            (
                #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false,"properties":"{}"}]}"#,
                "records[0].properties is not an object"
            ),
            (#"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":1,"properties":{}}]}"#, "records[0].hybridH5 is not a boolean"),
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

    @Test("resolve requests and answers read back as written")
    func resolveRoundTrip() throws {
        #expect(try ResolveRequest(jsonBytes: Self.resolve.jsonBytes) == Self.resolve)
        #expect(
            String(decoding: Self.resolve.jsonBytes, as: UTF8.self).hasPrefix(
                #"{"records":[{"project":"default","type":"track_signup","distinctId":"user-\"1\"","originalId":"anon","identities":{"$identity_cookie_id":"c\u0001😀","$identity_login_id":"user-\"1\""},"isLoginId":true,"lib":"js"}"#
            ))
        let answer = ResolveResponse(users: [ResolvedUser(userId: 7, created: true), ResolvedUser(userId: nil, created: false)])
        #expect(String(decoding: answer.jsonBytes, as: UTF8.self) == #"{"users":[{"userId":7,"created":true},{"created":false}]}"#)
        #expect(try ResolveResponse(jsonBytes: answer.jsonBytes) == answer)
        // What a gateway with its own cache asks and learns.
        var forCache = Self.resolve
        forCache.forCache = true
        #expect(try ResolveRequest(jsonBytes: forCache.jsonBytes) == forCache)
        #expect(String(decoding: forCache.jsonBytes, as: UTF8.self).hasSuffix(#","forCache":true}"#))
        let learned = ResolveResponse(
            users: [ResolvedUser(userId: 7, created: false, owned: true)],
            invalidated: [IdentityName(project: "default", key: "$identity_idfv", value: "D\"1")]
        )
        #expect(
            String(decoding: learned.jsonBytes, as: UTF8.self)
                == #"{"users":[{"userId":7,"created":false,"owned":true}],"invalidated":[{"project":"default","key":"$identity_idfv","value":"D\"1"}]}"#)
        #expect(try ResolveResponse(jsonBytes: learned.jsonBytes) == learned)
        let log = InvalidationLog(server: "2026-11-23 10:00:00+00", horizon: "812", identities: learned.invalidated, complete: true)
        #expect(try InvalidationLog(jsonBytes: log.jsonBytes) == log)
        for body in [
            #"{"server":"s","horizon":"1","identities":[]}"#, #"{"server":"s","horizon":"1","identities":[{"project":"p","key":"k"}],"complete":true}"#,
        ] {
            #expect(throws: ContractDecodingError.self, "\(body) was read") { try InvalidationLog(jsonBytes: Array(body.utf8)) }
        }
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
