import DatongContracts
import DatongPostgres
import IdentityCore
import Synchronization

/// `identity.invalidations` read from PostgreSQL: what identity-service's replicas follow, and what
/// `GET /v1/invalidations` answers the gateways.
///
/// Each look reads, in one statement and so from one snapshot, the entries written by
/// transactions whose id is at least the previous look's horizon, and the horizon of now (the
/// oldest transaction still running). Entries of a transaction that was still running at the
/// previous look are therefore read once it has finished, whatever order transactions commit in.
package final class PostgresInvalidationLog: InvalidationSource {
    let pool: PostgresPool
    private let lastPruned = Mutex<ContinuousClock.Instant?>(nil)

    package init(pool: PostgresPool) { self.pool = pool }

    /// Entries older than this are deleted: every cache that answers has read them (a cache that
    /// has not looked for `CacheFeed.maxGap` forgets everything when it does). Erased ids leave
    /// the log with them (docs/PRIVACY.md).
    static let retention = "5 minutes"
    static let pruneEvery: Duration = .seconds(60)

    package func look(after horizon: String?) async throws -> InvalidationLog {
        let rows = try await pool.withConnection { connection in
            try connection.queryPrepared(
                "identity.refresh",
                """
                SELECT pg_snapshot_xmin(pg_current_snapshot())::text, pg_postmaster_start_time()::text, NULL, NULL
                UNION ALL
                (SELECT NULL, project, key, value FROM identity.invalidations WHERE $1::xid8 IS NOT NULL AND xid >= $1::xid8 LIMIT $2)
                """,
                [horizon, String(InvalidationLog.maxIdentities + 1)]
            ).rows
        }
        var identities: [IdentityName] = []
        var next: String?
        var server: String?
        for row in rows {
            if let horizon = row[0] {
                next = horizon
                server = row[1]
                continue
            }
            guard let project = row[1], let key = row[2], let value = row[3] else { continue }
            identities.append(IdentityName(project: project, key: key, value: value))
        }
        guard let next, let server else { throw PostgresError.unexpectedResult("the invalidation look returned no horizon") }
        let complete = identities.count <= InvalidationLog.maxIdentities
        try await pruneIfDue()
        return InvalidationLog(server: server, horizon: next, identities: complete ? identities : [], complete: complete)
    }

    private func pruneIfDue() async throws {
        let now = ContinuousClock.now
        let due = lastPruned.withLock { last in
            guard last.map({ now - $0 >= Self.pruneEvery }) ?? true else { return false }
            last = now
            return true
        }
        guard due else { return }
        try await pool.withConnection { connection in
            try connection.query("DELETE FROM identity.invalidations WHERE created_at < now() - interval '\(Self.retention)'")
        }
    }

    /// True for an `after` a caller may pass: an xid8, as a previous look answered it.
    static func isHorizon(_ text: String) -> Bool {
        text.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") } && UInt64(text) != nil
    }
}
