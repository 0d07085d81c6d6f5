import DatongContracts
import DatongJSON
import DatongRuntime
import Hummingbird
import Logging

/// The admin API of what the gateways add to a project's records (docs/PRIVACY.md): how `$ip` is
/// stored, whether the region and the User-Agent's browser, OS and device are added, and what
/// becomes of crawlers' records. Every change is audited.
struct EnrichmentAPI: ServiceAPI {
    let store: any ConfigStore
    let auth: AdminAuth

    func register(on router: Router<DatongRequestContext>) {
        router.get("/v1/projects/:project/enrichment") { request, context in try await show(request, context) }
        router.put("/v1/projects/:project/enrichment") { request, context in try await change(request, context) }
    }

    private func show(_ request: Request, _ context: DatongRequestContext) async throws -> Response {
        _ = try await auth.authorize(request)
        let project = try context.project()
        guard let policy = try await store.enrichment(project: project) else { throw Self.unknownProject(project) }
        return jsonResponse(.ok, policy.jsonText)
    }

    /// The body names the settings to change; the others keep their values.
    private func change(_ request: Request, _ context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        let body = try await collectBody(request, limit: 1024)
        guard let sent = bodyObject(body), !sent.isEmpty else {
            throw ServiceError.badRequest(.invalidBody, Self.usage)
        }
        guard var policy = try await store.enrichment(project: project) else { throw Self.unknownProject(project) }
        for (name, value) in sent {
            switch name {
            case "ip":
                guard let text = value.stringValue, let storage = EnrichmentPolicy.AddressStorage(rawValue: text) else {
                    throw ServiceError.badRequest(.invalidEnrichment, #"ip is "full", "truncated" (IPv4 /24, IPv6 /48) or "none""#)
                }
                policy.ip = storage
            case "region", "userAgent":
                guard let flag = value.boolValue else { throw ServiceError.badRequest(.invalidEnrichment, "\(name) is true or false") }
                if name == "region" { policy.region = flag } else { policy.userAgent = flag }
            case "bots":
                guard let text = value.stringValue, let bots = EnrichmentPolicy.Bots(rawValue: text) else {
                    throw ServiceError.badRequest(.invalidEnrichment, #"bots is "keep", "mark" ($is_bot: true) or "drop""#)
                }
                policy.bots = bots
            default:
                throw ServiceError.badRequest(.invalidEnrichment, "'\(UntrustedText.quoted(name, limit: 40))' is no enrichment setting; " + Self.usage)
            }
        }
        guard try await store.setEnrichment(project: project, policy: policy, actor: actor) else { throw Self.unknownProject(project) }
        context.logger.info("audit.project.enrichment", metadata: ["project": "\(project)", "enrichment": "\(policy.jsonText)", "actor": "\(actor)"])
        return jsonResponse(.ok, policy.jsonText)
    }

    static let usage = #"send any of {"ip": "full"|"truncated"|"none", "region": true|false, "userAgent": true|false, "bots": "keep"|"mark"|"drop"}"#

    static func unknownProject(_ project: String) -> ServiceError {
        ServiceError(.notFound, .unknownProject, "there is no project '\(project)'")
    }
}
