import DatongContracts
import DatongPostgres

/// A published document version as served.
struct StoredDocument: Sendable {
    let version: Int
    let etag: String
    let body: String
}

/// Projects and document versions in PostgreSQL.
struct ConfigStore: Sendable {
    let pool: PostgresPool

    func listProjects() async throws -> [ProjectInfo] {
        try await pool.withConnection { connection in
            try connection.query(
                "SELECT name, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM config.projects ORDER BY name"
            ).rows.map { ProjectInfo(name: $0[0] ?? "", createdAt: $0[1] ?? "") }
        }
    }

    /// Creates the project if it does not exist; true when it was created now.
    func createProject(_ name: String) async throws -> Bool {
        try await pool.withConnection { connection in
            try connection.query(
                "INSERT INTO config.projects (name) VALUES ($1) ON CONFLICT DO NOTHING", [name]
            ).affectedRows == 1
        }
    }

    func projectExists(_ name: String) async throws -> Bool {
        try await pool.withConnection { connection in
            try connection.query("SELECT 1 FROM config.projects WHERE name = $1", [name]).rows.isEmpty == false
        }
    }

    /// Publishes `canonical` as the next version of the document; versions are numbered per
    /// (project, kind, scope) and never reused.
    func publish(
        project: String, kind: DocumentKind, scope: DocumentScope, canonical: String, etag: String, note: String?,
        minAppVersion: AppVersion? = nil, maxAppVersion: AppVersion? = nil
    ) async throws -> Int {
        try await pool.transaction { connection in
            try connection.query(
                "SELECT pg_advisory_xact_lock(hashtext($1))",
                ["config.documents/\(project)/\(kind.rawValue)/\(scope.platform)/\(scope.appID)"]
            )
            let next = try connection.query(
                """
                INSERT INTO config.documents (project, kind, platform, app_id, version, body, etag, note, min_app_version, max_app_version)
                SELECT $1, $2, $3, $4, coalesce(max(version), 0) + 1, $5::jsonb, $6, $7, $8::integer[], $9::integer[]
                FROM config.documents WHERE project = $1 AND kind = $2 AND platform = $3 AND app_id = $4
                RETURNING version
                """,
                [project, kind.rawValue, scope.platform, scope.appID, canonical, etag, note, minAppVersion?.arrayLiteral, maxAppVersion?.arrayLiteral]
            ).scalar.flatMap(Int.init)
            guard let next else { throw PostgresError.unexpectedResult("no version returned") }
            return next
        }
    }

    /// The newest version for exactly this scope that targets `appVersion`; without an app version,
    /// the newest version that targets no particular app versions.
    func latest(project: String, kind: DocumentKind, scope: DocumentScope, appVersion: AppVersion? = nil) async throws -> StoredDocument? {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT version, etag, body::text FROM config.documents
                WHERE project = $1 AND kind = $2 AND platform = $3 AND app_id = $4
                  AND CASE WHEN $5::integer[] IS NULL THEN min_app_version IS NULL AND max_app_version IS NULL
                           ELSE (min_app_version IS NULL OR min_app_version <= $5::integer[])
                            AND (max_app_version IS NULL OR max_app_version >= $5::integer[]) END
                ORDER BY version DESC LIMIT 1
                """,
                [project, kind.rawValue, scope.platform, scope.appID, appVersion?.arrayLiteral]
            ).rows.first.flatMap { row in
                guard let version = row[0].flatMap(Int.init), let etag = row[1], let body = row[2] else { return nil }
                return StoredDocument(version: version, etag: etag, body: body)
            }
        }
    }

    /// Every version of the document for exactly this scope, newest first.
    func versions(project: String, kind: DocumentKind, scope: DocumentScope) async throws -> [DocumentVersion] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT version, etag, note, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                       min_app_version::text, max_app_version::text
                FROM config.documents WHERE project = $1 AND kind = $2 AND platform = $3 AND app_id = $4
                ORDER BY version DESC
                """,
                [project, kind.rawValue, scope.platform, scope.appID]
            ).rows.compactMap { row in
                guard let version = row[0].flatMap(Int.init), let etag = row[1] else { return nil }
                return DocumentVersion(
                    version: version, etag: etag, note: row[2], publishedAt: row[3] ?? "",
                    minAppVersion: AppVersion.dotted(fromArray: row[4]), maxAppVersion: AppVersion.dotted(fromArray: row[5])
                )
            }
        }
    }

    /// Version `number` of the document, or nil.
    func version(_ number: Int, project: String, kind: DocumentKind, scope: DocumentScope) async throws -> StoredDocument? {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT version, etag, body::text FROM config.documents
                WHERE project = $1 AND kind = $2 AND platform = $3 AND app_id = $4 AND version = $5
                """,
                [project, kind.rawValue, scope.platform, scope.appID, String(number)]
            ).rows.first.flatMap { row in
                guard let version = row[0].flatMap(Int.init), let etag = row[1], let body = row[2] else { return nil }
                return StoredDocument(version: version, etag: etag, body: body)
            }
        }
    }

    /// Publishes version `number` again as the newest version (same body, same ETag); nil when
    /// there is no such version.
    func rollback(to number: Int, project: String, kind: DocumentKind, scope: DocumentScope, note: String?) async throws -> Int? {
        try await pool.transaction { connection in
            try connection.query(
                "SELECT pg_advisory_xact_lock(hashtext($1))",
                ["config.documents/\(project)/\(kind.rawValue)/\(scope.platform)/\(scope.appID)"]
            )
            return try connection.query(
                """
                INSERT INTO config.documents (project, kind, platform, app_id, version, body, etag, note, min_app_version, max_app_version)
                SELECT $1, $2, $3, $4,
                       (SELECT max(version) + 1 FROM config.documents WHERE project = $1 AND kind = $2 AND platform = $3 AND app_id = $4),
                       body, etag, coalesce($6, 'rollback to version ' || $5), min_app_version, max_app_version
                FROM config.documents WHERE project = $1 AND kind = $2 AND platform = $3 AND app_id = $4 AND version = $5::integer
                RETURNING version
                """,
                [project, kind.rawValue, scope.platform, scope.appID, String(number), note]
            ).scalar.flatMap(Int.init)
        }
    }
}
