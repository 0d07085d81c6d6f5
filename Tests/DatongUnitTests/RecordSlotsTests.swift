import DatongContracts
import Foundation
import Testing

@testable import Gateway

/// One slot per record from intake to answer: every rule's fate reaches the SDK at the record's
/// own position, however the rules before it moved the others.
@Suite("Record slots: each record's fate is answered at its own position")
struct RecordSlotsTests {
    static let now: Int64 = 1_795_273_119_736

    static func record(_ event: String, id: String = "d1") -> String {
        #"{"type":"track","event":"\#(event)","time":\#(now),"distinct_id":"\#(id)","properties":{"n":1}}"#
    }

    static func upload(_ records: [String]) throws -> PreparedUpload {
        let payload = Data("[\(records.joined(separator: ","))]".utf8).base64EncodedString()
        let body = "data_list=" + payload.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        return try PreparedUpload(query: "project=p", body: Array(body.utf8), limits: UploadLimits(), now: now)
    }

    @Test("refused, suppressed, duplicate and collector-refused records are each answered at their index, the rest stored")
    func mixedUpload() throws {
        let bad = #"{"type":"track","event":"Bad","time":\#(Self.now),"distinct_id":"d1","properties":{"user_id":1}}"#
        var upload = try Self.upload([
            Self.record("A"), bad, Self.record("B"), Self.record("C", id: "erased"), Self.record("D"), bad, Self.record("E"),
        ])
        #expect(upload.problems.map(\.index) == [1, 5])
        // An erased user's record drops out before the collector is called, as `ResolveAndStore` drops it.
        let erased = try #require(upload.slots.all.indices.first { upload.slots.record(of: $0)?.collect.distinctId == "erased" })
        upload.slots[erased].drop(as: .suppressed)
        let sent = upload.slots.acceptedSlots
        #expect(sent.map { upload.slots[$0].index } == [0, 2, 4, 6])
        #expect(upload.slots.rejected.count == 2)
        // The collector numbers what it was sent: B (its 1) was stored before, E (its 3) refused.
        let collected = CollectResult(
            stored: 2, duplicates: 1, rejected: 3, duplicateIndexes: [1], rejectedIndexes: [3], rejectedReasons: ["PROPERTY_WITH_WRONG_TYPE: n"])
        upload.slots.record(collected, sent: sent)
        let answer = UploadAnswer(upload.slots.answer(collected))
        #expect(answer.problems.map(\.index) == [1, 5, 6])
        #expect(answer.problems[0].reason.contains("user_id") && answer.problems[1].reason == answer.problems[0].reason)
        #expect(answer.problems[2].reason == "PROPERTY_WITH_WRONG_TYPE: n")
        #expect(answer.suppressed == 1 && answer.bots == nil)
        #expect(upload.slots.all.map(\.fate.name) == ["stored", "refused", "duplicate", "suppressed", "stored", "refused", "collectorRefused"])
    }

    @Test("a relay answers one result per message, in order, whatever the collector numbered")
    func relayResults() throws {
        var slots = RecordSlots()
        slots.append(RecordSlot(index: 0, fate: .ignored(reason: "getAppInfo")))
        var refused = RecordSlot(index: 1, fate: .accepted)
        refused.refuse(project: "p", reason: "bridge: no page", raw: "{}", answer: "no page")
        slots.append(refused)
        let good = try Self.upload([Self.record("A"), Self.record("B")]).accepted
        slots.accept(good[0], at: 2, sent: nil)
        slots.accept(good[1], at: 3, sent: nil)
        // An older collector says neither which position it refused nor why: the answer says where to look.
        let collected = CollectResult(stored: 1, duplicates: 0, rejected: 2, rejectedIndexes: [0])
        slots.record(collected, sent: slots.acceptedSlots)
        let answer = BridgeAnswer(slots.answer(collected))
        #expect(answer.results.map(\.index) == [0, 1, 2, 3])
        #expect(answer.results.map(\.status) == [.ignored, .rejected, .rejected, .stored])
        #expect(answer.results[1].reason == "no page" && slots.rejected.map(\.reason) == ["bridge: no page"])
        #expect(answer.results[2].reason == RecordSlots.collectorRefusal)
        #expect(answer.ignored == 1 && answer.stored == 1 && answer.rejected == 2)
    }
}

extension RecordSlot.Fate {
    fileprivate var name: String {
        switch self {
        case .accepted: "accepted"
        case .refused: "refused"
        case .ignored: "ignored"
        case .bot: "bot"
        case .suppressed: "suppressed"
        case .stored: "stored"
        case .duplicate: "duplicate"
        case .collectorRefused: "collectorRefused"
        }
    }
}
