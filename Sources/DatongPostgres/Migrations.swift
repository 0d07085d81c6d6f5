import Logging

/// One versioned change to a service's schema. Versions only grow; an applied migration never changes.
package struct Migration: Sendable {
    package let version: Int
    package let name: String
    package let sql: String

    package init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
    }
}

/// Applies a service's migrations at start-up.
///
/// Each service owns one schema and records what it applied in `<schema>.schema_migrations`. All
/// services take the same transaction-scoped advisory lock, so replicas (and services sharing the
/// `analytics` schema) that start at once apply each migration exactly once, one after the other.
package enum Migrator {
    /// The advisory lock key every Datong migration run takes ("datong" in ASCII).
    static let lockKey = 0x6461_746F_6E67

    package static func migrate(
        schema: String,
        migrations: [Migration],
        pool: PostgresPool,
        logger: Logger
    ) async throws {
        precondition(schema.allSatisfy { $0.isLetter || $0 == "_" }, "schema names are plain identifiers")
        let applied: [Migration] = try await pool.transaction { connection in
            try connection.query("SELECT pg_advisory_xact_lock($1)", [String(lockKey)])
            try connection.execute(
                """
                CREATE SCHEMA IF NOT EXISTS \(schema);
                CREATE TABLE IF NOT EXISTS \(schema).schema_migrations (
                    version    integer PRIMARY KEY,
                    name       text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                );
                """)
            let done = Set(
                try connection.query("SELECT version FROM \(schema).schema_migrations").rows.compactMap { $0[0].flatMap(Int.init) }
            )
            var applied: [Migration] = []
            for migration in migrations.sorted(by: { $0.version < $1.version }) where !done.contains(migration.version) {
                try connection.execute(migration.sql)
                try connection.query(
                    "INSERT INTO \(schema).schema_migrations (version, name) VALUES ($1, $2)",
                    [String(migration.version), migration.name]
                )
                applied.append(migration)
            }
            return applied
        }
        for migration in applied {
            logger.info(
                "migration.applied",
                metadata: [
                    "migration.schema": "\(schema)", "migration.version": "\(migration.version)", "migration.name": "\(migration.name)",
                ])
        }
    }

    /// `migrate`, retried while the database is unreachable (it may still be starting), up to `timeout`.
    package static func migrateWhenReachable(
        schema: String,
        migrations: [Migration],
        pool: PostgresPool,
        timeout: Duration,
        logger: Logger
    ) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: timeout)
        var delay = Duration.milliseconds(200)
        while true {
            do {
                try await migrate(schema: schema, migrations: migrations, pool: pool, logger: logger)
                return
            } catch let error as PostgresError where error.isUnavailable && clock.now < deadline {
                logger.warning("database.unreachable", metadata: ["error": "\(error)", "retry.in": "\(delay)"])
                try await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
        }
    }
}
