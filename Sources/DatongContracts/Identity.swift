/// `POST /v1/resolve` on identity-service: the gateway sends the ids of every record of one upload
/// in a single call and gets one user per record back, in the same order.
package struct ResolveRequest: Sendable, Equatable {
    package var records: [IdentityRecord]
    /// The caller keeps its own cache of owners (a gateway): every record is resolved in
    /// PostgreSQL, never from identity-service's cache, so that what the caller learns is at least
    /// as new as the invalidation log it has read (see `IdentityCache`).
    package var forCache: Bool

    package init(records: [IdentityRecord], forCache: Bool = false) {
        self.records = records
        self.forCache = forCache
    }
}

/// The identity-bearing fields of one record, exactly as the SDK sent them.
package struct IdentityRecord: Sendable, Hashable {
    package var project: String
    /// The record's `type` (`track`, `track_signup`, `profile_set`, …).
    package var type: String
    package var distinctId: String
    /// `original_id` of a `track_signup`: the anonymous id used before the login.
    package var originalId: String?
    /// The record's `identities` object (`$identity_cookie_id`, `$identity_login_id`, …), if any.
    package var identities: [String: String]?
    /// True when the record says `distinct_id` is a login id (`$is_login_id` property).
    package var isLoginId: Bool
    /// `lib.$lib` (`js`, `iOS`, `Android`, `python`, …): names the kind of device id for old SDKs.
    package var lib: String?

    package init(
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

    /// Field by field as bytes (`ExactText`): a record whose ids differ only in their Unicode form
    /// is another record.
    package static func == (a: IdentityRecord, b: IdentityRecord) -> Bool {
        ExactText.equal(a.project, b.project) && ExactText.equal(a.type, b.type) && ExactText.equal(a.distinctId, b.distinctId)
            && ExactText.equal(a.originalId, b.originalId) && ExactText.equal(a.identities, b.identities) && a.isLoginId == b.isLoginId
            && ExactText.equal(a.lib, b.lib)
    }

    package func hash(into hasher: inout Hasher) {
        ExactText.hash(project, into: &hasher)
        ExactText.hash(type, into: &hasher)
        ExactText.hash(distinctId, into: &hasher)
        ExactText.hash(originalId ?? "", into: &hasher)
        ExactText.hash(identities, into: &hasher)
        hasher.combine(isLoginId)
        ExactText.hash(lib ?? "", into: &hasher)
    }
}

extension IdentityRecord {
    /// The most identities one record may carry (an SDK sends a handful): one record's resolve text
    /// is then at most about half a MiB, far under a call's `ResolveRequest.maxCallBytes`.
    package static let maxIdentities = 100

    /// The identity keys the official SDKs send, most frequent first: read with
    /// `JSONRef.stringValue(sharing:)`, so that the keys of every record are these literals.
    package static let commonKeys: [String] = [
        "$identity_anonymous_id", "$identity_login_id", "$identity_cookie_id", "$identity_android_id", "$identity_android_uuid",
        "$identity_ios_uuid", "$identity_distinct_id", "$identity_mobile",
    ]
}

/// The answer to `ResolveRequest`: `users[i]` belongs to `records[i]`.
package struct ResolveResponse: Sendable, Equatable {
    package var users: [ResolvedUser]
    /// Identities whose owner this call changed (merges, unbinds): a caller's cache forgets them.
    package var invalidated: [IdentityName]

    package init(users: [ResolvedUser], invalidated: [IdentityName] = []) {
        self.users = users
        self.invalidated = invalidated
    }
}

/// The user a record belongs to.
package struct ResolvedUser: Sendable, Equatable {
    /// nil when the record carries no legal identity (e.g. `distinct_id` "undefined").
    package var userId: Int64?
    /// True when this call created the user (its identities were all new).
    package var created: Bool
    /// True when, as this call read and left the graph in PostgreSQL, every identity the record
    /// names belongs to `userId`: a cache may then answer the same identities with this user.
    package var owned: Bool

    package init(userId: Int64?, created: Bool, owned: Bool = false) {
        self.userId = userId
        self.created = created
        self.owned = owned
    }
}

/// One identity of a project, as `ResolveResponse.invalidated` and `InvalidationLog` name it.
package struct IdentityName: Sendable, Equatable {
    package var project: String
    package var key: String
    package var value: String

    package init(project: String, key: String, value: String) {
        self.project = project
        self.key = key
        self.value = value
    }
}

/// `GET /v1/invalidations?after=HORIZON` on identity-service: the identities whose owner changed
/// (merges, undos, unbinds) in transactions that finished since the look that answered `after`.
/// The gateway's identity cache follows it; identity-service's replicas read the same log directly.
package struct InvalidationLog: Sendable, Equatable {
    /// The database server that was read (its postmaster's start time): a different one (a failover
    /// or a restart) may lack changes a cache has seen, so the cache forgets everything.
    package var server: String
    /// `after` for the next look: which transactions had finished at this one (PostgreSQL's
    /// `pg_snapshot` text, `xmin:xmax:running ids`); opaque to the caller.
    package var horizon: String
    package var identities: [IdentityName]
    /// False when more changed than one answer carries (`maxIdentities`): forget everything.
    package var complete: Bool

    /// The most identities one answer carries.
    package static let maxIdentities = 100_000

    package init(server: String, horizon: String, identities: [IdentityName], complete: Bool) {
        self.server = server
        self.horizon = horizon
        self.identities = identities
        self.complete = complete
    }
}

// MARK: The identity API (operators and back ends; every call needs the service token)

/// One identity of a user.
package struct IdentityPair: Codable, Sendable, Equatable, Hashable {
    package var key: String
    package var value: String

    package init(key: String, value: String) {
        self.key = key
        self.value = value
    }
}

/// `GET /v1/projects/{project}/users/{user}`: a user and the identities it holds now.
package struct UserRecord: Codable, Sendable, Equatable {
    package var project: String
    package var userId: Int64
    /// The user this user's events count under now: itself, or the user it was merged into
    /// (merges followed to the end).
    package var canonicalUserId: Int64
    /// The user it was merged into directly, while merged.
    package var mergedInto: Int64?
    package var createdAt: String
    package var identities: [IdentityPair]

    package init(project: String, userId: Int64, canonicalUserId: Int64, mergedInto: Int64?, createdAt: String, identities: [IdentityPair]) {
        self.project = project
        self.userId = userId
        self.canonicalUserId = canonicalUserId
        self.mergedInto = mergedInto
        self.createdAt = createdAt
        self.identities = identities
    }
}

/// What caused a merge or a history entry: a record of an upload, or an API call.
package struct ChangeCause: Codable, Sendable, Equatable {
    /// The request id of the upload or call (also in every service's logs).
    package var requestId: String?
    /// The record's position among the records the gateway resolved for that upload.
    package var record: Int?
    package var type: String?
    package var distinctId: String?
    /// The API operation (`link`, `merge`, `unbind`, `undo`).
    package var api: String?

    package init(requestId: String? = nil, record: Int? = nil, type: String? = nil, distinctId: String? = nil, api: String? = nil) {
        self.requestId = requestId
        self.record = record
        self.type = type
        self.distinctId = distinctId
        self.api = api
    }
}

/// One merge: `fromUser`'s identities moved to `intoUser`.
package struct MergeRecord: Codable, Sendable, Equatable {
    package var project: String
    package var mergeId: Int64
    package var fromUser: Int64
    package var intoUser: Int64
    /// The identities the merge moved (an undo moves back those `intoUser` still holds).
    package var identities: [IdentityPair]
    package var reason: String
    /// `gateway` for merges caused by records, the caller's `actor` for API calls.
    package var actor: String
    package var cause: ChangeCause
    package var createdAt: String
    package var undoneAt: String?
    package var undoneBy: String?

    package init(
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
package struct HistoryEntry: Codable, Sendable, Equatable {
    package var entryId: Int64
    package var kind: String
    package var userId: Int64?
    package var otherUser: Int64?
    package var key: String?
    package var value: String?
    package var reason: String
    package var actor: String
    package var cause: ChangeCause
    package var createdAt: String

    package init(
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
package struct UserHistory: Codable, Sendable, Equatable {
    package var project: String
    package var userId: Int64
    package var merges: [MergeRecord]
    package var entries: [HistoryEntry]

    package init(project: String, userId: Int64, merges: [MergeRecord], entries: [HistoryEntry]) {
        self.project = project
        self.userId = userId
        self.merges = merges
        self.entries = entries
    }
}

/// `POST /v1/projects/{project}/links`: links every identity to one user (merging users as a
/// record would, but answering 409 where a record would only record a conflict).
package struct LinkRequest: Codable, Sendable, Equatable {
    package var identities: [String: String]
    /// Who asks (kept in the history); `api` when absent.
    package var actor: String?

    package init(identities: [String: String], actor: String? = nil) {
        self.identities = identities
        self.actor = actor
    }
}

/// `POST /v1/projects/{project}/unbind`: detaches one identity from its user.
package struct UnbindRequest: Codable, Sendable, Equatable {
    package var key: String
    package var value: String
    package var actor: String?

    package init(key: String, value: String, actor: String? = nil) {
        self.key = key
        self.value = value
        self.actor = actor
    }
}

/// `POST /v1/projects/{project}/merges`: merges one user into another on an operator's word.
package struct MergeRequest: Codable, Sendable, Equatable {
    package var fromUser: Int64
    package var intoUser: Int64
    package var actor: String?

    package init(fromUser: Int64, intoUser: Int64, actor: String? = nil) {
        self.fromUser = fromUser
        self.intoUser = intoUser
        self.actor = actor
    }
}

/// `POST /v1/projects/{project}/merges/{merge}/undo`.
package struct UndoRequest: Codable, Sendable, Equatable {
    package var actor: String?

    package init(actor: String? = nil) { self.actor = actor }
}

/// The user a link, unbind or identity lookup found.
package struct UserAnswer: Codable, Sendable, Equatable {
    package var userId: Int64
    /// True when a link created the user.
    package var created: Bool

    package init(userId: Int64, created: Bool) {
        self.userId = userId
        self.created = created
    }
}
