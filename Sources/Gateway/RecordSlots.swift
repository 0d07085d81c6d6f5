import DatongContracts
import DatongJSON

/// One record of an upload or a relay, from the moment it is read to the answer: where the SDK put
/// it and what became of it. Each per-record rule (refusal, a record's own project, the H5 page
/// whitelist, crawlers, erased users, the collector's result) changes a slot's fate in place; the
/// answer is written from the slots, once (`RecordSlots.answer`). No rule maps positions.
struct RecordSlot: Sendable {
    /// The record's position in `data_list` or in the relay's `messages`; nil for an encrypted
    /// envelope that could not be opened, whose records were never read.
    let index: Int?
    var fate: Fate
    /// Where its record is in `RecordSlots.records` while it is `.accepted`. The records are kept
    /// apart, each moved once: a slot is small, and a rule changing its fate copies no record.
    fileprivate(set) var record: Int?
    /// The record as sent, for the rules that read it again: its own project's settings (a server
    /// SDK's record may name one) and the page of a record an app relayed. nil for the others.
    var sent: JSONRef?

    enum Fate: Sendable, Equatable {
        /// Valid so far: to be resolved and stored.
        case accepted
        /// Refused before storing: kept in `analytics.rejected` as `kept`; `answer` is the reason
        /// the SDK is told (nil for an envelope that could not be opened: it has no position).
        case refused(kept: RejectedRecord, answer: String?)
        /// A relayed message that is not a record (`getAppInfo`, …), acknowledged and dropped.
        case ignored(reason: String?)
        /// A crawler's record, dropped as its project asks (`EnrichmentPolicy.bots`).
        case bot
        /// A record of an erased user (docs/PRIVACY.md), dropped.
        case suppressed
        /// Committed by the collector.
        case stored
        /// Already stored (a retried upload), or repeated earlier in the same batch.
        case duplicate
        /// Refused by the collector, which kept it in `analytics.rejected` with this reason.
        case collectorRefused(reason: String)
    }

    init(index: Int?, fate: Fate) {
        self.index = index
        self.fate = fate
    }

    /// Refuses the record: it is kept in `analytics.rejected` under `project` with `reason`, which
    /// is also the SDK's answer unless `answer` says otherwise.
    mutating func refuse(project: String, reason: String, raw: String, answer: String? = nil) {
        fate = .refused(kept: RejectedRecord(project: project, reason: reason, raw: raw), answer: answer ?? reason)
        record = nil
        sent = nil
    }

    /// Drops the record with `fate` (a crawler's, an erased user's): nothing of it is stored.
    mutating func drop(as fate: Fate) {
        self.fate = fate
        record = nil
        sent = nil
    }
}

/// The slots of one upload or relay, in the order the SDK sent the records.
struct RecordSlots: Sendable {
    var all: [RecordSlot] = []
    /// The accepted records, in the order read, each named by its slot's `record`.
    private var records: [NormalizedRecord] = []

    init(capacity: Int = 0) {
        all.reserveCapacity(capacity)
        records.reserveCapacity(capacity)
    }

    /// Adds an accepted record's slot; `sent` is kept when a later rule reads the record again.
    mutating func accept(_ record: NormalizedRecord, at index: Int, sent: JSONRef?) {
        var slot = RecordSlot(index: index, fate: .accepted)
        slot.record = records.count
        slot.sent = sent
        records.append(record)
        all.append(slot)
    }

    /// The record of an accepted slot. (A `_read` accessor here made debug builds release a
    /// record's strings once too often, under Swift 6.3.1: the tests crashed in the batch writer.)
    subscript(recordOf slot: Int) -> NormalizedRecord {
        get { records[all[slot].record!] }
        set { records[all[slot].record!] = newValue }
    }

    /// The identity records of the accepted slots `sent`, in order (nil for an item record).
    func identities(of sent: [Int]) -> [IdentityRecord?] { sent.map { records[all[$0].record!].identity } }

    /// The record of `slot` while it is accepted.
    func record(of slot: Int) -> NormalizedRecord? {
        all[slot].fate == .accepted ? all[slot].record.map { records[$0] } : nil
    }

    subscript(slot: Int) -> RecordSlot {
        get { all[slot] }
        _modify { yield &all[slot] }
    }

    mutating func append(_ slot: RecordSlot) { all.append(slot) }

    /// The slots still to be stored.
    var acceptedSlots: [Int] { all.indices.filter { all[$0].fate == .accepted } }

    /// The records still to be stored, in order.
    var accepted: [NormalizedRecord] { all.indices.compactMap(record(of:)) }

    /// The refused records, as `analytics.rejected` keeps them, in order.
    var rejected: [RejectedRecord] {
        all.compactMap { if case .refused(let kept, _) = $0.fate { kept } else { nil } }
    }

    func count(_ fate: RecordSlot.Fate) -> Int { all.count(where: { $0.fate == fate }) }

    /// Writes the collector's outcome of each record into its slot, `sent[i]` being the slot of the
    /// batch's i-th record.
    mutating func record(_ result: CollectResult, sent: [Int]) {
        for (position, slot) in sent.enumerated() {
            all[slot].record = nil
            all[slot].fate =
                switch result.outcome(at: position) {
                case .stored: .stored
                case .duplicate: .duplicate
                case .refused(let reason): .collectorRefused(reason: reason.isEmpty ? Self.collectorRefusal : reason)
                }
        }
        records = []
    }

    /// Why a record the gateway accepted was refused by the collector, when the collector (an
    /// older one) did not say; a collector of this release answers the reason itself.
    static let collectorRefusal = "the collector could not store a value of this record; analytics.rejected has the reason"

    /// What the SDK is told, written from the slots: the upload and relay answers are two
    /// renderings of it (`UploadAnswer`, `BridgeAnswer`). `collected` gives the counts (the
    /// collector's `rejected` counts the gateway's refusals it kept too).
    func answer(_ collected: CollectResult) -> IntakeAnswer {
        var results: [MessageResult] = []
        results.reserveCapacity(all.count)
        for slot in all.indices {
            guard let index = all[slot].index else { continue }
            let (status, reason): (MessageResult.Status, String?) =
                switch all[slot].fate {
                case .accepted, .stored: (.stored, nil)
                case .duplicate: (.duplicate, nil)
                case .refused(_, let answer): (.rejected, answer)
                case .collectorRefused(let reason): (.rejected, reason)
                case .ignored(let reason): (.ignored, reason)
                case .suppressed: (.suppressed, nil)
                case .bot: (.bot, nil)
                }
            results.append(MessageResult(index: index, status: status, reason: reason))
        }
        return IntakeAnswer(
            stored: collected.stored, duplicates: collected.duplicates, rejected: collected.rejected, suppressed: count(.suppressed),
            bots: count(.bot), results: results)
    }

    /// The refused records with a position, before anything is stored (a dry run's answer).
    var problems: [RecordProblem] { answer(CollectResult(stored: 0, duplicates: 0, rejected: 0)).problems }
}

/// What became of an upload's or relay's records, for the SDK.
struct IntakeAnswer: Sendable {
    let stored: Int
    let duplicates: Int
    let rejected: Int
    let suppressed: Int
    let bots: Int
    /// One result per record with a position, in the order sent.
    let results: [MessageResult]

    /// The refused records, in the order sent.
    var problems: [RecordProblem] {
        results.compactMap { $0.status == .rejected ? RecordProblem(index: $0.index, reason: $0.reason ?? "") : nil }
    }
}
