import AsyncHTTPClient
import DatongRuntime
import Hummingbird
import NIOCore

/// Builds bridge-gateway: the SDK upload endpoints, answered after the collector commits.
public func buildGatewayApplication(
    settings: GatewaySettings, runtime: ServiceRuntime
) -> some ApplicationProtocol {
    let http = HTTPClient.forServices(connectTimeout: .seconds(2))
    let timeout = TimeAmount.seconds(Int64(settings.upstreamTimeoutSeconds))
    let identity = ServiceClient(name: "identity-service", baseURL: settings.identityURL, http: http, timeout: timeout)
    let collector = ServiceClient(name: "collector", baseURL: settings.collectorURL, http: http, timeout: timeout)
    let config = ServiceClient(name: "config-service", baseURL: settings.configURL, http: http, timeout: timeout)
    let uploads = UploadHandler(limits: settings.limits, identity: identity, collector: collector)

    let router = makeServiceRouter(runtime: runtime, readiness: [
        ReadinessCheck("identity-service") { await identity.isHealthy() },
        ReadinessCheck("collector") { await collector.isHealthy() },
        ReadinessCheck("config-service") { await config.isHealthy() },
    ])
    router.post("/sa") { request, context in try await uploads.handle(request, context: context, mode: .upload) }
    router.post("/sa.gif") { request, context in try await uploads.handle(request, context: context, mode: .upload) }
    router.get("/sa.gif") { request, context in try await uploads.handle(request, context: context, mode: .beacon) }
    router.post("/debug") { request, context in try await uploads.handle(request, context: context, mode: .debug) }
    router.get("/debug") { request, context in try await uploads.handle(request, context: context, mode: .debug) }

    return makeServiceApplication(
        name: "bridge-gateway", router: router, server: settings.server, runtime: runtime,
        services: [HTTPClientService(client: http)]
    )
}
