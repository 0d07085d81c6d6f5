import DatongContracts
import Foundation
import Logging
import Prometheus
import ServiceLifecycle
import Synchronization

/// Where a cache reads `identity.invalidations`: PostgreSQL itself (identity-service's replicas)
/// or identity-service's `GET /v1/invalidations` (the gateway).
package protocol InvalidationSource: Sendable {
    /// The identities whose owner changed in transactions that finished since the look that
    /// answered `after` (nothing on the first look, `after` nil), and where the next look starts.
    func look(after horizon: String?) async throws -> InvalidationLog
}

/// Keeps an `IdentityCache` fresh: every `interval` it reads the invalidation log from `source` and
/// forgets what changed. From the first failed look until one succeeds the cache neither answers
/// nor learns; failing for the cache's `maxStaleness` forgets everything, and so does a look that
/// ends more than `maxGap` after the last good one began (one that hung): the log keeps its entries
/// only `PostgresInvalidationLog.retention`, and such a look may have missed some.
package final class CacheFeed: Service, Sendable {
    private let cache: IdentityCache
    private let source: any InvalidationSource
    private let interval: Duration
    private let maxGap: Duration
    private let logger: Logger
    private let horizon = Mutex<String?>(nil)
    /// When the last look that succeeded began.
    private let lastLook = Mutex<ContinuousClock.Instant?>(nil)

    /// Below the log's retention (5 minutes) by more than the longest interval (1 minute) and
    /// than any transaction that writes the log runs.
    package static let maxGap: Duration = .seconds(120)
    /// `datong_identity_cache_server_changes_total`: looks that found a different server.
    private let serverChanges: Counter?
    /// `datong_identity_cache_last_refresh_timestamp_seconds`: when the last look that succeeded
    /// ended (Unix time), so that an alert sees a cache that stopped refreshing.
    private let lastRefresh: Gauge?
    /// The time looks are measured by: the clock's, or a test's that moves it on by itself.
    private let now: @Sendable () -> ContinuousClock.Instant

    package init(
        cache: IdentityCache, source: any InvalidationSource, interval: Duration, maxGap: Duration = CacheFeed.maxGap, logger: Logger,
        metrics: PrometheusCollectorRegistry? = nil, now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }
    ) {
        self.serverChanges = metrics?.makeCounter(
            descriptor: MetricNameDescriptor(
                namespace: "datong", subsystem: "identity", metricName: "cache_server_changes", unitName: "total",
                helpText: "Refreshes of the identity cache that found a different database server and forgot everything"
            ))
        self.lastRefresh = metrics?.makeGauge(
            descriptor: MetricNameDescriptor(
                namespace: "datong", subsystem: "identity", metricName: "cache_last_refresh_timestamp", unitName: "seconds",
                helpText: "When the identity cache last refreshed from the invalidation log (Unix time)"
            ))
        self.cache = cache
        self.source = source
        self.interval = interval
        self.maxGap = maxGap
        self.logger = logger
        self.now = now
    }

    package func run() async throws {
        try? await cancelWhenGracefulShutdown {
            var failingSince: ContinuousClock.Instant?
            while true {
                do {
                    try await self.refresh()
                    failingSince = nil
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
        let started = now()
        let log = try await source.look(after: horizon.withLock { $0 })
        horizon.withLock { $0 = log.horizon }
        let previous = lastLook.withLock { last in
            let previous = last
            last = started
            return previous
        }
        if !log.complete {
            cache.clear()
            logger.notice("identity.cache_cleared", metadata: ["reason": "more identities changed than one look carries"])
        } else if let previous, now() - previous > maxGap {
            cache.clear()
            logger.notice("identity.cache_cleared", metadata: ["reason": "no look succeeded for \(maxGap): the log may have pruned what changed"])
        }
        let forgetting = log.identities.map { ScopedIdentity(project: $0.project, identity: IdentityKey(key: $0.key, value: $0.value)) }
        if cache.refreshed(forgetting: forgetting, at: started, server: log.server) {
            logger.notice("identity.cache_cleared", metadata: ["reason": "the database server changed (failover or restart)"])
            serverChanges?.increment()
        }
        lastRefresh?.set(Date().timeIntervalSince1970)
    }
}
