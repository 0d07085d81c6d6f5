import DatongContracts
import DatongJSON
import DatongPostgres
import DatongRuntime
import IdentityCore

/// A user in its project.
struct UserRef: Hashable, Sendable {
    let project: String
    let id: Int64
}

/// Who changed the graph and why: a record of an upload (its request id, position, type and
/// distinct id) or a call of the API (its actor). Stored as JSON with every merge and history entry.
struct Cause: Sendable {
    let actor: String
    let json: String

    static func record(_ record: IdentityRecord, index: Int, requestID: String) -> Cause {
        var out: [UInt8] = []
        out.append(contentsOf: #"{"request_id":"#.utf8)
        JSONValue.writeString(utf8: requestID.utf8, to: &out)
        out.append(contentsOf: #","record":\#(index),"type":"#.utf8)
        JSONValue.writeString(utf8: record.type.utf8, to: &out)
        out.append(contentsOf: #","distinct_id":"#.utf8)
        JSONValue.writeString(utf8: record.distinctId.utf8, to: &out)
        out.append(UInt8(ascii: "}"))
        return Cause(actor: "gateway", json: String(decoding: out, as: UTF8.self))
    }

    static func api(_ operation: String, actor: String?, requestID: String) -> Cause {
        var out: [UInt8] = []
        out.append(contentsOf: #"{"request_id":"#.utf8)
        JSONValue.writeString(utf8: requestID.utf8, to: &out)
        out.append(contentsOf: #","api":"#.utf8)
        JSONValue.writeString(utf8: operation.utf8, to: &out)
        out.append(UInt8(ascii: "}"))
        return Cause(actor: actor ?? "api", json: String(decoding: out, as: UTF8.self))
    }
}

/// The identity graph as one transaction sees and changes it.
///
/// Concurrency: every change takes transaction-scoped advisory locks first, on the identities it
/// links and on every user whose identities it moves or reads to decide a merge, and reads the
/// owners again after locking. Replicas changing overlapping parts of the graph therefore wait for
/// each other, and none decides on owners another has just changed. A user is only ever changed
/// under its lock, so a lookup made after locking is exact for every locked user.
final class GraphTransaction {
    let connection: PostgresConnection
    /// Current owner of every identity this transaction looked at (absent: nobody owns it).
    private(set) var owners: [ScopedIdentity: Int64] = [:]
    /// Login-class identities (key → value) of the users this transaction looked at.
    private var logins: [UserRef: [String: String]] = [:]
    /// Identities whose owner this transaction changed or removed: caches must forget them.
    private(set) var invalidated: [ScopedIdentity] = []
    private var lockedIdentities: Set<ScopedIdentity> = []
    private var lockedUsers: Set<UserRef> = []

    init(connection: PostgresConnection) {
        self.connection = connection
    }

    // MARK: Reading

    /// The owners of identities `$2`/`$3` (keys, values) of project `$1`: one primary-key lookup
    /// per identity. As a join, the generic plan PostgreSQL caches for the prepared statement was a
    /// hash join over a scan of the whole table whenever it was planned while the table held under
    /// about a thousand identities, and it is kept until the next ANALYZE however large the table
    /// grows: 1.8 ms a call at 30k identities in `scripts/bench e2e --records 1`, more than the
    /// collector's COPYs of all the events took (docs/BENCHMARKS.md).
    static let ownersQuery = """
        SELECT w.key, w.value, (
            SELECT i.user_id FROM identity.identities i WHERE i.project = $1 AND i.key = w.key AND i.value = w.value)
        FROM unnest($2::text[], $3::text[]) AS w(key, value)
        """

    /// Reads the owners of `identities` (one query per project) into `owners`.
    func lookUpOwners(_ identities: some Collection<ScopedIdentity>) throws {
        var byProject: [String: [IdentityKey]] = [:]
        for identity in identities {
            byProject[identity.project, default: []].append(identity.identity)
            owners[identity] = nil
        }
        for (project, keys) in byProject {
            let rows = try connection.queryPrepared(
                "identity.owners", Self.ownersQuery,
                [project, postgresTextArray(keys.map(\.key)), postgresTextArray(keys.map(\.value))]
            ).rows
            for row in rows {
                guard let key = row[0], let value = row[1], let user = row[2].flatMap(Int64.init) else { continue }
                owners[ScopedIdentity(project: project, identity: IdentityKey(key: key, value: value))] = user
            }
        }
    }

    /// Reads the login-class identities of those of `users` this transaction does not know yet
    /// (one query per project) into `logins`, where they are then kept up to date.
    func loadLogins(_ users: some Collection<UserRef>) throws {
        var byProject: [String: [Int64]] = [:]
        for user in users where logins[user] == nil {
            byProject[user.project, default: []].append(user.id)
            logins[user] = [:]
        }
        for (project, ids) in byProject {
            let rows = try connection.queryPrepared(
                "identity.logins",
                "SELECT user_id, key, value FROM identity.identities WHERE project = $1 AND user_id = ANY($2::bigint[])",
                [project, postgresBigintArray(ids)]
            ).rows
            for row in rows {
                guard let user = row[0].flatMap(Int64.init), let key = row[1], let value = row[2], IdentityRules.isLoginClass(key) else { continue }
                logins[UserRef(project: project, id: user), default: [:]][key] = value
            }
        }
    }

    // MARK: Locking

    /// Takes the locks of `identities` and `users` this transaction does not hold yet (in one
    /// global order), and reads again the owners of `lookAgain`. True when it took any lock.
    @discardableResult
    func lock(identities: some Collection<ScopedIdentity>, users: some Collection<UserRef>, lookAgain: some Collection<ScopedIdentity>) throws -> Bool {
        let newIdentities = identities.filter { !lockedIdentities.contains($0) }
        let newUsers = users.filter { !lockedUsers.contains($0) }
        guard !newIdentities.isEmpty || !newUsers.isEmpty else { return false }
        var names = newIdentities.map { "i\u{1F}\($0.project)\u{1F}\($0.identity.key)\u{1F}\($0.identity.value)" }
        names += newUsers.map { "u\u{1F}\($0.project)\u{1F}\($0.id)" }
        try connection.lockInOrder(names)
        lockedIdentities.formUnion(newIdentities)
        lockedUsers.formUnion(newUsers)
        // Whatever was known about these users may have changed before the locks were granted.
        for user in newUsers { logins[user] = nil }
        try lookUpOwners(Array(lookAgain))
        return true
    }

    func holds(identities: some Collection<ScopedIdentity>, users: some Collection<UserRef>) -> Bool {
        identities.allSatisfy(lockedIdentities.contains) && users.allSatisfy(lockedUsers.contains)
    }

    // MARK: Changing

    func newUser(project: String) throws -> Int64 {
        guard
            let user = try connection.queryPrepared(
                "identity.new_user", "INSERT INTO identity.users (project) VALUES ($1) RETURNING user_id", [project]
            ).scalar.flatMap(Int64.init)
        else { throw PostgresError.unexpectedResult("no user id returned") }
        let ref = UserRef(project: project, id: user)
        logins[ref] = [:]
        lockedUsers.insert(ref)  // nobody else knows it yet
        return user
    }

    /// Links identities of `project` nobody owns to `user` (the caller holds their locks), in one
    /// statement: a new device links two or three at once, and each was a round trip.
    func link(_ identities: [IdentityKey], project: String, to user: Int64) throws {
        // One row each: the insert cannot update a row it inserted in the same statement.
        var seen: Set<IdentityKey> = []
        let identities = identities.filter { seen.insert($0).inserted }
        let rows = try connection.queryPrepared(
            "identity.link",
            """
            INSERT INTO identity.identities (project, key, value, user_id)
            SELECT $1, w.key, w.value, $4 FROM unnest($2::text[], $3::text[]) AS w(key, value)
            ON CONFLICT (project, key, value) DO UPDATE SET user_id = identity.identities.user_id
            RETURNING key, value, user_id
            """,
            [project, postgresTextArray(identities.map(\.key)), postgresTextArray(identities.map(\.value)), String(user)]
        ).rows
        var linked: Set<IdentityKey> = []
        for row in rows {
            guard let key = row[0], let value = row[1], row[2].flatMap(Int64.init) == user else { continue }
            linked.insert(IdentityKey(key: key, value: value))
        }
        let ref = UserRef(project: project, id: user)
        for identity in identities {
            guard linked.contains(identity) else {
                throw PostgresError.unexpectedResult("identity \(identity.description) was linked by a transaction that did not hold its lock")
            }
            owners[ScopedIdentity(project: project, identity: identity)] = user
            if IdentityRules.isLoginClass(identity.key), logins[ref] != nil { logins[ref]?[identity.key] = identity.value }
        }
        try forgetFlaglessForms(of: identities.filter { $0.key == IdentityRules.loginKey }.map(\.value), project: project)
    }

    /// A value that just became a login id may be held as a device id, linked by an old SDK's
    /// record before the sign-up: caches answering such records from those owners must forget
    /// them, so that the next one finds the login id (`IdentityPlan.loginAlias`).
    private func forgetFlaglessForms(of logins: [String], project: String) throws {
        guard !logins.isEmpty else { return }
        let rows = try connection.queryPrepared(
            "identity.flagless_forms",
            """
            WITH forms AS (
                SELECT key, value FROM identity.identities WHERE project = $1 AND value = ANY($2::text[]) AND key = ANY($3::text[])
            )
            INSERT INTO identity.invalidations (project, key, value) SELECT $1, key, value FROM forms RETURNING key, value
            """,
            [project, postgresTextArray(logins), postgresTextArray(IdentityRules.flaglessKeys)]
        ).rows
        for row in rows {
            guard let key = row[0], let value = row[1] else { continue }
            invalidated.append(ScopedIdentity(project: project, identity: IdentityKey(key: key, value: value)))
        }
    }

    /// Moves every identity of `from` to `into`, marks `from` merged, points everything that
    /// followed `from` at `into`, and records the merge. Returns the merge id.
    @discardableResult
    func merge(_ from: Int64, into: Int64, project: String, reason: String, cause: Cause) throws -> Int64 {
        let rows = try connection.queryPrepared(
            "identity.merge",
            """
            WITH moved AS (
                UPDATE identity.identities SET user_id = $3 WHERE project = $1 AND user_id = $2 RETURNING key, value
            ), recorded AS (
                INSERT INTO identity.merges (project, from_user, into_user, keys, vals, reason, actor, cause)
                SELECT $1, $2, $3, coalesce(array_agg(key ORDER BY key, value), '{}'),
                       coalesce(array_agg(value ORDER BY key, value), '{}'), $4, $5, $6::jsonb
                FROM moved
                RETURNING merge_id
            ), invalidated AS (
                INSERT INTO identity.invalidations (project, key, value) SELECT $1, key, value FROM moved
            ), merged AS (
                UPDATE identity.users SET merged_into = $3 WHERE project = $1 AND user_id = $2
            ), followers AS (
                UPDATE identity.user_map SET canonical_user_id = $3 WHERE project = $1 AND canonical_user_id = $2
            ), mapped AS (
                INSERT INTO identity.user_map (project, user_id, canonical_user_id) VALUES ($1, $2, $3)
                ON CONFLICT (project, user_id) DO UPDATE SET canonical_user_id = EXCLUDED.canonical_user_id
            )
            SELECT merge_id, NULL, NULL FROM recorded
            UNION ALL
            SELECT NULL, key, value FROM moved
            """,
            [project, String(from), String(into), reason, cause.actor, cause.json]
        ).rows
        var mergeID: Int64?
        for row in rows {
            if let id = row[0].flatMap(Int64.init) {
                mergeID = id
                continue
            }
            guard let key = row[1], let value = row[2] else { continue }
            let identity = ScopedIdentity(project: project, identity: IdentityKey(key: key, value: value))
            owners[identity] = into
            invalidated.append(identity)
        }
        for (identity, owner) in owners where owner == from && identity.project == project { owners[identity] = into }
        let fromRef = UserRef(project: project, id: from)
        let intoRef = UserRef(project: project, id: into)
        // What is known of `into`'s logins stays exact, or is forgotten (read again when needed).
        if let kept = logins[intoRef], let moved = logins[fromRef] {
            logins[intoRef] = kept.merging(moved) { kept, _ in kept }
        } else {
            logins[intoRef] = nil
        }
        logins[fromRef] = [:]
        guard let mergeID else { throw PostgresError.unexpectedResult("the merge was not recorded") }
        return mergeID
    }

    /// Detaches an identity from `owner` (the caller holds the owner's lock) and records it.
    func unbind(_ identity: ScopedIdentity, from owner: Int64, cause: Cause) throws {
        try connection.queryPrepared(
            "identity.unbind",
            """
            WITH gone AS (
                DELETE FROM identity.identities WHERE project = $1 AND key = $2 AND value = $3 AND user_id = $4 RETURNING key, value
            ), invalidated AS (
                INSERT INTO identity.invalidations (project, key, value) SELECT $1, key, value FROM gone
            )
            INSERT INTO identity.history (project, kind, user_id, key, value, reason, actor, cause)
            SELECT $1, 'unbind', $4, key, value, 'detached by ' || $5, $5, $6::jsonb FROM gone
            """,
            [identity.project, identity.identity.key, identity.identity.value, String(owner), cause.actor, cause.json]
        )
        owners[identity] = nil
        invalidated.append(identity)
        logins[UserRef(project: identity.project, id: owner)]?[identity.identity.key] = nil
    }

    /// Adds an entry to the history (conflicts, refusals, links through the API).
    func note(
        _ kind: String, project: String, user: Int64?, other: Int64? = nil, identity: IdentityKey?, reason: String, cause: Cause
    ) throws {
        try connection.queryPrepared(
            "identity.note",
            """
            INSERT INTO identity.history (project, kind, user_id, other_user, key, value, reason, actor, cause)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb)
            """,
            [project, kind, user.map { String($0) }, other.map { String($0) }, identity?.key, identity?.value, reason, cause.actor, cause.json]
        )
    }

    // MARK: Deciding

    /// Reads the owners of every identity of a batch and takes, all at once and in one global
    /// order, the locks its records will need: the new identities they link and the users they
    /// change. Records locking one by one in their own order would deadlock with a batch holding
    /// the same people in another order.
    func prepare(_ plans: [(plan: IdentityPlan, project: String)]) throws {
        var all: [ScopedIdentity] = []
        for (plan, project) in plans {
            for identity in plan.identities { all.append(ScopedIdentity(project: project, identity: identity)) }
            if let alias = plan.loginAlias { all.append(ScopedIdentity(project: project, identity: alias)) }
        }
        try lookUpOwners(all)
        var identities: Set<ScopedIdentity> = []
        var users: Set<UserRef> = []
        for (plan, project) in plans {
            guard let needs = needs(plan, project: project) else { continue }
            identities.formUnion(needs.identities)
            users.formUnion(needs.users)
        }
        try lock(identities: identities, users: users, lookAgain: all)
        try loadLogins(users)
    }

    /// The identities to lock and the users to load before `plan` may change the graph; nil
    /// when it changes nothing (its user is known, by its login alias or its identities). A plan
    /// with a login alias nobody holds locks the alias too: a sign-up making it a login id waits,
    /// or is waited for and then seen.
    private func needs(_ plan: IdentityPlan, project: String) -> (identities: [ScopedIdentity], users: [UserRef])? {
        let alias = plan.loginAlias.map { ScopedIdentity(project: project, identity: $0) }
        if let alias, owners[alias] != nil { return nil }
        guard let needs = MergeRule.needs(plan, owner: { self.owners[ScopedIdentity(project: project, identity: $0)] }) else { return nil }
        return (
            needs.link.map { ScopedIdentity(project: project, identity: $0) } + (alias.map { [$0] } ?? []),
            needs.users.map { UserRef(project: project, id: $0) }
        )
    }

    /// Applies one record's plan: takes any lock it still needs, lets `MergeRule` decide on the
    /// graph as it now is, and carries out the changes. With `strict` (links through the API) a
    /// clash is refused (`GraphRefusal`, and the caller's transaction rolls back) instead of
    /// recorded.
    func apply(_ plan: IdentityPlan, project: String, cause: Cause, strict: Bool = false) throws -> ResolvedUser {
        guard !plan.identities.isEmpty else { return ResolvedUser(userId: nil, created: false) }
        let scoped = plan.identities.map { ScopedIdentity(project: project, identity: $0) }
        let alias = plan.loginAlias.map { ScopedIdentity(project: project, identity: $0) }
        // Normally `prepare` took every lock already; a lock is taken here only when the graph
        // changed between the batch's lookup and its locks.
        var users: [UserRef]
        while true {
            guard let needs = needs(plan, project: project) else {
                let owner = alias.flatMap { owners[$0] } ?? scoped.lazy.compactMap { self.owners[$0] }.first
                return ResolvedUser(userId: owner, created: false)
            }
            users = needs.users
            if holds(identities: needs.identities, users: needs.users) { break }
            try lock(identities: needs.identities, users: needs.users, lookAgain: scoped + (alias.map { [$0] } ?? []))
        }
        try loadLogins(users)
        var view = GraphView()
        for identity in scoped { view.owners[identity.identity] = owners[identity] }
        for user in users { view.logins[user.id] = logins[user] }

        switch MergeRule.start(plan, in: view) {
        case .finished(let user, let changes):
            try carryOut(changes, user: user, project: project, cause: cause)
            return ResolvedUser(userId: user, created: false)
        case .attach(let existing):
            let user = try existing ?? newUser(project: project)
            try carryOut(try MergeRule.attach(plan, to: user, in: view, strict: strict), user: user, project: project, cause: cause)
            return ResolvedUser(userId: user, created: existing == nil)
        }
    }

    /// Makes `MergeRule`'s changes, in order; `user` is the record's user. Links that follow one
    /// another are made in one statement.
    private func carryOut(_ changes: [GraphChange], user: Int64?, project: String, cause: Cause) throws {
        var links: [IdentityKey] = []
        func linkWaiting() throws {
            guard !links.isEmpty else { return }
            guard let user else { throw PostgresError.unexpectedResult("a link without a user") }
            try link(links, project: project, to: user)
            links.removeAll()
        }
        for change in changes {
            switch change {
            case .link(let identity):
                links.append(identity)
            case .merge(let from, let reason):
                try linkWaiting()
                guard let user else { throw PostgresError.unexpectedResult("a merge without a user") }
                try merge(from, into: user, project: project, reason: reason, cause: cause)
            case .unbind(let identity, let owner):
                try linkWaiting()
                try unbind(ScopedIdentity(project: project, identity: identity), from: owner, cause: cause)
            case .note(let note):
                try linkWaiting()
                try self.note(note.kind, project: project, user: note.user, other: note.other, identity: note.identity, reason: note.reason, cause: cause)
            }
        }
        try linkWaiting()
    }
}
