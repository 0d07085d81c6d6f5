/// A contract type with a hand-written JSON form for the hot paths between services: the same
/// document `JSONEncoder` writes and `JSONDecoder` reads (camelCase keys, absent optionals left
/// out), at a fraction of the cost per field. The Codable conformance stays the reference.
package protocol JSONBytesCodable {
    /// The value as JSON text.
    var jsonBytes: [UInt8] { get }
    /// Reads the value from JSON text; a problem names the field.
    init(jsonBytes: [UInt8]) throws(ContractDecodingError)
}

/// Why a request body is not the contract's document: which field, and what is wrong with it.
package struct ContractDecodingError: Error, Sendable, Equatable {
    package let message: String

    package init(_ message: String) { self.message = message }
}

extension CollectBatch: JSONBytesCodable {
    /// How deep a batch may nest: the batch, its records array and a record, then the properties
    /// as deep as the gateway's `MAX_JSON_DEPTH` allows at most.
    static let maxDepth = 3 + 512

    package var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64 + records.reduce(0) { $0 + $1.properties.utf8.count + 400 })
        var batch = JSONObjectWriter(&out)
        batch.int("receivedAt", receivedAt, &out)
        batch.array("records", records, &out) { $0.write(to: &$1) }
        batch.array("rejected", rejected, &out) { $0.write(to: &$1) }
        batch.finish(&out)
        return out
    }

    package init(jsonBytes: [UInt8]) throws(ContractDecodingError) {
        let root = try Field.object(jsonBytes, maxDepth: Self.maxDepth, "the batch")
        var receivedAt: Int64?
        var records: [CollectRecord] = []
        var rejected: [RejectedRecord] = []
        for (key, value) in root.members {
            if key.textEquals("receivedAt") {
                receivedAt = try Field.int(value, "receivedAt")
            } else if key.textEquals("records") {
                guard value.kind == .array else { throw ContractDecodingError("records is not an array") }
                records.reserveCapacity(Int(value.entry.count))
                for (index, element) in value.elements.enumerated() { records.append(try CollectRecord(element, path: "records[\(index)]")) }
            } else if key.textEquals("rejected") {
                guard value.kind == .array else { throw ContractDecodingError("rejected is not an array") }
                for (index, element) in value.elements.enumerated() { rejected.append(try RejectedRecord(element, path: "rejected[\(index)]")) }
            }
        }
        guard let receivedAt else { throw ContractDecodingError("receivedAt is missing") }
        self.init(receivedAt: receivedAt, records: records, rejected: rejected)
    }
}

extension CollectRecord {
    /// The record as it travels in a batch, as JSON text (kept with a refused record).
    package var jsonText: String {
        var out: [UInt8] = []
        write(to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    fileprivate func write(to out: inout [UInt8]) {
        var record = JSONObjectWriter(&out)
        record.string("project", project, &out)
        record.string("type", type, &out)
        record.string("event", event, &out)
        record.int("time", time, &out)
        record.string("distinctId", distinctId, &out)
        record.int("userId", userId, &out)
        record.string("anonymousId", anonymousId, &out)
        record.string("loginId", loginId, &out)
        record.string("lib", lib, &out)
        record.string("libVersion", libVersion, &out)
        record.string("appVersion", appVersion, &out)
        record.bool("hybridH5", hybridH5, &out)
        record.raw("properties", properties, &out)
        record.string("itemType", itemType, &out)
        record.string("itemId", itemId, &out)
        record.string("libMethod", libMethod, &out)
        record.string("libDetail", libDetail, &out)
        record.string("originalId", originalId, &out)
        record.identities(identities, &out)
        record.finish(&out)
    }

    fileprivate init(_ value: JSONRef, path: String) throws(ContractDecodingError) {
        guard value.isObject else { throw ContractDecodingError("\(path) is not an object") }
        var project: String?, type: String?, event: String?, time: Int64?, distinctId: String?, userId: Int64?
        var anonymousId: String?, loginId: String?, lib: String?, libVersion: String?, appVersion: String?
        var hybridH5: Bool?, properties: String?, itemType: String?, itemId: String?
        var libMethod: String?, libDetail: String?, originalId: String?, identities: [String: String]?
        for (key, field) in value.members {
            if key.textEquals("project") { project = try Field.string(field, path, "project") }
            else if key.textEquals("type") { type = try Field.string(field, path, "type") }
            else if key.textEquals("event") { event = try Field.string(field, path, "event") }
            else if key.textEquals("time") { time = try Field.int(field, "\(path).time") }
            else if key.textEquals("distinctId") { distinctId = try Field.string(field, path, "distinctId") }
            else if key.textEquals("userId") { userId = field.kind == .null ? nil : try Field.int(field, "\(path).userId") }
            else if key.textEquals("anonymousId") { anonymousId = try Field.string(field, path, "anonymousId") }
            else if key.textEquals("loginId") { loginId = try Field.string(field, path, "loginId") }
            else if key.textEquals("lib") { lib = try Field.string(field, path, "lib") }
            else if key.textEquals("libVersion") { libVersion = try Field.string(field, path, "libVersion") }
            else if key.textEquals("appVersion") { appVersion = try Field.string(field, path, "appVersion") }
            else if key.textEquals("hybridH5") {
                guard field.kind == .bool else { throw ContractDecodingError("\(path).hybridH5 is not a boolean") }
                hybridH5 = field.isTrue
            }
            else if key.textEquals("properties") {
                // Taken as sent: the parser checked it, and it is stored as it is (jsonb). Gateways
                // before 2026-11 sent the object's text as a string; it is still read.
                if field.kind == .string, let text = field.stringValue, (try? JSONParser.parse(Array(text.utf8), maxDepth: CollectBatch.maxDepth))?.root.isObject == true {
                    properties = text
                } else {
                    guard field.isObject else { throw ContractDecodingError("\(path).properties is not an object") }
                    properties = field.rawText
                }
            }
            else if key.textEquals("itemType") { itemType = try Field.string(field, path, "itemType") }
            else if key.textEquals("itemId") { itemId = try Field.string(field, path, "itemId") }
            else if key.textEquals("libMethod") { libMethod = try Field.string(field, path, "libMethod") }
            else if key.textEquals("libDetail") { libDetail = try Field.string(field, path, "libDetail") }
            else if key.textEquals("originalId") { originalId = try Field.string(field, path, "originalId") }
            else if key.textEquals("identities") { identities = try Field.identities(field, path) }
        }
        guard let project else { throw ContractDecodingError("\(path).project is missing") }
        guard let type else { throw ContractDecodingError("\(path).type is missing") }
        guard let time else { throw ContractDecodingError("\(path).time is missing") }
        guard let hybridH5 else { throw ContractDecodingError("\(path).hybridH5 is missing") }
        guard let properties else { throw ContractDecodingError("\(path).properties is missing") }
        self.init(
            project: project, type: type, event: event, time: time, distinctId: distinctId, userId: userId,
            anonymousId: anonymousId, loginId: loginId, lib: lib, libVersion: libVersion, appVersion: appVersion,
            hybridH5: hybridH5, properties: properties, itemType: itemType, itemId: itemId,
            libMethod: libMethod, libDetail: libDetail, originalId: originalId, identities: identities
        )
    }
}

extension RejectedRecord {
    fileprivate func write(to out: inout [UInt8]) {
        var record = JSONObjectWriter(&out)
        record.string("project", project, &out)
        record.string("reason", reason, &out)
        record.string("raw", raw, &out)
        record.finish(&out)
    }

    fileprivate init(_ value: JSONRef, path: String) throws(ContractDecodingError) {
        guard value.isObject else { throw ContractDecodingError("\(path) is not an object") }
        var project: String?, reason: String?, raw: String?
        for (key, field) in value.members {
            if key.textEquals("project") { project = try Field.string(field, path, "project") }
            else if key.textEquals("reason") { reason = try Field.string(field, path, "reason") }
            else if key.textEquals("raw") { raw = try Field.string(field, path, "raw") }
        }
        guard let project, let reason, let raw else { throw ContractDecodingError("\(path) needs project, reason and raw") }
        self.init(project: project, reason: reason, raw: raw)
    }
}

extension ResolveRequest: JSONBytesCodable {
    package var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(16 + records.count * 256)
        var request = JSONObjectWriter(&out)
        request.array("records", records, &out) { $0.write(to: &$1) }
        request.finish(&out)
        return out
    }

    package init(jsonBytes: [UInt8]) throws(ContractDecodingError) {
        let root = try Field.object(jsonBytes, maxDepth: 8, "the resolve request")
        var records: [IdentityRecord]?
        for (key, value) in root.members where key.textEquals("records") {
            guard value.kind == .array else { throw ContractDecodingError("records is not an array") }
            var list: [IdentityRecord] = []
            list.reserveCapacity(Int(value.entry.count))
            for (index, element) in value.elements.enumerated() { list.append(try IdentityRecord(element, path: "records[\(index)]")) }
            records = list
        }
        guard let records else { throw ContractDecodingError("records is missing") }
        self.init(records: records)
    }
}

extension IdentityRecord {
    fileprivate func write(to out: inout [UInt8]) {
        var record = JSONObjectWriter(&out)
        record.string("project", project, &out)
        record.string("type", type, &out)
        record.string("distinctId", distinctId, &out)
        record.string("originalId", originalId, &out)
        record.identities(identities, &out)
        record.bool("isLoginId", isLoginId, &out)
        record.string("lib", lib, &out)
        record.finish(&out)
    }

    fileprivate init(_ value: JSONRef, path: String) throws(ContractDecodingError) {
        guard value.isObject else { throw ContractDecodingError("\(path) is not an object") }
        var project: String?, type: String?, distinctId: String?, originalId: String?, lib: String?
        var identities: [String: String]?, isLoginId = false
        for (key, field) in value.members {
            if key.textEquals("project") { project = try Field.string(field, path, "project") }
            else if key.textEquals("type") { type = try Field.string(field, path, "type") }
            else if key.textEquals("distinctId") { distinctId = try Field.string(field, path, "distinctId") }
            else if key.textEquals("originalId") { originalId = try Field.string(field, path, "originalId") }
            else if key.textEquals("lib") { lib = try Field.string(field, path, "lib") }
            else if key.textEquals("isLoginId") {
                guard field.kind == .bool else { throw ContractDecodingError("\(path).isLoginId is not a boolean") }
                isLoginId = field.isTrue
            } else if key.textEquals("identities") {
                identities = try Field.identities(field, path)
            }
        }
        guard let project else { throw ContractDecodingError("\(path).project is missing") }
        guard let type else { throw ContractDecodingError("\(path).type is missing") }
        guard let distinctId else { throw ContractDecodingError("\(path).distinctId is missing") }
        self.init(
            project: project, type: type, distinctId: distinctId, originalId: originalId,
            identities: identities, isLoginId: isLoginId, lib: lib
        )
    }
}

extension ResolveResponse: JSONBytesCodable {
    package var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(16 + users.count * 40)
        var response = JSONObjectWriter(&out)
        response.array("users", users, &out) { user, out in
            var object = JSONObjectWriter(&out)
            object.int("userId", user.userId, &out)
            object.bool("created", user.created, &out)
            object.finish(&out)
        }
        response.finish(&out)
        return out
    }

    package init(jsonBytes: [UInt8]) throws(ContractDecodingError) {
        let root = try Field.object(jsonBytes, maxDepth: 4, "the resolve answer")
        var users: [ResolvedUser]?
        for (key, value) in root.members where key.textEquals("users") {
            guard value.kind == .array else { throw ContractDecodingError("users is not an array") }
            var list: [ResolvedUser] = []
            list.reserveCapacity(Int(value.entry.count))
            for (index, element) in value.elements.enumerated() {
                guard element.isObject else { throw ContractDecodingError("users[\(index)] is not an object") }
                var userId: Int64?, created: Bool?
                for (name, field) in element.members {
                    if name.textEquals("userId") { userId = field.kind == .null ? nil : try Field.int(field, "users[\(index)].userId") }
                    else if name.textEquals("created") {
                        guard field.kind == .bool else { throw ContractDecodingError("users[\(index)].created is not a boolean") }
                        created = field.isTrue
                    }
                }
                guard let created else { throw ContractDecodingError("users[\(index)].created is missing") }
                list.append(ResolvedUser(userId: userId, created: created))
            }
            users = list
        }
        guard let users else { throw ContractDecodingError("users is missing") }
        self.init(users: users)
    }
}

/// Reading one field; `null` is an absent optional.
private enum Field {
    /// The document's root, which must be an object; `what` names the document in problems.
    static func object(_ bytes: [UInt8], maxDepth: Int, _ what: String) throws(ContractDecodingError) -> JSONRef {
        let root: JSONRef
        do {
            root = try JSONParser.parse(bytes, maxDepth: maxDepth).root
        } catch {
            throw ContractDecodingError("\(what) is \(error.message)")
        }
        guard root.isObject else { throw ContractDecodingError("\(what) is not a JSON object") }
        return root
    }

    static func string(_ value: JSONRef, _ path: String, _ name: String) throws(ContractDecodingError) -> String? {
        switch value.kind {
        case .null: return nil
        case .string: return value.stringValue
        default: throw ContractDecodingError("\(path).\(name) is not a string")
        }
    }

    /// An `identities` object of string values; nil for null.
    static func identities(_ value: JSONRef, _ path: String) throws(ContractDecodingError) -> [String: String]? {
        if value.kind == .null { return nil }
        guard value.isObject else { throw ContractDecodingError("\(path).identities is not an object") }
        var found: [String: String] = [:]
        for (name, text) in value.members {
            guard let name = name.stringValue, let text = try Field.string(text, path, "identities") else {
                throw ContractDecodingError("\(path).identities holds a value that is not a string")
            }
            found[name] = text
        }
        return found
    }

    static func int(_ value: JSONRef, _ path: String) throws(ContractDecodingError) -> Int64 {
        guard let int = value.int64Value else { throw ContractDecodingError("\(path) is not an integer") }
        return int
    }
}

/// Writes one JSON object member by member into a caller's buffer; absent optionals are left
/// out, as `JSONEncoder` does.
private struct JSONObjectWriter {
    private var empty = true

    init(_ out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
    }

    private mutating func key(_ name: StaticString, _ out: inout [UInt8]) {
        if !empty { out.append(UInt8(ascii: ",")) }
        empty = false
        out.append(UInt8(ascii: "\""))
        out.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        out.append(contentsOf: "\":".utf8)
    }

    /// A member whose name is not known at compile time.
    mutating func string(dynamic name: String, _ value: String, _ out: inout [UInt8]) {
        if !empty { out.append(UInt8(ascii: ",")) }
        empty = false
        JSONValue.writeString(utf8: name.utf8, to: &out)
        out.append(UInt8(ascii: ":"))
        JSONValue.writeString(utf8: value.utf8, to: &out)
    }

    mutating func object(_ name: StaticString, _ out: inout [UInt8], _ write: (inout [UInt8]) -> Void) {
        key(name, &out)
        write(&out)
    }

    mutating func string(_ name: StaticString, _ value: String?, _ out: inout [UInt8]) {
        guard let value else { return }
        key(name, &out)
        JSONValue.writeString(utf8: value.utf8, to: &out)
    }

    /// A member whose value is JSON text, written as it is.
    mutating func raw(_ name: StaticString, _ json: String, _ out: inout [UInt8]) {
        key(name, &out)
        out.append(contentsOf: json.utf8)
    }

    /// An `identities` member (keys sorted), left out when nil.
    mutating func identities(_ identities: [String: String]?, _ out: inout [UInt8]) {
        guard let identities else { return }
        object("identities", &out) { out in
            var object = JSONObjectWriter(&out)
            for (key, value) in identities.sorted(by: { $0.key < $1.key }) { object.string(dynamic: key, value, &out) }
            object.finish(&out)
        }
    }

    mutating func int(_ name: StaticString, _ value: Int64?, _ out: inout [UInt8]) {
        guard let value else { return }
        key(name, &out)
        out.append(contentsOf: String(value).utf8)
    }

    mutating func bool(_ name: StaticString, _ value: Bool, _ out: inout [UInt8]) {
        key(name, &out)
        out.append(contentsOf: (value ? "true" : "false").utf8)
    }

    mutating func array<Element>(_ name: StaticString, _ values: [Element], _ out: inout [UInt8], _ write: (Element, inout [UInt8]) -> Void) {
        key(name, &out)
        out.append(UInt8(ascii: "["))
        for (index, value) in values.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            write(value, &out)
        }
        out.append(UInt8(ascii: "]"))
    }

    func finish(_ out: inout [UInt8]) {
        out.append(UInt8(ascii: "}"))
    }
}
