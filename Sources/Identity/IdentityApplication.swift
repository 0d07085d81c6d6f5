import DatongContracts
import DatongRuntime
import Hummingbird

/// Builds identity-service: `POST /v1/resolve` maps every record of an upload to its user.
public func buildIdentityApplication(
    settings: IdentitySettings, runtime: ServiceRuntime
) -> some ApplicationProtocol {
    let database = ServiceDatabase(settings: settings.database, logger: runtime.logger)
    let store = PostgresIdentityStore(pool: database.pool)
    let router = makeServiceRouter(runtime: runtime, readiness: [database.readiness])
    let limit = settings.maxRequestBytes
    let serviceToken = ServiceToken(settings.server.serviceToken)
    router.post("/v1/resolve") { request, _ in
        try serviceToken.check(request)
        let resolve = try await decodeJSONBody(ResolveRequest.self, from: request, limit: limit)
        let users = try await store.resolve(resolve.records)
        return try jsonResponse(.ok, encoding: ResolveResponse(users: users))
    }
    var app = makeServiceApplication(name: "identity-service", router: router, server: settings.server, runtime: runtime)
    database.attach(to: &app, schema: IdentitySchema.name, migrations: IdentitySchema.migrations, logger: runtime.logger)
    return app
}
