import DatongContracts
import DatongPostgres
import IdentityCore
import Synchronization

/// `identity.invalidations` read from PostgreSQL: what identity-service's replicas follow, and what
/// `GET /v1/invalidations` answers the gateways.
///
/// Each look reads, in one statement and so from one snapshot, the entries of the transactions
/// that snapshot sees finished and the previous look's did not, and answers its snapshot (which
/// transactions had finished) as the horizon for the next. Entries of a transaction that was still
/// running at the previous look are therefore read once it has finished, whatever order
/// transactions commit in, and each entry is read once: a horizon that held only the oldest
/// running transaction made every look read again all that finished after it, so one long writer
/// anywhere on the server had every cache forget the same identities each interval.
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
        let snapshot = horizon.flatMap(Self.snapshot(horizon:))
        let rows = try await pool.withConnection { connection in
            try connection.queryPrepared(
                "identity.refresh",
                """
                SELECT pg_current_snapshot()::text, pg_postmaster_start_time()::text, NULL, NULL
                UNION ALL
                (SELECT NULL, project, key, value FROM identity.invalidations
                 WHERE $1::pg_snapshot IS NOT NULL AND xid >= pg_snapshot_xmin($1::pg_snapshot)
                   AND NOT pg_visible_in_snapshot(xid, $1::pg_snapshot)
                 LIMIT $2)
                """,
                [snapshot, String(InvalidationLog.maxIdentities + 1)]
            ).rows
        }
        var identities: [IdentityName] = []
        var next: String?
        var server: String?
        for row in rows {
            if let horizon = row[0] {
                next = Self.bounded(horizon)
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

    /// The longest horizon answered (a snapshot of about 400 running transactions); past it, the
    /// snapshot's oldest running transaction alone, which reads again what finished after it.
    static let maxHorizonBytes = 8192

    /// `snapshot`, or its `xmin:xmin:` form when it is longer than `maxHorizonBytes`.
    package static func bounded(_ snapshot: String) -> String {
        guard snapshot.utf8.count > maxHorizonBytes, let xmin = snapshot.split(separator: ":").first else { return snapshot }
        return "\(xmin):\(xmin):"
    }

    /// The `pg_snapshot` a horizon stands for, or nil when `horizon` is not one a look answers: a
    /// snapshot (`xmin:xmax:xip,…`, as PostgreSQL writes it and takes it: 1 ≤ xmin ≤ xmax, the
    /// running ids ascending in [xmin, xmax)), or an xid8 alone, which a gateway of the previous
    /// version passes and which stands for every transaction from it on.
    static func snapshot(horizon: String) -> String? {
        guard horizon.utf8.count <= maxHorizonBytes else { return nil }
        func number(_ text: Substring) -> UInt64? {
            // At most Int64.max: PostgreSQL refuses some snapshots beyond it (a 5xx, not a 400).
            text.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") } ? Int64(text).map(UInt64.init) : nil
        }
        let parts = horizon.split(separator: ":", omittingEmptySubsequences: false)
        if parts.count == 1 {
            guard let xid = number(parts[0]), xid >= 1 else { return nil }
            return "\(xid):\(xid):"
        }
        guard parts.count == 3, let xmin = number(parts[0]), let xmax = number(parts[1]), xmin >= 1, xmin <= xmax else { return nil }
        var previous = xmin
        for running in parts[2].split(separator: ",", omittingEmptySubsequences: false) where !parts[2].isEmpty {
            guard let xid = number(running), xid >= previous, xid < xmax else { return nil }
            previous = xid
        }
        return horizon
    }
}
