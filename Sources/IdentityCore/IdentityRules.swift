import DatongContracts

/// An identity in its project.
package struct ScopedIdentity: Hashable, Sendable {
    package let project: String
    package let identity: IdentityKey

    package init(project: String, identity: IdentityKey) {
        self.project = project
        self.identity = identity
    }
}

/// One identity: a `$identity_*` key (or a custom `loginWithKey` key) and its value, compared and
/// hashed as bytes (`ExactText`).
package struct IdentityKey: Hashable, Sendable, Comparable {
    package let key: String
    package let value: String

    package init(key: String, value: String) {
        self.key = key
        self.value = value
    }

    /// By rank, then by bytes: ids are compared as bytes (`ExactText`), never canonically.
    package static func < (a: IdentityKey, b: IdentityKey) -> Bool {
        let (rankA, rankB) = (IdentityRules.rank(a.key), IdentityRules.rank(b.key))
        if rankA != rankB { return rankA < rankB }
        if !ExactText.equal(a.key, b.key) { return ExactText.less(a.key, b.key) }
        return ExactText.less(a.value, b.value)
    }

    package static func == (a: IdentityKey, b: IdentityKey) -> Bool { ExactText.equal(a.key, b.key) && ExactText.equal(a.value, b.value) }

    package func hash(into hasher: inout Hasher) {
        ExactText.hash(key, into: &hasher)
        ExactText.hash(value, into: &hasher)
    }

    package var description: String { "\(key)=\(value)" }
}

/// What one record asks of the identity graph: which identities name its user, which of them it
/// may take from another user (merging that user in), and which pair it detaches.
package struct IdentityPlan: Sendable, Equatable {
    /// The record's legal identities, strongest first.
    package var identities: [IdentityKey]
    /// Identities this record may link when nobody owns them but never takes from another user:
    /// the keys a `$BindID` may not bind.
    package var neverMerged: Set<IdentityKey> = []
    /// True for a `$UnbindID`: it finds its user and detaches `unbind`, and links nothing.
    package var linksNothing = false
    /// The pair a `$UnbindID` detaches.
    package var unbind: IdentityKey? = nil
    /// Why part of the record was refused (a forbidden unbind), for the history.
    package var refused: [String] = []
    /// For a record of an old SDK (no `identities`, no `$is_login_id`): its `distinct_id` as a
    /// login id. When some user holds that login id the record is that user's and links nothing
    /// (the Ruby SDK's `track(login, …)` after `track_signup(login, anonymous)`); otherwise its
    /// `identities` (a device id) apply.
    package var loginAlias: IdentityKey? = nil

    package init(
        identities: [IdentityKey], neverMerged: Set<IdentityKey> = [], linksNothing: Bool = false, unbind: IdentityKey? = nil,
        refused: [String] = []
    ) {
        self.identities = identities
        self.neverMerged = neverMerged
        self.linksNothing = linksNothing
        self.unbind = unbind
        self.refused = refused
    }

    package func mayMerge(_ identity: IdentityKey) -> Bool { !linksNothing && !neverMerged.contains(identity) }

    /// True when the record's user may be answered from a cache of owners: it changes nothing
    /// once every identity it names belongs to one user. Unbinds and refusals always change or
    /// note something, so they always go to the graph.
    package var answerableFromCache: Bool { !linksNothing && refused.isEmpty && !identities.isEmpty }
}

/// Which identities a record carries, as docs/PROTOCOL.md section 4 describes. Pure functions.
package enum IdentityRules {
    package static let loginKey = "$identity_login_id"
    package static let anonymousKey = "$identity_anonymous_id"
    package static let cookieKey = "$identity_cookie_id"
    /// Every official SDK's device id: the key it sets from a device or install identifier of its
    /// own, keeps across a login, and refuses to `bind`. Read from each SDK's code (docs/PROTOCOL.md
    /// section 4 has the table with the file that decides each); `$identity_anonymous_id`, which
    /// every SDK sends, and the H5 `$identity_cookie_id` have ranks of their own.
    package static let deviceKeys: Set<String> = [
        // iOS (SensorsAnalyticsSDK 5.0.7, the identity keys in its framework binary)
        "$identity_idfv", "$identity_ios_uuid", "$identity_idfa",
        // Android (sa-sdk-android: useridentity/Identities.java)
        "$identity_android_id", "$identity_android_uuid",
        // WeChat mini program (sa-sdk-miniprogram: `identities.$identity_mp_id = getUUID()`)
        "$identity_mp_id",
        // The other mini programs (sa-sdk-mini: each build's `identity_id`)
        "$identity_ali_mp_id", "$identity_baidu_mp_id", "$identity_byte_mp_id", "$identity_feishu_mp_id", "$identity_qq_mp_id",
        "$identity_xhs_mp_id", "$identity_taobao_uuid",
    ]
    /// Keys a `$BindID` may not bind.
    package static let unbindableByBind: Set<String> = [loginKey, anonymousKey, cookieKey]
    /// Keys a `$UnbindID` may not detach.
    package static let notUnbindable: Set<String> = [loginKey, anonymousKey]

    /// Values that must never link anything (case-insensitive, also when quoted).
    package static let illegalValues: Set<String> = [
        "", "null", "undefined", "0", "-1", "anonymous", "[object object]", "nan", "none", "nil",
    ]

    package static func isLegal(_ value: String) -> Bool {
        let utf8 = value.utf8
        guard IDRule.fits(value) else { return false }
        // Every illegal value is short; a longer one that does not start or end with a quote or
        // a space is legal without lowercasing it (device and cookie ids are 36 to 64 bytes).
        if utf8.count > 24, let first = utf8.first, let last = utf8.last, !Self.padding(first), !Self.padding(last) { return true }
        var trimmed = Substring(value)
        while let first = trimmed.first, first == "\"" || first == "'" || first.isWhitespace { trimmed.removeFirst() }
        while let last = trimmed.last, last == "\"" || last == "'" || last.isWhitespace { trimmed.removeLast() }
        return !illegalValues.contains(trimmed.lowercased())
    }

    private static func padding(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") || byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t")
            || byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r") || byte >= 0x80
    }

    /// Login-class keys name a person, not a device: the login id and custom keys
    /// (`loginWithKey`, or bound ones such as `$identity_mobile`, the mini programs' openid and
    /// unionid). A user holds at most one value of each, so two users holding different values of
    /// one are two people and never merge implicitly. A `$identity_*` key no official SDK sets as a
    /// device id is one of these: keeping two people apart is the safe side of not knowing.
    package static func isLoginClass(_ key: String) -> Bool { rank(key) <= 1 }

    /// The kind of device id an old SDK (no `identities`) means by `distinct_id`, from `lib.$lib`.
    package static func deviceKey(lib: String?) -> String {
        switch lib?.lowercased() {
        case "js", "miniprogram", "mini program": return cookieKey
        case "ios": return "$identity_idfv"
        case "android": return "$identity_android_id"
        default: return anonymousKey
        }
    }

    /// Strength of a key: the login id, then custom keys, then the app's device ids, the anonymous
    /// id and last the H5 cookie id, so a record relayed from an H5 page names the app's user first.
    package static func rank(_ key: String) -> Int {
        switch key {
        case loginKey: return 0
        case anonymousKey: return 3
        case cookieKey: return 4
        default: return deviceKeys.contains(key) ? 2 : 1
        }
    }

    /// The record's legal identities, strongest first (the login id, then custom keys, then device
    /// and anonymous ids, the cookie id last), without repeats.
    package static func identities(of record: IdentityRecord) -> [IdentityKey] {
        var found: [IdentityKey] = []
        func add(_ key: String, _ value: String) {
            guard isLegal(value), !key.isEmpty, IDRule.fits(key) else { return }
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
            // Every SDK's anonymous id is also its `$identity_anonymous_id`. An app that hands its
            // anonymous id to an H5 page, which then sends directly with it as distinct_id (bridge
            // schemes 1 and 2), gets the page's events under its own user this way.
            add(anonymousKey, record.distinctId)
        }
        if record.type == "track_signup" {
            if let identities = record.identities, identities[loginKey] == nil, splitKeyedDistinctID(record.distinctId) == nil {
                add(loginKey, record.distinctId)
            }
            if let original = record.originalId {
                let deviceKey =
                    record.identities?.first(where: { $0.value == original && !isLoginClass($0.key) })?.key
                    ?? deviceKey(lib: record.lib)
                add(deviceKey, original)
            }
        }
        return found.sorted()
    }

    /// What the record asks of the graph. A `$BindID` (`track_id_bind`) links what it carries but
    /// cannot take a login, anonymous or cookie id from another user; a `$UnbindID`
    /// (`track_id_unbind`) detaches the one pair it carries, unless it is a login or anonymous id.
    package static func plan(for record: IdentityRecord) -> IdentityPlan {
        let identities = identities(of: record)
        var plan = IdentityPlan(identities: identities)
        if isFlagless(record), !identities.isEmpty { plan.loginAlias = IdentityKey(key: loginKey, value: record.distinctId) }
        switch record.type {
        case "track_id_bind":
            plan.neverMerged = Set(identities.filter { unbindableByBind.contains($0.key) })
        case "track_id_unbind":
            plan.linksNothing = true
            let detachable = identities.filter { !notUnbindable.contains($0.key) }
            for refused in identities where notUnbindable.contains(refused.key) {
                plan.refused.append("\(refused.key) cannot be unbound")
            }
            if detachable.count == 1 {
                plan.unbind = detachable[0]
            } else if detachable.count > 1 {
                plan.refused.append("an unbind detaches one pair; this one names \(detachable.count)")
            }
        default:
            break
        }
        return plan
    }

    /// A record whose `distinct_id` alone names its user, as a device id unless it is a known
    /// login id: no `identities`, no login flag, not a sign-up, a bind or an unbind.
    static func isFlagless(_ record: IdentityRecord) -> Bool {
        (record.identities ?? [:]).isEmpty && !record.isLoginId && splitKeyedDistinctID(record.distinctId) == nil
            && !["track_signup", "track_id_bind", "track_id_unbind"].contains(record.type)
    }

    /// The keys under which an old SDK's records may have linked a value that later becomes a
    /// login id (`deviceKey(lib:)` and the anonymous id): caches must forget those owners then.
    package static let flaglessKeys: [String] = [anonymousKey, cookieKey, "$identity_idfv", "$identity_android_id"]

    /// `distinct_id` of the form `$identity_key+value` (what `loginWithKey` produces).
    package static func splitKeyedDistinctID(_ distinctID: String) -> IdentityKey? {
        guard distinctID.hasPrefix("$identity_"), let plus = distinctID.firstIndex(of: "+") else { return nil }
        let key = String(distinctID[..<plus])
        let value = String(distinctID[distinctID.index(after: plus)...])
        return value.isEmpty ? nil : IdentityKey(key: key, value: value)
    }
}
