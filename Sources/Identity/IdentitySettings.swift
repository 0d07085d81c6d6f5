import DatongRuntime

/// identity-service's settings (see the README's settings table).
public struct IdentitySettings: Sendable {
    public var server: ServerSettings
    public var database: DatabaseSettings
    /// Largest resolve request accepted, in bytes (`IDENTITY_MAX_REQUEST_BYTES`).
    public var maxRequestBytes: Int

    public static let defaultPort = 8107

    public init(server: ServerSettings, database: DatabaseSettings, maxRequestBytes: Int = 16 << 20) {
        self.server = server
        self.database = database
        self.maxRequestBytes = maxRequestBytes
    }

    public init(_ reader: SettingsReader) throws {
        self.init(
            server: try ServerSettings(reader, defaultPort: Self.defaultPort),
            database: try DatabaseSettings(reader, defaultPoolSize: 4),
            maxRequestBytes: try reader.int("IDENTITY_MAX_REQUEST_BYTES", default: 16 << 20, range: 1024...(1 << 30))
        )
    }
}
