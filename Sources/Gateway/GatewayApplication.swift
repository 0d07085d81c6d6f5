import AsyncHTTPClient
import DatongContracts
import DatongRuntime
import Hummingbird
import IdentityCore
import NIOCore
import ServiceLifecycle

/// Builds bridge-gateway: the SDK upload endpoints under any path prefix, the bridge relay endpoint,
/// CORS for browser transports; every upload is answered after the collector commits.
package func buildGatewayApplication(
    settings: GatewaySettings, runtime: ServiceRuntime
) -> some ApplicationProtocol {
    let http = HTTPClient.forServices(connectTimeout: .seconds(2))
    let timeout = TimeAmount.seconds(Int64(settings.upstreamTimeoutSeconds))
    let token = settings.server.serviceToken
    let identity = ServiceClient(upstream: .identity, baseURL: settings.identityURL, http: http, timeout: timeout, serviceToken: token)
    let collector = ServiceClient(upstream: .collector, baseURL: settings.collectorURL, http: http, timeout: timeout, serviceToken: token)
    let config = ServiceClient(upstream: .config, baseURL: settings.configURL, http: http, timeout: timeout, serviceToken: token)
    var ingest = ResolveAndStore(
        identity: IdentityCalls(identity: identity, maxCalls: settings.identityCalls, registry: runtime.metrics),
        collector: CollectorCalls(
            collector: collector, maxCalls: settings.collectorCalls, maxGroupBytes: settings.collectorGroupBytes, registry: runtime.metrics)
    )
    ingest.suppressedRecords = runtime.metrics.gatewayCounter(
        "suppressed_records", "Records dropped because they name an erased user's id (docs/PRIVACY.md)")
    ingest.outcomes = RecordOutcomeMetrics(registry: runtime.metrics)
    var services: [any Service] = []
    if settings.identityCacheEntries > 0 {
        let cache = IdentityCache(capacity: settings.identityCacheEntries, refreshInterval: .milliseconds(settings.identityCacheRefreshMilliseconds))
        ingest.cache = cache
        ingest.metrics = IdentityCacheMetrics(registry: runtime.metrics)
        services.append(
            CacheFeed(
                cache: cache, source: IdentityServiceLog(identity: identity, logger: runtime.logger),
                interval: .milliseconds(settings.identityCacheRefreshMilliseconds), logger: runtime.logger, metrics: runtime.metrics
            ))
    }
    let whitelists = WhitelistCache(
        config: config, refreshInterval: .seconds(settings.whitelistRefreshSeconds), logger: runtime.logger
    )
    let auth = IngestionAuth(config: config, refreshInterval: .seconds(settings.whitelistRefreshSeconds))
    let keyring = EncryptionKeyring(config: config, sealer: settings.sealer, refreshInterval: .seconds(settings.whitelistRefreshSeconds))
    let enrichment = EnrichmentSources.load(settings, logger: runtime.logger, metrics: runtime.metrics)
    if let regions = enrichment.regions { services.append(regions) }
    var uploads = UploadHandler(
        limits: settings.limits, ingest: ingest, auth: auth, whitelists: whitelists, keyring: keyring, enrichment: enrichment)
    uploads.botsDropped = runtime.metrics.gatewayCounter(
        "bot_records_dropped", "Records of crawlers (by their User-Agent) dropped as their project asks (docs/PRIVACY.md)")
    let bridge = BridgeHandler(limits: settings.limits, whitelists: whitelists, ingest: ingest, auth: auth, enrichment: enrichment)

    let router = makeServiceRouter(
        runtime: runtime,
        readiness: [
            ReadinessCheck("identity-service") { await identity.isHealthy() },
            ReadinessCheck("collector") { await collector.isHealthy() },
            ReadinessCheck("config-service") { await config.isHealthy() },
        ])
    router.addMiddleware { AdmissionMiddleware(limit: settings.maxInFlightRequests) }
    // Browser transports (ajax with credentials, sendBeacon) need CORS answers, preflight included.
    router.addMiddleware {
        CORSMiddleware(
            allowOrigin: .originBased,
            allowHeaders: [.accept, .contentType, .contentEncoding, .origin, .requestID, .dryRun],
            allowMethods: [.get, .post, .head, .options],
            allowCredentials: true,
            exposedHeaders: [DatongHeader.requestID],
            maxAge: .seconds(86_400)
        )
    }
    GatewayAPI(
        uploads: uploads, bridge: bridge, sdkConfig: SDKConfigHandler(config: config, keyring: keyring),
        downloads: AppDownloadsHandler(config: config, linksProject: settings.appLinksProject)
    ).register(on: router)

    return makeServiceApplication(
        name: "bridge-gateway", router: SDKPathRouter(inner: router), server: settings.server, runtime: runtime,
        services: [whitelists] + services + [HTTPClientService(client: http)]
    )
}

/// bridge-gateway's HTTP API: SDK uploads (and their GET and debug forms), bridge relays, the SDKs'
/// remote and visual config, and the app downloads (under any path prefix: `SDKPathRouter`).
struct GatewayAPI: ServiceAPI {
    let uploads: UploadHandler
    let bridge: BridgeHandler
    let sdkConfig: SDKConfigHandler
    let downloads: AppDownloadsHandler

    func register(on router: Router<DatongRequestContext>) {
        router.post("/sa") { request, context in try await uploads.handle(request, context: context, mode: .upload) }
        // Pages whose POST bodies are lost fall back to GET with the payload in the query.
        router.get("/sa") { request, context in try await uploads.handle(request, context: context, mode: .beacon) }
        router.post("/sa.gif") { request, context in try await uploads.handle(request, context: context, mode: .upload) }
        router.get("/sa.gif") { request, context in try await uploads.handle(request, context: context, mode: .beacon) }
        router.post("/debug") { request, context in try await uploads.handle(request, context: context, mode: .debug) }
        router.get("/debug") { request, context in try await uploads.handle(request, context: context, mode: .debug) }
        router.post("/v1/bridge") { request, context in try await bridge.handle(request, context: context) }
        router.get("/config/:file") { request, context in
            // `…/config/iOS.conf` is the Sensors remote config; `…/config/NAME.json` Datong's app downloads.
            if context.parameters.get("file")?.hasSuffix(".json") == true { return try await downloads.document(request, context: context) }
            return try await sdkConfig.remote(request, context: context)
        }
        router.get("/.well-known/apple-app-site-association") { request, context in
            try await downloads.appleAppSiteAssociation(request, context: context)
        }
        router.get("/.well-known/assetlinks.json") { request, context in try await downloads.assetLinks(request, context: context) }
        router.get("/config/visualized/:file") { request, context in try await sdkConfig.visual(request, context: context) }
    }
}
