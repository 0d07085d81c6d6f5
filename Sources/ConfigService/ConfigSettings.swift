import DatongCrypto
import DatongRuntime

/// config-service's settings (see the README's settings table).
public struct ConfigSettings: Sendable {
    public var server: ServerSettings
    public var database: DatabaseSettings
    /// Bearer token of the admin API (`ADMIN_TOKEN`); when unset, the admin API refuses every call.
    public var adminToken: String?
    /// Largest document accepted, in bytes (`CONFIG_MAX_DOCUMENT_BYTES`).
    public var maxDocumentBytes: Int
    /// Seals the private keys of the SDKs' payload encryption (`ENCRYPTION_MASTER_KEY`, 32 bytes in
    /// base64); without it no key can be made.
    public var sealer: KeySealer?

    public static let defaultPort = 8108

    public init(
        server: ServerSettings, database: DatabaseSettings, adminToken: String?, maxDocumentBytes: Int = 1 << 20, sealer: KeySealer? = nil
    ) {
        self.sealer = sealer
        self.server = server
        self.database = database
        self.adminToken = adminToken
        self.maxDocumentBytes = maxDocumentBytes
    }

    public init(_ reader: SettingsReader) throws {
        self.init(
            server: try ServerSettings(reader, defaultPort: Self.defaultPort),
            database: try DatabaseSettings(reader, defaultPoolSize: 2),
            adminToken: reader.optionalString("ADMIN_TOKEN"),
            maxDocumentBytes: try reader.int("CONFIG_MAX_DOCUMENT_BYTES", default: 1 << 20, range: 1024...(64 << 20)),
            sealer: try reader.masterKey()
        )
    }
}

