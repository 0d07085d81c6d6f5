import DatongContracts
import DatongCrypto
import DatongJSON
import DatongRuntime
import DatongStorage
import Foundation
import Hummingbird
import Logging
import NIOFoundationEssentialsCompat
import Prometheus

/// Builds config-service: projects, versioned documents (admin API) and ETag-revalidated reads.
package func buildConfigApplication(
    settings: ConfigSettings, runtime: ServiceRuntime
) -> some ApplicationProtocol {
    let database = ServiceDatabase(settings: settings.database, logger: runtime.logger)
    let store = PostgresConfigStore(pool: database.pool)
    let auth = AdminAuth(bootstrapToken: settings.adminToken, pool: database.pool)
    let erasures = ErasureStore(pool: database.pool)
    var owners = OwnedDataAPI(
        auth: auth,
        collector: .init(upstream: .collector, baseURL: settings.collectorURL, serviceToken: settings.server.serviceToken),
        identity: .init(upstream: .identity, baseURL: settings.identityURL, serviceToken: settings.server.serviceToken),
        requireProject: { try await erasures.requireProject($0) }
    )
    owners.gatewayURL = settings.gatewayURL
    let calls = ErasureCalls(identity: owners.identity, collector: owners.collector)
    let api = ConfigAPI(
        store: store, auth: auth, serviceToken: ServiceToken(settings.server.serviceToken), sealer: settings.sealer,
        documentLimit: settings.maxDocumentBytes, owners: owners,
        erasures: ErasureAPI(auth: auth, store: erasures, calls: calls, settleSeconds: settings.erasureSettleSeconds),
        console: .bundled()
    )
    var runner = ErasureRunner(store: erasures, calls: calls, batchRows: settings.erasureBatchRows, logger: runtime.logger)
    runner.failures = runtime.metrics.makeCounter(
        descriptor: MetricNameDescriptor(
            namespace: "datong", subsystem: "erasure", metricName: "failures", unitName: "total",
            helpText: "Erasure claims and steps that failed (a step is tried again)"))
    runner.oldestOpen = runtime.metrics.makeGauge(
        descriptor: MetricNameDescriptor(
            namespace: "datong", subsystem: "erasure", metricName: "oldest_open", unitName: "seconds",
            helpText: "How long the oldest erasure not done yet has waited since it was asked for (0: none open)"))
    return database.application(
        name: "config-service", api: api, schema: ConfigSchema.name, migrations: ConfigSchema.migrations, server: settings.server, runtime: runtime,
        services: [runner]
    )
}

/// config-service's HTTP API: projects, versioned documents, admin tokens, the audit trail, and
/// (through `EncryptionKeysAPI`) the projects' encryption keys.
struct ConfigAPI: ServiceAPI {
    let store: any ConfigStore
    let auth: AdminAuth
    let serviceToken: ServiceToken
    let sealer: KeySealer?
    let documentLimit: Int
    let owners: OwnedDataAPI
    let erasures: ErasureAPI
    let console: ConsoleFiles

    func register(on router: Router<DatongRequestContext>) {
        owners.register(on: router)
        erasures.register(on: router)
        console.register(on: router)
        // Projects, their ingestion tokens and keys, and what the gateways check uploads against.
        router.get("/v1/projects", use: listProjects)
        router.put("/v1/projects/:project", use: putProject)
        EncryptionKeysAPI(store: store, auth: auth, serviceToken: serviceToken, sealer: sealer).register(on: router)
        EnrichmentAPI(store: store, auth: auth).register(on: router)
        router.get("/v1/projects/:project/ingestion", use: ingestion)
        // Versioned documents: publish, check, read, history, diff, roll back.
        router.put("/v1/projects/:project/:kind", use: publish)
        router.post("/v1/projects/:project/:kind/validate", use: validate)
        router.get("/v1/projects/:project/:kind", use: latest)
        router.get("/v1/projects/:project/:kind/versions", use: versions)
        router.get("/v1/projects/:project/:kind/versions/:version", use: version)
        router.get("/v1/projects/:project/:kind/diff", use: diff)
        router.post("/v1/projects/:project/:kind/rollback", use: rollback)
        // Admin tokens and the audit trail.
        router.post("/v1/admin-tokens", use: createToken)
        router.get("/v1/admin-tokens", use: listTokens)
        router.delete("/v1/admin-tokens/:name", use: revokeToken)
        router.get("/v1/audit", use: auditTrail)
    }

    // MARK: Projects

    @Sendable func listProjects(_ request: Request, context: DatongRequestContext) async throws -> Response {
        _ = try await auth.authorize(request)
        return try jsonResponse(.ok, encoding: try await store.listProjects())
    }

    /// Creates a project; an optional body sets its ingestion token or clears it.
    @Sendable func putProject(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        // An optional body sets the ingestion token ({"token": "…"}) or clears it ({"token": null}).
        let body = try await collectBody(request, limit: 4096)
        enum TokenChange {
            case keep
            case set(String)
            case clear
        }
        var change = TokenChange.keep
        if body.readableBytes > 0 {
            guard let sent = bodyObject(body)?["token"] else {
                throw ServiceError.badRequest(.invalidBody, #"the body is optional; when sent it is {"token": "…"} or {"token": null}"#)
            }
            switch sent {
            case .string(let text) where (16...256).contains(text.utf8.count): change = .set(text)
            case .null: change = .clear
            default: throw ServiceError.badRequest(.invalidToken, "an ingestion token is 16 to 256 characters (or null to remove it)")
            }
        }
        let created = try await store.createProject(project, actor: actor)
        switch change {
        case .keep: break
        case .set(let token): _ = try await store.setIngestionToken(project: project, digestHex: AdminAuth.digestHex(of: token), actor: actor)
        case .clear: _ = try await store.setIngestionToken(project: project, digestHex: nil, actor: actor)
        }
        context.logger.info("audit.project.put", metadata: ["project": "\(project)", "created": "\(created)", "actor": "\(actor)"])
        return jsonResponse(created ? .created : .ok, #"{"name":"\#(project)"}"#)
    }

    /// Internal: what the gateway checks uploads against (no admin token; the digest only).
    @Sendable func ingestion(_ request: Request, context: DatongRequestContext) async throws -> Response {
        try serviceToken.check(request)
        let project = try context.project()
        let tokenSHA256: String?
        switch try await store.ingestion(project: project) {
        case .unknown: throw ServiceError(.notFound, .unknownProject, "there is no project '\(project)'")
        case .open: tokenSHA256 = nil
        case .token(let digest): tokenSHA256 = digest
        }
        // Gateways read this every few seconds: revalidated by an ETag of the token and the
        // suppression list's version, an unchanged answer is a 304, however long the list.
        let version = try await erasures.store.suppressionVersion(project: project) ?? 0
        let enrichment = try await store.enrichment(project: project) ?? .defaults
        let etag = "\"" + SHA256Digest.hex(Array("\(tokenSHA256 ?? "-")/\(version)/\(enrichment.jsonText)".utf8)).prefix(32) + "\""
        let candidates = (request.headers[.ifNoneMatch] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        if candidates.contains(etag) { return Response(status: .notModified, headers: [.eTag: etag]) }
        let suppressed = try await erasures.store.suppressedIDs(project: project)
        return try jsonResponse(
            .ok, encoding: ProjectIngestion(project: project, tokenSHA256: tokenSHA256, suppressed: suppressed, enrichment: enrichment),
            headers: [.eTag: etag])
    }

    // MARK: Documents

    @Sendable func publish(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let (project, kind, scope) = try documentAddress(request, context)
        let minimum = try AppVersion.parameter(request.uri.queryParameters["min_app_version"].map(String.init), name: "min_app_version")
        let maximum = try AppVersion.parameter(request.uri.queryParameters["max_app_version"].map(String.init), name: "max_app_version")
        if let minimum, let maximum, maximum.padded.lexicographicallyPrecedes(minimum.padded) {
            throw ServiceError.badRequest(.invalidAppVersion, "min_app_version is above max_app_version")
        }
        if minimum != nil || maximum != nil, kind == .serverURLWhitelist || kind == .h5DomainWhitelist {
            throw ServiceError.badRequest(
                .invalidAppVersion, "whitelists apply to every app version; publish them without min_app_version or max_app_version")
        }
        guard try await store.projectExists(project) else {
            throw ServiceError(.notFound, .unknownProject, "project '\(project)' does not exist; create it with PUT /v1/projects/\(project)")
        }
        let body = try await collectBody(request, limit: documentLimit, code: .documentTooLarge)
        switch DocumentValidator.canonicalize(Array(buffer: body), kind: kind) {
        case .failure(let problems):
            return try jsonResponse(.unprocessableContent, encoding: InvalidDocument(problems.list))
        case .success(let canonical):
            let etag = DocumentValidator.etag(ofCanonical: canonical)
            let note = request.uri.queryParameters["note"].map(String.init)
            let version = try await store.publish(
                project: project, kind: kind, scope: scope, canonical: canonical, etag: etag, note: note,
                minAppVersion: minimum, maxAppVersion: maximum, actor: actor
            )
            context.logger.info(
                "audit.document.published",
                metadata: [
                    "project": "\(project)", "kind": "\(kind.rawValue)", "version": "\(version)",
                    "platform": "\(scope.platform)", "app_id": "\(scope.appID)", "actor": "\(actor)",
                ])
            return try jsonResponse(.created, encoding: PublishResult(project: project, kind: kind, version: version, etag: etag))
        }
    }

    /// Checks a document as a publish would, and keeps nothing: 200, or 422 with every problem.
    @Sendable func validate(_ request: Request, context: DatongRequestContext) async throws -> Response {
        _ = try await auth.authorize(request)
        let (_, kind, _) = try documentAddress(request, context)
        let body = try await collectBody(request, limit: documentLimit, code: .documentTooLarge)
        switch DocumentValidator.canonicalize(Array(buffer: body), kind: kind) {
        case .failure(let problems): return try jsonResponse(.unprocessableContent, encoding: InvalidDocument(problems.list))
        case .success: return jsonResponse(.ok, #"{"problems":[]}"#)
        }
    }

    /// The newest version of a document, or the one for `?app_version=` (no admin token: the
    /// gateways read documents here to serve the SDKs).
    @Sendable func latest(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let (project, kind, scope) = try documentAddress(request, context)
        let appVersion = try AppVersion.parameter(request.uri.queryParameters["app_version"].map(String.init), name: "app_version")
        guard let document = try await store.cachedLatest(project: project, kind: kind, scope: scope, appVersion: appVersion) else {
            throw noDocument(project, kind)
        }
        var headers: HTTPFields = [.eTag: document.etag, .cacheControl: "no-cache"]
        headers[.documentVersion] = String(document.version)
        let candidates = (request.headers[.ifNoneMatch] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        if candidates.contains(where: { $0 == document.etag || $0 == "*" }) {
            return Response(status: .notModified, headers: headers)
        }
        return jsonResponse(.ok, document.body, headers: headers)
    }

    @Sendable func versions(_ request: Request, context: DatongRequestContext) async throws -> Response {
        _ = try await auth.authorize(request)
        let (project, kind, scope) = try documentAddress(request, context)
        let versions = try await store.versions(project: project, kind: kind, scope: scope)
        guard !versions.isEmpty else { throw noDocument(project, kind) }
        return try jsonResponse(.ok, encoding: versions)
    }

    @Sendable func version(_ request: Request, context: DatongRequestContext) async throws -> Response {
        _ = try await auth.authorize(request)
        let (project, kind, scope) = try documentAddress(request, context)
        let number = try versionNumber(context.parameters.get("version"), name: "version")
        guard let document = try await store.version(number, project: project, kind: kind, scope: scope) else {
            throw noVersion(number, project, kind)
        }
        var headers: HTTPFields = [.eTag: document.etag]
        headers[.documentVersion] = String(document.version)
        return jsonResponse(.ok, document.body, headers: headers)
    }

    @Sendable func diff(_ request: Request, context: DatongRequestContext) async throws -> Response {
        _ = try await auth.authorize(request)
        let (project, kind, scope) = try documentAddress(request, context)
        let from = try versionNumber(request.uri.queryParameters["from"].map(String.init), name: "from")
        let to = try versionNumber(request.uri.queryParameters["to"].map(String.init), name: "to")
        guard let old = try await store.version(from, project: project, kind: kind, scope: scope) else { throw noVersion(from, project, kind) }
        guard let new = try await store.version(to, project: project, kind: kind, scope: scope) else { throw noVersion(to, project, kind) }
        // Stored documents were published canonical, so they parse within the same depth.
        let changes = DocumentDiff.changes(
            from: try JSONValue(parsing: Array(old.body.utf8), maxDepth: DocumentValidator.maxDepth),
            to: try JSONValue(parsing: Array(new.body.utf8), maxDepth: DocumentValidator.maxDepth)
        )
        return try jsonResponse(.ok, encoding: DocumentDiff.Answer(from: from, to: to, changes: changes))
    }

    @Sendable func rollback(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let (project, kind, scope) = try documentAddress(request, context)
        let target = try versionNumber(request.uri.queryParameters["to"].map(String.init), name: "to")
        let note = request.uri.queryParameters["note"].map(String.init)
        guard let version = try await store.rollback(to: target, project: project, kind: kind, scope: scope, note: note, actor: actor),
            let published = try await store.version(version, project: project, kind: kind, scope: scope)
        else {
            throw noVersion(target, project, kind)
        }
        context.logger.info(
            "audit.document.rolled_back",
            metadata: [
                "project": "\(project)", "kind": "\(kind.rawValue)", "version": "\(version)", "to": "\(target)",
                "platform": "\(scope.platform)", "app_id": "\(scope.appID)", "actor": "\(actor)",
            ])
        return try jsonResponse(.created, encoding: PublishResult(project: project, kind: kind, version: version, etag: published.etag))
    }

    // MARK: Admin tokens and the audit trail

    @Sendable func createToken(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let body = try await collectBody(request, limit: 4096)
        guard let name = (try? JSONDecoder().decode(TokenRequest.self, from: Data(buffer: body)))?.name, isTokenName(name) else {
            throw ServiceError.badRequest(.invalidTokenName, #"send {"name": "…"}: 1 to 64 letters, digits, '.', '-' or '_'"#)
        }
        guard name != AdminAuth.bootstrapName else {
            throw ServiceError(.conflict, .tokenExists, "'\(AdminAuth.bootstrapName)' is the ADMIN_TOKEN setting's name")
        }
        let token = AdminAuth.newToken()
        guard try await store.createToken(name: name, digestHex: AdminAuth.digestHex(of: token), actor: actor) else {
            throw ServiceError(.conflict, .tokenExists, "a token named '\(name)' exists; revoke it first or choose another name")
        }
        context.logger.info("audit.token.created", metadata: ["name": "\(name)", "actor": "\(actor)"])
        return try jsonResponse(.created, encoding: NewAdminToken(name: name, token: token))
    }

    @Sendable func listTokens(_ request: Request, context: DatongRequestContext) async throws -> Response {
        _ = try await auth.authorize(request)
        return try jsonResponse(.ok, encoding: try await store.listTokens())
    }

    @Sendable func revokeToken(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let name = context.parameters.get("name") ?? ""
        guard try await store.revokeToken(name: name, actor: actor) else {
            throw ServiceError(.notFound, .unknownToken, "no token is named '\(name.prefix(64))'")
        }
        context.logger.info("audit.token.revoked", metadata: ["name": "\(name)", "actor": "\(actor)"])
        return Response(status: .noContent)
    }

    @Sendable func auditTrail(_ request: Request, context: DatongRequestContext) async throws -> Response {
        _ = try await auth.authorize(request)
        let project = request.uri.queryParameters["project"].map(String.init)
        if let project, !ProjectName.isValid(project) { throw ServiceError.invalidProject }
        let limit = try request.integerParameter("limit", in: 1...1000, default: 100)
        return try jsonResponse(.ok, encoding: try await store.auditTrail(project: project, limit: limit))
    }
}

private struct TokenRequest: Decodable {
    let name: String
}

private func isTokenName(_ name: String) -> Bool {
    (1...64).contains(name.utf8.count)
        && name.utf8.allSatisfy {
            $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_")
                || ($0 < 0x80 && (Character(UnicodeScalar($0)).isLetter || Character(UnicodeScalar($0)).isNumber))
        }
}

/// 422: every problem of a document, each at its JSON Pointer.
private struct InvalidDocument: Encodable {
    let error = "invalid_document"
    let message: String
    let problems: [DocumentProblem]

    init(_ problems: [DocumentProblem]) {
        self.message = "the document has \(problems.count) problem(s)"
        self.problems = problems
    }
}

/// The project, kind and scope (`platform`, `app_id`) a document request names.
private func documentAddress(_ request: Request, _ context: DatongRequestContext) throws -> (String, DocumentKind, DocumentScope) {
    let project = try context.project()
    let kind = try kindParameter(context)
    let scope = try DocumentScope(
        platform: request.uri.queryParameters["platform"].map(String.init),
        appID: request.uri.queryParameters["app_id"].map(String.init))
    return (project, kind, scope)
}

private func versionNumber(_ raw: String?, name: String) throws -> Int {
    guard let raw, let number = Int(raw), number > 0 else {
        throw ServiceError.badRequest(.invalidVersion, "\(name) must be a version number (1, 2, …)")
    }
    return number
}

private func noDocument(_ project: String, _ kind: DocumentKind) -> ServiceError {
    ServiceError(.notFound, .noDocument, "no \(kind.rawValue) is published for project '\(project)' and this platform/app")
}

private func noVersion(_ number: Int, _ project: String, _ kind: DocumentKind) -> ServiceError {
    ServiceError(.notFound, .noVersion, "project '\(project)' has no version \(number) of its \(kind.rawValue) for this platform/app")
}

private func kindParameter(_ context: DatongRequestContext) throws -> DocumentKind {
    let raw = context.parameters.get("kind") ?? ""
    guard let kind = DocumentKind(rawValue: raw) else {
        throw ServiceError(.notFound, .unknownKind, "unknown document kind '\(raw)'; kinds: \(DocumentKind.allCases.map(\.rawValue).joined(separator: ", "))")
    }
    return kind
}

/// The members of a small JSON object body; nil when the body is not one.
func bodyObject(_ body: ByteBuffer) -> [String: JSONValue]? {
    (try? JSONValue(parsing: Array(buffer: body), maxDepth: 8))?.objectValue
}
