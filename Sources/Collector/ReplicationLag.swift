import DatongPostgres
import Logging
import Prometheus
import ServiceLifecycle

/// Exports how far each standby of the primary is behind, from `pg_stat_replication`, every
/// `interval`: `datong_postgres_standby_lag_bytes{standby}` (WAL written on the primary, not yet
/// replayed on the standby), `datong_postgres_standby_lag_seconds{standby}` (`replay_lag`: 0 once
/// it has caught up and nothing is being written) and `datong_postgres_standbys` (standbys streaming
/// now; a standby that goes away loses its lag series, so alert on this one).
///
/// `standby` is the standby's `application_name` (its `cluster_name`, or what its
/// `primary_conninfo` says). The figures need the collector's role to be a superuser or a member
/// of `pg_monitor`: for other roles PostgreSQL hides them, and only the count is exported.
final class ReplicationMonitor: Service, Sendable {
    private let pool: PostgresPool
    private let registry: PrometheusCollectorRegistry
    private let interval: Duration
    private let logger: Logger

    init(pool: PostgresPool, registry: PrometheusCollectorRegistry, interval: Duration = .seconds(5), logger: Logger) {
        self.pool = pool
        self.registry = registry
        self.interval = interval
        self.logger = logger
    }

    // Made when used: the descriptor type is not Sendable.
    private static var lagBytes: MetricNameDescriptor {
        metric("standby_lag", unit: "bytes", "WAL written on the primary that the standby has not replayed")
    }
    private static var lagSeconds: MetricNameDescriptor { metric("standby_lag", unit: "seconds", "The standby's replay_lag (0 once caught up and idle)") }

    private static func metric(_ name: String, unit: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "datong", subsystem: "postgres", metricName: name, unitName: unit, helpText: help)
    }

    func run() async throws {
        let standbys = registry.makeGauge(descriptor: Self.metric("standbys", unit: "", "Standbys streaming from the primary now"))
        try? await cancelWhenGracefulShutdown {
            var exported: [String: (bytes: Gauge, seconds: Gauge)] = [:]
            while true {
                do {
                    let rows = try await self.pool.withConnection { connection in
                        try connection.query(
                            """
                            SELECT application_name, pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::text,
                                   COALESCE(EXTRACT(epoch FROM replay_lag), 0)::text
                            FROM pg_stat_replication WHERE state = 'streaming' OR state IS NULL
                            """
                        ).rows
                    }
                    standbys.set(Double(rows.count))
                    var seen: Set<String> = []
                    for row in rows {
                        guard let name = row[0], let bytes = row[1].flatMap(Double.init), let seconds = row[2].flatMap(Double.init) else { continue }
                        seen.insert(name)
                        let gauges =
                            exported[name]
                            ?? (
                                bytes: self.registry.makeGauge(descriptor: Self.lagBytes, labels: [("standby", name)]),
                                seconds: self.registry.makeGauge(descriptor: Self.lagSeconds, labels: [("standby", name)])
                            )
                        exported[name] = gauges
                        gauges.bytes.set(max(bytes, 0))
                        gauges.seconds.set(seconds)
                    }
                    for (name, gauges) in exported where !seen.contains(name) {
                        self.registry.unregisterGauge(gauges.bytes)
                        self.registry.unregisterGauge(gauges.seconds)
                        exported[name] = nil
                    }
                } catch {
                    self.logger.debug("replication.monitor_failed", metadata: ["error": "\(error)"])
                }
                try await Task.sleep(for: self.interval)
            }
        }
    }
}
