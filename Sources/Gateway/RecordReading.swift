import DatongContracts
import DatongJSON

/// The top-level fields of a record the normalizer reads, found in one pass over its members.
/// A repeated key keeps its last value, as JavaScript reads it.
///
/// It keeps the document once and each field as a position in its tape, so reading a record and
/// passing its fields along costs no reference counting per field (a `JSONRef` per field did: the
/// profile of the upload path showed retain/release as a third of the normalizer's time).
package struct RecordFields {
    private let document: JSONDocument
    private var at = Positions()

    /// Where each field's value is in the tape; -1 when the record does not have it.
    private struct Positions {
        var type: Int32 = -1, event: Int32 = -1, time: Int32 = -1, distinctID: Int32 = -1, project: Int32 = -1
        var properties: Int32 = -1, identities: Int32 = -1, lib: Int32 = -1, anonymousID: Int32 = -1, loginID: Int32 = -1
        var originalID: Int32 = -1, itemType: Int32 = -1, itemID: Int32 = -1, hybrid: Int32 = -1, serverURL: Int32 = -1
        var token: Int32 = -1, timeFree: Int32 = -1, trackID: Int32 = -1, version: Int32 = -1, schema: Int32 = -1, entityID: Int32 = -1
    }

    var type: JSONRef? { ref(at.type) }
    var event: JSONRef? { ref(at.event) }
    var time: JSONRef? { ref(at.time) }
    var distinctID: JSONRef? { ref(at.distinctID) }
    var project: JSONRef? { ref(at.project) }
    var properties: JSONRef? { ref(at.properties) }
    var identities: JSONRef? { ref(at.identities) }
    var lib: JSONRef? { ref(at.lib) }
    var anonymousID: JSONRef? { ref(at.anonymousID) }
    var loginID: JSONRef? { ref(at.loginID) }
    var originalID: JSONRef? { ref(at.originalID) }
    var itemType: JSONRef? { ref(at.itemType) }
    var itemID: JSONRef? { ref(at.itemID) }
    var hybrid: JSONRef? { ref(at.hybrid) }
    /// Where the page's SDK meant to send a bridged record.
    var serverURL: JSONRef? { ref(at.serverURL) }
    /// The record's own ingestion token (with its own `project`).
    var token: JSONRef? { ref(at.token) }
    /// `time_free: true`: an import of history, exempt from the time window.
    var timeFree: JSONRef? { ref(at.timeFree) }
    /// `_track_id`: the number the SDK gave the record when it made it (a retry resends it).
    var trackID: JSONRef? { ref(at.trackID) }
    /// `version`: `"2.0"` marks a record of the multi-entity protocol (the Java SDK's SensorsSchemaData).
    var version: JSONRef? { ref(at.version) }
    /// The multi-entity record's schema: `events`, `users`, or an item or detail schema.
    var schema: JSONRef? { ref(at.schema) }
    /// A multi-entity item's or detail's `id`.
    var entityID: JSONRef? { ref(at.entityID) }

    private func ref(_ position: Int32) -> JSONRef? {
        position < 0 ? nil : JSONRef(document: document, index: Int(position))
    }

    init(_ record: JSONRef) {
        document = record.document
        var found = Positions()
        let document = self.document
        document.entries.withUnsafeBufferPointer { entries in
            let parent = entries[record.index]
            guard parent.kind == .object else { return }
            document.bytes.withUnsafeBufferPointer { bytes in
                var position = record.index + 1
                for _ in 0..<Int(parent.count) {
                    let key = entries[position]
                    if key.kind == .string {
                        let text = UnsafeBufferPointer(rebasing: bytes[Int(key.start)..<Int(key.end)])
                        if key.flag {
                            JSONParser.unescape(text).withUnsafeBufferPointer { Self.note($0, at: Int32(position + 1), in: &found) }
                        } else {
                            Self.note(text, at: Int32(position + 1), in: &found)
                        }
                    }
                    position = Int(entries[position + 1].next)
                }
            }
        }
        at = found
    }

    /// Remembers `value` when `name` is a field the normalizer reads.
    private static func note(_ name: UnsafeBufferPointer<UInt8>, at value: Int32, in found: inout Positions) {
        func named(_ field: StaticString) -> Bool {
            name.count == field.utf8CodeUnitCount && name.elementsEqual(UnsafeBufferPointer(start: field.utf8Start, count: field.utf8CodeUnitCount))
        }
        if named("type") {
            found.type = value
        } else if named("event") {
            found.event = value
        } else if named("time") {
            found.time = value
        } else if named("distinct_id") {
            found.distinctID = value
        } else if named("properties") {
            found.properties = value
        } else if named("lib") {
            found.lib = value
        } else if named("identities") {
            found.identities = value
        } else if named("project") {
            found.project = value
        } else if named("anonymous_id") {
            found.anonymousID = value
        } else if named("login_id") {
            found.loginID = value
        } else if named("original_id") {
            found.originalID = value
        } else if named("item_type") {
            found.itemType = value
        } else if named("item_id") {
            found.itemID = value
        } else if named("_hybrid_h5") {
            found.hybrid = value
        } else if named("server_url") {
            found.serverURL = value
        } else if named("token") {
            found.token = value
        } else if named("time_free") {
            found.timeFree = value
        } else if named("_track_id") {
            found.trackID = value
        } else if named("version") {
            found.version = value
        } else if named("schema") {
            found.schema = value
        } else if named("id") {
            found.entityID = value
        }
    }
}

/// A record's properties read in one pass: every name and value checked, the few the normalizer
/// needs remembered, and the rest kept as positions in the upload, to be written as the stored
/// text (keys sorted, so equal properties give equal text) straight from the upload's bytes.
///
/// A key is always read after unescaping: `"\u0024time"` is `"$time"` (the same JSON string), so it
/// sets the time, sorts and is stored as `$time` does; nothing depends on how the JSON was written.
struct PropertiesReading {
    private let document: JSONDocument?
    /// Key entries of the properties to store, in the order sent.
    private var keys: [Int32] = []
    /// The names of keys sent with an escape, unescaped, one after another (no SDK writes one).
    private var unescapedNames: [UInt8] = []
    /// Where in `unescapedNames` each escaped key's name is, by its key entry.
    private var unescapedRanges: [Int32: Range<Int>] = [:]
    /// `$time`: when the record happened, if it differs from `time`; never stored as a property.
    private(set) var time: JSONRef?
    private(set) var lib: JSONRef?
    private(set) var libVersion: JSONRef?
    private(set) var appVersion: JSONRef?
    private(set) var isLoginID: JSONRef?
    /// A multi-entity record's user, which it carries among its properties; never stored there.
    private(set) var identities: JSONRef?
    private(set) var distinctID: JSONRef?
    /// A Sensors user number (`user_id`) naming the record's user instead of identities.
    private(set) var sensorsUserID: JSONRef?
    /// `$ip` and `$url`, stored as sent; read for enrichment (`RequestEnrichment`).
    private(set) var ip: JSONRef?
    private(set) var url: JSONRef?

    private init(document: JSONDocument?) { self.document = document }

    /// Reads `properties` (an object, or nil when the record has none). A bridged record also
    /// loses `project` and `token`, as the app SDK removes them; a multi-entity record its user's
    /// `identities`, `distinct_id` and `user_id`, which it carries there.
    static func read(
        _ properties: JSONRef?, bridged: Bool, multiEntity: Bool = false, type: String = "track", normalizer: RecordNormalizer
    ) -> Result<PropertiesReading, RecordRefusal> {
        guard let properties else { return .success(PropertiesReading(document: nil)) }
        let document = properties.document
        var reading = PropertiesReading(document: document)
        reading.keys.reserveCapacity(Int(properties.entry.count))
        var problem: RecordRefusal?
        let operand = Operand(type)
        document.bytes.withUnsafeBufferPointer { bytes in
            document.entries.withUnsafeBufferPointer { entries in
                var position = properties.index + 1
                for _ in 0..<Int(entries[properties.index].count) {
                    let key = position
                    let entry = entries[key]
                    position = Int(entries[key + 1].next)
                    let raw = UnsafeBufferPointer(rebasing: bytes[Int(entry.start)..<Int(entry.end)])
                    let outcome: Result<Bool, RecordRefusal>
                    if entry.flag {
                        let name = JSONParser.unescape(raw)
                        outcome = name.withUnsafeBufferPointer {
                            reading.take(key, named: $0, bridged: bridged, multiEntity: multiEntity, normalizer: normalizer, bytes: bytes, entries: entries)
                        }
                        if case .success(true) = outcome {
                            reading.unescapedRanges[Int32(key)] = reading.unescapedNames.count..<(reading.unescapedNames.count + name.count)
                            reading.unescapedNames += name
                        }
                    } else {
                        outcome = reading.take(
                            key, named: raw, bridged: bridged, multiEntity: multiEntity, normalizer: normalizer, bytes: bytes, entries: entries)
                    }
                    switch outcome {
                    case .success(let stored):
                        guard stored else { continue }
                        if operand != .any, let invalid = Self.operandProblem(operand, at: key, document: document) {
                            problem = invalid
                            return
                        }
                        reading.keys.append(Int32(key))
                    case .failure(let invalid):
                        problem = invalid
                        return
                    }
                }
            }
        }
        if let problem { return .failure(problem) }
        return .success(reading)
    }

    /// Checks the property at `key` (its name unescaped: `name`) and remembers it when the
    /// normalizer reads it; true when it is stored among the properties.
    private mutating func take(
        _ key: Int, named name: UnsafeBufferPointer<UInt8>, bridged: Bool, multiEntity: Bool, normalizer: RecordNormalizer,
        bytes: UnsafeBufferPointer<UInt8>, entries: UnsafeBufferPointer<JSONDocument.Entry>
    ) -> Result<Bool, RecordRefusal> {
        // Made only for a property the normalizer keeps: a JSONRef retains the document.
        func value() -> JSONRef { JSONRef(document: document!, index: key + 1) }
        if multiEntity {
            if Self.equals(name, "identities") {
                identities = value()
                return .success(false)
            } else if Self.equals(name, "distinct_id") {
                distinctID = value()
                return .success(false)
            } else if Self.equals(name, "user_id") {
                sensorsUserID = value()
                return .success(false)
            }
        }
        if let reason = RecordNormalizer.nameProblem(utf8: name) {
            return .failure(.init("property '\(UntrustedText.quoted(String(decoding: name, as: UTF8.self)))': \(reason)"))
        }
        if let reason = normalizer.valueProblem(at: key + 1, bytes: bytes, entries: entries) {
            return .failure(.init("property '\(UntrustedText.quoted(String(decoding: name, as: UTF8.self)))': \(reason)"))
        }
        guard let first = name.first else { return .success(true) }
        if first == UInt8(ascii: "$") {
            if Self.equals(name, "$time") {
                time = value()
                return .success(false)
            }
            if Self.equals(name, "$lib") {
                lib = value()
            } else if Self.equals(name, "$lib_version") {
                libVersion = value()
            } else if Self.equals(name, "$app_version") {
                appVersion = value()
            } else if Self.equals(name, "$ip") {
                ip = value()
            } else if Self.equals(name, "$url") {
                url = value()
            } else if Self.equals(name, "$is_login_id") {
                // A flag on the record (its distinct_id is a login id), not data: the
                // server SDKs add it when told isLoginId (sa-sdk-go track.go TrackEvent,
                // `properties["$is_login_id"] = true`). Read here, never stored, on
                // events or profiles (the event's login_id column says the same).
                isLoginID = value()
                return .success(false)
            }
        } else if bridged, Self.equals(name, "project") || Self.equals(name, "token") {
            return .success(false)
        }
        return .success(true)
    }

    /// What a record's type asks of each property's value.
    private enum Operand {
        case any
        /// `profile_increment`: a number, within a double.
        case number
        /// `profile_append`: a list of strings.
        case stringList

        init(_ type: String) {
            self = type == "profile_increment" ? .number : type == "profile_append" ? .stringList : .any
        }
    }

    /// Why a stored property cannot be the operand of a `profile_increment` or a `profile_append`,
    /// as Sensors applies them; nil otherwise. What the operation meets in the profile is the
    /// collector's to judge (`profile_problem`).
    private static func operandProblem(_ operand: Operand, at key: Int, document: JSONDocument) -> RecordRefusal? {
        let value = JSONRef(document: document, index: key + 1)
        let name = UntrustedText.quoted(JSONRef(document: document, index: key).stringValue ?? "")
        if operand == .number {
            guard value.isNumber, value.doubleValue?.isFinite == true else {
                return .init("profile_increment of '\(name)': \(value.rawText.prefix(40)) is not a number (Sensors adds numbers only)")
            }
        } else if value.kind != .array || value.elements.contains(where: { $0.kind != .string }) {
            return .init("profile_append to '\(name)': the value must be a list of strings (Sensors appends to lists only)")
        }
        return nil
    }

    private static func equals(_ name: UnsafeBufferPointer<UInt8>, _ literal: StaticString) -> Bool {
        name.count == literal.utf8CodeUnitCount
            && compare(name, UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount)) == 0
    }

    /// The properties to store as JSON object text: keys sorted by their (unescaped) bytes, a
    /// repeated key keeping its last value, date-times given three millisecond digits, and each of
    /// `presets` (sorted by key) in place of the property of its name. Values are copied as sent:
    /// a number keeps every digit.
    func canonicalText(replacing presets: [PropertyPreset] = [], dateTimes: RecordNormalizer.DateTimeStyle = .milliseconds) -> PropertiesText {
        var out: [UInt8] = []
        // The presets too: outgrowing the estimate would copy the whole text once more.
        out.reserveCapacity(estimatedSize + presets.reduce(0) { $0 + $1.size + 1 })
        out.append(UInt8(ascii: "{"))
        let bytes = document?.bytes ?? []
        let entries = document?.entries ?? []
        // Local copies: the sort's comparator reads them, and must not reach through `self`.
        let ranges = unescapedRanges
        let anyEscaped = !ranges.isEmpty
        unescapedNames.withUnsafeBufferPointer { unescaped in
            bytes.withUnsafeBufferPointer { bytes in
                entries.withUnsafeBufferPointer { entries in
                    func rawName(_ key: Int32) -> UnsafeBufferPointer<UInt8> {
                        let entry = entries[Int(key)]
                        return UnsafeBufferPointer(rebasing: bytes[Int(entry.start)..<Int(entry.end)])
                    }
                    func name(_ key: Int32) -> UnsafeBufferPointer<UInt8> {
                        if anyEscaped, entries[Int(key)].flag, let range = ranges[key] { return UnsafeBufferPointer(rebasing: unescaped[range]) }
                        return rawName(key)
                    }
                    // The sort compares names ~n log n times: without escaped keys, straight from the upload.
                    let sorted =
                        anyEscaped
                        ? keys.sorted { a, b in
                            let order = Self.compare(name(a), name(b))
                            return order != 0 ? order < 0 : a < b
                        }
                        : keys.sorted { a, b in
                            let order = Self.compare(rawName(a), rawName(b))
                            return order != 0 ? order < 0 : a < b
                        }
                    var presetIndex = 0
                    // `out` and `presetIndex` go in as arguments: captured, every append would pay a
                    // dynamic exclusivity check.
                    // Writes the presets that sort before `key` (all that are left for nil), and
                    // answers whether the next one is `key` itself.
                    func writePresets(before key: UnsafeBufferPointer<UInt8>?, _ presetIndex: inout Int, _ out: inout [UInt8]) -> Bool {
                        while presetIndex < presets.count {
                            if let key {
                                let order = presets[presetIndex].key.withUnsafeBufferPointer { Self.compare($0, key) }
                                if order >= 0 { return order == 0 }
                            }
                            if presets[presetIndex].value != nil {
                                if out.count > 1 { out.append(UInt8(ascii: ",")) }
                                presets[presetIndex].write(to: &out)
                            }
                            presetIndex += 1
                        }
                        return false
                    }
                    for (position, key) in sorted.enumerated() {
                        let keyName = name(key)
                        // Of a repeated key only the last one sent (the last of its run) is stored.
                        if position + 1 < sorted.count, Self.compare(keyName, name(sorted[position + 1])) == 0 { continue }
                        if writePresets(before: keyName, &presetIndex, &out) {
                            // The app's value, unless the page's own is kept (`$lib`, `$lib_version`, `$app_version`).
                            if !presets[presetIndex].pageWins { continue }
                            presetIndex += 1
                        }
                        if out.count > 1 { out.append(UInt8(ascii: ",")) }
                        let entry = entries[Int(key)]
                        if entry.flag {
                            JSONValue.writeString(utf8: keyName, to: &out)
                        } else {
                            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[Int(entry.start - 1)...Int(entry.end)]))
                        }
                        out.append(UInt8(ascii: ":"))
                        Self.writeValue(at: Int(key) + 1, bytes: bytes, entries: entries, dateTimes: dateTimes, to: &out)
                    }
                    _ = writePresets(before: nil, &presetIndex, &out)
                }
            }
        }
        out.append(UInt8(ascii: "}"))
        // Well-formed UTF-8: the parser checked every string of the upload, and escapes are
        // resolved to well-formed text.
        return PropertiesText(utf8: out)
    }

    /// The stored text is about as long as the properties sent.
    private var estimatedSize: Int {
        guard let document, let first = keys.first, let last = keys.last else { return 16 }
        let end = document.entries[Int(last) + 1].end
        return max(16, Int(end - document.entries[Int(first)].start) + 64)
    }

    private static func compare(_ left: UnsafeBufferPointer<UInt8>, _ right: UnsafeBufferPointer<UInt8>) -> Int {
        for index in 0..<min(left.count, right.count) where left[index] != right[index] {
            return left[index] < right[index] ? -1 : 1
        }
        return left.count == right.count ? 0 : (left.count < right.count ? -1 : 1)
    }

    /// A property value as stored: copied as sent unless it holds an escape to normalize or a
    /// date-time to pad.
    private static func writeValue(
        at index: Int, bytes: UnsafeBufferPointer<UInt8>, entries: UnsafeBufferPointer<JSONDocument.Entry>,
        dateTimes: RecordNormalizer.DateTimeStyle, to out: inout [UInt8]
    ) {
        let entry = entries[index]
        switch entry.kind {
        case .string:
            let text = UnsafeBufferPointer(rebasing: bytes[Int(entry.start)..<Int(entry.end)])
            if entry.flag {
                let decoded = JSONParser.unescape(text)
                JSONValue.writeString(utf8: RecordNormalizer.normalizedDateTime(decoded, style: dateTimes) ?? decoded, to: &out)
            } else if let padded = RecordNormalizer.normalizedDateTime(text, style: dateTimes) {
                JSONValue.writeString(utf8: padded, to: &out)
            } else {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[Int(entry.start - 1)...Int(entry.end)]))
            }
        case .array:
            out.append(UInt8(ascii: "["))
            var position = index + 1
            for element in 0..<Int(entry.count) {
                if element > 0 { out.append(UInt8(ascii: ",")) }
                let item = entries[position]
                if item.kind == .string, item.flag {
                    JSONValue.writeString(utf8: JSONParser.unescape(UnsafeBufferPointer(rebasing: bytes[Int(item.start)..<Int(item.end)])), to: &out)
                } else {
                    let start = item.kind == .string ? item.start - 1 : item.start
                    let end = item.kind == .string ? item.end + 1 : item.end
                    out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[Int(start)..<Int(end)]))
                }
                position = Int(item.next)
            }
            out.append(UInt8(ascii: "]"))
        case .object:
            if let date = RecordNormalizer.phpDateTime(at: index, bytes: bytes, entries: entries) {
                JSONValue.writeString(utf8: date, to: &out)
            } else {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[Int(entry.start)..<Int(entry.end)]))
            }
        case .null, .bool, .number:
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[Int(entry.start)..<Int(entry.end)]))
        }
    }
}

/// A property an app puts on every bridged event (`$os`, `$model`, `$carrier`, its super
/// properties, …): in place of the page's, unless the page's own is kept (`pageWins`).
struct PropertyPreset: Sendable, Equatable {
    let key: [UInt8]
    /// nil removes the record's property of this name (`$ip` when a project stores none).
    let value: JSONValue?
    /// The record's value stays when it has one: what a page's own SDK says of itself, or what a
    /// record says that the server would only guess (`RequestEnrichment`).
    let pageWins: Bool
    /// `"key":value` as stored, written once: a preset goes on every record of its upload or relay.
    private let rendered: [UInt8]

    init(key: String, value: JSONValue?, pageWins: Bool = false) {
        self.init(key: Array(key.utf8), value: value, pageWins: pageWins)
    }

    init(key: [UInt8], value: JSONValue?, pageWins: Bool = false) {
        self.key = key
        self.value = value
        self.pageWins = pageWins
        var rendered: [UInt8] = []
        if let value {
            JSONValue.writeString(utf8: key, to: &rendered)
            rendered.append(UInt8(ascii: ":"))
            value.write(to: &rendered)
        }
        self.rendered = rendered
    }

    func write(to out: inout [UInt8]) {
        out.append(contentsOf: rendered)
    }

    /// The bytes `write` adds.
    var size: Int { rendered.count }

    /// Two lists sorted by key as one: on a key in both, the one that replaces the record's value
    /// wins, else the first list's (the app's presets over the server's guesses).
    static func merge(_ first: [PropertyPreset], _ second: [PropertyPreset]) -> [PropertyPreset] {
        if second.isEmpty { return first }
        if first.isEmpty { return second }
        var merged: [PropertyPreset] = []
        merged.reserveCapacity(first.count + second.count)
        var (i, j) = (0, 0)
        while i < first.count || j < second.count {
            guard i < first.count else {
                merged.append(second[j])
                j += 1
                continue
            }
            guard j < second.count else {
                merged.append(first[i])
                i += 1
                continue
            }
            if first[i].key.lexicographicallyPrecedes(second[j].key) {
                merged.append(first[i])
                i += 1
            } else if second[j].key.lexicographicallyPrecedes(first[i].key) {
                merged.append(second[j])
                j += 1
            } else {
                merged.append(first[i].pageWins && !second[j].pageWins ? second[j] : first[i])
                i += 1
                j += 1
            }
        }
        return merged
    }
}

/// What an app SDK puts in place of a bridged record's own fields (docs/PROTOCOL.md section 3). The
/// normalizer applies it while it reads the record, so the page's record is never copied or rebuilt.
package struct BridgeOverrides: Sendable, Equatable {
    /// The app's user, for records that belong to a user (not items).
    struct User: Sendable, Equatable {
        var distinctID: String
        /// nil for a relayed `$UnbindID`, which carries no anonymous id.
        var anonymousID: String?
        var loginID: String?
        /// For a `$SignUp`, the app's anonymous id; nil leaves the record's own `original_id`.
        var originalID: String?
        var identities: [String: String]
    }

    var user: User?
    /// `lib.$app_version`: the app's version, when the app sent one.
    var appVersion: String?
    /// The app's device presets, sorted by key; they replace the page's on events.
    var presets: [PropertyPreset]
}
