import DatongContracts
import DatongCrypto
import DatongRuntime

/// config-service's settings (docs/SETTINGS.md).
package struct ConfigSettings: Sendable {
    package var server: ServerSettings
    package var database: DatabaseSettings
    /// Bearer token of the admin API (`ADMIN_TOKEN`); when unset, the admin API refuses every call.
    package var adminToken: String?
    /// Largest document accepted, in bytes (`CONFIG_MAX_DOCUMENT_BYTES`).
    package var maxDocumentBytes: Int
    /// Seals the private keys of the SDKs' payload encryption (`ENCRYPTION_MASTER_KEY`, 32 bytes in
    /// base64); without it no key can be made.
    package var sealer: KeySealer?
    /// Where the admin API finds the data it shows but does not own (`IDENTITY_URL`, `COLLECTOR_URL`).
    package var identityURL: String
    package var collectorURL: String
    /// The gateway, for `GET /v1/status` and the console's Services table only (`GATEWAY_URL`;
    /// unset: they show no gateway).
    package var gatewayURL: String?
    /// Seconds between an erasure's request and its first step, for every gateway to read the
    /// suppression first (`ERASURE_SETTLE_SECONDS`; the gateways read it each `WHITELIST_REFRESH_SECONDS`).
    package var erasureSettleSeconds: Int
    /// Rows of each table the collector removes in one step of an erasure (`ERASURE_BATCH_ROWS`).
    package var erasureBatchRows: Int

    package static let defaultPort = 8108

    package init(
        server: ServerSettings, database: DatabaseSettings, adminToken: String?, maxDocumentBytes: Int = 1 << 20, sealer: KeySealer? = nil,
        identityURL: String = "http://127.0.0.1:8107", collectorURL: String = "http://127.0.0.1:8109", erasureSettleSeconds: Int = 10,
        erasureBatchRows: Int = 5000, gatewayURL: String? = nil
    ) {
        self.gatewayURL = gatewayURL
        self.erasureSettleSeconds = erasureSettleSeconds
        self.erasureBatchRows = erasureBatchRows
        self.identityURL = identityURL
        self.collectorURL = collectorURL
        self.sealer = sealer
        self.server = server
        self.database = database
        self.adminToken = adminToken
        self.maxDocumentBytes = maxDocumentBytes
    }

    /// Config-service's pool: its reads are cached, two connections serve it.
    package static let defaultPoolSize = 2

    /// The defaults are the memberwise initializer's, and nowhere else.
    package init(_ reader: SettingsReader) throws {
        let defaults = ConfigSettings(server: ServerSettings(port: Self.defaultPort), database: DatabaseSettings(), adminToken: nil)
        self.init(
            server: try ServerSettings(reader, defaultPort: Self.defaultPort),
            database: try DatabaseSettings(reader, defaultPoolSize: Self.defaultPoolSize),
            adminToken: reader.optionalString("ADMIN_TOKEN"),
            maxDocumentBytes: try reader.int("CONFIG_MAX_DOCUMENT_BYTES", default: defaults.maxDocumentBytes, range: 1024...DocumentKind.largestDocumentBytes),
            sealer: try reader.masterKey(),
            identityURL: reader.string("IDENTITY_URL", default: defaults.identityURL),
            collectorURL: reader.string("COLLECTOR_URL", default: defaults.collectorURL),
            erasureSettleSeconds: try reader.int("ERASURE_SETTLE_SECONDS", default: defaults.erasureSettleSeconds, range: 0...3600),
            erasureBatchRows: try reader.int("ERASURE_BATCH_ROWS", default: defaults.erasureBatchRows, range: CollectorErasureStep.limits),
            gatewayURL: reader.optionalString("GATEWAY_URL")
        )
    }
}
