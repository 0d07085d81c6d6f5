import DatongContracts

/// One identity: a `$identity_*` key (or a custom `loginWithKey` key) and its value, in a project.
struct IdentityKey: Hashable, Sendable {
    let key: String
    let value: String
}

/// Which identities a record carries, as PROTOCOL.md section 4 describes. Pure functions.
enum IdentityRules {
    static let loginKey = "$identity_login_id"
    static let anonymousKey = "$identity_anonymous_id"

    /// Values that must never link anything (case-insensitive, also when quoted).
    static let illegalValues: Set<String> = [
        "", "null", "undefined", "0", "-1", "anonymous", "[object object]", "nan", "none", "nil",
    ]

    static func isLegal(_ value: String) -> Bool {
        var trimmed = Substring(value)
        while let first = trimmed.first, first == "\"" || first == "'" || first.isWhitespace { trimmed.removeFirst() }
        while let last = trimmed.last, last == "\"" || last == "'" || last.isWhitespace { trimmed.removeLast() }
        return !illegalValues.contains(trimmed.lowercased()) && value.utf8.count <= 255
    }

    /// The kind of device id an old SDK (no `identities`) means by `distinct_id`, from `lib.$lib`.
    static func deviceKey(lib: String?) -> String {
        switch lib?.lowercased() {
        case "js", "miniprogram", "mini program": return "$identity_cookie_id"
        case "ios": return "$identity_idfv"
        case "android": return "$identity_android_id"
        default: return anonymousKey
        }
    }

    /// The record's legal identities, strongest first (the login id, then custom keys, then device
    /// and anonymous ids), without repeats.
    static func identities(of record: IdentityRecord) -> [IdentityKey] {
        var found: [IdentityKey] = []
        func add(_ key: String, _ value: String) {
            guard isLegal(value), !key.isEmpty else { return }
            let identity = IdentityKey(key: key, value: value)
            if !found.contains(identity) { found.append(identity) }
        }
        if let identities = record.identities, !identities.isEmpty {
            for (key, value) in identities { add(key, value) }
        } else if let pair = splitKeyedDistinctID(record.distinctId) {
            add(pair.key, pair.value)
        } else if record.type == "track_signup" || record.isLoginId {
            add(loginKey, record.distinctId)
        } else {
            add(deviceKey(lib: record.lib), record.distinctId)
        }
        if record.type == "track_signup" {
            if let identities = record.identities, identities[loginKey] == nil { add(loginKey, record.distinctId) }
            if let original = record.originalId {
                let deviceKey = record.identities?.first(where: { $0.value == original && $0.key != loginKey })?.key
                    ?? deviceKey(lib: record.lib)
                add(deviceKey, original)
            }
        }
        return found.sorted { rank($0.key) < rank($1.key) || (rank($0.key) == rank($1.key) && ($0.key, $0.value) < ($1.key, $1.value)) }
    }

    /// `distinct_id` of the form `$identity_key+value` (what `loginWithKey` produces).
    static func splitKeyedDistinctID(_ distinctID: String) -> IdentityKey? {
        guard distinctID.hasPrefix("$identity_"), let plus = distinctID.firstIndex(of: "+") else { return nil }
        let key = String(distinctID[..<plus])
        let value = String(distinctID[distinctID.index(after: plus)...])
        return value.isEmpty ? nil : IdentityKey(key: key, value: value)
    }

    private static func rank(_ key: String) -> Int {
        switch key {
        case loginKey: return 0
        case anonymousKey: return 3
        case "$identity_cookie_id", "$identity_idfv", "$identity_ios_uuid", "$identity_android_id", "$identity_android_uuid": return 2
        default: return 1
        }
    }
}
