/// `POST /v1/resolve` on identity-service: the gateway sends the ids of every record of one upload
/// in a single call and gets one user per record back, in the same order.
public struct ResolveRequest: Codable, Sendable, Equatable {
    public var records: [IdentityRecord]

    public init(records: [IdentityRecord]) { self.records = records }
}

/// The identity-bearing fields of one record, exactly as the SDK sent them.
public struct IdentityRecord: Codable, Sendable, Equatable {
    public var project: String
    /// The record's `type` (`track`, `track_signup`, `profile_set`, …).
    public var type: String
    public var distinctId: String
    /// `original_id` of a `track_signup`: the anonymous id used before the login.
    public var originalId: String?
    /// The record's `identities` object (`$identity_cookie_id`, `$identity_login_id`, …), if any.
    public var identities: [String: String]?
    /// True when the record says `distinct_id` is a login id (`$is_login_id` property).
    public var isLoginId: Bool
    /// `lib.$lib` (`js`, `iOS`, `Android`, `python`, …): names the kind of device id for old SDKs.
    public var lib: String?

    public init(
        project: String, type: String, distinctId: String, originalId: String? = nil,
        identities: [String: String]? = nil, isLoginId: Bool = false, lib: String? = nil
    ) {
        self.project = project
        self.type = type
        self.distinctId = distinctId
        self.originalId = originalId
        self.identities = identities
        self.isLoginId = isLoginId
        self.lib = lib
    }
}

/// The answer to `ResolveRequest`: `users[i]` belongs to `records[i]`.
public struct ResolveResponse: Codable, Sendable, Equatable {
    public var users: [ResolvedUser]

    public init(users: [ResolvedUser]) { self.users = users }
}

/// The user a record belongs to.
public struct ResolvedUser: Codable, Sendable, Equatable {
    /// nil when the record carries no legal identity (e.g. `distinct_id` "undefined").
    public var userId: Int64?
    /// True when this call created the user (its identities were all new).
    public var created: Bool

    public init(userId: Int64?, created: Bool) {
        self.userId = userId
        self.created = created
    }
}
