/// `POST /v1/resolve` on identity-service: the gateway sends the ids of every record of one upload
/// in a single call and gets one user per record back, in the same order.
public struct ResolveRequest: Sendable, Equatable {
    public var records: [IdentityRecord]

    public init(records: [IdentityRecord]) { self.records = records }
}

/// The identity-bearing fields of one record, exactly as the SDK sent them.
public struct IdentityRecord: Sendable, Equatable {
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
public struct ResolveResponse: Sendable, Equatable {
    public var users: [ResolvedUser]

    public init(users: [ResolvedUser]) { self.users = users }
}

/// The user a record belongs to.
public struct ResolvedUser: Sendable, Equatable {
    /// nil when the record carries no legal identity (e.g. `distinct_id` "undefined").
    public var userId: Int64?
    /// True when this call created the user (its identities were all new).
    public var created: Bool

    public init(userId: Int64?, created: Bool) {
        self.userId = userId
        self.created = created
    }
}

// MARK: The identity API (operators and back ends; every call needs the service token)

/// One identity of a user.
public struct IdentityPair: Codable, Sendable, Equatable, Hashable {
    public var key: String
    public var value: String

    public init(key: String, value: String) {
        self.key = key
        self.value = value
    }
}

/// `GET /v1/projects/{project}/users/{user}`: a user and the identities it holds now.
public struct UserRecord: Codable, Sendable, Equatable {
    public var project: String
    public var userId: Int64
    /// The user this user's events count under now: itself, or the user it was merged into
    /// (merges followed to the end).
    public var canonicalUserId: Int64
    /// The user it was merged into directly, while merged.
    public var mergedInto: Int64?
    public var createdAt: String
    public var identities: [IdentityPair]

    public init(project: String, userId: Int64, canonicalUserId: Int64, mergedInto: Int64?, createdAt: String, identities: [IdentityPair]) {
        self.project = project
        self.userId = userId
        self.canonicalUserId = canonicalUserId
        self.mergedInto = mergedInto
        self.createdAt = createdAt
        self.identities = identities
    }
}

/// What caused a merge or a history entry: a record of an upload, or an API call.
public struct ChangeCause: Codable, Sendable, Equatable {
    /// The request id of the upload or call (also in every service's logs).
    public var requestId: String?
    /// The record's position among the records the gateway resolved for that upload.
    public var record: Int?
    public var type: String?
    public var distinctId: String?
    /// The API operation (`link`, `merge`, `unbind`, `undo`).
    public var api: String?

    public init(requestId: String? = nil, record: Int? = nil, type: String? = nil, distinctId: String? = nil, api: String? = nil) {
        self.requestId = requestId
        self.record = record
        self.type = type
        self.distinctId = distinctId
        self.api = api
    }
}

/// One merge: `fromUser`'s identities moved to `intoUser`.
public struct MergeRecord: Codable, Sendable, Equatable {
    public var project: String
    public var mergeId: Int64
    public var fromUser: Int64
    public var intoUser: Int64
    /// The identities the merge moved (an undo moves back those `intoUser` still holds).
    public var identities: [IdentityPair]
    public var reason: String
    /// `gateway` for merges caused by records, the caller's `actor` for API calls.
    public var actor: String
    public var cause: ChangeCause
    public var createdAt: String
    public var undoneAt: String?
    public var undoneBy: String?

    public init(
        project: String, mergeId: Int64, fromUser: Int64, intoUser: Int64, identities: [IdentityPair], reason: String,
        actor: String, cause: ChangeCause, createdAt: String, undoneAt: String?, undoneBy: String?
    ) {
        self.project = project
        self.mergeId = mergeId
        self.fromUser = fromUser
        self.intoUser = intoUser
        self.identities = identities
        self.reason = reason
        self.actor = actor
        self.cause = cause
        self.createdAt = createdAt
        self.undoneAt = undoneAt
        self.undoneBy = undoneBy
    }
}

/// An unbind, a link through the API, a conflict (two users with different login ids, not
/// merged) or a refusal (a forbidden bind or unbind).
public struct HistoryEntry: Codable, Sendable, Equatable {
    public var entryId: Int64
    public var kind: String
    public var userId: Int64?
    public var otherUser: Int64?
    public var key: String?
    public var value: String?
    public var reason: String
    public var actor: String
    public var cause: ChangeCause
    public var createdAt: String

    public init(
        entryId: Int64, kind: String, userId: Int64?, otherUser: Int64?, key: String?, value: String?, reason: String,
        actor: String, cause: ChangeCause, createdAt: String
    ) {
        self.entryId = entryId
        self.kind = kind
        self.userId = userId
        self.otherUser = otherUser
        self.key = key
        self.value = value
        self.reason = reason
        self.actor = actor
        self.cause = cause
        self.createdAt = createdAt
    }
}

/// `GET /v1/projects/{project}/users/{user}/history`, newest first.
public struct UserHistory: Codable, Sendable, Equatable {
    public var project: String
    public var userId: Int64
    public var merges: [MergeRecord]
    public var entries: [HistoryEntry]

    public init(project: String, userId: Int64, merges: [MergeRecord], entries: [HistoryEntry]) {
        self.project = project
        self.userId = userId
        self.merges = merges
        self.entries = entries
    }
}

/// `POST /v1/projects/{project}/links`: links every identity to one user (merging users as a
/// record would, but answering 409 where a record would only record a conflict).
public struct LinkRequest: Codable, Sendable, Equatable {
    public var identities: [String: String]
    /// Who asks (kept in the history); `api` when absent.
    public var actor: String?

    public init(identities: [String: String], actor: String? = nil) {
        self.identities = identities
        self.actor = actor
    }
}

/// `POST /v1/projects/{project}/unbind`: detaches one identity from its user.
public struct UnbindRequest: Codable, Sendable, Equatable {
    public var key: String
    public var value: String
    public var actor: String?

    public init(key: String, value: String, actor: String? = nil) {
        self.key = key
        self.value = value
        self.actor = actor
    }
}

/// `POST /v1/projects/{project}/merges`: merges one user into another on an operator's word.
public struct MergeRequest: Codable, Sendable, Equatable {
    public var fromUser: Int64
    public var intoUser: Int64
    public var actor: String?

    public init(fromUser: Int64, intoUser: Int64, actor: String? = nil) {
        self.fromUser = fromUser
        self.intoUser = intoUser
        self.actor = actor
    }
}

/// `POST /v1/projects/{project}/merges/{merge}/undo`.
public struct UndoRequest: Codable, Sendable, Equatable {
    public var actor: String?

    public init(actor: String? = nil) { self.actor = actor }
}

/// The user a link, unbind or identity lookup found.
public struct UserAnswer: Codable, Sendable, Equatable {
    public var userId: Int64
    /// True when a link created the user.
    public var created: Bool

    public init(userId: Int64, created: Bool) {
        self.userId = userId
        self.created = created
    }
}
