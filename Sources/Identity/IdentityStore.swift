import DatongContracts
import DatongJSON
import DatongPostgres
import DatongRuntime
import Foundation
import IdentityCore

/// Where identity-service keeps the graph: resolving records, the API's changes and reads.
protocol IdentityStore: Sendable {
    /// One user per record, in order. Records whose identities the cache knows, all owned by one
    /// user, need no query; the others are resolved in one transaction. With `forCache` every
    /// record is resolved in PostgreSQL and the answer says which users own all their record's
    /// identities, and which identities the call moved.
    func resolve(_ request: ResolveRequest, requestID: String) async throws -> ResolveResponse
    /// Links `identities` to one user through the API: like a record carrying them, but a clash of
    /// login ids is refused (`GraphRefusal`) instead of recorded.
    func link(project: String, identities: [String: String], cause: Cause) async throws -> ResolvedUser
    /// Detaches one identity through the API; nil when nobody owns it.
    func unbind(project: String, identity: IdentityKey, cause: Cause) async throws -> Int64?
    /// Merges `from` into `into` on an operator's word: allowed even when both have login ids.
    func merge(project: String, from: Int64, into: Int64, cause: Cause) async throws -> MergeRecord
    /// Undoes a merge: the identities it moved go back to the user they came from (those the
    /// survivor still holds), the merged user is live again, and every user that followed it
    /// follows it again. Refused when the survivor was itself merged since (undo that first).
    func undo(project: String, mergeID: Int64, cause: Cause) async throws -> MergeRecord
    func user(project: String, id: Int64) async throws -> UserRecord?
    func owner(project: String, identity: IdentityKey) async throws -> Int64?
    /// The merges a user took part in and its history entries, newest first (at most `limit` each);
    /// nil when there is no such user.
    func history(project: String, user: Int64, limit: Int) async throws -> UserHistory?
    func mergeRecord(project: String, id: Int64) async throws -> MergeRecord?
    /// The person `reference` leads to: its current user, the users merged into that one and every
    /// id they hold; nil when nobody holds the id or there is no such user.
    func erasureSubject(project: String, reference: UserReference) async throws -> ErasureSubject?
    /// Forgets `subject`'s users: their ids (every cache told), merges, history entries and the
    /// users themselves. Idempotent: a second call finds nothing and removes nothing.
    func erase(project: String, subject: ErasureSubject) async throws -> IdentityErasure
}

extension IdentityStore {
    /// A user's history, at most 1000 merges and entries of each.
    func history(project: String, user: Int64) async throws -> UserHistory? { try await history(project: project, user: user, limit: 1000) }
}

/// The identity graph in PostgreSQL, with the identities already known answered from `cache`.
///
/// The primary key on (project, key, value) keeps one user per identity; the graph's advisory locks
/// (see `GraphTransaction`) keep replicas that change overlapping parts of the graph from deciding
/// on stale owners. Every change that moves or detaches an identity writes it to
/// `identity.invalidations`, which every replica's `CacheFeed` reads.
package struct PostgresIdentityStore: IdentityStore {
    let pool: PostgresPool
    var cache: IdentityCache? = nil

    package init(pool: PostgresPool, cache: IdentityCache? = nil) {
        self.pool = pool
        self.cache = cache
    }

    /// One user per record, in order (a resolve without `forCache`).
    package func resolve(_ records: [IdentityRecord], requestID: String = "") async throws -> [ResolvedUser] {
        try await resolve(ResolveRequest(records: records), requestID: requestID).users
    }

    /// Resolves the records by the procedure the gateway runs too (`IdentityResolution`): here the
    /// cache's misses are applied to the graph in one transaction. A caller with a cache of its own
    /// (`forCache`) is answered from PostgreSQL only: this cache may be older than the
    /// invalidations that caller has already read.
    package func resolve(_ request: ResolveRequest, requestID: String = "") async throws -> ResolveResponse {
        let resolved = try await IdentityResolution.resolve(request.records.map { $0 }, cache: cache, answerFromCache: !request.forCache) {
            toResolve in
            let (users, owners, invalidated) = try await write { transaction in
                try transaction.prepare(toResolve.map { ($0.plan, $0.record.project) })
                var users = try toResolve.map { entry in
                    try transaction.apply(
                        entry.plan, project: entry.record.project, cause: .record(entry.record, index: entry.positions[0], requestID: requestID))
                }
                var learned: [(ScopedIdentity, Int64)] = []
                for (position, entry) in toResolve.enumerated() {
                    let (plan, project) = (entry.plan, entry.record.project)
                    // A record that is its login alias's: this replica learns the alias's owner; the
                    // caller is not told the record's identities are that user's (they are not).
                    if let alias = plan.loginAlias.map({ ScopedIdentity(project: project, identity: $0) }), let owner = transaction.owners[alias] {
                        learned.append((alias, owner))
                        users[position].owned = false
                        continue
                    }
                    var owned = users[position].userId != nil && plan.answerableFromCache
                    for identity in plan.identities {
                        let scoped = ScopedIdentity(project: project, identity: identity)
                        let owner = transaction.owners[scoped]
                        if let owner { learned.append((scoped, owner)) }
                        if owner != users[position].userId { owned = false }
                    }
                    users[position].owned = owned
                }
                return (users, learned, transaction.invalidated)
            }
            return IdentityResolution.Fetched(users: users, learned: owners, forgetting: invalidated)
        }
        return ResolveResponse(
            users: resolved.users.map { $0 ?? ResolvedUser(userId: nil, created: false) },
            invalidated: resolved.forgetting.map { IdentityName(project: $0.project, key: $0.identity.key, value: $0.identity.value) }
        )
    }

    func link(project: String, identities: [String: String], cause: Cause) async throws -> ResolvedUser {
        var plan = IdentityPlan(identities: [])
        for (key, value) in identities {
            guard !key.isEmpty, key.utf8.count <= 255 else { throw GraphRefusal(code: .invalidIdentity, message: "identity keys are 1 to 255 bytes") }
            guard IdentityRules.isLegal(value) else {
                throw GraphRefusal(code: .illegalIdentity, message: "\(key)=\(value.prefix(64)) is not a legal identity value")
            }
            plan.identities.append(IdentityKey(key: key, value: value))
        }
        guard !plan.identities.isEmpty else { throw GraphRefusal(code: .noIdentities, message: "name at least one identity") }
        plan.identities.sort()
        let linking = plan
        let epoch = cache?.epoch ?? 0
        let (user, invalidated) = try await write { transaction in
            (try transaction.apply(linking, project: project, cause: cause, strict: true), transaction.invalidated)
        }
        cache?.update(learned: [], readAt: epoch, forgetting: invalidated)
        return user
    }

    func unbind(project: String, identity: IdentityKey, cause: Cause) async throws -> Int64? {
        guard !IdentityRules.notUnbindable.contains(identity.key) else {
            throw GraphRefusal(code: .cannotUnbind, message: "\(identity.key) cannot be unbound")
        }
        let scoped = ScopedIdentity(project: project, identity: identity)
        let epoch = cache?.epoch ?? 0
        let (owner, invalidated) = try await write { transaction -> (Int64?, [ScopedIdentity]) in
            try transaction.lookUpOwners([scoped])
            guard let owner = transaction.owners[scoped] else { return (nil, []) }
            try transaction.lock(identities: [scoped], users: [UserRef(project: project, id: owner)], lookAgain: [scoped])
            guard let current = transaction.owners[scoped] else { return (nil, []) }
            try transaction.unbind(scoped, from: current, cause: cause)
            return (current, transaction.invalidated)
        }
        cache?.update(learned: [], readAt: epoch, forgetting: invalidated)
        return owner
    }

    func merge(project: String, from: Int64, into: Int64, cause: Cause) async throws -> MergeRecord {
        guard from != into else { throw GraphRefusal(code: .sameUser, message: "a user cannot be merged into itself") }
        let epoch = cache?.epoch ?? 0
        let (record, invalidated) = try await write { transaction -> (MergeRecord, [ScopedIdentity]) in
            try transaction.lock(
                identities: [ScopedIdentity](), users: [UserRef(project: project, id: from), UserRef(project: project, id: into)], lookAgain: [ScopedIdentity]()
            )
            for user in [from, into] {
                let state = try transaction.connection.query(
                    "SELECT merged_into FROM identity.users WHERE project = $1 AND user_id = $2", [project, String(user)]
                ).rows
                guard let row = state.first else { throw GraphRefusal(code: .unknownUser, message: "project \(project) has no user \(user)") }
                if let merged = row[0] {
                    throw GraphRefusal(code: .alreadyMerged, message: "user \(user) was merged into user \(merged); merge that one")
                }
            }
            let id = try transaction.merge(from, into: into, project: project, reason: "merged through the API", cause: cause)
            guard let record = try Self.mergeRecord(project: project, id: id, on: transaction.connection) else {
                throw PostgresError.unexpectedResult("merge \(id) vanished")
            }
            return (record, transaction.invalidated)
        }
        cache?.update(learned: [], readAt: epoch, forgetting: invalidated)
        return record
    }

    func undo(project: String, mergeID: Int64, cause: Cause) async throws -> MergeRecord {
        let epoch = cache?.epoch ?? 0
        let (record, invalidated) = try await write { transaction -> (MergeRecord, [ScopedIdentity]) in
            guard let merge = try Self.mergeRecord(project: project, id: mergeID, on: transaction.connection) else {
                throw GraphRefusal(code: .unknownMerge, message: "project \(project) has no merge \(mergeID)")
            }
            try transaction.lock(
                identities: [ScopedIdentity](), users: [UserRef(project: project, id: merge.fromUser), UserRef(project: project, id: merge.intoUser)],
                lookAgain: [ScopedIdentity]()
            )
            // Read again under the locks: another undo may have finished while this one waited.
            guard let locked = try Self.mergeRecord(project: project, id: mergeID, on: transaction.connection), locked.undoneAt == nil else {
                throw GraphRefusal(code: .alreadyUndone, message: "merge \(mergeID) is already undone")
            }
            if let later = try transaction.connection.query(
                """
                SELECT merge_id FROM identity.merges
                WHERE project = $1 AND from_user = $2 AND undone_at IS NULL ORDER BY merge_id DESC LIMIT 1
                """,
                [project, String(merge.intoUser)]
            ).scalar {
                throw GraphRefusal(
                    code: .mergedSince,
                    message: "user \(merge.intoUser) was merged into another user since (merge \(later)); undo merge \(later) first"
                )
            }
            let moved = try transaction.connection.query(
                """
                WITH moved AS (
                    UPDATE identity.identities i SET user_id = m.from_user
                    FROM identity.merges m, unnest(m.keys, m.vals) AS x(key, value)
                    WHERE m.project = $1 AND m.merge_id = $2
                      AND i.project = $1 AND i.user_id = m.into_user AND i.key = x.key AND i.value = x.value
                    RETURNING i.key, i.value
                ), invalidated AS (
                    INSERT INTO identity.invalidations (project, key, value) SELECT $1, key, value FROM moved
                )
                SELECT key, value FROM moved
                """,
                [project, String(mergeID)]
            ).rows
            try transaction.connection.query(
                """
                WITH RECURSIVE followers(user_id) AS (
                    SELECT user_id FROM identity.users WHERE project = $1 AND merged_into = $2
                    UNION
                    SELECT u.user_id FROM identity.users u JOIN followers f ON u.merged_into = f.user_id WHERE u.project = $1
                ), revived AS (
                    UPDATE identity.users SET merged_into = NULL WHERE project = $1 AND user_id = $2
                ), unmapped AS (
                    DELETE FROM identity.user_map WHERE project = $1 AND user_id = $2
                ), undone AS (
                    UPDATE identity.merges SET undone_at = now(), undone_by = $3 WHERE project = $1 AND merge_id = $4
                )
                UPDATE identity.user_map SET canonical_user_id = $2
                WHERE project = $1 AND user_id IN (SELECT user_id FROM followers)
                """,
                [project, String(merge.fromUser), cause.actor, String(mergeID)]
            )
            guard let record = try Self.mergeRecord(project: project, id: mergeID, on: transaction.connection) else {
                throw PostgresError.unexpectedResult("merge \(mergeID) vanished")
            }
            let invalidated = moved.compactMap { row -> ScopedIdentity? in
                guard let key = row[0], let value = row[1] else { return nil }
                return ScopedIdentity(project: project, identity: IdentityKey(key: key, value: value))
            }
            return (record, invalidated)
        }
        cache?.update(learned: [], readAt: epoch, forgetting: invalidated)
        return record
    }

    // MARK: Reading through the API

    func user(project: String, id: Int64) async throws -> UserRecord? {
        try await pool.withConnection { connection in
            guard
                let row = try connection.query(
                    """
                    SELECT u.user_id, coalesce(m.canonical_user_id, u.user_id), u.merged_into, to_char(u.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                    FROM identity.users u LEFT JOIN identity.user_map m ON m.project = u.project AND m.user_id = u.user_id
                    WHERE u.project = $1 AND u.user_id = $2
                    """,
                    [project, String(id)]
                ).rows.first
            else { return nil }
            let identities = try connection.query(
                "SELECT key, value FROM identity.identities WHERE project = $1 AND user_id = $2 ORDER BY key, value LIMIT 10000",
                [project, String(id)]
            ).rows.compactMap { row in row[0].flatMap { key in row[1].map { IdentityPair(key: key, value: $0) } } }
            return UserRecord(
                project: project, userId: id, canonicalUserId: row[1].flatMap(Int64.init) ?? id,
                mergedInto: row[2].flatMap(Int64.init), createdAt: row[3] ?? "", identities: identities
            )
        }
    }

    func owner(project: String, identity: IdentityKey) async throws -> Int64? {
        try await pool.withConnection { connection in
            try connection.query(
                "SELECT user_id FROM identity.identities WHERE project = $1 AND key = $2 AND value = $3",
                [project, identity.key, identity.value]
            ).scalar.flatMap(Int64.init)
        }
    }

    func history(project: String, user: Int64, limit: Int) async throws -> UserHistory? {
        try await pool.withConnection { connection in
            guard
                try connection.query(
                    "SELECT 1 FROM identity.users WHERE project = $1 AND user_id = $2", [project, String(user)]
                ).rows.count == 1
            else { return nil }
            let merges = try connection.query(
                Self.mergeSelect + " WHERE project = $1 AND (from_user = $2 OR into_user = $2) ORDER BY merge_id DESC LIMIT $3",
                [project, String(user), String(limit)]
            ).rows.compactMap { Self.mergeRecord(project: project, row: $0) }
            let entries = try connection.query(
                """
                SELECT entry_id, kind, user_id, other_user, key, value, reason, actor, cause::text,
                       to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                FROM identity.history WHERE project = $1 AND (user_id = $2 OR other_user = $2)
                ORDER BY entry_id DESC LIMIT $3
                """,
                [project, String(user), String(limit)]
            ).rows.compactMap { row -> HistoryEntry? in
                guard let id = row[0].flatMap(Int64.init), let kind = row[1], let reason = row[6], let actor = row[7] else { return nil }
                return HistoryEntry(
                    entryId: id, kind: kind, userId: row[2].flatMap(Int64.init), otherUser: row[3].flatMap(Int64.init),
                    key: row[4], value: row[5], reason: reason, actor: actor, cause: Self.cause(row[8]), createdAt: row[9] ?? ""
                )
            }
            return UserHistory(project: project, userId: user, merges: merges, entries: entries)
        }
    }

    func mergeRecord(project: String, id: Int64) async throws -> MergeRecord? {
        try await pool.withConnection { connection in try Self.mergeRecord(project: project, id: id, on: connection) }
    }

    // MARK: Erasure

    func erasureSubject(project: String, reference: UserReference) async throws -> ErasureSubject? {
        try await pool.withConnection { connection in
            var start = reference.userId
            if let key = reference.key, let value = reference.value {
                start = try connection.query(
                    "SELECT user_id FROM identity.identities WHERE project = $1 AND key = $2 AND value = $3", [project, key, value]
                ).scalar.flatMap(Int64.init)
            }
            if let distinct = reference.distinctId {
                start = try Self.holder(project: project, distinctId: distinct, on: connection)
            }
            guard let start,
                let canonical = try connection.query(
                    """
                    SELECT coalesce(m.canonical_user_id, u.user_id) FROM identity.users u
                    LEFT JOIN identity.user_map m ON m.project = u.project AND m.user_id = u.user_id
                    WHERE u.project = $1 AND u.user_id = $2
                    """,
                    [project, String(start)]
                ).scalar.flatMap(Int64.init)
            else { return nil }
            let merged = try connection.query(
                "SELECT user_id FROM identity.user_map WHERE project = $1 AND canonical_user_id = $2 ORDER BY user_id LIMIT $3",
                [project, String(canonical), String(ErasureSubject.maxUsers - 1)]
            ).rows.compactMap { $0[0].flatMap(Int64.init) }
            let users = [canonical] + merged.filter { $0 != canonical }
            var identities = try connection.query(
                "SELECT key, value FROM identity.identities WHERE project = $1 AND user_id = ANY($2::bigint[]) ORDER BY key, value LIMIT $3",
                [project, postgresBigintArray(users), String(ErasureSubject.maxIdentities)]
            ).rows.compactMap { row in row[0].flatMap { key in row[1].map { IdentityPair(key: key, value: $0) } } }
            if let key = reference.key, let value = reference.value, !identities.contains(IdentityPair(key: key, value: value)) {
                identities.append(IdentityPair(key: key, value: value))
            }
            return ErasureSubject(users: users, identities: identities)
        }
    }

    /// The holders of a value under any key, by the primary key alone: the project's few keys
    /// found by skipping through the index (a loose index scan), then one lookup each, where a
    /// filter on the value would read every id of the project.
    static let holdersQuery = """
        WITH RECURSIVE keys(key) AS (
            (SELECT key FROM identity.identities WHERE project = $1 ORDER BY key LIMIT 1)
            UNION ALL
            SELECT (SELECT i.key FROM identity.identities i WHERE i.project = $1 AND i.key > keys.key ORDER BY i.key LIMIT 1)
            FROM keys WHERE keys.key IS NOT NULL
        )
        SELECT coalesce(m.canonical_user_id, i.user_id), i.key FROM keys
        JOIN LATERAL (SELECT user_id, key FROM identity.identities WHERE project = $1 AND key = keys.key AND value = $2) i ON true
        LEFT JOIN identity.user_map m ON m.project = $1 AND m.user_id = i.user_id
        ORDER BY 1, 2 LIMIT 20
        """

    /// The user whose ids hold `distinctId` as their value, under any key; nil when none does, and
    /// a 409 naming each holder when they are different people (merged users are one person).
    static func holder(project: String, distinctId: String, on connection: PostgresConnection) throws -> Int64? {
        let rows = try connection.query(Self.holdersQuery, [project, distinctId]).rows.compactMap { row in
            row[0].flatMap(Int64.init).flatMap { user in row[1].map { (user, $0) } }
        }
        let users = Set(rows.map(\.0))
        guard users.count > 1 else { return users.first }
        let holders = rows.map { "\($0.1) of user \($0.0)" }.joined(separator: ", ")
        throw GraphRefusal(
            code: .ambiguousId,
            message:
                "'\(distinctId)' is an id of \(users.count)\(rows.count == 20 ? " or more" : "") users (\(holders)): name one by key and value, or by user number"
        )
    }

    func erase(project: String, subject: ErasureSubject) async throws -> IdentityErasure {
        let users = postgresBigintArray(subject.users)
        let keys = postgresTextArray(subject.identities.map(\.key))
        let values = postgresTextArray(subject.identities.map(\.value))
        let epoch = cache?.epoch ?? 0
        let (erased, invalidated) = try await write { transaction -> (IdentityErasure, [ScopedIdentity]) in
            // Under the users' locks: no resolve gives them an id while they are being forgotten.
            _ = try transaction.lock(identities: [], users: subject.users.map { UserRef(project: project, id: $0) }, lookAgain: [])
            let connection = transaction.connection
            let gone = try connection.query(
                """
                WITH gone AS (
                    DELETE FROM identity.identities WHERE project = $1 AND user_id = ANY($2::bigint[]) RETURNING key, value
                ), invalidated AS (
                    INSERT INTO identity.invalidations (project, key, value) SELECT $1, key, value FROM gone
                )
                SELECT key, value FROM gone
                """,
                [project, users]
            ).rows.compactMap { row in
                row[0].flatMap { key in row[1].map { ScopedIdentity(project: project, identity: IdentityKey(key: key, value: $0)) } }
            }
            let merges = try connection.query(
                "DELETE FROM identity.merges WHERE project = $1 AND (from_user = ANY($2::bigint[]) OR into_user = ANY($2::bigint[]))",
                [project, users]
            ).affectedRows
            // Entries of other users that name one of the person's ids go too (a refused link).
            let history = try connection.query(
                """
                DELETE FROM identity.history WHERE project = $1
                AND (user_id = ANY($2::bigint[]) OR other_user = ANY($2::bigint[])
                     OR (key, value) IN (SELECT * FROM unnest($3::text[], $4::text[])))
                """,
                [project, users, keys, values]
            ).affectedRows
            try connection.query(
                "DELETE FROM identity.user_map WHERE project = $1 AND (user_id = ANY($2::bigint[]) OR canonical_user_id = ANY($2::bigint[]))",
                [project, users]
            )
            let removed = try connection.query(
                "DELETE FROM identity.users WHERE project = $1 AND user_id = ANY($2::bigint[])", [project, users]
            ).affectedRows
            return (IdentityErasure(identities: gone.count, users: removed, merges: merges, history: history), gone)
        }
        cache?.update(learned: [], readAt: epoch, forgetting: invalidated)
        return erased
    }

    // MARK: Helpers

    private static let mergeSelect = """
        SELECT merge_id, from_user, into_user, array_to_json(keys)::text, array_to_json(vals)::text, reason, actor, cause::text,
               to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
               to_char(undone_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), undone_by
        FROM identity.merges
        """

    private static func mergeRecord(project: String, id: Int64, on connection: PostgresConnection) throws -> MergeRecord? {
        try connection.query(Self.mergeSelect + " WHERE project = $1 AND merge_id = $2", [project, String(id)])
            .rows.first.flatMap { mergeRecord(project: project, row: $0) }
    }

    private static func mergeRecord(project: String, row: [String?]) -> MergeRecord? {
        guard let id = row[0].flatMap(Int64.init), let from = row[1].flatMap(Int64.init), let into = row[2].flatMap(Int64.init),
            let keys = row[3].flatMap(jsonStrings), let values = row[4].flatMap(jsonStrings), keys.count == values.count
        else { return nil }
        return MergeRecord(
            project: project, mergeId: id, fromUser: from, intoUser: into,
            identities: zip(keys, values).map { IdentityPair(key: $0, value: $1) },
            reason: row[5] ?? "", actor: row[6] ?? "", cause: Self.cause(row[7]), createdAt: row[8] ?? "",
            undoneAt: row[9], undoneBy: row[10]
        )
    }

    /// A stored cause (snake_case JSON) as the API shows it.
    private static func cause(_ text: String?) -> ChangeCause {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return (try? decoder.decode(ChangeCause.self, from: Data((text ?? "{}").utf8))) ?? ChangeCause()
    }

    /// A JSON array of strings, as `array_to_json` writes it.
    private static func jsonStrings(_ text: String) -> [String]? {
        guard let root = try? JSONParser.parse(Array(text.utf8), maxDepth: 2).root, root.kind == .array else { return nil }
        var strings: [String] = []
        for element in root.elements {
            guard let string = element.stringValue else { return nil }
            strings.append(string)
        }
        return strings
    }

    /// Runs `body` in a transaction, again when two transactions deadlocked (locks taken late,
    /// after the graph changed between a lookup and its locks).
    private func write<T: Sendable>(_ body: @escaping @Sendable (GraphTransaction) throws -> T) async throws -> T {
        var attempt = 0
        while true {
            do {
                return try await pool.transaction { connection in try body(GraphTransaction(connection: connection)) }
            } catch let error as PostgresError where error.sqlState == "40P01" && attempt < 3 {
                attempt += 1
            }
        }
    }
}
