/// What was seen of one service by asking its `/ready` and `/metrics` (config-service's
/// `GET /v1/status` for the services behind it; `datongctl status` for the others).
package struct ServiceProbe: Codable, Sendable, Equatable {
    package var name: String
    package var url: String
    /// `/ready` answered 200.
    package var ready: Bool
    /// `/ready`'s body (its checks), when it answered.
    package var readiness: String?
    /// `/metrics`' text (Prometheus' format), when it answered.
    package var metrics: String?
    /// Why the service could not be asked, when it could not.
    package var error: String?

    package init(name: String, url: String, ready: Bool, readiness: String?, metrics: String?, error: String?) {
        self.name = name
        self.url = url
        self.ready = ready
        self.readiness = readiness
        self.metrics = metrics
        self.error = error
    }

    /// The most `/metrics` text kept of a service.
    package static let maxMetricsBytes = 4 << 20
}

/// config-service's `GET /v1/status`: the services it calls (identity-service, the collector).
package struct ServicesStatus: Codable, Sendable, Equatable {
    package var services: [ServiceProbe]

    package init(services: [ServiceProbe]) {
        self.services = services
    }
}
