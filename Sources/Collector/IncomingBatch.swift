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
/// A record the collector cannot store (`CollectRecordReader.storageProblem`'s rules) is moved to
/// `rejected` with the reason while reading, so one bad record never costs the others.
package struct IncomingBatch: Sendable {
    /// When the gateway received the upload, in milliseconds since the Unix epoch.
    package let receivedAt: Int64
    /// The request's JSON (the batch, or the group holding it), into which `Record.raw` and
    /// `CatalogMark.name` point.
    let body: [UInt8]
    /// The events' COPY rows (after the COPY header), into which `Content.event` points.
    package var eventRows: [UInt8]
    /// The records to write, in the order sent, without those refused (`refuse`).
    package var records: [Record]
    /// Records the gateway refused, and those the collector refused.
    package var rejected: [RejectedRecord]
    /// The records the collector refused, by their position in the batch as sent, with the reason
    /// (each also in `rejected`): answered by the commit with the duplicates, positions as sent.
    private(set) var refusals: [(position: Int, reason: String)] = []
    /// The property types the records' first values set (`TypeCheck`), confirmed in the storing
    /// transaction.
    var assumedTypes: [AssumedType] = []

    package struct Record: Sendable {
        /// Its position in the batch as sent: every answer names a record by it, however many
        /// records before it were refused.
        let position: Int
        /// The deduplication key (`RecordKey(of:)`'s, computed over the same bytes).
        package let key: RecordKey
        package let project: String
        /// Milliseconds since the Unix epoch.
        package let time: Int64
        /// The record's JSON in `body`, kept if PostgreSQL refuses a value of it.
        let raw: Range<Int>
        package var content: Content
        /// What the catalog needs of an event or profile record; nil for other records.
        let catalog: CatalogMark?
        /// The properties its project's rules left out (`TypeCheck`), counted once it is stored.
        var dropped: [DroppedProperty] = []
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

    /// The batch with only `records[range]`, sharing its bytes; `rejected` and `refusals` go with
    /// the first part.
    func part(_ range: Range<Int>) -> IncomingBatch {
        var part = IncomingBatch(
            receivedAt: receivedAt, body: body, eventRows: eventRows, records: Array(records[range]),
            rejected: range.lowerBound == 0 ? rejected : [], assumedTypes: assumedTypes)
        if range.lowerBound == 0 { part.refusals = refusals }
        return part
    }

    /// Keeps `record` (no longer among `records`) in `rejected` with `reason`, answered at its position.
    mutating func refuse(_ record: Record, reason: String) {
        rejected.append(RejectedRecord(project: record.project, reason: reason, raw: rawText(of: record)))
        refusals.append((record.position, reason))
    }

    /// The result of writing the batch: `duplicates` are indexes in `records`. The answer has an
    /// outcome for every record up to the last this batch (or part of one) holds, by its position
    /// as sent: stored, a duplicate, or refused with its reason.
    func result(duplicates: [Int]) -> CollectResult {
        let count = (records.map(\.position) + refusals.map(\.position)).max().map { $0 + 1 } ?? 0
        var outcomes = [RecordOutcome](repeating: .stored, count: count)
        for index in duplicates { outcomes[records[index].position] = .duplicate }
        for refusal in refusals { outcomes[refusal.position] = .refused(reason: refusal.reason) }
        return CollectResult(stored: records.count - duplicates.count, duplicates: duplicates.count, rejected: rejected.count, records: outcomes)
    }

    /// The records a batch brings to the group commit's queue (stored and rejected alike).
    var weight: Int { max(1, records.count + rejected.count) }
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
        let members = try CollectBatch.members(of: root, path: path)
        let receivedAt = members.receivedAt
        let recordIndexes = members.records.map(\.index)
        let rejected = members.rejected.map(\.storable)
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
            receivedAt: receivedAt, body: root.document.bytes, eventRows: reader.rows.bytes, records: reader.records, rejected: reader.rejected)
        refusals = reader.refusals
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
    typealias Entries = CollectRecordReader.Entries
    typealias Bytes = CollectRecordReader.Bytes

    let document: JSONDocument
    let receivedAt: Int64
    let keys: KeyRule
    var rows: BinaryCopyWriter
    var records: [IncomingBatch.Record] = []
    var rejected: [RejectedRecord]
    var refusals: [(position: Int, reason: String)] = []

    /// The contract's reader, which finds and checks each record's fields.
    private var record = CollectRecordReader()
    private var keyInput: [UInt8] = []
    private var project = ""
    private var projectBytes: [UInt8] = []
    /// `project`'s hash, and the day of receipt, for the records' catalog marks.
    private var projectHash: UInt64 = 0
    private let receivedDay: UInt64

    /// `bytes`: the size of the batch's JSON (in a group, not the whole body), which its rows
    /// take about as much of.
    init(document: JSONDocument, receivedAt: Int64, rejected: [RejectedRecord], count: Int, bytes: Int, keys: KeyRule) {
        self.document = document
        self.keys = keys
        self.receivedAt = receivedAt
        receivedDay = UInt64(Catalog.day(of: receivedAt))
        self.rejected = rejected
        rows = BinaryCopyWriter(reservingCapacity: 64 + bytes + count * 96)
        records.reserveCapacity(count)
        keyInput.reserveCapacity(1024)
    }

    private static func slice(_ bytes: Bytes, _ entry: JSONDocument.Entry) -> Bytes { CollectRecordReader.slice(bytes, entry) }

    mutating func read(at index: Int, position: Int, path batch: String?, bytes: Bytes, entries: Entries) throws(ContractDecodingError) {
        func path() -> String { batch.map { "\($0).records[\(position)]" } ?? "records[\(position)]" }
        let object = entries[index]
        try record.read(document, at: index, bytes: bytes, entries: entries, path: path)
        let project = internedProject(bytes: bytes)
        if let problem = record.storageProblem(project: project, bytes: bytes, entries: entries) {
            refuse(position, project: project, problem: problem, raw: object, bytes: bytes)
            return
        }
        let type = record.string(.type, bytes: bytes)!
        guard RecordTypes.isEvent(type) else {
            // Profile and item records are few, and folded from typed records.
            let profile = CollectRecord(reading: record, document: document, bytes: bytes, entries: entries)
            let mark = Self.catalogsProperties(ofType: type) ? catalogMark(isEvent: false, bytes: bytes, entries: entries) : nil
            keep(
                position, key: RecordKey(of: profile, rule: keys), project: project, time: profile.time, raw: object, content: .profile(profile),
                catalog: mark)
            return
        }
        let key = hashKey(bytes: bytes, entries: entries)
        let start = rows.bytes.count
        writeRow(key: key, bytes: bytes, entries: entries)
        keep(
            position, key: key, project: project, time: record.time, raw: object, content: .event(row: start..<rows.bytes.count),
            catalog: catalogMark(isEvent: true, bytes: bytes, entries: entries))
    }

    private mutating func keep(
        _ position: Int, key: RecordKey, project: String, time: Int64, raw: JSONDocument.Entry, content: IncomingBatch.Content, catalog: CatalogMark?
    ) {
        records.append(
            IncomingBatch.Record(
                position: position, key: key, project: project, time: time, raw: Int(raw.start)..<Int(raw.end), content: content, catalog: catalog))
    }

    /// The profile records whose properties are profile properties with values of their type
    /// (`profile_unset` and `profile_delete` name properties or nothing).
    private static func catalogsProperties(ofType type: String) -> Bool {
        type == "profile_set" || type == "profile_set_once" || type == "profile_increment" || type == "profile_append"
    }

    /// The record's catalog shape (`Catalog.swift`): a hash over its project, event, `$lib`, app
    /// version, day of receipt and its properties' names and types, read from the bytes as they are.
    private func catalogMark(isEvent: Bool, bytes: Bytes, entries: Entries) -> CatalogMark {
        let record = record
        var shape = ShapeHasher()
        shape.combine(projectHash)
        var event: UInt64 = 0
        if isEvent {
            record.withEscaped { escaped in
                shape.combine(record.text(.event, bytes: bytes, escaped: escaped))
                event = shape.value | 1  // never 0, which marks a profile record
                shape.combine(record.text(.lib, bytes: bytes, escaped: escaped))
                shape.combine(record.text(.appVersion, bytes: bytes, escaped: escaped))
            }
        } else {
            shape.combine(0)
        }
        shape.combine(receivedDay)
        let slot = record.slots[Field.properties.rawValue]
        var member = slot + 1
        for _ in 0..<Int(entries[slot].count) {
            let key = entries[member]
            let value = entries[member + 1]
            if let type = SensorsType.of(value, bytes: bytes) {
                shape.combine(Int(key.start)..<Int(key.end), in: bytes)
                shape.combine(type.code)
            }
            member = Int(value.next)
        }
        let nameSlot = record.slots[Field.event.rawValue]
        let name = nameSlot >= 0 && entries[nameSlot].kind == .string ? entries[nameSlot] : nil
        return CatalogMark(
            shape: shape.value, event: event, name: name.map { $0.start..<$0.end } ?? 0..<0, nameEscaped: name?.flag ?? false)
    }

    private mutating func refuse(_ position: Int, project: String, problem: String, raw: JSONDocument.Entry, bytes: Bytes) {
        let reason = "collector: \(problem)"
        rejected.append(
            RejectedRecord(
                project: ProjectName.isValid(project) ? project : "default", reason: reason, raw: String(decoding: Self.slice(bytes, raw), as: UTF8.self)))
        refusals.append((position, reason))
    }

    /// The record's project as a `String`, made once for a run of records of the same project.
    private mutating func internedProject(bytes: Bytes) -> String {
        let record = record
        let same = record.withEscaped { escaped in
            projectBytes.withUnsafeBufferPointer { $0.elementsEqual(record.text(.project, bytes: bytes, escaped: escaped)!) }
        }
        if !same {
            projectBytes = record.withEscaped { Array(record.text(.project, bytes: bytes, escaped: $0)!) }
            project = String(decoding: projectBytes, as: UTF8.self)
            var hasher = ShapeHasher()
            projectBytes.withUnsafeBufferPointer { hasher.combine($0) }
            projectHash = hasher.value
        }
        return project
    }

    /// `RecordKey(of:rule:)` over the fields' bytes: the same key for the same record.
    private mutating func hashKey(bytes: Bytes, entries: Entries) -> RecordKey {
        keyInput.removeAll(keepingCapacity: true)
        let record = record  // shares the buffers: `keyInput` is written while they are read
        let trackId = keys.usesTrackID(time: record.time, trackId: record.trackId) ? record.trackId : nil
        if trackId != nil { keyInput.append(RecordKey.trackIDMark) }
        record.withEscaped { escaped in
            func field(_ value: Bytes?) { RecordKey.appendField(value, to: &keyInput) }
            field(record.text(.project, bytes: bytes, escaped: escaped))
            field(record.text(.type, bytes: bytes, escaped: escaped))
            field(record.text(.event, bytes: bytes, escaped: escaped))
            var time = String(record.time)
            time.withUTF8 { field($0) }
            field(record.text(.distinctId, bytes: bytes, escaped: escaped))
            field(record.text(.itemType, bytes: bytes, escaped: escaped))
            field(record.text(.itemId, bytes: bytes, escaped: escaped))
            if var trackId = trackId.map({ String($0) }) {
                trackId.withUTF8 { field($0) }
            } else {
                field(Self.slice(bytes, entries[record.slots[Field.properties.rawValue]]))
            }
        }
        return RecordKey(hashing: keyInput)
    }

    /// The event's `collector.events` row, in `EventRows.columns` order.
    private mutating func writeRow(key: RecordKey, bytes: Bytes, entries: Entries) {
        let empty: Bytes = Bytes(start: nil, count: 0)
        rows.beginRow(fieldCount: EventRows.columns.count)
        rows.uuid(key)
        rows.timestamp(unixMillis: receivedAt)
        let record = record  // shares the buffers: `rows` is written while they are read
        record.withEscaped { escaped in
            for field in EventRows.eventFields {
                let slot = record.slots[field.rawValue]
                switch field {
                case .project, .type, .anonymousId, .loginId, .lib, .libVersion, .appVersion, .libMethod, .libDetail, .originalId, .schema:
                    rows.text(utf8: record.text(field, bytes: bytes, escaped: escaped))
                case .event, .distinctId:  // NOT NULL: "" for a record without one
                    rows.text(utf8: record.text(field, bytes: bytes, escaped: escaped) ?? empty)
                case .time: rows.timestamp(unixMillis: record.time)
                case .userId: rows.bigint(record.userId)
                case .hybridH5: rows.boolean(record.hybridH5)
                case .properties: rows.jsonb(utf8: Self.slice(bytes, entries[slot]))
                case .identities: writeIdentities(slot, bytes: bytes, entries: entries)
                case .trackId: rows.bigint(record.trackId)
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
