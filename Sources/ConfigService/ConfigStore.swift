import DatongContracts
import DatongCrypto
import DatongPostgres
import Foundation

/// A published document version as served.
struct StoredDocument: Sendable, Equatable {
    let version: Int
    let etag: String
    let body: String
}

/// Where config-service keeps projects, documents, keys and tokens.
protocol ConfigStore: Sendable {
    /// `latest`, answered from the cache when this process read it within the last second.
    func cachedLatest(project: String, kind: DocumentKind, scope: DocumentScope, appVersion: AppVersion?) async throws -> StoredDocument?
    func listProjects() async throws -> [ProjectInfo]
    /// Creates the project if it does not exist; true when it was created now.
    func createProject(_ name: String, actor: String) async throws -> Bool
    /// Sets (a digest) or clears (nil) the ingestion token of an existing project; false when there
    /// is no such project.
    func setIngestionToken(project: String, digestHex: String?, actor: String) async throws -> Bool
    /// What the gateway needs to accept uploads for `project`: nil when there is no such project,
    /// otherwise the hex SHA-256 of its ingestion token (nil inside when uploads need none).
    func ingestion(project: String) async throws -> ProjectAccess
    /// The project's enrichment settings; nil when there is no such project.
    func enrichment(project: String) async throws -> EnrichmentPolicy?
    /// False when there is no such project.
    func setEnrichment(project: String, policy: EnrichmentPolicy, actor: String) async throws -> Bool
    func projectExists(_ name: String) async throws -> Bool
    /// Publishes `canonical` as the next version of the document; versions are numbered per
    /// (project, kind, scope) and never reused.
    func publish(
        project: String, kind: DocumentKind, scope: DocumentScope, canonical: String, etag: String, note: String?, minAppVersion: AppVersion?,
        maxAppVersion: AppVersion?, actor: String
    ) async throws -> Int
    /// The newest version for exactly this scope that targets `appVersion`; without an app version,
    /// the newest version that targets no particular app versions.
    func latest(project: String, kind: DocumentKind, scope: DocumentScope, appVersion: AppVersion?) async throws -> StoredDocument?
    /// Every version of the document for exactly this scope, newest first.
    func versions(project: String, kind: DocumentKind, scope: DocumentScope) async throws -> [DocumentVersion]
    /// Version `number` of the document, or nil.
    func version(_ number: Int, project: String, kind: DocumentKind, scope: DocumentScope) async throws -> StoredDocument?
    /// Publishes version `number` again as the newest version (same body, same ETag); nil when
    /// there is no such version.
    func rollback(to number: Int, project: String, kind: DocumentKind, scope: DocumentScope, note: String?, actor: String) async throws -> Int?
    /// Stores a new key pair for `project` under the next pkv (one past every pkv it ever had);
    /// nil when there is no such project.
    func createKey(project: String, pair: GeneratedKeyPair, sealer: KeySealer, actor: String) async throws -> EncryptionKeyInfo?
    func listKeys(project: String) async throws -> [EncryptionKeyInfo]
    /// Retires key `pkv` of `project`: it is no longer served and no longer decrypts. nil when there
    /// is no such key, false when it was retired already.
    func retireKey(project: String, pkv: Int, actor: String) async throws -> Bool?
    /// Turns transport encryption (`gzip=13`) on or off for SDKs; false when there is no such project.
    func setTransportEncryption(project: String, enabled: Bool, actor: String) async throws -> Bool
    /// The gateway's view of a project's encryption; nil when there is no such project.
    func encryption(project: String) async throws -> ProjectEncryption?
    /// Stores a new token's digest under `name`; false when the name is taken.
    func createToken(name: String, digestHex: String, actor: String) async throws -> Bool
    func listTokens() async throws -> [AdminTokenInfo]
    /// Revokes the token named `name`; false when there is none.
    func revokeToken(name: String, actor: String) async throws -> Bool
    /// The newest `limit` entries of the audit trail, for one project or all.
    func auditTrail(project: String?, limit: Int) async throws -> [AuditRecord]
}

/// Projects and document versions in PostgreSQL.
struct PostgresConfigStore: ConfigStore {
    let pool: PostgresPool
    let cache = DocumentCache()

    func cachedLatest(project: String, kind: DocumentKind, scope: DocumentScope, appVersion: AppVersion?) async throws -> StoredDocument? {
        let key = DocumentCache.Key(project: project, kind: kind.rawValue, platform: scope.platform, appID: scope.appID, appVersion: appVersion?.padded)
        if let cached = cache.lookup(key) { return cached }
        let document = try await latest(project: project, kind: kind, scope: scope, appVersion: appVersion)
        cache.store(document, for: key)
        return document
    }

    func listProjects() async throws -> [ProjectInfo] {
        try await pool.withConnection { connection in
            try connection.query(
                "SELECT name, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM config.projects ORDER BY name"
            ).rows.map { ProjectInfo(name: $0[0] ?? "", createdAt: $0[1] ?? "") }
        }
    }

    func createProject(_ name: String, actor: String) async throws -> Bool {
        try await pool.transaction { connection in
            let created =
                try connection.query(
                    "INSERT INTO config.projects (name) VALUES ($1) ON CONFLICT DO NOTHING", [name]
                ).affectedRows == 1
            if created { try Self.audit(actor, "project.created", project: name, on: connection) }
            return created
        }
    }

    func setIngestionToken(project: String, digestHex: String?, actor: String) async throws -> Bool {
        try await pool.transaction { connection in
            let updated =
                try connection.query(
                    "UPDATE config.projects SET token_sha256 = $2 WHERE name = $1", [project, digestHex]
                ).affectedRows == 1
            if updated { try Self.audit(actor, digestHex == nil ? "project.token_cleared" : "project.token_set", project: project, on: connection) }
            return updated
        }
    }

    func ingestion(project: String) async throws -> ProjectAccess {
        try await pool.withConnection { connection in
            let rows = try connection.query("SELECT token_sha256 FROM config.projects WHERE name = $1", [project]).rows
            guard let row = rows.first else { return .unknown }
            return row[0].map { .token(sha256: $0) } ?? .open
        }
    }

    func enrichment(project: String) async throws -> EnrichmentPolicy? {
        try await pool.withConnection { connection in
            guard let row = try connection.query("SELECT enrichment FROM config.projects WHERE name = $1", [project]).rows.first else {
                return nil
            }
            // Written by `setEnrichment` only; a value this version cannot read is the defaults.
            return row[0].flatMap { try? JSONDecoder().decode(EnrichmentPolicy.self, from: Data($0.utf8)) } ?? .defaults
        }
    }

    func setEnrichment(project: String, policy: EnrichmentPolicy, actor: String) async throws -> Bool {
        try await pool.transaction { connection in
            let updated =
                try connection.query(
                    "UPDATE config.projects SET enrichment = $2 WHERE name = $1", [project, policy.jsonText]
                ).affectedRows == 1
            if updated { try Self.audit(actor, "project.enrichment_set", project: project, detail: policy.jsonText, on: connection) }
            return updated
        }
    }

    func projectExists(_ name: String) async throws -> Bool {
        try await pool.withConnection { connection in
            try connection.query("SELECT 1 FROM config.projects WHERE name = $1", [name]).rows.isEmpty == false
        }
    }

    func publish(
        project: String, kind: DocumentKind, scope: DocumentScope, canonical: String, etag: String, note: String?,
        minAppVersion: AppVersion? = nil, maxAppVersion: AppVersion? = nil, actor: String
    ) async throws -> Int {
        let version = try await pool.transaction { connection in
            // Publishers of one document take turns, so version numbers never collide.
            try connection.lockInOrder(["config.documents/\(project)/\(kind.rawValue)/\(scope.platform)/\(scope.appID)"])
            let next = try connection.query(
                """
                INSERT INTO config.documents (project, kind, platform, app_id, version, body, etag, note, min_app_version, max_app_version)
                SELECT $1, $2, $3, $4, coalesce(max(version), 0) + 1, $5, $6, $7, $8::integer[], $9::integer[]
                FROM config.documents WHERE project = $1 AND kind = $2 AND platform = $3 AND app_id = $4
                RETURNING version
                """,
                [project, kind.rawValue, scope.platform, scope.appID, canonical, etag, note, minAppVersion?.arrayLiteral, maxAppVersion?.arrayLiteral]
            ).scalar.flatMap(Int.init)
            guard let next else { throw PostgresError.unexpectedResult("no version returned") }
            try Self.audit(actor, "document.published", project: project, kind: kind, scope: scope, version: next, detail: note, on: connection)
            return next
        }
        cache.invalidate(project: project, kind: kind.rawValue)
        return version
    }

    func latest(project: String, kind: DocumentKind, scope: DocumentScope, appVersion: AppVersion? = nil) async throws -> StoredDocument? {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT version, etag, body FROM config.documents
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

    func version(_ number: Int, project: String, kind: DocumentKind, scope: DocumentScope) async throws -> StoredDocument? {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT version, etag, body FROM config.documents
                WHERE project = $1 AND kind = $2 AND platform = $3 AND app_id = $4 AND version = $5
                """,
                [project, kind.rawValue, scope.platform, scope.appID, String(number)]
            ).rows.first.flatMap { row in
                guard let version = row[0].flatMap(Int.init), let etag = row[1], let body = row[2] else { return nil }
                return StoredDocument(version: version, etag: etag, body: body)
            }
        }
    }

    func rollback(to number: Int, project: String, kind: DocumentKind, scope: DocumentScope, note: String?, actor: String) async throws -> Int? {
        defer { cache.invalidate(project: project, kind: kind.rawValue) }
        return try await pool.transaction { connection in
            // Publishers of one document take turns, so version numbers never collide.
            try connection.lockInOrder(["config.documents/\(project)/\(kind.rawValue)/\(scope.platform)/\(scope.appID)"])
            let version = try connection.query(
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
            if let version {
                try Self.audit(
                    actor, "document.rolled_back", project: project, kind: kind, scope: scope, version: version,
                    detail: "to version \(number)", on: connection)
            }
            return version
        }
    }

    // MARK: Encryption keys

    func createKey(project: String, pair: GeneratedKeyPair, sealer: KeySealer, actor: String) async throws -> EncryptionKeyInfo? {
        try await pool.transaction { connection in
            try connection.lockInOrder(["config.encryption_keys/\(project)"])
            guard try connection.query("SELECT 1 FROM config.projects WHERE name = $1", [project]).rows.count == 1 else { return nil }
            let next =
                try connection.query(
                    "SELECT coalesce(max(pkv), 0) + 1 FROM config.encryption_keys WHERE project = $1", [project]
                ).rows.first?[0].flatMap(Int.init) ?? 1
            let sealed = try sealer.seal(pair.privateKeyDER, label: ProjectEncryption.sealLabel(project: project, pkv: next))
            let row = try connection.query(
                """
                INSERT INTO config.encryption_keys (project, pkv, type, public_key, sealed_private, created_by)
                VALUES ($1, $2::integer, $3, $4, decode($5, 'base64'), $6)
                RETURNING to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
                """,
                [project, String(next), pair.type.rawValue, pair.publicKeyBase64, Data(sealed).base64EncodedString(), actor]
            ).rows.first
            try Self.audit(actor, "key.created", project: project, detail: "pkv \(next) (\(pair.type.rawValue))", on: connection)
            return EncryptionKeyInfo(
                pkv: next, type: pair.type.rawValue, publicKey: pair.publicKeyBase64,
                createdAt: row?[0] ?? "", createdBy: actor, retiredAt: nil)
        }
    }

    func listKeys(project: String) async throws -> [EncryptionKeyInfo] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT pkv, type, public_key, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), created_by,
                       to_char(retired_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
                FROM config.encryption_keys WHERE project = $1 ORDER BY pkv
                """, [project]
            ).rows.map { row in
                EncryptionKeyInfo(
                    pkv: row[0].flatMap(Int.init) ?? 0, type: row[1] ?? "", publicKey: row[2] ?? "",
                    createdAt: row[3] ?? "", createdBy: row[4] ?? "", retiredAt: row[5])
            }
        }
    }

    func retireKey(project: String, pkv: Int, actor: String) async throws -> Bool? {
        try await pool.transaction { connection in
            let rows = try connection.query(
                "SELECT retired_at IS NOT NULL FROM config.encryption_keys WHERE project = $1 AND pkv = $2::integer FOR UPDATE",
                [project, String(pkv)]
            ).rows
            guard let row = rows.first else { return nil }
            if row[0] == "t" { return false }
            try connection.query(
                "UPDATE config.encryption_keys SET retired_at = now(), retired_by = $3 WHERE project = $1 AND pkv = $2::integer",
                [project, String(pkv), actor]
            )
            try Self.audit(actor, "key.retired", project: project, detail: "pkv \(pkv)", on: connection)
            return true
        }
    }

    func setTransportEncryption(project: String, enabled: Bool, actor: String) async throws -> Bool {
        try await pool.transaction { connection in
            let updated =
                try connection.query(
                    "UPDATE config.projects SET transport_encryption = $2::boolean WHERE name = $1", [project, enabled ? "true" : "false"]
                ).affectedRows == 1
            if updated {
                try Self.audit(actor, enabled ? "project.transport_encryption_on" : "project.transport_encryption_off", project: project, on: connection)
            }
            return updated
        }
    }

    func encryption(project: String) async throws -> ProjectEncryption? {
        try await pool.withConnection { connection in
            guard let flag = try connection.query("SELECT transport_encryption FROM config.projects WHERE name = $1", [project]).rows.first else {
                return nil
            }
            let keys = try connection.query(
                """
                SELECT pkv, type, public_key, encode(sealed_private, 'base64') FROM config.encryption_keys
                WHERE project = $1 AND retired_at IS NULL ORDER BY pkv
                """, [project]
            ).rows.map { row in
                ProjectEncryption.Key(
                    pkv: row[0].flatMap(Int.init) ?? 0, type: row[1] ?? "", publicKey: row[2] ?? "",
                    sealedPrivateKey: (row[3] ?? "").replacingOccurrences(of: "\n", with: ""))
            }
            return ProjectEncryption(transportEncryption: flag[0] == "t", keys: keys)
        }
    }

    // MARK: Admin tokens and the audit trail

    func createToken(name: String, digestHex: String, actor: String) async throws -> Bool {
        try await pool.transaction { connection in
            let created =
                try connection.query(
                    "INSERT INTO config.admin_tokens (name, sha256, created_by) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    [name, digestHex, actor]
                ).affectedRows == 1
            if created { try Self.audit(actor, "token.created", detail: name, on: connection) }
            return created
        }
    }

    func listTokens() async throws -> [AdminTokenInfo] {
        try await pool.withConnection { connection in
            try connection.query(
                "SELECT name, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), created_by FROM config.admin_tokens ORDER BY name"
            ).rows.map { AdminTokenInfo(name: $0[0] ?? "", createdAt: $0[1] ?? "", createdBy: $0[2] ?? "") }
        }
    }

    func revokeToken(name: String, actor: String) async throws -> Bool {
        try await pool.transaction { connection in
            let revoked = try connection.query("DELETE FROM config.admin_tokens WHERE name = $1", [name]).affectedRows == 1
            if revoked { try Self.audit(actor, "token.revoked", detail: name, on: connection) }
            return revoked
        }
    }

    func auditTrail(project: String?, limit: Int) async throws -> [AuditRecord] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), actor, action, project, kind,
                       nullif(platform, ''), nullif(app_id, ''), version, detail
                FROM config.audit WHERE $1::text IS NULL OR project = $1 ORDER BY id DESC LIMIT $2::integer
                """,
                [project, String(limit)]
            ).rows.map { row in
                AuditRecord(
                    at: row[0] ?? "", actor: row[1] ?? "", action: row[2] ?? "", project: row[3], kind: row[4],
                    platform: row[5], appId: row[6], version: row[7].flatMap(Int.init), detail: row[8])
            }
        }
    }

    /// Writes an audit entry in the transaction that makes the change (erasures use it too).
    static func audit(
        _ actor: String, _ action: String, project: String? = nil, kind: DocumentKind? = nil, scope: DocumentScope? = nil,
        version: Int? = nil, detail: String? = nil, on connection: PostgresConnection
    ) throws {
        try connection.query(
            "INSERT INTO config.audit (actor, action, project, kind, platform, app_id, version, detail) VALUES ($1, $2, $3, $4, $5, $6, $7::integer, $8)",
            [actor, action, project, kind?.rawValue, scope?.platform, scope?.appID, version.map(String.init), detail]
        )
    }
}
