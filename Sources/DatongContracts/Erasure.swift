// The calls behind a user's erasure and export (docs/PRIVACY.md). config-service runs the job;
// identity-service says which users and ids make up the person and forgets them; the collector
// deletes what it stored about them in bounded steps and streams it for an export.

/// Who is to be erased or exported, as an operator names them: a user number, or one of its ids.
package struct UserReference: Codable, Sendable, Equatable {
    /// A user number (`analytics.events.user_id`).
    package var userId: Int64?
    /// An identity key (`$identity_login_id`, …) with `value`.
    package var key: String?
    package var value: String?
    /// A `distinct_id` as `analytics.events` holds it: the value of one of the user's ids, under
    /// whichever key; it names a user when every id holding that value is one person's.
    package var distinctId: String?

    package init(userId: Int64? = nil, key: String? = nil, value: String? = nil, distinctId: String? = nil) {
        self.userId = userId
        self.key = key
        self.value = value
        self.distinctId = distinctId
    }

    /// Why the reference cannot name anyone, or nil.
    package var problem: String? {
        switch (userId, key, value, distinctId) {
        case (let user?, nil, nil, nil): return user > 0 ? nil : "userId must be a user number (1, 2, …)"
        case (nil, let key?, let value?, nil):
            guard (1...255).contains(key.utf8.count), Self.isIDValue(value) else {
                return "key is 1 to 255 bytes and value 1 to 1024 bytes without NUL"
            }
            return nil
        case (nil, nil, nil, let distinct?):
            return Self.isIDValue(distinct) ? nil : "distinctId is 1 to 1024 bytes without NUL"
        default: return "name the user by userId, by key and value (one of its ids), or by distinctId, one of them"
        }
    }

    private static func isIDValue(_ value: String) -> Bool { (1...1024).contains(value.utf8.count) && !value.utf8.contains(0) }
}

/// The person an erasure or export covers, as identity-service knows it: the user a reference
/// leads to, every user merged into it (their events keep their own user numbers), and every id
/// they hold. `identities` also holds the reference itself when it names an id.
package struct ErasureSubject: Codable, Sendable, Equatable {
    package var users: [Int64]
    package var identities: [IdentityPair]

    package init(users: [Int64], identities: [IdentityPair]) {
        self.users = users
        self.identities = identities
    }

    /// At most this many ids make one subject (a person has a handful of devices and logins).
    package static let maxIdentities = 10_000
    package static let maxUsers = 10_000
}

/// identity-service's answer to erasing a subject: rows removed, by table.
package struct IdentityErasure: Codable, Sendable, Equatable {
    package var identities: Int
    package var users: Int
    package var merges: Int
    package var history: Int

    package init(identities: Int = 0, users: Int = 0, merges: Int = 0, history: Int = 0) {
        self.identities = identities
        self.users = users
        self.merges = merges
        self.history = history
    }
}

/// `POST /v1/projects/{project}/erasures/step` on the collector: delete at most `limit` rows of
/// each of the subject's tables, and scan at most `limit` rejected records after `rejectedAfter`.
package struct CollectorErasureStep: Codable, Sendable, Equatable {
    package var subject: ErasureSubject
    package var rejectedAfter: Int64
    package var limit: Int

    package init(subject: ErasureSubject, rejectedAfter: Int64 = 0, limit: Int = 5000) {
        self.subject = subject
        self.rejectedAfter = rejectedAfter
        self.limit = limit
    }

    package static let limits = 1...50_000
}

/// What one collector step removed, by table, what is left, and where the scan of rejected
/// records stands. `done` when a step found nothing left to remove anywhere.
package struct CollectorErasure: Codable, Sendable, Equatable {
    package var events: Int
    package var profileRecords: Int
    package var profiles: Int
    package var details: Int
    package var rejected: Int
    /// Events, profile and detail records and details still to remove after this step.
    package var left: Int
    /// The last rejected record scanned; the next step scans after it.
    package var rejectedAfter: Int64
    package var done: Bool

    package init(
        events: Int = 0, profileRecords: Int = 0, profiles: Int = 0, details: Int = 0, rejected: Int = 0, left: Int = 0,
        rejectedAfter: Int64 = 0, done: Bool = false
    ) {
        self.events = events
        self.profileRecords = profileRecords
        self.profiles = profiles
        self.left = left
        self.details = details
        self.rejected = rejected
        self.rejectedAfter = rejectedAfter
        self.done = done
    }

    /// Reads a count left out as 0: a job's saved counts outlive the version that wrote them.
    package init(from decoder: any Decoder) throws {
        let values = try decoder.container(keyedBy: CodingKeys.self)
        func count(_ key: CodingKeys) throws -> Int { try values.decodeIfPresent(Int.self, forKey: key) ?? 0 }
        self.init(
            events: try count(.events), profileRecords: try count(.profileRecords), profiles: try count(.profiles), details: try count(.details),
            rejected: try count(.rejected), left: try count(.left), rejectedAfter: try values.decodeIfPresent(Int64.self, forKey: .rejectedAfter) ?? 0,
            done: try values.decodeIfPresent(Bool.self, forKey: .done) ?? false)
    }

    /// This step's counts added to `total`'s.
    package func adding(to total: CollectorErasure) -> CollectorErasure {
        CollectorErasure(
            events: total.events + events, profileRecords: total.profileRecords + profileRecords, profiles: total.profiles + profiles,
            details: total.details + details, rejected: total.rejected + rejected, left: left, rejectedAfter: rejectedAfter, done: done
        )
    }
}

/// `POST /v1/projects/{project}/erasures` on config-service.
package struct ErasureRequest: Codable, Sendable, Equatable {
    package var user: UserReference
    /// Drop later records naming the erased ids at the gateways (default true).
    package var suppress: Bool?

    package init(user: UserReference, suppress: Bool? = nil) {
        self.user = user
        self.suppress = suppress
    }
}

/// An erasure job as the admin API shows it: what was asked, by whom, where it stands, and what
/// was removed by count. Never the erased data itself.
package struct ErasureJob: Codable, Sendable, Equatable {
    package var project: String
    package var erasureId: Int64
    package var requested: UserReference
    package var actor: String
    package var suppress: Bool
    /// `waiting` (for the gateways to apply the suppression), `identity`, `collector`, `done`.
    package var state: String
    /// The user numbers covered and how many ids (the ids themselves are in the suppression list
    /// when suppressed, and nowhere once erased when not).
    package var users: [Int64]
    package var identityCount: Int
    package var identity: IdentityErasure?
    package var collector: CollectorErasure?
    /// The last failure of a step, which is tried again.
    package var lastError: String?
    package var createdAt: String
    package var finishedAt: String?

    package init(
        project: String, erasureId: Int64, requested: UserReference, actor: String, suppress: Bool, state: String, users: [Int64],
        identityCount: Int, identity: IdentityErasure?, collector: CollectorErasure?, lastError: String?, createdAt: String,
        finishedAt: String?
    ) {
        self.project = project
        self.erasureId = erasureId
        self.requested = requested
        self.actor = actor
        self.suppress = suppress
        self.state = state
        self.users = users
        self.identityCount = identityCount
        self.identity = identity
        self.collector = collector
        self.lastError = lastError
        self.createdAt = createdAt
        self.finishedAt = finishedAt
    }
}

/// An id whose records the gateways drop (an erased user's), with the erasure that set it.
package struct Suppression: Codable, Sendable, Equatable, Hashable {
    package var key: String
    package var value: String
    package var erasureId: Int64?
    package var createdAt: String?

    package init(key: String, value: String, erasureId: Int64? = nil, createdAt: String? = nil) {
        self.key = key
        self.value = value
        self.erasureId = erasureId
        self.createdAt = createdAt
    }
}
