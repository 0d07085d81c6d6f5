import DatongContracts
import DatongRuntime
import Foundation
import Hummingbird

/// Builds config-service: projects, versioned documents (admin API) and ETag-revalidated reads.
public func buildConfigApplication(
    settings: ConfigSettings, runtime: ServiceRuntime
) -> some ApplicationProtocol {
    let database = ServiceDatabase(settings: settings.database, logger: runtime.logger)
    let store = ConfigStore(pool: database.pool)
    let auth = AdminAuth(token: settings.adminToken)
    let router = makeServiceRouter(runtime: runtime, readiness: [database.readiness])
    let documentLimit = settings.maxDocumentBytes

    router.get("/v1/projects") { request, _ in
        try auth.authorize(request)
        return try jsonResponse(.ok, encoding: try await store.listProjects())
    }

    router.put("/v1/projects/:project") { request, context in
        try auth.authorize(request)
        let project = try projectParameter(context)
        let created = try await store.createProject(project)
        context.logger.info("audit.project.put", metadata: ["project": "\(project)", "created": "\(created)"])
        return jsonResponse(created ? .created : .ok, #"{"name":"\#(project)"}"#)
    }

    router.put("/v1/projects/:project/:kind") { request, context in
        try auth.authorize(request)
        let project = try projectParameter(context)
        let kind = try kindParameter(context)
        let scope = try DocumentScope(platform: request.uri.queryParameters["platform"].map(String.init),
                                      appID: request.uri.queryParameters["app_id"].map(String.init))
        guard try await store.projectExists(project) else {
            throw ServiceError(.notFound, "unknown_project", "project '\(project)' does not exist; create it with PUT /v1/projects/\(project)")
        }
        let body = try await collectBody(request, limit: documentLimit, code: "document_too_large")
        switch DocumentValidator.canonicalize(Data(buffer: body), kind: kind) {
        case .failure(let problems):
            let payload = try JSONEncoder().encode(InvalidDocument(
                error: "invalid_document", message: "the document has \(problems.list.count) problem(s)", problems: problems.list
            ))
            return jsonResponse(.unprocessableContent, String(decoding: payload, as: UTF8.self))
        case .success(let canonical):
            let etag = DocumentValidator.etag(ofCanonical: canonical)
            let note = request.uri.queryParameters["note"].map(String.init)
            let version = try await store.publish(project: project, kind: kind, scope: scope, canonical: canonical, etag: etag, note: note)
            context.logger.info("audit.document.published", metadata: [
                "project": "\(project)", "kind": "\(kind.rawValue)", "version": "\(version)",
                "platform": "\(scope.platform)", "app_id": "\(scope.appID)",
            ])
            return try jsonResponse(.created, encoding: PublishResult(project: project, kind: kind, version: version, etag: etag))
        }
    }

    router.get("/v1/projects/:project/:kind") { request, context in
        let project = try projectParameter(context)
        let kind = try kindParameter(context)
        let scope = try DocumentScope(platform: request.uri.queryParameters["platform"].map(String.init),
                                      appID: request.uri.queryParameters["app_id"].map(String.init))
        guard let document = try await store.latest(project: project, kind: kind, scope: scope) else {
            throw ServiceError(.notFound, "no_document", "no \(kind.rawValue) is published for project '\(project)' and this platform/app")
        }
        var headers: HTTPFields = [.eTag: document.etag, .cacheControl: "no-cache"]
        headers[.documentVersion] = String(document.version)
        let candidates = (request.headers[.ifNoneMatch] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        if candidates.contains(where: { $0 == document.etag || $0 == "*" }) {
            return Response(status: .notModified, headers: headers)
        }
        return jsonResponse(.ok, document.body, headers: headers)
    }

    var app = makeServiceApplication(name: "config-service", router: router, server: settings.server, runtime: runtime)
    database.attach(to: &app, schema: ConfigSchema.name, migrations: ConfigSchema.migrations, logger: runtime.logger)
    return app
}

private struct InvalidDocument: Encodable {
    let error: String
    let message: String
    let problems: [DocumentProblem]
}

private func projectParameter(_ context: DatongRequestContext) throws -> String {
    let project = context.parameters.get("project") ?? ""
    guard ProjectName.isValid(project) else {
        throw ServiceError.invalidProject
    }
    return project
}

private func kindParameter(_ context: DatongRequestContext) throws -> DocumentKind {
    let raw = context.parameters.get("kind") ?? ""
    guard let kind = DocumentKind(rawValue: raw) else {
        throw ServiceError(.notFound, "unknown_kind", "unknown document kind '\(raw)'; kinds: \(DocumentKind.allCases.map(\.rawValue).joined(separator: ", "))")
    }
    return kind
}
