import DatongContracts

/// A record that passed validation: what the collector stores and what identity-service resolves.
struct NormalizedRecord: Sendable, Equatable {
    var collect: CollectRecord
    /// nil for item records, which belong to no user.
    var identity: IdentityRecord?
}

/// Validates one SDK record and normalizes it (PROTOCOL.md section 2). Pure: the same record and
/// clock give the same answer. A failure is a reason a person can act on.
struct RecordNormalizer: Sendable {
    let limits: UploadLimits

    static let reservedNames: Set<String> = [
        "distinct_id", "original_id", "time", "properties", "id", "first_id", "second_id", "users", "events", "event",
        "user_id", "date", "datetime", "event_id", "device_id",
    ]

    static let implicitEventNames = ["track_signup": "$SignUp", "track_id_bind": "$BindID", "track_id_unbind": "$UnbindID"]

    /// - Parameters:
    ///   - defaultProject: the request's project (`?project=`), used unless the record names its own.
    ///   - now: the server's clock in milliseconds since the Unix epoch.
    func normalize(_ value: JSONValue, defaultProject: String, now: Int64) -> Result<NormalizedRecord, RecordRejection> {
        guard case .object(let record) = value else {
            return .failure(.init(project: defaultProject, reason: "the record is not a JSON object"))
        }
        var project = defaultProject
        if let override = record["project"] {
            guard let name = override.stringValue, ProjectName.isValid(name) else {
                return .failure(.init(project: defaultProject, reason: "the record's project is not a valid project name"))
            }
            project = name
        }
        func reject(_ reason: String) -> Result<NormalizedRecord, RecordRejection> {
            .failure(.init(project: project, reason: reason))
        }

        guard let type = record["type"]?.stringValue else { return reject("the record has no type") }
        guard RecordTypes.all.contains(type) else { return reject("unknown type '\(type.prefix(64))'") }
        let isItem = RecordTypes.isItem(type)
        let isEvent = RecordTypes.isEvent(type)

        var properties: [String: JSONValue] = [:]
        if let raw = record["properties"] {
            guard case .object(let object) = raw else { return reject("properties is not a JSON object") }
            properties = object
        }
        guard properties.count <= limits.maxPropertiesPerRecord else {
            return reject("\(properties.count) properties; the limit is \(limits.maxPropertiesPerRecord)")
        }

        // time: milliseconds, or seconds from SDKs that send 10 digits; a `$time` property wins.
        var timeValue = record["time"]
        if let override = properties.removeValue(forKey: "$time") { timeValue = override }
        guard let time = Self.milliseconds(timeValue) else { return reject("the record has no numeric time") }
        let pastLimit = now - Int64(limits.timeWindowPastDays) * 86_400_000
        let futureLimit = now + Int64(limits.timeWindowFutureMinutes) * 60_000
        guard time >= pastLimit else { return reject("time \(time) is more than \(limits.timeWindowPastDays) days in the past") }
        guard time <= futureLimit else { return reject("time \(time) is more than \(limits.timeWindowFutureMinutes) minutes in the future") }

        var event: String?
        if isEvent {
            event = record["event"]?.stringValue ?? Self.implicitEventNames[type]
            guard let name = event else { return reject("a \(type) record needs an event name") }
            if let problem = Self.nameProblem(name) { return reject("event name: \(problem)") }
        }

        for (name, value) in properties {
            if let problem = Self.nameProblem(name) { return reject("property '\(name.prefix(100))': \(problem)") }
            if let problem = valueProblem(value, type: type) { return reject("property '\(name)': \(problem)") }
            if case .string(let text) = value, let normalized = Self.normalizedDateTime(text) {
                properties[name] = .string(normalized)
            }
        }

        var distinctID: String?
        switch record["distinct_id"] {
        case .string(let value)?: distinctID = value
        case .int(let value)?: distinctID = String(value)
        default: distinctID = nil
        }
        if !isItem {
            guard let id = distinctID, !id.isEmpty else { return reject("the record has no distinct_id") }
        }
        var itemType: String?
        var itemID: String?
        if isItem {
            guard let kind = record["item_type"]?.stringValue, Self.nameProblem(kind) == nil else {
                return reject("an item record needs a valid item_type")
            }
            guard let id = record["item_id"]?.stringValue, !id.isEmpty else {
                return reject("an item record needs an item_id")
            }
            itemType = kind
            itemID = id
        }

        var identities: [String: String]?
        if let raw = record["identities"] {
            guard case .object(let object) = raw else { return reject("identities is not a JSON object") }
            var pairs: [String: String] = [:]
            for (key, value) in object {
                if let problem = Self.nameProblem(key) { return reject("identity key '\(key.prefix(100))': \(problem)") }
                guard let text = value.stringValue else { return reject("identity '\(key)' is not a string") }
                pairs[key] = text
            }
            identities = pairs
        }
        let lib = record["lib"]?.objectValue ?? [:]
        let libName = lib["$lib"]?.stringValue ?? properties["$lib"]?.stringValue
        let isLoginID: Bool = {
            if case .bool(true)? = properties["$is_login_id"] { return true }
            return false
        }()
        let hybrid: Bool = {
            if case .bool(true)? = record["_hybrid_h5"] { return true }
            return false
        }()

        let anonymousID = record["anonymous_id"]?.stringValue ?? identities?["$identity_anonymous_id"]
        let loginID = record["login_id"]?.stringValue ?? identities?["$identity_login_id"] ?? (isLoginID || type == "track_signup" ? distinctID : nil)
        let libVersion = lib["$lib_version"]?.stringValue ?? properties["$lib_version"]?.stringValue
        let appVersion = lib["$app_version"]?.stringValue ?? properties["$app_version"]?.stringValue
        let originalID = record["original_id"]?.stringValue
        var storedTexts: [(String, String?)] = [
            ("distinct_id", distinctID), ("anonymous_id", anonymousID), ("login_id", loginID), ("original_id", originalID),
            ("item_id", itemID), ("lib.$lib", libName), ("lib.$lib_version", libVersion), ("lib.$app_version", appVersion),
        ]
        for (key, value) in identities ?? [:] { storedTexts.append(("identity '\(key)'", value)) }
        for (field, value) in storedTexts {
            if let problem = Self.idProblem(value) { return reject("\(field) \(problem)") }
        }

        let collect = CollectRecord(
            project: project, type: type, event: event, time: time, distinctId: distinctID, userId: nil,
            anonymousId: anonymousID, loginId: loginID, lib: libName, libVersion: libVersion, appVersion: appVersion,
            hybridH5: hybrid,
            properties: JSONValue.object(properties).canonicalText,
            itemType: itemType, itemId: itemID
        )
        let identity = isItem ? nil : IdentityRecord(
            project: project, type: type, distinctId: distinctID ?? "",
            originalId: originalID, identities: identities, isLoginId: isLoginID, lib: libName
        )
        return .success(NormalizedRecord(collect: collect, identity: identity))
    }

    /// Epoch milliseconds from a JSON number; 10-digit values are seconds.
    static func milliseconds(_ value: JSONValue?) -> Int64? {
        let raw: Int64
        switch value {
        case .int(let int)?: raw = int
        case .double(let double)? where double.isFinite && abs(double) < 9e15: raw = Int64(double)
        default: return nil
        }
        return raw < 100_000_000_000 ? raw * 1000 : raw
    }

    /// A date-time value `yyyy-MM-dd HH:mm:ss.S` or `.SS` written with three millisecond digits, or
    /// nil when `text` needs no change. The JS SDK pads milliseconds to two digits only, so `.06`
    /// means 6 ms and becomes `.006` (PROTOCOL.md section 2).
    static func normalizedDateTime(_ text: String) -> String? {
        let length = text.utf8.count
        guard length == 21 || length == 22 else { return nil }
        let bytes = Array(text.utf8)
        let pattern = Array("dddd-dd-dd dd:dd:dd.".utf8)
        for (index, expected) in pattern.enumerated() {
            let byte = bytes[index]
            if expected == UInt8(ascii: "d") {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
            } else if byte != expected {
                return nil
            }
        }
        let fraction = bytes[20...]
        guard fraction.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return nil }
        let padding = String(repeating: "0", count: 3 - fraction.count)
        return String(decoding: bytes[..<20], as: UTF8.self) + padding + String(decoding: fraction, as: UTF8.self)
    }

    /// Why `name` is not a valid event or property name, or nil when it is.
    static func nameProblem(_ name: String) -> String? {
        var count = 0
        var first: UInt8 = 0
        for byte in name.utf8 {
            let isLetter = (byte | 0x20) >= UInt8(ascii: "a") && (byte | 0x20) <= UInt8(ascii: "z")
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "$")
            let isDigit = byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
            if count == 0 { first = byte }
            guard isLetter || (isDigit && count > 0) else { return nameRule }
            count += 1
        }
        guard count > 0, count <= 100 else { return nameRule }
        // Presets (`$os`, `$url`, …) are never reserved; only look further for other names.
        if first == UInt8(ascii: "$") { return nil }
        let lower = name.lowercased()
        if reservedNames.contains(lower) || lower.hasPrefix("user_tag") || lower.hasPrefix("user_group") {
            return "'\(name)' is a reserved name"
        }
        return nil
    }

    private static let nameRule = "names start with a letter, _ or $ and have at most 100 letters, digits, _ or $"

    /// Why an id or other short text the record stores in its own column cannot be stored, or nil:
    /// PostgreSQL refuses NUL characters, and ids are at most 255 characters (as the SDKs enforce).
    static func idProblem(_ value: String?) -> String? {
        guard let value else { return nil }
        if value.utf8.contains(0) { return "contains a NUL character" }
        if value.utf8.count > 255, value.count > 255 { return "is longer than 255 characters" }
        return nil
    }

    /// Why a property value cannot be stored, or nil. Values are numbers, booleans, strings, lists of
    /// strings (and null); `profile_unset` sends `true`; nothing nests deeper.
    func valueProblem(_ value: JSONValue, type: String) -> String? {
        switch value {
        case .null, .bool, .int, .double: return nil
        case .string(let text): return stringProblem(text)
        case .array(let items):
            for item in items {
                guard case .string(let text) = item else { return "lists may only hold strings" }
                if let problem = stringProblem(text) { return problem }
            }
            return nil
        case .object: return "objects are not allowed as property values"
        }
    }

    private func stringProblem(_ text: String) -> String? {
        if text.utf8.contains(0) { return "contains a NUL character" }
        if text.utf8.count > limits.maxStringLength, text.count > limits.maxStringLength {
            return "longer than \(limits.maxStringLength) characters"
        }
        return nil
    }
}

/// Why a record was refused; it is kept in `analytics.rejected` with the record as received.
struct RecordRejection: Error, Sendable, Equatable {
    let project: String
    let reason: String
}
