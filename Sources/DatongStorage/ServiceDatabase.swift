import DatongPostgres
import DatongRuntime
import Hummingbird
import Logging
import ServiceLifecycle
import Synchronization

/// A service's PostgreSQL pool, whose schema is migrated before the server accepts requests.
package struct ServiceDatabase: Sendable {
    package let pool: PostgresPool
    private let settings: DatabaseSettings

    package init(settings: DatabaseSettings, logger: Logger) {
        self.settings = settings
        pool = PostgresPool(url: settings.url, maxConnections: settings.poolSize, logger: logger)
    }

    /// The `/ready` check: a connection answers now.
    package var readiness: ReadinessCheck {
        let pool = self.pool
        return ReadinessCheck("database") { await pool.ping() }
    }

    /// Makes the pool one of `app`'s services (closed after the server drains on shutdown) and applies
    /// the migrations before the server starts, waiting for the database up to the start-up timeout.
    package func attach<Responder>(
        to app: inout Application<Responder>, schema: String, migrations: [Migration], logger: Logger, migrated: MigrationGate? = nil
    ) {
        let pool = self.pool
        let timeout = Duration.seconds(settings.startupTimeout)
        app.addServices(pool)
        app.beforeServerStarts {
            try await Migrator.migrateWhenReachable(
                schema: schema, migrations: migrations, pool: pool, timeout: timeout, logger: logger
            )
            migrated?.open()
        }
    }
}

extension ServiceDatabase {
    /// The application of a service that keeps its data here: the shared router, ready when the
    /// database answers, with `api`'s routes; the pool and `services` run beside the server, and
    /// the schema is migrated before it starts.
    package func application(
        name: String, api: some ServiceAPI, schema: String, migrations: [Migration], server: ServerSettings, runtime: ServiceRuntime,
        services: [any Service] = []
    ) -> some ApplicationProtocol {
        let router = makeServiceRouter(runtime: runtime, readiness: [readiness])
        api.register(on: router)
        // The services beside the server work on the schema: they begin once it is migrated.
        let migrated = MigrationGate()
        var app = makeServiceApplication(
            name: name, router: router, server: server, runtime: runtime, services: services.map { AfterMigrations(gate: migrated, service: $0) })
        attach(to: &app, schema: schema, migrations: migrations, logger: runtime.logger, migrated: migrated)
        return app
    }
}

/// Opens once a service's migrations have run.
package final class MigrationGate: Sendable {
    private let isOpen = Mutex(false)

    package init() {}

    package func open() { isOpen.withLock { $0 = true } }

    /// Returns once the gate is open; throws when the task is cancelled first (a shutdown).
    package func wait() async throws {
        while !isOpen.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(20)) }
    }
}

/// A service that begins its work once its database is migrated (partition maintenance, the
/// identity cache's refresher), instead of failing its first rounds against missing tables.
struct AfterMigrations: Service {
    let gate: MigrationGate
    let service: any Service

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown { try await gate.wait() }
        } catch is CancellationError {
            return
        }
        try await service.run()
    }
}

/// What a request that met a database error is answered: 503 while the database cannot be reached,
/// 400 for a value PostgreSQL cannot store; anything else is an internal error.
extension PostgresError: ServiceErrorConvertible {
    package func serviceError(logger: Logger) -> ServiceError {
        if isUnavailable {
            logger.warning("database.unavailable", metadata: ["error": "\(self)"])
            return .unavailable(.databaseUnavailable, "the database cannot be reached now; try again later")
        }
        if sqlState == "57014" {
            // A statement timeout (the console's bounded reads set one): the request asked for
            // more than the database does in that time.
            logger.notice("request.query_timeout", metadata: ["error": "\(self)"])
            return ServiceError(.serviceUnavailable, .queryTimeout, "the query took too long and was stopped; narrow it (an event name, a shorter time)")
        }
        if isDataException {
            // A value PostgreSQL cannot store (a NUL character, a timestamp out of range, malformed
            // JSON): the input is at fault, not the server. PostgreSQL's own text stays in the log:
            // it names tables and internals that are no business of a client.
            logger.notice("request.invalid_value", metadata: ["error": "\(self)"])
            return .badRequest(.invalidValue, "a value in the request cannot be stored (SQLSTATE \(sqlState ?? "?"))")
        }
        logger.error("request.failed", metadata: ["error": "\(String(reflecting: self))"])
        return ServiceError(.internalServerError, .internalError, "the request failed unexpectedly; it is logged with its request id")
    }
}
