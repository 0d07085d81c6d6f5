import DatongContracts
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOFoundationEssentialsCompat
import Prometheus
import ServiceLifecycle
import Synchronization

/// One thing `/ready` checks: the database, migrations, a service this one calls.
package struct ReadinessCheck: Sendable {
    package let name: String
    package let check: @Sendable () async -> Bool

    package init(_ name: String, check: @escaping @Sendable () async -> Bool) {
        self.name = name
        self.check = check
    }

    /// How long a scrape of /metrics waits for the checks: below Prometheus' scrape timeouts.
    package static let scrapeLimit: Duration = .milliseconds(750)

    /// Runs `checks` at once and answers within `limit`: a check that has not answered by then
    /// counts as failed, and finishes in the background (a call to a service that is down retries
    /// its connection until its own timeout; a ping of a database that hangs waits on it).
    package static func run(_ checks: [ReadinessCheck], within limit: Duration) async -> [Bool] {
        let outcomes = Outcomes(count: checks.count)
        for (index, check) in checks.enumerated() {
            Task { outcomes.set(index, await check.check()) }
        }
        let deadline = ContinuousClock.now + limit
        while !outcomes.complete, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
        return outcomes.values
    }

    private final class Outcomes: Sendable {
        private let state: Mutex<[Bool?]>

        init(count: Int) { state = Mutex(Array(repeating: nil, count: count)) }

        func set(_ index: Int, _ passed: Bool) { state.withLock { $0[index] = passed } }
        var complete: Bool { state.withLock { $0.allSatisfy { $0 != nil } } }
        var values: [Bool] { state.withLock { $0.map { $0 ?? false } } }
    }
}

/// The long-lived parts a service process is given: its logger and the registry `/metrics` exports.
package struct ServiceRuntime: Sendable {
    package var logger: Logger
    package var metrics: PrometheusCollectorRegistry

    package init(logger: Logger, metrics: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.logger = logger
        self.metrics = metrics
    }
}

/// A router with the middleware every Datong service runs (request id, metrics, debug request log,
/// error mapping, the Host rule) and the operational endpoints `/health`, `/ready` and `/metrics`.
/// Every GET route answers HEAD too (RFC 9110 §9.3.2: the same status and headers, no body).
package func makeServiceRouter(runtime: ServiceRuntime, readiness: [ReadinessCheck]) -> Router<DatongRequestContext> {
    let router = Router(context: DatongRequestContext.self, options: .autoGenerateHeadEndpoints)
    router.addMiddleware {
        RequestIDMiddleware()
        MetricsMiddleware()
        LogRequestsMiddleware(.debug)
        ErrorMiddleware(registry: runtime.metrics)
        HostHeaderMiddleware()
    }
    router.get("/health") { _, _ in
        jsonResponse(.ok, #"{"status":"ok"}"#)
    }
    router.get("/ready") { _, _ in
        var failed: [String] = []
        var lines: [String] = []
        for check in readiness {
            let ok = await check.check()
            if !ok { failed.append(check.name) }
            lines.append("\"\(check.name)\":\"\(ok ? "ok" : "failed")\"")
        }
        let body = #"{"status":"\#(failed.isEmpty ? "ready" : "not_ready")","checks":{\#(lines.joined(separator: ","))}}"#
        return jsonResponse(failed.isEmpty ? .ok : .serviceUnavailable, body)
    }
    let registry = runtime.metrics
    // `datong_ready{check}`: each readiness check, run at every scrape (1 passed, 0 failed or not
    // answered within `ReadinessCheck.scrapeLimit`), so that an alert sees the database or a called
    // service go away while the process still answers; the scrape never waits longer than that.
    let readyGauges = readiness.map { check in
        registry.makeGauge(
            descriptor: MetricNameDescriptor(
                namespace: "datong", metricName: "ready", unitName: "",
                helpText: "Whether a readiness check passed at the last scrape (1) or failed or did not answer in time (0)"),
            labels: [("check", check.name)])
    }
    // `process_start_time_seconds`, as Prometheus' client libraries name it (here: when the service's
    // router was made, at its start): uptime is `time() - process_start_time_seconds`.
    registry.makeGauge(
        descriptor: MetricNameDescriptor(
            namespace: "process", metricName: "start_time", unitName: "seconds", helpText: "When the service started (Unix time)")
    ).set(to: Date().timeIntervalSince1970)
    // `datong_build_info{version}`, always 1, as Prometheus' own `prometheus_build_info`: which
    // release each replica runs (`datongctl status` shows it, and two side by side mid-upgrade).
    registry.makeGauge(
        descriptor: MetricNameDescriptor(
            namespace: "datong", metricName: "build_info", unitName: "", helpText: "The Datong release this service runs (always 1)"),
        labels: [("version", DatongRelease.version)]
    ).set(to: 1)
    router.get("/metrics") { _, _ in
        let passed = await ReadinessCheck.run(readiness, within: ReadinessCheck.scrapeLimit)
        for (gauge, passed) in zip(readyGauges, passed) {
            gauge.set(to: passed ? 1.0 : 0.0)
        }
        return Response(
            status: .ok,
            headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: registry.emitToBuffer()))
        )
    }
    return router
}

/// The Hummingbird application of a service: its router, listening where `server` says, with the
/// service's long-lived parts (`services`) started before and stopped after the server.
package func makeServiceApplication<Builder: HTTPResponderBuilder>(
    name: String, router: Builder, server: ServerSettings, runtime: ServiceRuntime,
    services: [any Service] = []
) -> Application<Builder.Responder> where Builder.Responder.Context == DatongRequestContext {
    Application(
        router: router,
        server: .http1(configuration: .init(idleTimeout: .seconds(Int64(server.idleTimeoutSeconds)))),
        configuration: .init(address: .hostname(server.host, port: server.port), serverName: name),
        services: services,
        logger: runtime.logger
    )
}

/// A service's HTTP API: one small type per service that registers its routes on the router every
/// service shares (`makeServiceRouter`), so the four are built alike: settings → store → API → app.
package protocol ServiceAPI: Sendable {
    func register(on router: Router<DatongRequestContext>)
}
