import DatongPostgres
import Hummingbird
import Logging

/// A service's PostgreSQL pool, whose schema is migrated before the server accepts requests.
public struct ServiceDatabase: Sendable {
    public let pool: PostgresPool
    private let settings: DatabaseSettings

    public init(settings: DatabaseSettings, logger: Logger) {
        self.settings = settings
        pool = PostgresPool(url: settings.url, maxConnections: settings.poolSize, logger: logger)
    }

    /// The `/ready` check: a connection answers now.
    public var readiness: ReadinessCheck {
        let pool = self.pool
        return ReadinessCheck("database") { await pool.ping() }
    }

    /// Makes the pool one of `app`'s services (closed after the server drains on shutdown) and applies
    /// the migrations before the server starts, waiting for the database up to the start-up timeout.
    public func attach<Responder>(
        to app: inout Application<Responder>, schema: String, migrations: [Migration], logger: Logger
    ) {
        let pool = self.pool
        let timeout = Duration.seconds(settings.startupTimeout)
        app.addServices(pool)
        app.beforeServerStarts {
            try await Migrator.migrateWhenReachable(
                schema: schema, migrations: migrations, pool: pool, timeout: timeout, logger: logger
            )
        }
    }
}
