import DatongCrypto
import DatongRuntime

/// config-service's settings (see the README's settings table).
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

    package static let defaultPort = 8108

    package init(
        server: ServerSettings, database: DatabaseSettings, adminToken: String?, maxDocumentBytes: Int = 1 << 20, sealer: KeySealer? = nil
    ) {
        self.sealer = sealer
        self.server = server
        self.database = database
        self.adminToken = adminToken
        self.maxDocumentBytes = maxDocumentBytes
    }

    package init(_ reader: SettingsReader) throws {
        self.init(
            server: try ServerSettings(reader, defaultPort: Self.defaultPort),
            database: try DatabaseSettings(reader, defaultPoolSize: 2),
            adminToken: reader.optionalString("ADMIN_TOKEN"),
            maxDocumentBytes: try reader.int("CONFIG_MAX_DOCUMENT_BYTES", default: 1 << 20, range: 1024...(64 << 20)),
            sealer: try reader.masterKey()
        )
    }
}
