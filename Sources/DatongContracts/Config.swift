/// The kinds of versioned document config-service keeps per project.
public enum DocumentKind: String, Codable, Sendable, CaseIterable {
    case trackingTable = "tracking-table"
    case remoteConfig = "remote-config"
    case visualConfig = "visual-config"
    case serverURLWhitelist = "server-url-whitelist"
    case h5DomainWhitelist = "h5-domain-whitelist"
    /// The app's route table and its Universal Links / App Links data (seed 003).
    case appLinks = "app-links"
}

/// A project as the admin API lists it.
public struct ProjectInfo: Codable, Sendable, Equatable {
    public var name: String
    public var createdAt: String

    public init(name: String, createdAt: String) {
        self.name = name
        self.createdAt = createdAt
    }
}

/// The answer to publishing a document: its new immutable version.
public struct PublishResult: Codable, Sendable, Equatable {
    public var project: String
    public var kind: DocumentKind
    public var version: Int
    public var etag: String

    public init(project: String, kind: DocumentKind, version: Int, etag: String) {
        self.project = project
        self.kind = kind
        self.version = version
        self.etag = etag
    }
}

/// The JSON body of every 4xx/5xx answer of every service.
public struct ProblemBody: Codable, Sendable, Equatable {
    /// A short stable code, e.g. `invalid_base64`.
    public var error: String
    /// What went wrong, in words a developer can act on.
    public var message: String

    public init(error: String, message: String) {
        self.error = error
        self.message = message
    }
}

/// Header names the services share.
public enum DatongHeader {
    /// The request id that travels from the gateway to every service a request reaches.
    public static let requestID = "X-Request-Id"
    /// The version number of a served config document.
    public static let documentVersion = "X-Datong-Version"
}

/// One published version of a document, as the version history lists it.
public struct DocumentVersion: Codable, Sendable, Equatable {
    public var version: Int
    public var etag: String
    public var note: String?
    /// When it was published (UTC, ISO 8601).
    public var publishedAt: String
    /// The app versions it targets (inclusive); absent: unbounded.
    public var minAppVersion: String?
    public var maxAppVersion: String?

    public init(version: Int, etag: String, note: String?, publishedAt: String, minAppVersion: String? = nil, maxAppVersion: String? = nil) {
        self.version = version
        self.etag = etag
        self.note = note
        self.publishedAt = publishedAt
        self.minAppVersion = minAppVersion
        self.maxAppVersion = maxAppVersion
    }
}

/// An admin token as listed (its value is never shown again after it was made).
public struct AdminTokenInfo: Codable, Sendable, Equatable {
    public var name: String
    public var createdAt: String
    public var createdBy: String

    public init(name: String, createdAt: String, createdBy: String) {
        self.name = name
        self.createdAt = createdAt
        self.createdBy = createdBy
    }
}

/// A token just made: the only time its value is shown.
public struct NewAdminToken: Codable, Sendable, Equatable {
    public var name: String
    public var token: String

    public init(name: String, token: String) {
        self.name = name
        self.token = token
    }
}

/// One change in config-service's audit trail: who did what, when.
public struct AuditRecord: Codable, Sendable, Equatable {
    public var at: String
    /// The name of the admin token used (`bootstrap` for ADMIN_TOKEN).
    public var actor: String
    /// `project.created`, `project.token_set`, `project.token_cleared`, `document.published`,
    /// `document.rolled_back`, `token.created`, `token.revoked`.
    public var action: String
    public var project: String?
    public var kind: String?
    public var platform: String?
    public var appId: String?
    public var version: Int?
    public var detail: String?

    public init(
        at: String, actor: String, action: String, project: String? = nil, kind: String? = nil, platform: String? = nil,
        appId: String? = nil, version: Int? = nil, detail: String? = nil
    ) {
        self.at = at
        self.actor = actor
        self.action = action
        self.project = project
        self.kind = kind
        self.platform = platform
        self.appId = appId
        self.version = version
        self.detail = detail
    }
}

/// `GET /v1/projects/{project}/ingestion` on config-service: what the gateway checks uploads against.
public struct ProjectIngestion: Codable, Sendable, Equatable {
    public var project: String
    /// The hex SHA-256 of the token uploads must carry; absent when the project needs none.
    public var tokenSHA256: String?

    public init(project: String, tokenSHA256: String?) {
        self.project = project
        self.tokenSHA256 = tokenSHA256
    }
}

/// One of a project's encryption key pairs as the admin API shows it: never the private key.
public struct EncryptionKeyInfo: Codable, Sendable, Equatable {
    /// The key's number, echoed by the SDKs in every envelope; never reused within a project.
    public var pkv: Int
    /// `rsa` or `ec`.
    public var type: String
    /// Base64 of the DER SubjectPublicKeyInfo, as the SDKs read it.
    public var publicKey: String
    public var createdAt: String
    public var createdBy: String
    /// When an admin retired it: it is no longer served to SDKs and no longer decrypts.
    public var retiredAt: String?

    public init(pkv: Int, type: String, publicKey: String, createdAt: String, createdBy: String, retiredAt: String?) {
        self.pkv = pkv
        self.type = type
        self.publicKey = publicKey
        self.createdAt = createdAt
        self.createdBy = createdBy
        self.retiredAt = retiredAt
    }
}

/// What the gateway needs to serve and decrypt a project's encrypted uploads
/// (`GET /v1/projects/{project}/encryption`, service token only): its active keys, each private key
/// sealed under the master key, and whether SDKs may encrypt whole batches (`gzip=13`).
public struct ProjectEncryption: Codable, Sendable, Equatable {
    public struct Key: Codable, Sendable, Equatable {
        public var pkv: Int
        public var type: String
        public var publicKey: String
        /// Base64 of the private key's PKCS#8 DER sealed with AES-256-GCM under the master key,
        /// bound to "project/pkv".
        public var sealedPrivateKey: String

        public init(pkv: Int, type: String, publicKey: String, sealedPrivateKey: String) {
            self.pkv = pkv
            self.type = type
            self.publicKey = publicKey
            self.sealedPrivateKey = sealedPrivateKey
        }
    }

    public var transportEncryption: Bool
    /// Active keys, oldest first.
    public var keys: [Key]

    public init(transportEncryption: Bool, keys: [Key]) {
        self.transportEncryption = transportEncryption
        self.keys = keys
    }

    /// The label a sealed key is bound to.
    public static func sealLabel(project: String, pkv: Int) -> String { "\(project)/\(pkv)" }
}
