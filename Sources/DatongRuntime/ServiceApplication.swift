import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOFoundationEssentialsCompat
import Prometheus
import ServiceLifecycle

/// One thing `/ready` checks: the database, migrations, a service this one calls.
package struct ReadinessCheck: Sendable {
    package let name: String
    package let check: @Sendable () async -> Bool

    package init(_ name: String, check: @escaping @Sendable () async -> Bool) {
        self.name = name
        self.check = check
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
    router.get("/metrics") { _, _ in
        Response(
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
