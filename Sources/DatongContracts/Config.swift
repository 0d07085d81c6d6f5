/// The kinds of versioned document config-service keeps per project.
public enum DocumentKind: String, Codable, Sendable, CaseIterable {
    case trackingTable = "tracking-table"
    case remoteConfig = "remote-config"
    case visualConfig = "visual-config"
    case serverURLWhitelist = "server-url-whitelist"
    case h5DomainWhitelist = "h5-domain-whitelist"
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
