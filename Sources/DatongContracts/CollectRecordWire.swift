import DatongJSON

// A record as it travels in a batch (`POST /v1/batches`): its one writer and its one reader, both
// over the one field list, `CollectRecord.Field`.

/// The one reader of a record in a batch (`POST /v1/batches`): where each `Field`'s value lies in
/// the batch's bytes, each value checked against its field's `kind` (an unknown member is ignored;
/// a field named twice counts the last time, every value checked), and the bytes of each text
/// field with its escapes resolved. `CollectRecord(wire:)` makes a typed record from it; the
/// collector writes an event's COPY row from it without making one. Its buffers are kept from one
/// record to the next.
package struct CollectRecordReader: Sendable {
    package typealias Field = CollectRecord.Field
    package typealias Entries = UnsafeBufferPointer<JSONDocument.Entry>
    package typealias Bytes = UnsafeBufferPointer<UInt8>

    /// The entry of each field's value, or -1.
    package private(set) var slots = [Int](repeating: -1, count: Field.all.count)
    package private(set) var time: Int64 = 0
    package private(set) var userId: Int64?
    package private(set) var trackId: Int64?
    package private(set) var hybridH5 = false
    /// Where each text field's bytes are: in the batch, or (a string with escapes) in `escaped`.
    private var texts = [Text?](repeating: nil, count: Field.all.count)
    private var escaped: [UInt8] = []

    private struct Text: Sendable {
        var escaped: Bool
        var range: Range<Int>
    }

    package init() {}

    private static let names: [[UInt8]] = Field.all.map(\.nameBytes)

    /// Reads the record whose object is `entries[index]`; a value of the wrong kind, or a required
    /// field missing, is a problem named by `path`.
    package mutating func read(
        _ document: JSONDocument, at index: Int, bytes: Bytes, entries: Entries, path: () -> String
    ) throws(ContractDecodingError) {
        let object = entries[index]
        guard object.kind == .object else { throw ContractDecodingError("\(path()) is not an object") }
        for field in slots.indices { slots[field] = -1 }
        var member = index + 1
        var next = 0
        for _ in 0..<Int(object.count) {
            let value = member + 1
            if let field = Self.field(entries[member], expected: next, bytes: bytes) {
                try Self.check(field, JSONRef(document: document, index: value), path: path)
                slots[field.rawValue] = value
                next = field.rawValue + 1
            }
            member = Int(entries[value].next)
        }
        for field in Field.all where field.isRequired && slots[field.rawValue] < 0 {
            throw ContractDecodingError("\(path()).\(field.name) is missing")
        }
        func int(_ field: Field) -> Int64? {
            let slot = slots[field.rawValue]
            return slot < 0 ? nil : JSONRef(document: document, index: slot).int64Value
        }
        time = int(.time)!
        userId = int(.userId)
        trackId = int(.trackId)
        hybridH5 = entries[slots[Field.hybridH5.rawValue]].flag
        readTexts(bytes: bytes, entries: entries)
    }

    /// The contract's check of a value, with `WireField`'s messages.
    private static func check(_ field: Field, _ value: JSONRef, path: () -> String) throws(ContractDecodingError) {
        func at() -> String { "\(path()).\(field.name)" }
        let kind = value.kind
        switch field.kind {
        case .requiredText:
            if kind != .string { _ = try WireField.requiredString(value, at()) }
        case .text:
            guard kind == .string || kind == .null else { throw ContractDecodingError("\(at()) is not a string") }
        case .integer: _ = try WireField.int(value, at())
        case .optionalInteger: _ = try WireField.optionalInt(value, at())
        case .flag: guard kind == .bool else { throw ContractDecodingError("\(at()) is not a boolean") }
        case .object: guard kind == .object else { throw ContractDecodingError("\(at()) is not an object") }
        case .texts:
            guard kind != .null else { return }
            guard kind == .object else { throw ContractDecodingError("\(at()) is not an object") }
            for (_, text) in value.members where text.kind != .string {
                throw ContractDecodingError("\(at()) holds a value that is not a string")
            }
        }
    }

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

    package static func slice(_ bytes: Bytes, _ entry: JSONDocument.Entry) -> Bytes {
        Bytes(rebasing: bytes[Int(entry.start)..<Int(entry.end)])
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

    /// Calls `body` with the buffer `text(_:bytes:escaped:)` takes.
    package func withEscaped<Result>(_ body: (Bytes) throws -> Result) rethrows -> Result {
        try escaped.withUnsafeBufferPointer(body)
    }

    /// The bytes of a text field, escapes resolved, or nil when it is absent or null.
    package func text(_ field: Field, bytes: Bytes, escaped: Bytes) -> Bytes? {
        guard let text = texts[field.rawValue] else { return nil }
        return Bytes(rebasing: (text.escaped ? escaped : bytes)[text.range])
    }

    /// A text field as a `String`.
    package func string(_ field: Field, bytes: Bytes) -> String? {
        withEscaped { escaped in text(field, bytes: bytes, escaped: escaped).map { String(decoding: $0, as: UTF8.self) } }
    }

    /// Why the collector cannot store the record, or nil: what its columns hold (a project name, a
    /// time from 1970 to 9999, a type of 1 to 64 bytes) and no NUL in any text, which PostgreSQL
    /// refuses. `project` is the record's (its caller has made it a `String` already).
    package func storageProblem(project: String, bytes: Bytes, entries: Entries) -> String? {
        guard ProjectName.isValid(project) else { return "project '\(UntrustedText.quoted(project))' is not a valid project name" }
        guard (0...StoredTime.latestMillis).contains(time) else { return "time \(time) is not a time from 1970 to 9999 in milliseconds" }
        let typeLength = texts[Field.type.rawValue]!.range.count
        guard typeLength > 0, typeLength <= 64 else { return "type must be 1 to 64 bytes" }
        // Only a string with escapes can hold a NUL.
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
}

extension CollectRecord {
    /// Reads a record of a batch: unknown members are ignored, a required `Field` must be there.
    package init(wire value: JSONRef, path: @autoclosure () -> String) throws(ContractDecodingError) {
        let document = value.document
        self =
            try document.bytes.withUnsafeBufferPointer { (bytes) throws(ContractDecodingError) in
                try document.entries.withUnsafeBufferPointer { (entries) throws(ContractDecodingError) in
                    var reader = CollectRecordReader()
                    try reader.read(document, at: value.index, bytes: bytes, entries: entries, path: path)
                    return CollectRecord(reading: reader, document: document, bytes: bytes, entries: entries)
                }
            }
    }

    /// The record `reader` has read.
    package init(
        reading reader: CollectRecordReader, document: JSONDocument, bytes: CollectRecordReader.Bytes, entries: CollectRecordReader.Entries
    ) {
        self.init(
            project: reader.string(.project, bytes: bytes)!, type: reader.string(.type, bytes: bytes)!, event: nil, time: reader.time,
            distinctId: nil, userId: reader.userId, properties: "")
        for field in Field.all {
            let slot = reader.slots[field.rawValue]
            switch field {
            case .project, .type, .time, .userId: continue
            case .event: event = reader.string(field, bytes: bytes)
            case .distinctId: distinctId = reader.string(field, bytes: bytes)
            case .anonymousId: anonymousId = reader.string(field, bytes: bytes)
            case .loginId: loginId = reader.string(field, bytes: bytes)
            case .lib: lib = reader.string(field, bytes: bytes)
            case .libVersion: libVersion = reader.string(field, bytes: bytes)
            case .appVersion: appVersion = reader.string(field, bytes: bytes)
            case .hybridH5: hybridH5 = reader.hybridH5
            // Taken as sent: the parser checked it, and it is stored as it is (jsonb).
            case .properties: properties = PropertiesText(utf8: Array(CollectRecordReader.slice(bytes, entries[slot])))
            case .itemType: itemType = reader.string(field, bytes: bytes)
            case .itemId: itemId = reader.string(field, bytes: bytes)
            case .libMethod: libMethod = reader.string(field, bytes: bytes)
            case .libDetail: libDetail = reader.string(field, bytes: bytes)
            case .originalId: originalId = reader.string(field, bytes: bytes)
            case .identities:
                // Checked by the reader: an object of strings, or null.
                identities = slot < 0 ? nil : try? WireField.identities(JSONRef(document: document, index: slot), "")
            case .trackId: trackId = reader.trackId
            case .schema: schema = reader.string(field, bytes: bytes)
            }
        }
    }

    /// Why the collector cannot store this record (`CollectRecordReader.storageProblem`, applied to
    /// the record as the gateway writes it), or nil.
    package var storageProblem: String? {
        var text: [UInt8] = []
        write(to: &text, userId: userId)
        guard let root = try? JSONParser.parse(text, maxDepth: CollectBatch.maxDepth).root else { return "the record cannot be written" }
        return text.withUnsafeBufferPointer { bytes in
            root.document.entries.withUnsafeBufferPointer { entries in
                var reader = CollectRecordReader()
                guard (try? reader.read(root.document, at: root.index, bytes: bytes, entries: entries, path: { "" })) != nil else {
                    return "the record cannot be read back"
                }
                return reader.storageProblem(project: project, bytes: bytes, entries: entries)
            }
        }
    }
}

extension CollectRecord {
    /// Every `Field` in order, with `userId` in place of the record's own (the user the gateway
    /// resolved); `properties` is JSON object text and goes as it is.
    package func write(to out: inout [UInt8], userId: Int64?) {
        var object = JSONObjectWriter(&out)
        for field in Field.all {
            func string(_ value: String?) {
                guard let value else { return }
                object.key(field.staticName, &out)
                JSONValue.writeString(utf8: value.utf8, to: &out)
            }
            switch field {
            case .project: string(project)
            case .type: string(type)
            case .event: string(event)
            case .time:
                object.key(field.staticName, &out)
                out.append(contentsOf: String(time).utf8)
            case .distinctId: string(distinctId)
            case .userId:
                guard let userId else { continue }
                object.key(field.staticName, &out)
                out.append(contentsOf: String(userId).utf8)
            case .anonymousId: string(anonymousId)
            case .loginId: string(loginId)
            case .lib: string(lib)
            case .libVersion: string(libVersion)
            case .appVersion: string(appVersion)
            case .hybridH5:
                object.key(field.staticName, &out)
                out.append(contentsOf: (hybridH5 ? "true" : "false").utf8)
            case .properties:
                object.key(field.staticName, &out)
                out.append(contentsOf: properties.utf8)
            case .itemType: string(itemType)
            case .itemId: string(itemId)
            case .libMethod: string(libMethod)
            case .libDetail: string(libDetail)
            case .originalId: string(originalId)
            case .schema: string(schema)
            case .identities:
                guard let identities else { continue }
                // In the dictionary's order: the collector stores the object as it comes, as jsonb,
                // which keeps no key order, so sorting would buy nothing.
                object.key(field.staticName, &out)
                var members = JSONObjectWriter(&out)
                for (name, value) in identities { members.string(dynamic: name, value, &out) }
                members.finish(&out)
            case .trackId:
                guard let trackId else { continue }
                object.key(field.staticName, &out)
                out.append(contentsOf: String(trackId).utf8)
            }
        }
        object.finish(&out)
    }
}
