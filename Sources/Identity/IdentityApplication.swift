import DatongContracts
import DatongRuntime
import DatongStorage
import Foundation
import Hummingbird
import IdentityCore
import NIOCore
import NIOFoundationEssentialsCompat
import ServiceLifecycle

/// Builds identity-service: `POST /v1/resolve` maps every record of an upload to its user; the
/// `/v1/projects/{project}/…` API links, unbinds, merges, undoes merges and shows users and their
/// history. Every `/v1` call needs the service token.
package func buildIdentityApplication(
    settings: IdentitySettings, runtime: ServiceRuntime
) -> some ApplicationProtocol {
    let database = ServiceDatabase(settings: settings.database, logger: runtime.logger)
    var services: [any Service] = []
    var store = PostgresIdentityStore(pool: database.pool)
    let log = PostgresInvalidationLog(pool: database.pool)
    if settings.cacheEntries > 0 {
        let cache = IdentityCache(capacity: settings.cacheEntries, refreshInterval: .milliseconds(settings.cacheRefreshMilliseconds))
        store.cache = cache
        services.append(
            CacheFeed(
                cache: cache, source: log, interval: .milliseconds(settings.cacheRefreshMilliseconds), logger: runtime.logger,
                metrics: runtime.metrics
            ))
    }
    return database.application(
        name: "identity-service",
        api: IdentityAPI(
            store: store, invalidations: log, serviceToken: ServiceToken(settings.server.serviceToken), maxRequestBytes: settings.maxRequestBytes
        ),
        schema: IdentitySchema.name, migrations: IdentitySchema.migrations, server: settings.server, runtime: runtime, services: services
    )
}

/// The HTTP face of the identity graph.
struct IdentityAPI: ServiceAPI {
    let store: any IdentityStore
    let invalidations: any InvalidationSource
    let serviceToken: ServiceToken
    let maxRequestBytes: Int

    /// API bodies other than resolve are small.
    static let maxCallBytes = 64 << 10

    func register(on router: Router<DatongRequestContext>) {
        // The gateways' calls: users for records, and the log their identity caches follow.
        router.post("/v1/resolve", use: resolve)
        router.get("/v1/invalidations", use: invalidationLog)
        let projects = router.group("/v1/projects/:project")
        // Identities, users and their history (the console, through config-service).
        projects.post("links", use: link)
        projects.post("unbind", use: unbind)
        projects.get("identities", use: owner)
        projects.get("users/:user", use: user)
        projects.get("users/:user/history", use: history)
        // Merges and their undo.
        projects.post("merges", use: merge)
        projects.get("merges/:merge", use: mergeRecord)
        projects.post("merges/:merge/undo", use: undo)
        // An erasure (config-service runs the job): who the person is, then forget them.
        projects.post("erasures/subject", use: erasureSubject)
        projects.post("erasures/apply", use: erase)
    }

    // MARK: The gateways' calls

    @Sendable func resolve(_ request: Request, context: DatongRequestContext) async throws -> Response {
        try serviceToken.check(request)
        let resolve = try await readContractBody(ResolveRequest.self, from: request, limit: maxRequestBytes, what: "the resolve request")
        for record in resolve.records where !ProjectName.isValid(record.project) { throw ServiceError.invalidProject }
        return Self.json(try await store.resolve(resolve, requestID: context.requestID).jsonBytes)
    }

    /// What the gateways' identity caches follow (see `IdentityCache`).
    @Sendable func invalidationLog(_ request: Request, context: DatongRequestContext) async throws -> Response {
        try serviceToken.check(request)
        let after = request.uri.queryParameters["after"].map(String.init)
        if let after, PostgresInvalidationLog.snapshot(horizon: after) == nil {
            throw ServiceError.badRequest(.invalidHorizon, "after must be the horizon a previous look answered (xmin:xmax:running ids)")
        }
        return Self.json(try await invalidations.look(after: after).jsonBytes)
    }

    // MARK: Identities and users

    @Sendable func link(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let body = try await decodeJSONBody(LinkRequest.self, from: request, limit: Self.maxCallBytes)
        let user = try await refusing {
            try await store.link(project: project, identities: body.identities, cause: .api("link", actor: body.actor, requestID: context.requestID))
        }
        return try jsonResponse(.ok, encoding: UserAnswer(userId: user.userId ?? 0, created: user.created))
    }

    @Sendable func unbind(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let body = try await decodeJSONBody(UnbindRequest.self, from: request, limit: Self.maxCallBytes)
        let owner = try await refusing {
            try await store.unbind(
                project: project, identity: IdentityKey(key: body.key, value: body.value),
                cause: .api("unbind", actor: body.actor, requestID: context.requestID)
            )
        }
        guard let owner else { throw ServiceError(.notFound, .unknownIdentity, "\(body.key)=\(body.value.prefix(64)) belongs to no user") }
        return try jsonResponse(.ok, encoding: UserAnswer(userId: owner, created: false))
    }

    @Sendable func owner(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let query = request.uri.queryParameters
        guard let key = query["key"].map(String.init), let value = query["value"].map(String.init) else {
            throw ServiceError.badRequest(.missingIdentity, "give the identity as ?key=…&value=…")
        }
        guard let user = try await store.owner(project: project, identity: IdentityKey(key: key, value: value)) else {
            throw ServiceError(.notFound, .unknownIdentity, "\(key)=\(value.prefix(64)) belongs to no user")
        }
        return try jsonResponse(.ok, encoding: UserAnswer(userId: user, created: false))
    }

    @Sendable func user(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let (project, id) = (try authorize(request, context), try Self.number(context, "user"))
        return try Self.found(try await store.user(project: project, id: id), .unknownUser, "project \(project) has no user \(id)")
    }

    @Sendable func history(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let (project, id) = (try authorize(request, context), try Self.number(context, "user"))
        return try Self.found(try await store.history(project: project, user: id), .unknownUser, "project \(project) has no user \(id)")
    }

    // MARK: Merges

    @Sendable func merge(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let body = try await decodeJSONBody(MergeRequest.self, from: request, limit: Self.maxCallBytes)
        let merge = try await refusing {
            try await store.merge(
                project: project, from: body.fromUser, into: body.intoUser,
                cause: .api("merge", actor: body.actor, requestID: context.requestID)
            )
        }
        return try jsonResponse(.created, encoding: merge)
    }

    @Sendable func mergeRecord(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let (project, id) = (try authorize(request, context), try Self.number(context, "merge"))
        return try Self.found(try await store.mergeRecord(project: project, id: id), .unknownMerge, "project \(project) has no merge \(id)")
    }

    @Sendable func undo(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let id = try Self.number(context, "merge")
        let body = try await Self.optionalBody(UndoRequest.self, request) ?? UndoRequest()
        let merge = try await refusing {
            try await store.undo(project: project, mergeID: id, cause: .api("undo", actor: body.actor, requestID: context.requestID))
        }
        return try jsonResponse(.ok, encoding: merge)
    }

    // MARK: Erasures

    @Sendable func erasureSubject(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let reference = try await decodeJSONBody(UserReference.self, from: request, limit: Self.maxCallBytes)
        if let problem = reference.problem { throw ServiceError.badRequest(.invalidUser, problem) }
        return try Self.found(
            try await refusing { try await store.erasureSubject(project: project, reference: reference) }, .unknownUser,
            "project \(project) has no such user (no user holds that id, or no user has that number)")
    }

    @Sendable func erase(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let subject = try await decodeJSONBody(ErasureSubject.self, from: request, limit: 4 << 20)
        guard subject.users.count <= ErasureSubject.maxUsers, subject.identities.count <= ErasureSubject.maxIdentities + 1 else {
            throw ServiceError.badRequest(
                .invalidBody, "an erasure covers at most \(ErasureSubject.maxUsers) users and \(ErasureSubject.maxIdentities) ids")
        }
        return try jsonResponse(.ok, encoding: try await store.erase(project: project, subject: subject))
    }

    // MARK: Helpers

    /// 200 with what was found, or 404 with `code` and `message`.
    private static func found(_ value: (some Encodable)?, _ code: ErrorCode, _ message: @autoclosure () -> String) throws -> Response {
        guard let value else { throw ServiceError(.notFound, code, message()) }
        return try jsonResponse(.ok, encoding: value)
    }

    private static func json(_ bytes: [UInt8]) -> Response {
        Response(status: .ok, headers: [.contentType: "application/json; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    /// Checks the service token and the project name; returns the project.
    private func authorize(_ request: Request, _ context: DatongRequestContext) throws -> String {
        try serviceToken.check(request)
        return try context.project()
    }

    /// A refusal of the graph (a login conflict, an unknown user or merge) is the caller's 4xx.
    private func refusing<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let refusal as GraphRefusal {
            let status: HTTPResponse.Status
            switch refusal.code {
            case .unknownUser, .unknownMerge: status = .notFound
            case .loginConflict, .alreadyMerged, .alreadyUndone, .mergedSince, .ambiguousId: status = .conflict
            default: status = .unprocessableContent
            }
            throw ServiceError(status, refusal.code, refusal.message)
        }
    }

    private static func number(_ context: DatongRequestContext, _ name: String) throws -> Int64 {
        guard let text = context.parameters.get(name), let number = Int64(text), number > 0 else {
            throw ServiceError.badRequest(name == "user" ? .invalidUser : .invalidMerge, "\(name) must be a positive whole number")
        }
        return number
    }

    /// A JSON body that may be left out.
    private static func optionalBody<T: Decodable>(_ type: T.Type, _ request: Request) async throws -> T? {
        let body = try await collectBody(request, limit: maxCallBytes)
        guard body.readableBytes > 0 else { return nil }
        return try JSONDecoder().decode(T.self, from: Data(buffer: body))
    }
}
