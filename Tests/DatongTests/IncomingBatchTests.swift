import DatongContracts
import DatongJSON
import DatongPostgres
import DatongTestSupport
import Foundation
import Testing

@testable import Collector

/// The collector reads a batch straight from its bytes into COPY rows (`IncomingBatch`), beside the
/// contract's decoder (`CollectBatch`), which the gateway's tests and the other services use. The
/// two must agree: on what is a batch, on each record's key (stored in `collector.events`, so a
/// retry after an upgrade must find the same key), and on which records cannot be stored.
@Suite("collector: a batch read straight into rows")
struct IncomingBatchTests {
    static let base: Int64 = 1_795_273_000_000

    /// Records in every shape a field takes: escapes, a lone surrogate, nulls, absent fields, item
    /// fields on an event, identities with and without escapes, and each kind of record.
    static let varied: [CollectRecord] = [
        CollectRecord(project: "default", type: "track", event: "E", time: base, distinctId: "d", userId: 1, properties: "{}"),
        CollectRecord(
            project: "shop", type: "track", event: "été \"quoted\"\n\t/", time: base + 1, distinctId: "用户-1", userId: nil,
            anonymousId: "a\\b", loginId: "login", lib: "iOS", libVersion: "4.5.0", appVersion: "2.3.0", hybridH5: true,
            properties: #"{"$os":"iOS","text":"\u00e9\ud83d\ude00","n":1.50}"#, itemType: "book", itemId: "b1", libMethod: "code",
            libDetail: "detail", originalId: "orig", identities: ["$identity_idfv": "D1", "$identity_login_id": "é\"x"]
        ),
        CollectRecord(project: "default", type: "track_signup", event: nil, time: base + 2, distinctId: nil, userId: 2, properties: #"{"a":[1,{"b":null}]}"#),
        CollectRecord(project: "default", type: "profile_set", event: nil, time: base + 3, distinctId: "d", userId: 3, properties: #"{"name":"x"}"#),
        CollectRecord(
            project: "default", type: "item_set", event: nil, time: base + 4, distinctId: nil, userId: nil, properties: "{}", itemType: "book",
            itemId: "b2"),
        CollectRecord(project: "default", type: "track", event: "", time: 0, distinctId: "", userId: 0, properties: "{}", identities: [:]),
    ]

    @Test("each record's key is RecordKey(of:)'s, and the key of a fixed record is the one stored before this reader existed")
    func keysAsBefore() throws {
        let batch = try IncomingBatch(CollectBatch(receivedAt: Self.base, records: Self.varied))
        #expect(batch.records.count == Self.varied.count && batch.refusals.isEmpty && batch.rejected.isEmpty)
        for (read, record) in zip(batch.records, Self.varied) {
            #expect(read.key == RecordKey(of: record), "\(record.type) \(record.event ?? "-")")
            #expect(read.project == record.project && read.time == record.time)
            if case .profile(let profile) = read.content {
                #expect(!RecordTypes.isEvent(record.type) && profile == record)
            } else {
                #expect(RecordTypes.isEvent(record.type))
            }
        }
        // SHA-256 of the documented input (docs/RELIABILITY.md: project, type, event, time, distinct
        // id, item type and id, properties), computed apart from this code.
        #expect(batch.records[0].key.uuidText == "1f655aa3-b493-808c-b831-4116ad2a9886")
    }

    @Test("with track ids, the reader's key is still RecordKey(of:rule:)'s, on either side of an upgrade's time")
    func trackIDKeysAsTheContract() throws {
        let rule = KeyRule(contentKeysBefore: Self.base + 2)
        let records = Self.varied.enumerated().map { index, record in
            var record = record
            record.trackId = Int64(index) - 2
            return record
        }
        let batch = try IncomingBatch(jsonBytes: CollectBatch(receivedAt: Self.base, records: records).jsonBytes, keys: rule)
        #expect(batch.records.count == records.count)
        for (read, record) in zip(batch.records, records) {
            #expect(read.key == RecordKey(of: record, rule: rule), "\(record.type) \(record.time)")
        }
        // Both kinds of key occur in the batch.
        #expect(records.contains { $0.time < rule.contentKeysBefore } && records.contains { $0.time >= rule.contentKeysBefore })
        #expect(RecordKey(of: records[3], rule: rule) != RecordKey(of: records[3], rule: KeyRule(contentKeysBefore: .max)))
    }

    @Test("a body is a batch for the collector exactly when it is one for the contract's decoder")
    func sameRefusals() throws {
        let record = #"{"project":"p","type":"track","time":1,"hybridH5":false,"properties":{}}"#
        let bodies = [
            #"{"receivedAt":1,"records":[\#(record)]}"#,
            #"{"records":[],"receivedAt":1,"rejected":[{"project":"p","reason":"r","raw":"x"}],"other":[1]}"#,
            #"{"receivedAt":1,"records":[{"time":1,"properties":{},"hybridH5":false,"type":"track","project":"p","unknown":{"a":1}}]}"#,
            #"{"receivedAt":1,"records":[{"project":"p","type":"tr\u0061ck","time":1,"hybridH5":false,"properties":{},"event":null,"userId":null}]}"#,
            #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false,"properties":{},"identities":null}]}"#,
            #"{"records":[]}"#,
            #"{"receivedAt":1.5,"records":[]}"#,
            #"{"receivedAt":1,"records":{}}"#,
            #"{"receivedAt":1,"records":[5]}"#,
            #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false}]}"#,
            #"{"receivedAt":1,"records":[{"project":null,"type":"track","time":1,"hybridH5":false,"properties":{}}]}"#,
            #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":"1","hybridH5":false,"properties":{}}]}"#,
            #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":0,"properties":{}}]}"#,
            #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false,"properties":[]}]}"#,
            #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false,"properties":{},"event":5}]}"#,
            #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false,"properties":{},"userId":"7"}]}"#,
            #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false,"properties":{},"identities":{"a":1}}]}"#,
            #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false,"properties":{},"identities":"a"}]}"#,
            #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":99999999999999999999,"hybridH5":false,"properties":{}}]}"#,
            #"{"receivedAt":1,"records":[],"rejected":[{"project":"p"}]}"#,
            // A field twice: the first of the wrong kind (the fuzzer's find), then both valid.
            #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":{"a":1},"hybridH5":false,"properties":{},"time":2}]}"#,
            #"{"receivedAt":1,"records":[{"project":"p","type":"track","time":1,"hybridH5":false,"properties":{},"time":2,"event":"a","event":"b"}]}"#,
            // A receivedAt whose microseconds overflow (the fuzzer's second find): the records are
            // still checked, so a bad one refuses the batch as the contract does, and good ones read.
            #"{"receivedAt":17952731197369736,"records":[\#(record),{"project":"p","type":"track","time":1,"hybridH5":false}]}"#,
            #"{"receivedAt":9223372036854775807,"records":[\#(record)]}"#,
            #"[]"#, #"{"#, "",
        ]
        for body in bodies {
            let bytes = Array(body.utf8)
            func read<T: WireDecodable>(_: T.Type) -> Result<T, ContractDecodingError> {
                do throws(ContractDecodingError) { return .success(try T(jsonBytes: bytes)) } catch { return .failure(error) }
            }
            switch (read(CollectBatch.self), read(IncomingBatch.self)) {
            case (.success(let contract), .success(let read)):
                #expect(read.records.count == contract.records.count && read.rejected.count == contract.rejected.count, "\(body)")
                for (mine, record) in zip(read.records, contract.records) { #expect(mine.key == RecordKey(of: record), "\(body)") }
            case (.failure(let contract), .failure(let read)):
                #expect(read == contract, "\(body)")
            case (let contract, let read):
                Issue.record("\(body): the contract \(contract), the collector \(read)")
            }
        }
    }

    @Test("a record the collector cannot store is refused alone, with CollectRecord's reason and the record as it came")
    func refusedAlone() throws {
        var bad: [CollectRecord] = []
        for (field, value) in [("event", "e\u{0}"), ("distinctId", "d\u{0}"), ("libDetail", "x\u{0}")] {
            var record = Self.varied[0]
            switch field {
            case "event": record.event = value
            case "distinctId": record.distinctId = value
            default: record.libDetail = value
            }
            bad.append(record)
        }
        var identities = Self.varied[0]
        identities.identities = ["$identity_idfv": "a\u{0}"]
        var project = Self.varied[0]
        project.project = "no such-name"
        var time = Self.varied[0]
        time.time = StoredTime.latestMillis + 1
        var type = Self.varied[0]
        type.type = String(repeating: "t", count: 65)
        var profile = Self.varied[3]
        profile.distinctId = "p\u{0}"
        bad += [identities, project, time, profile]
        let good = Self.varied[0]
        var records: [CollectRecord] = []
        for record in bad { records += [good, record] }
        let batch = try IncomingBatch(
            CollectBatch(receivedAt: Self.base, records: records, rejected: [RejectedRecord(project: "bad name", reason: "r", raw: "x")]))
        #expect(batch.records.map(\.position) == Array(stride(from: 0, to: records.count, by: 2)))
        #expect(batch.refusals.map(\.position) == Array(stride(from: 1, to: records.count, by: 2)))
        #expect(batch.records.allSatisfy { $0.key == RecordKey(of: good) })
        #expect(batch.rejected.count == bad.count + 1)
        #expect(batch.rejected[0].project == "default" && batch.rejected[0].reason.hasPrefix("(for project 'bad name', not a valid name)"))
        for (refused, record) in zip(batch.rejected.dropFirst(), bad) {
            #expect(refused.reason == "collector: \(record.storageProblem ?? "none")")
            let raw = try JSONParser.parse(Array(refused.raw.utf8), maxDepth: 600)
            #expect(try CollectRecord(wire: raw.root, path: "raw") == record, "the record as it came: \(refused.raw)")
        }
        #expect(batch.rejected[5].project == "default", "an invalid project is kept under default")
    }

    @Test("every field of an event read from the batch's bytes is stored decoded, escapes and all")
    func storedDecoded() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: TestDatabase.logger)
            let record = Self.varied[1]
            // A lone surrogate in an identity: decoded to U+FFFD, as the contract's decoder does (jsonb refuses it).
            let body = Array(
                CollectBatch(receivedAt: Self.base, records: [record]).jsonText.replacingOccurrences(of: #""D1""#, with: #""D\ud800""#).utf8)
            let result = try await PostgresEventStore(pool: pool).write(IncomingBatch(jsonBytes: body))
            #expect(result.stored == 1)
            let rows = try await TestDatabase.rows(
                url,
                """
                SELECT project, event, distinct_id, anonymous_id, lib_detail, hybrid_h5::text, properties->>'text', identities->>'$identity_idfv',
                       identities->>'$identity_login_id', (user_id IS NULL)::text, event_id::text
                FROM analytics.events
                """)
            #expect(
                rows == [
                    [
                        "shop", "été \"quoted\"\n\t/", "用户-1", "a\\b", "detail", "true", "é😀", "D\u{FFFD}", "é\"x", "true",
                        RecordKey(of: record).uuidText,
                    ]
                ])
        }
    }
}

extension CollectBatch {
    /// The batch as the gateway sends it, as text.
    fileprivate var jsonText: String { String(decoding: jsonBytes, as: UTF8.self) }
}
