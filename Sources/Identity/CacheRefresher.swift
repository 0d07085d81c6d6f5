import DatongPostgres
import IdentityCore
import Logging
import Prometheus
import ServiceLifecycle
import Synchronization

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
