import DatongPostgres
import Logging
import Prometheus
import ServiceLifecycle
import Synchronization

/// The owners of identities this replica has seen, so resolving known identities needs no query.
///
/// Freshness: an identity's owner only changes by a merge, an undo or an unbind, and every one of
/// those writes the identity to `identity.invalidations`. `CacheRefresher` reads the entries of
/// every transaction that finished since its last look, every `refreshInterval`, and forgets those
/// identities. A change made through another replica is therefore seen here within one refresh
/// interval plus the time of one refresh. From the first failed refresh until one succeeds again,
/// the cache does not answer (every resolve goes to PostgreSQL) and learns nothing; a refresh that
/// has not succeeded for `maxStaleness` (one that hangs) stops it answering too, and failing for
/// that long forgets everything.
///
/// A different database server (a promoted standby after a failover, or a restart) may not have
/// every transaction this replica saw: with asynchronous replication a merge committed on the old
/// primary can be lost, and its transaction ids used again. So the first refresh that reads from a
/// server other than the last one's forgets everything.
///
/// A lookup made in PostgreSQL before a refresh forgot something is not learned afterwards: every
/// forgetting starts a new epoch, and `update` learns only from reads of the current epoch.
///
/// Bounded: two generations of at most `capacity / 2` entries each; when the young one is full it
/// becomes the old one and the old one is dropped, so the identities in use stay.
package final class IdentityCache: Sendable {
    private struct State {
        var young: [ScopedIdentity: Int64] = [:]
        var old: [ScopedIdentity: Int64] = [:]
        var epoch: UInt64 = 0
        /// When the last refresh succeeded; nil before the first and after a failed one.
        var refreshedAt: ContinuousClock.Instant?
        /// The server the last refresh read from (its postmaster's start time).
        var server: String?
    }

    private let state = Mutex(State())
    private let generationSize: Int
    let maxStaleness: Duration

    package init(capacity: Int, maxStaleness: Duration) {
        generationSize = max(1, capacity / 2)
        self.maxStaleness = maxStaleness
    }

    /// The epoch to pass to `update` with what a read that starts now learns.
    var epoch: UInt64 { state.withLock { $0.epoch } }

    var count: Int { state.withLock { $0.young.count + $0.old.count } }

    /// For each list of identities, the user that owns all of them, when the cache knows every
    /// one and they agree; nil otherwise (and for empty lists).
    func users(of records: [[ScopedIdentity]]) -> [Int64?] {
        let now = ContinuousClock.now
        return state.withLock { state in
            guard let refreshed = state.refreshedAt, refreshed.advanced(by: maxStaleness) > now else {
                return [Int64?](repeating: nil, count: records.count)
            }
            return records.map { identities in
                var user: Int64?
                for identity in identities {
                    var owner = state.young[identity]
                    if owner == nil, let aged = state.old[identity] {
                        owner = aged
                        Self.insert(identity, aged, into: &state, generationSize: generationSize)
                    }
                    guard let owner, user == nil || user == owner else { return nil }
                    user = owner
                }
                return user
            }
        }
    }

    /// Forgets `forgetting` (changes this replica made), then learns `learned` if no refresh or
    /// change forgot anything since the read that found them began (`readAt`).
    func update(learned: [(ScopedIdentity, Int64)], readAt: UInt64, forgetting: [ScopedIdentity]) {
        state.withLock { state in
            let current = state.epoch
            if !forgetting.isEmpty { Self.forget(forgetting, in: &state) }
            guard readAt == current, state.refreshedAt != nil else { return }
            for (identity, user) in learned { Self.insert(identity, user, into: &state, generationSize: generationSize) }
        }
    }

    /// A refresh read the invalidation log of `server`: forgets what changed elsewhere, or
    /// everything when `server` is not the one the last refresh read from. True in that case.
    @discardableResult
    func refreshed(forgetting: [ScopedIdentity], at instant: ContinuousClock.Instant, server: String? = nil) -> Bool {
        state.withLock { state in
            let changed = server != nil && state.server != nil && server != state.server
            if server != nil { state.server = server }
            if changed {
                state.young.removeAll()
                state.old.removeAll()
                state.epoch &+= 1
            } else if !forgetting.isEmpty {
                Self.forget(forgetting, in: &state)
            }
            // Reads that began before the first look may have missed changes the log will
            // never show this replica: nothing they found is learned.
            if state.refreshedAt == nil { state.epoch &+= 1 }
            state.refreshedAt = instant
            return changed
        }
    }

    /// A refresh failed: the cache neither answers nor learns until one succeeds (the database
    /// may be failing over, and what it says next may differ from what was cached).
    func refreshFailed() {
        state.withLock { $0.refreshedAt = nil }
    }

    /// Refreshing failed for too long: forget everything (it is not used until a refresh works).
    func clear() {
        state.withLock { state in
            state.young.removeAll()
            state.old.removeAll()
            state.epoch &+= 1
        }
    }

    private static func forget(_ identities: [ScopedIdentity], in state: inout State) {
        for identity in identities {
            state.young[identity] = nil
            state.old[identity] = nil
        }
        state.epoch &+= 1
    }

    private static func insert(_ identity: ScopedIdentity, _ user: Int64, into state: inout State, generationSize: Int) {
        if state.young.count >= generationSize, state.young[identity] == nil {
            state.old = state.young
            state.young = [:]
            state.young.reserveCapacity(generationSize)
        }
        state.young[identity] = user
        state.old[identity] = nil
    }
}

/// Keeps one replica's `IdentityCache` fresh by reading `identity.invalidations`.
///
/// Each look reads, in one statement and so from one snapshot, the entries written by
/// transactions whose id is at least the previous look's horizon, and the horizon of now (the
/// oldest transaction still running). Entries of a transaction that was still running at the
/// previous look are therefore read once it has finished, whatever order transactions commit in.
package final class CacheRefresher: Service, Sendable {
    private let cache: IdentityCache
    private let pool: PostgresPool
    private let interval: Duration
    private let logger: Logger
    private let horizon = Mutex<String?>(nil)
    /// `datong_identity_cache_server_changes_total`: refreshes that found a different server.
    private let serverChanges: Counter?

    /// Entries older than this are deleted (a replica that could not look for this long has
    /// cleared its cache anyway).
    static let retention = "1 hour"

    package init(cache: IdentityCache, pool: PostgresPool, interval: Duration, logger: Logger, metrics: PrometheusCollectorRegistry? = nil) {
        self.serverChanges = metrics?.makeCounter(
            descriptor: MetricNameDescriptor(
                namespace: "datong", subsystem: "identity", metricName: "cache_server_changes", unitName: "total",
                helpText: "Refreshes of the identity cache that found a different database server and forgot everything"
            ))
        self.cache = cache
        self.pool = pool
        self.interval = interval
        self.logger = logger
    }

    package func run() async throws {
        try? await cancelWhenGracefulShutdown {
            var failingSince: ContinuousClock.Instant?
            var looks = 0
            while true {
                do {
                    try await self.refresh()
                    failingSince = nil
                    looks += 1
                    if looks % 600 == 0 { try await self.prune() }
                } catch {
                    self.cache.refreshFailed()
                    let now = ContinuousClock.now
                    let since = failingSince ?? now
                    failingSince = since
                    self.logger.warning("identity.cache_refresh_failed", metadata: ["error": "\(error)"])
                    if now - since >= self.cache.maxStaleness { self.cache.clear() }
                }
                try await Task.sleep(for: self.interval)
            }
        }
    }

    /// One look at the invalidation log.
    package func refresh() async throws {
        let started = ContinuousClock.now
        let previous = horizon.withLock { $0 }
        let rows = try await pool.withConnection { connection in
            try connection.queryPrepared(
                "identity.refresh",
                """
                SELECT pg_snapshot_xmin(pg_current_snapshot())::text, pg_postmaster_start_time()::text, NULL, NULL
                UNION ALL
                SELECT NULL, project, key, value FROM identity.invalidations WHERE $1::xid8 IS NOT NULL AND xid >= $1::xid8
                """,
                [previous]
            ).rows
        }
        var forgetting: [ScopedIdentity] = []
        var next: String?
        var server: String?
        for row in rows {
            if let horizon = row[0] {
                next = horizon
                server = row[1]
                continue
            }
            guard let project = row[1], let key = row[2], let value = row[3] else { continue }
            forgetting.append(ScopedIdentity(project: project, identity: IdentityKey(key: key, value: value)))
        }
        // Before the first look nothing was cached, so nothing older needs forgetting.
        horizon.withLock { $0 = next }
        if cache.refreshed(forgetting: forgetting, at: started, server: server) {
            logger.notice("identity.cache_cleared", metadata: ["reason": "the database server changed (failover or restart)"])
            serverChanges?.increment()
        }
    }

    private func prune() async throws {
        try await pool.withConnection { connection in
            try connection.query("DELETE FROM identity.invalidations WHERE created_at < now() - interval '\(Self.retention)'")
        }
    }
}
