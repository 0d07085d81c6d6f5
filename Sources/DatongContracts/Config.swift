/// The kinds of versioned document config-service keeps per project.
package enum DocumentKind: String, Codable, Sendable, CaseIterable {
    case trackingTable = "tracking-table"
    case remoteConfig = "remote-config"
    case visualConfig = "visual-config"
    case serverURLWhitelist = "server-url-whitelist"
    case h5DomainWhitelist = "h5-domain-whitelist"
    /// The app's route table and its Universal Links / App Links data.
    case appLinks = "app-links"
}

extension DocumentKind {
    /// The largest `CONFIG_MAX_DOCUMENT_BYTES` config-service may be given, and what the gateway
    /// reads of a document: config-service serves a document as the canonical text it checked,
    /// never longer than what was published, so every document it accepts reaches the SDKs.
    package static let largestDocumentBytes = 64 << 20
}

/// A project as the admin API lists it.
package struct ProjectInfo: Codable, Sendable, Equatable {
    package var name: String
    package var createdAt: String

    package init(name: String, createdAt: String) {
        self.name = name
        self.createdAt = createdAt
    }
}

/// The answer to publishing a document: its new immutable version.
package struct PublishResult: Codable, Sendable, Equatable {
    package var project: String
    package var kind: DocumentKind
    package var version: Int
    package var etag: String

    package init(project: String, kind: DocumentKind, version: Int, etag: String) {
        self.project = project
        self.kind = kind
        self.version = version
        self.etag = etag
    }
}

/// The JSON body of every 4xx/5xx answer of every service.
package struct ProblemBody: Codable, Sendable, Equatable {
    /// A short stable code, e.g. `invalid_base64`.
    package var error: String
    /// What went wrong, in words a developer can act on.
    package var message: String

    package init(error: String, message: String) {
        self.error = error
        self.message = message
    }
}

/// Header names the services share.
package enum DatongHeader {
    /// The request id that travels from the gateway to every service a request reaches.
    package static let requestID = "X-Request-Id"
    /// The version number of a served config document.
    package static let documentVersion = "X-Datong-Version"
}

/// One published version of a document, as the version history lists it.
package struct DocumentVersion: Codable, Sendable, Equatable {
    package var version: Int
    package var etag: String
    package var note: String?
    /// When it was published (UTC, ISO 8601).
    package var publishedAt: String
    /// The app versions it targets (inclusive); absent: unbounded.
    package var minAppVersion: String?
    package var maxAppVersion: String?

    package init(version: Int, etag: String, note: String?, publishedAt: String, minAppVersion: String? = nil, maxAppVersion: String? = nil) {
        self.version = version
        self.etag = etag
        self.note = note
        self.publishedAt = publishedAt
        self.minAppVersion = minAppVersion
        self.maxAppVersion = maxAppVersion
    }
}

/// An admin token as listed (its value is never shown again after it was made).
package struct AdminTokenInfo: Codable, Sendable, Equatable {
    package var name: String
    package var createdAt: String
    package var createdBy: String

    package init(name: String, createdAt: String, createdBy: String) {
        self.name = name
        self.createdAt = createdAt
        self.createdBy = createdBy
    }
}

/// A token just made: the only time its value is shown.
package struct NewAdminToken: Codable, Sendable, Equatable {
    package var name: String
    package var token: String

    package init(name: String, token: String) {
        self.name = name
        self.token = token
    }
}

/// One change in config-service's audit trail: who did what, when.
package struct AuditRecord: Codable, Sendable, Equatable {
    package var at: String
    /// The name of the admin token used (`bootstrap` for ADMIN_TOKEN).
    package var actor: String
    /// `project.created`, `project.token_set`, `project.token_cleared`, `document.published`,
    /// `document.rolled_back`, `token.created`, `token.revoked`.
    package var action: String
    package var project: String?
    package var kind: String?
    package var platform: String?
    package var appId: String?
    package var version: Int?
    package var detail: String?

    package init(
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
package struct ProjectIngestion: Codable, Sendable, Equatable {
    package var project: String
    /// The hex SHA-256 of the token uploads must carry; absent when the project needs none.
    package var tokenSHA256: String?
    /// The ids of erased users whose records the gateways drop (absent from older config-services).
    package var suppressed: [IdentityPair]?

    /// What the gateways add to the project's records (absent from older config-services: the defaults).
    package var enrichment: EnrichmentPolicy?

    package init(project: String, tokenSHA256: String?, suppressed: [IdentityPair]? = nil, enrichment: EnrichmentPolicy? = nil) {
        self.project = project
        self.tokenSHA256 = tokenSHA256
        self.suppressed = suppressed
        self.enrichment = enrichment
    }

    package var access: ProjectAccess { tokenSHA256.map { .token(sha256: $0) } ?? .open }
}

/// What the gateways add to a project's records from the request (docs/PRIVACY.md): its privacy
/// settings. The defaults are what Sensors' server stores.
package struct EnrichmentPolicy: Codable, Sendable, Equatable {
    /// How `$ip` is stored: the client's address in full, truncated (IPv4 /24, IPv6 /48) or not at
    /// all. The region is computed from the full address first, whichever is chosen.
    package enum AddressStorage: String, Codable, Sendable, CaseIterable {
        case full
        case truncated
        case none
    }

    /// What becomes of a record whose User-Agent is a crawler's (uap-core's `Spider`).
    package enum Bots: String, Codable, Sendable, CaseIterable {
        /// Stored as any other.
        case keep
        /// Stored with `$is_bot: true`.
        case mark
        /// Not stored; counted in the answer's `dropped` and in a metric.
        case drop
    }

    package var ip: AddressStorage
    /// `$country`, `$province` and `$city` from the gateway's IP database.
    package var region: Bool
    /// `$browser`, `$browser_version`, `$os`, `$os_version`, `$model`, `$manufacturer` from a
    /// browser's User-Agent.
    package var userAgent: Bool
    package var bots: Bots

    package init(ip: AddressStorage = .full, region: Bool = true, userAgent: Bool = true, bots: Bots = .keep) {
        self.ip = ip
        self.region = region
        self.userAgent = userAgent
        self.bots = bots
    }

    package static let defaults = EnrichmentPolicy()

    /// The policy as the admin API and the ingestion answer write it, keys sorted.
    package var jsonText: String {
        #"{"bots":"\#(bots.rawValue)","ip":"\#(ip.rawValue)","region":\#(region),"userAgent":\#(userAgent)}"#
    }
}

/// Who may upload to a project: none (no such project), anyone, or whoever holds its token.
package enum ProjectAccess: Sendable, Equatable {
    case unknown
    case open
    /// The hex SHA-256 of the project's ingestion token.
    case token(sha256: String)
}

/// One of a project's encryption key pairs as the admin API shows it: never the private key.
package struct EncryptionKeyInfo: Codable, Sendable, Equatable {
    /// The key's number, echoed by the SDKs in every envelope; never reused within a project.
    package var pkv: Int
    /// `rsa` or `ec`.
    package var type: String
    /// Base64 of the DER SubjectPublicKeyInfo, as the SDKs read it.
    package var publicKey: String
    package var createdAt: String
    package var createdBy: String
    /// When an admin retired it: it is no longer served to SDKs and no longer decrypts.
    package var retiredAt: String?

    package init(pkv: Int, type: String, publicKey: String, createdAt: String, createdBy: String, retiredAt: String?) {
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
package struct ProjectEncryption: Codable, Sendable, Equatable {
    package struct Key: Codable, Sendable, Equatable {
        package var pkv: Int
        package var type: String
        package var publicKey: String
        /// Base64 of the private key's PKCS#8 DER sealed with AES-256-GCM under the master key,
        /// bound to "project/pkv".
        package var sealedPrivateKey: String

        package init(pkv: Int, type: String, publicKey: String, sealedPrivateKey: String) {
            self.pkv = pkv
            self.type = type
            self.publicKey = publicKey
            self.sealedPrivateKey = sealedPrivateKey
        }
    }

    package var transportEncryption: Bool
    /// Active keys, oldest first.
    package var keys: [Key]

    package init(transportEncryption: Bool, keys: [Key]) {
        self.transportEncryption = transportEncryption
        self.keys = keys
    }

    /// The label a sealed key is bound to.
    package static func sealLabel(project: String, pkv: Int) -> String { "\(project)/\(pkv)" }
}
