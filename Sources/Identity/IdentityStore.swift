import DatongContracts
import DatongPostgres

/// Where identities live.
protocol IdentityStore: Sendable {
    /// One user per record, in order.
    func resolve(_ records: [IdentityRecord]) async throws -> [ResolvedUser]
}

/// Identities in PostgreSQL. The primary key on (project, key, value) is what guarantees one user
/// per identity when replicas race: a link is an `INSERT … ON CONFLICT DO NOTHING`, and the loser
/// adopts the winner's user.
struct PostgresIdentityStore: IdentityStore {
    let pool: PostgresPool

    func resolve(_ records: [IdentityRecord]) async throws -> [ResolvedUser] {
        let wanted = records.map { IdentityRules.identities(of: $0) }
        var attempt = 0
        while true {
            do {
                return try await pool.transaction { connection in
                    try Self.resolve(records, wanted, on: connection)
                }
            } catch let error as PostgresError where error.sqlState == "40P01" && attempt < 3 {
                // Two batches linked the same new identities in different orders; try again.
                attempt += 1
            }
        }
    }

    private struct Scoped: Hashable {
        let project: String
        let identity: IdentityKey
    }

    /// The users that own `identities` (per project) now.
    private static func lookUpOwners(_ identities: [String: Set<IdentityKey>], on connection: PostgresConnection) throws -> [Scoped: Int64] {
        var owners: [Scoped: Int64] = [:]
        for (project, keys) in identities where !keys.isEmpty {
            let list = Array(keys)
            let rows = try connection.query(
                """
                SELECT i.key, i.value, i.user_id FROM identity.identities i
                JOIN unnest($2::text[], $3::text[]) AS w(key, value) ON i.key = w.key AND i.value = w.value
                WHERE i.project = $1
                """,
                [project, postgresTextArray(list.map(\.key)), postgresTextArray(list.map(\.value))]
            ).rows
            for row in rows {
                guard let key = row[0], let value = row[1], let user = row[2].flatMap(Int64.init) else { continue }
                owners[Scoped(project: project, identity: IdentityKey(key: key, value: value))] = user
            }
        }
        return owners
    }

    private static func resolve(
        _ records: [IdentityRecord], _ wanted: [[IdentityKey]], on connection: PostgresConnection
    ) throws -> [ResolvedUser] {
        var byProject: [String: Set<IdentityKey>] = [:]
        for (record, identities) in zip(records, wanted) { byProject[record.project, default: []].formUnion(identities) }
        var owners = try lookUpOwners(byProject, on: connection)

        // Identities nobody owns yet are about to be linked. Take a lock per identity, all at once
        // and in one global order, so batches that link the same new identities in different
        // orders wait for each other instead of deadlocking; then look again, so whoever comes
        // second links to the user the first one made.
        var unowned: [String: Set<IdentityKey>] = [:]
        var lockNames: [String] = []
        for (project, identities) in byProject {
            for identity in identities where owners[Scoped(project: project, identity: identity)] == nil {
                unowned[project, default: []].insert(identity)
                lockNames.append("\(project)\u{1F}\(identity.key)\u{1F}\(identity.value)")
            }
        }
        if !lockNames.isEmpty {
            try connection.lockInOrder(lockNames)
            owners.merge(try lookUpOwners(unowned, on: connection)) { _, new in new }
        }

        var results: [ResolvedUser] = []
        results.reserveCapacity(records.count)
        for (record, identities) in zip(records, wanted) {
            guard !identities.isEmpty else {
                results.append(ResolvedUser(userId: nil, created: false))
                continue
            }
            let scoped = identities.map { Scoped(project: record.project, identity: $0) }
            var user = scoped.lazy.compactMap { owners[$0] }.first
            var created = false
            var linkedAny = user != nil
            if user == nil {
                user = try connection.queryPrepared(
                    "identity.new_user", "INSERT INTO identity.users (project) VALUES ($1) RETURNING user_id", [record.project]
                ).scalar.flatMap(Int64.init)
                created = true
            }
            guard var current = user else { throw PostgresError.unexpectedResult("no user id returned") }
            for identity in scoped where owners[identity] == nil {
                let inserted = try connection.queryPrepared(
                    "identity.link",
                    """
                    INSERT INTO identity.identities (project, key, value, user_id) VALUES ($1, $2, $3, $4)
                    ON CONFLICT DO NOTHING RETURNING user_id
                    """,
                    [identity.project, identity.identity.key, identity.identity.value, String(current)]
                ).scalar.flatMap(Int64.init)
                if let inserted {
                    owners[identity] = inserted
                    linkedAny = true
                    continue
                }
                // Another replica linked this identity first: it is that user's now.
                let owner = try connection.queryPrepared(
                    "identity.owner",
                    "SELECT user_id FROM identity.identities WHERE project = $1 AND key = $2 AND value = $3",
                    [identity.project, identity.identity.key, identity.identity.value]
                ).scalar.flatMap(Int64.init)
                guard let owner else { throw PostgresError.unexpectedResult("identity vanished during resolve") }
                owners[identity] = owner
                if !linkedAny {
                    // Nothing links to the user made above yet: adopt the winner instead, and drop
                    // the user this transaction made so no user without identities is left behind.
                    if created {
                        try connection.queryPrepared(
                            "identity.drop_user", "DELETE FROM identity.users WHERE project = $1 AND user_id = $2",
                            [identity.project, String(current)]
                        )
                    }
                    current = owner
                    created = false
                    linkedAny = true
                }
            }
            results.append(ResolvedUser(userId: current, created: created))
        }
        return results
    }
}
