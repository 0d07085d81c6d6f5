import DatongContracts
import DatongJSON
import DatongPostgres
import DatongRuntime

/// A batch as the collector writes it, read in one pass from the request's bytes (`POST
/// /v1/batches`). Each event's `collector.events` row is written while its record is read, and its
/// key is hashed over the same bytes: no `String` per field, no `CollectRecord`, and the properties
/// and identities go from the request into the row as the JSON text they arrived as. Profile and
/// item records, which are few and are written through a staging table, are read into
/// `CollectRecord`s.
///
/// A record the collector cannot store (`CollectRecord.storageProblem`'s rules) is moved to
/// `rejected` with the reason while reading, so one bad record never costs the others.
package struct IncomingBatch: Sendable {
    /// When the gateway received the upload, in milliseconds since the Unix epoch.
    package let receivedAt: Int64
    /// The request's JSON (the batch, or the group holding it), into which `Record.raw` points.
    let body: [UInt8]
    /// The events' COPY rows (after the COPY header), into which `Content.event` points.
    package let eventRows: [UInt8]
    /// The records to write, in the order sent, without those refused while reading.
    package var records: [Record]
    /// Records the gateway refused, and those the collector refused while reading.
    package var rejected: [RejectedRecord]
    /// The positions in the batch as sent of `records`, when reading refused some; nil when not.
    let kept: [Int]?
    /// How many records the batch as sent held.
    let sentCount: Int

    package struct Record: Sendable {
        /// The deduplication key (`RecordKey(of:)`'s, computed over the same bytes).
        package let key: RecordKey
        package let project: String
        /// Milliseconds since the Unix epoch.
        package let time: Int64
        /// The record's JSON in `body`, kept if PostgreSQL refuses a value of it.
        let raw: Range<Int>
        package let content: Content
    }

    package enum Content: Sendable {
        /// An event: its row in `eventRows`.
        case event(row: Range<Int>)
        /// A profile or item record.
        case profile(CollectRecord)
    }

    /// Why the whole batch cannot be written (only what concerns every record: a bad record is
    /// refused alone while reading), or nil. A batch with a problem is refused whole; its rows,
    /// written with another `receivedAt`, are never used.
    package var problem: String? {
        Self.canStore(receivedAt: receivedAt) ? nil : "receivedAt \(receivedAt) is not a time from 1970 to 9999 in milliseconds"
    }

    /// Every row holds `receivedAt` as a timestamp, whose microseconds overflow outside PostgreSQL's range.
    static func canStore(receivedAt: Int64) -> Bool { (0...StoredTime.latestMillis).contains(receivedAt) }

    /// The JSON text of `record`, as it came.
    func rawText(of record: Record) -> String { String(decoding: body[record.raw], as: UTF8.self) }

    /// The batch with only `records[range]`, sharing its bytes; `rejected` goes with the first part.
    func part(_ range: Range<Int>) -> IncomingBatch {
        IncomingBatch(
            receivedAt: receivedAt, body: body, eventRows: eventRows, records: Array(records[range]),
            rejected: range.lowerBound == 0 ? rejected : [], kept: nil, sentCount: range.count
        )
    }

    /// The records a batch brings to the group commit's queue (stored and rejected alike).
    var weight: Int { max(1, records.count + rejected.count) }

    /// `result` (of writing `records`) with positions in the batch as sent: the records refused
    /// while reading named in `rejectedIndexes`.
    func asSent(_ result: CollectResult) -> CollectResult {
        guard let kept else { return result }
        let keptSet = Set(kept)
        let refused = (0..<sentCount).filter { !keptSet.contains($0) }
        var sent = result
        sent.duplicateIndexes = result.duplicateIndexes.map { kept[$0] }
        sent.rejectedIndexes = (result.rejectedIndexes.map { kept[$0] } + refused).sorted()
        return sent
    }
}

extension IncomingBatch: WireDecodable {
    package init(jsonBytes body: [UInt8]) throws(ContractDecodingError) {
        try self.init(jsonBytes: body, keys: .trackIDs)
    }

    /// Reads a batch whose records get their keys by `keys`.
    package init(jsonBytes body: [UInt8], keys: KeyRule) throws(ContractDecodingError) {
        try self.init(wire: try WireField.object(body, maxDepth: CollectBatch.maxDepth, "the batch"), path: nil, keys: keys)
    }

    /// The batches of a group (`POST /v1/batch-groups`), each read on its own: a batch that is
    /// not one is refused alone, with the problem `CollectBatch(wire:path:)` names.
    package static func group(
        jsonBytes body: [UInt8], keys: KeyRule
    ) throws(ContractDecodingError) -> [Result<IncomingBatch, ContractDecodingError>] {
        let root = try WireField.object(body, maxDepth: CollectBatch.maxDepth + 2, "the group")
        guard let list = root["batches"] else { throw ContractDecodingError("batches is missing") }
        return try WireField.array(list, "batches").enumerated().map { index, element in
            do throws(ContractDecodingError) {
                return .success(try IncomingBatch(wire: element, path: "batches[\(index)]", keys: keys))
            } catch {
                return .failure(error)
            }
        }
    }

    /// Reads a batch from its object in a parsed body; `path` names it inside a group.
    init(wire root: JSONRef, path: String?, keys: KeyRule) throws(ContractDecodingError) {
        guard root.isObject else { throw ContractDecodingError("\(path ?? "the batch") is not an object") }
        func at(_ name: String) -> String { path.map { "\($0).\(name)" } ?? name }
        var receivedAt: Int64?
        var recordIndexes: [Int] = []
        var rejected: [RejectedRecord] = []
        for (key, value) in root.members {
            if key.textEquals("receivedAt") {
                receivedAt = try WireField.int(value, at("receivedAt"))
            } else if key.textEquals("records") {
                recordIndexes.reserveCapacity(Int(value.entry.count))
                for element in try WireField.array(value, at("records")) { recordIndexes.append(element.index) }
            } else if key.textEquals("rejected") {
                for (index, element) in try WireField.array(value, at("rejected")).enumerated() {
                    rejected.append(try RejectedRecord(wire: element, path: at("rejected[\(index)]")).storable)
                }
            }
        }
        guard let receivedAt else { throw ContractDecodingError("\(at("receivedAt")) is missing") }
        // A batch PostgreSQL cannot hold is read all the same (its records checked as always), with
        // rows that are never written.
        var reader = RecordReader(
            document: root.document, receivedAt: Self.canStore(receivedAt: receivedAt) ? receivedAt : 0, rejected: rejected, count: recordIndexes.count,
            bytes: Int(root.entry.end - root.entry.start), keys: keys)
        try root.document.bytes.withUnsafeBufferPointer { (bytes) throws(ContractDecodingError) in
            try root.document.entries.withUnsafeBufferPointer { (entries) throws(ContractDecodingError) in
                for (position, index) in recordIndexes.enumerated() {
                    try reader.read(at: index, position: position, path: path, bytes: bytes, entries: entries)
                }
            }
        }
        self.init(
            receivedAt: receivedAt, body: root.document.bytes, eventRows: reader.rows.bytes, records: reader.records, rejected: reader.rejected,
            kept: reader.refusedAny ? reader.kept : nil, sentCount: recordIndexes.count
        )
    }
}

extension RejectedRecord {
    /// This entry as the collector can always store it: an invalid project becomes `default`.
    fileprivate var storable: RejectedRecord {
        guard !ProjectName.isValid(project) else { return self }
        return RejectedRecord(project: "default", reason: "(for project '\(UntrustedText.quoted(project))', not a valid name) \(reason)", raw: raw)
    }
}

/// Reads a batch's records into `IncomingBatch.Record`s and event rows, with scratch buffers the
/// records share.
private struct RecordReader {
    typealias Field = CollectRecord.Field
    typealias Entries = UnsafeBufferPointer<JSONDocument.Entry>
    typealias Bytes = UnsafeBufferPointer<UInt8>

    let document: JSONDocument
    let receivedAt: Int64
    let keys: KeyRule
    var rows: BinaryCopyWriter
    var records: [IncomingBatch.Record] = []
    var rejected: [RejectedRecord]
    var kept: [Int] = []
    var refusedAny = false

    /// The record's value entry of each field, or -1.
    private var slots = [Int](repeating: -1, count: Field.all.count)
    /// Where each text field's bytes are: in the batch, or (for a string with escapes) in `escaped`.
    private var texts = [Text?](repeating: nil, count: Field.all.count)
    private var escaped: [UInt8] = []
    private var keyInput: [UInt8] = []
    private var project = ""
    private var projectBytes: [UInt8] = []

    private struct Text {
        var escaped: Bool
        var range: Range<Int>
    }

    /// `bytes`: the size of the batch's JSON (in a group, not the whole body), which its rows
    /// take about as much of.
    init(document: JSONDocument, receivedAt: Int64, rejected: [RejectedRecord], count: Int, bytes: Int, keys: KeyRule) {
        self.document = document
        self.keys = keys
        self.receivedAt = receivedAt
        self.rejected = rejected
        rows = BinaryCopyWriter(reservingCapacity: 64 + bytes + count * 96)
        records.reserveCapacity(count)
        keyInput.reserveCapacity(1024)
    }

    private static let names: [[UInt8]] = Field.all.map(\.nameBytes)

    /// The field a member's key names, trying `expected` first (the gateway writes them in order).
    private static func field(_ key: JSONDocument.Entry, expected: Int, bytes: Bytes) -> Field? {
        guard key.kind == .string else { return nil }
        if key.flag { return Field.named(ArraySlice(JSONParser.unescape(slice(bytes, key))), expected: expected) }
        let name = slice(bytes, key)
        func matches(_ index: Int) -> Bool { names[index].withUnsafeBufferPointer { $0.elementsEqual(name) } }
        if expected < names.count, names[expected].count == name.count, matches(expected) { return Field.all[expected] }
        for index in names.indices where names[index].count == name.count && matches(index) { return Field.all[index] }
        return nil
    }

    private static func slice(_ bytes: Bytes, _ entry: JSONDocument.Entry) -> Bytes {
        Bytes(rebasing: bytes[Int(entry.start)..<Int(entry.end)])
    }

    mutating func read(at index: Int, position: Int, path batch: String?, bytes: Bytes, entries: Entries) throws(ContractDecodingError) {
        func path() -> String { batch.map { "\($0).records[\(position)]" } ?? "records[\(position)]" }
        let object = entries[index]
        guard object.kind == .object else { throw ContractDecodingError("\(path()) is not an object") }
        for field in slots.indices { slots[field] = -1 }
        var member = index + 1
        var next = 0
        var repeated = false
        for _ in 0..<Int(object.count) {
            let value = member + 1
            if let field = Self.field(entries[member], expected: next, bytes: bytes) {
                repeated = repeated || slots[field.rawValue] >= 0
                slots[field.rawValue] = value
                next = field.rawValue + 1
            }
            member = Int(entries[value].next)
        }
        // A field named twice: the last counts, as in the contract's reader, which also refuses
        // the record when an earlier one is of the wrong kind (found by the `batch` fuzz target).
        if repeated { _ = try CollectRecord(wire: JSONRef(document: document, index: index), path: path()) }
        let (time, trackId) = try checkKinds(entries: entries, path: path)
        readTexts(bytes: bytes, entries: entries)
        let type = escaped.withUnsafeBufferPointer { String(decoding: text(.type, bytes: bytes, escaped: $0)!, as: UTF8.self) }
        guard RecordTypes.isEvent(type) else {
            // Profile and item records are read whole.
            let record = try CollectRecord(wire: JSONRef(document: document, index: index), path: path())
            if let problem = record.storageProblem {
                refuse(position, project: record.project, problem: problem, raw: object, bytes: bytes)
            } else {
                keep(position, key: RecordKey(of: record, rule: keys), project: record.project, time: record.time, raw: object, content: .profile(record))
            }
            return
        }
        let project = internedProject(bytes: bytes)
        if let problem = storageProblem(project: project, time: time, bytes: bytes, entries: entries) {
            refuse(position, project: project, problem: problem, raw: object, bytes: bytes)
            return
        }
        let key = hashKey(time: time, trackId: trackId, bytes: bytes, entries: entries)
        let start = rows.bytes.count
        writeRow(key: key, time: time, trackId: trackId, bytes: bytes, entries: entries)
        keep(position, key: key, project: project, time: time, raw: object, content: .event(row: start..<rows.bytes.count))
    }

    private mutating func keep(_ position: Int, key: RecordKey, project: String, time: Int64, raw: JSONDocument.Entry, content: IncomingBatch.Content) {
        records.append(IncomingBatch.Record(key: key, project: project, time: time, raw: Int(raw.start)..<Int(raw.end), content: content))
        kept.append(position)
    }

    private mutating func refuse(_ position: Int, project: String, problem: String, raw: JSONDocument.Entry, bytes: Bytes) {
        refusedAny = true
        rejected.append(
            RejectedRecord(
                project: ProjectName.isValid(project) ? project : "default", reason: "collector: \(problem)",
                raw: String(decoding: Self.slice(bytes, raw), as: UTF8.self)
            ))
    }

    /// The contract's checks of each field's kind, with `WireField`'s messages; returns the time
    /// and the track id.
    private func checkKinds(entries: Entries, path: () -> String) throws(ContractDecodingError) -> (Int64, Int64?) {
        var time: Int64 = 0
        var trackId: Int64?
        for field in Field.all {
            let slot = slots[field.rawValue]
            guard slot >= 0 else {
                if field.isRequired { throw ContractDecodingError("\(path()).\(field.name) is missing") }
                continue
            }
            let kind = entries[slot].kind
            func at() -> String { "\(path()).\(field.name)" }
            switch field {
            case .project, .type:
                // Only a value that is not a string fails; the contract's reader names how (and a
                // string read by it would be made into a `String` for nothing).
                if kind != .string { _ = try WireField.requiredString(JSONRef(document: document, index: slot), at()) }
            case .time: time = try WireField.int(JSONRef(document: document, index: slot), at())
            case .userId: _ = try WireField.optionalInt(JSONRef(document: document, index: slot), at())
            case .trackId: trackId = try WireField.optionalInt(JSONRef(document: document, index: slot), at())
            case .hybridH5: guard kind == .bool else { throw ContractDecodingError("\(at()) is not a boolean") }
            case .properties: guard kind == .object else { throw ContractDecodingError("\(at()) is not an object") }
            case .identities:
                guard kind != .null else { continue }
                guard kind == .object else { throw ContractDecodingError("\(at()) is not an object") }
                var member = slot + 1
                for _ in 0..<Int(entries[slot].count) {
                    // The contract's reader names what is wrong.
                    if entries[member + 1].kind != .string {
                        _ = try WireField.identities(JSONRef(document: document, index: slot), at())
                        throw ContractDecodingError("\(at()) holds a value that is not a string")
                    }
                    member = Int(entries[member + 1].next)
                }
            case .event, .distinctId, .anonymousId, .loginId, .lib, .libVersion, .appVersion, .itemType, .itemId, .libMethod, .libDetail,
                .originalId, .schema:
                guard kind == .string || kind == .null else { throw ContractDecodingError("\(at()) is not a string") }
            }
        }
        return (time, trackId)
    }

    /// Finds every text field's bytes; a string with escapes is unescaped once, into `escaped`.
    private mutating func readTexts(bytes: Bytes, entries: Entries) {
        escaped.removeAll(keepingCapacity: true)
        for field in Field.all {
            texts[field.rawValue] = nil
            let slot = slots[field.rawValue]
            guard slot >= 0, entries[slot].kind == .string else { continue }
            let entry = entries[slot]
            if entry.flag {
                let start = escaped.count
                escaped.append(contentsOf: JSONParser.unescape(Self.slice(bytes, entry)))
                texts[field.rawValue] = Text(escaped: true, range: start..<escaped.count)
            } else {
                texts[field.rawValue] = Text(escaped: false, range: Int(entry.start)..<Int(entry.end))
            }
        }
    }

    /// The bytes of a text field, or nil when it is absent or null.
    private func text(_ field: Field, bytes: Bytes, escaped: Bytes) -> Bytes? {
        guard let text = texts[field.rawValue] else { return nil }
        return Bytes(rebasing: (text.escaped ? escaped : bytes)[text.range])
    }

    /// The record's project as a `String`, made once for a run of records of the same project.
    private mutating func internedProject(bytes: Bytes) -> String {
        let text = texts[Field.project.rawValue]!
        let same = escaped.withUnsafeBufferPointer { escaped in
            projectBytes.withUnsafeBufferPointer { $0.elementsEqual(Bytes(rebasing: (text.escaped ? escaped : bytes)[text.range])) }
        }
        if !same {
            projectBytes = escaped.withUnsafeBufferPointer { Array((text.escaped ? $0 : bytes)[text.range]) }
            project = String(decoding: projectBytes, as: UTF8.self)
        }
        return project
    }

    /// `CollectRecord.storageProblem` for an event read here: its checks in its order, with its
    /// reasons. Only a string with escapes can hold a NUL.
    private func storageProblem(project: String, time: Int64, bytes: Bytes, entries: Entries) -> String? {
        guard ProjectName.isValid(project) else { return "project '\(UntrustedText.quoted(project))' is not a valid project name" }
        guard (0...StoredTime.latestMillis).contains(time) else { return "time \(time) is not a time from 1970 to 9999 in milliseconds" }
        let typeLength = texts[Field.type.rawValue]!.range.count
        guard typeLength > 0, typeLength <= 64 else { return "type must be 1 to 64 bytes" }
        return escaped.withUnsafeBufferPointer { escaped in
            for field in Field.all where field != .project {
                guard let text = texts[field.rawValue], text.escaped else { continue }
                if escaped[text.range].contains(0) { return "\(field.name) contains a NUL character" }
            }
            let slot = slots[Field.identities.rawValue]
            guard slot >= 0, entries[slot].kind == .object else { return nil }
            var member = slot + 1
            for _ in 0..<Int(entries[slot].count) {
                func hasNUL(_ entry: JSONDocument.Entry) -> Bool { entry.flag && JSONParser.unescape(Self.slice(bytes, entry)).contains(0) }
                if hasNUL(entries[member]) || hasNUL(entries[member + 1]) { return "identities contain a NUL character" }
                member = Int(entries[member + 1].next)
            }
            return nil
        }
    }

    /// `RecordKey(of:rule:)` over the fields' bytes: the same key for the same record.
    private mutating func hashKey(time: Int64, trackId: Int64?, bytes: Bytes, entries: Entries) -> RecordKey {
        keyInput.removeAll(keepingCapacity: true)
        let trackId = keys.usesTrackID(time: time, trackId: trackId) ? trackId : nil
        if trackId != nil { keyInput.append(RecordKey.trackIDMark) }
        let escaped = escaped  // shares the buffer: `keyInput` is written while it is read
        escaped.withUnsafeBufferPointer { escaped in
            func field(_ value: Bytes?) { RecordKey.appendField(value, to: &keyInput) }
            field(text(.project, bytes: bytes, escaped: escaped))
            field(text(.type, bytes: bytes, escaped: escaped))
            field(text(.event, bytes: bytes, escaped: escaped))
            var time = String(time)
            time.withUTF8 { field($0) }
            field(text(.distinctId, bytes: bytes, escaped: escaped))
            field(text(.itemType, bytes: bytes, escaped: escaped))
            field(text(.itemId, bytes: bytes, escaped: escaped))
            if var trackId = trackId.map({ String($0) }) {
                trackId.withUTF8 { field($0) }
            } else {
                field(Self.slice(bytes, entries[slots[Field.properties.rawValue]]))
            }
        }
        return RecordKey(hashing: keyInput)
    }

    /// The event's `collector.events` row, in `EventRows.columns` order.
    private mutating func writeRow(key: RecordKey, time: Int64, trackId: Int64?, bytes: Bytes, entries: Entries) {
        let empty: Bytes = Bytes(start: nil, count: 0)
        rows.beginRow(fieldCount: EventRows.columns.count)
        rows.uuid(key)
        rows.timestamp(unixMillis: receivedAt)
        let escaped = escaped  // shares the buffer: `rows` is written while it is read
        escaped.withUnsafeBufferPointer { escaped in
            for field in EventRows.eventFields {
                let slot = slots[field.rawValue]
                switch field {
                case .project, .type, .anonymousId, .loginId, .lib, .libVersion, .appVersion, .libMethod, .libDetail, .originalId, .schema:
                    rows.text(utf8: text(field, bytes: bytes, escaped: escaped))
                case .event, .distinctId:  // NOT NULL: "" for a record without one
                    rows.text(utf8: text(field, bytes: bytes, escaped: escaped) ?? empty)
                case .time: rows.timestamp(unixMillis: time)
                case .userId: rows.bigint(slot < 0 ? nil : JSONRef(document: document, index: slot).int64Value)
                case .hybridH5: rows.boolean(entries[slot].flag)
                case .properties: rows.jsonb(utf8: Self.slice(bytes, entries[slot]))
                case .identities: writeIdentities(slot, bytes: bytes, entries: entries)
                case .trackId: rows.bigint(trackId)
                case .itemType, .itemId: preconditionFailure("\(field) is not an event column")
                }
            }
        }
    }

    /// The identities as they came; an object with escapes is written again from its decoded
    /// strings, as `jsonb` would refuse a lone surrogate the decoder turns into U+FFFD.
    private mutating func writeIdentities(_ slot: Int, bytes: Bytes, entries: Entries) {
        guard slot >= 0, entries[slot].kind == .object else { return rows.null() }
        var member = slot + 1
        var plain = true
        for _ in 0..<Int(entries[slot].count) {
            plain = plain && !entries[member].flag && !entries[member + 1].flag
            member = Int(entries[member + 1].next)
        }
        if plain { return rows.jsonb(utf8: Self.slice(bytes, entries[slot])) }
        let document = document
        rows.jsonb { out in
            var object = JSONObjectWriter(&out)
            for (name, value) in JSONRef(document: document, index: slot).members {
                object.string(dynamic: name.stringValue ?? "", value.stringValue ?? "", &out)
            }
            object.finish(&out)
        }
    }
}
