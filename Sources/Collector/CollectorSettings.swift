import DatongRuntime

/// The collector's settings (see the README's settings table).
public struct CollectorSettings: Sendable {
    public var server: ServerSettings
    public var database: DatabaseSettings
    /// Largest batch body accepted from the gateway, in bytes (`COLLECTOR_MAX_BATCH_BYTES`).
    public var maxBatchBytes: Int

    public static let defaultPort = 8109

    public init(server: ServerSettings, database: DatabaseSettings, maxBatchBytes: Int = 64 << 20) {
        self.server = server
        self.database = database
        self.maxBatchBytes = maxBatchBytes
    }

    public init(_ reader: SettingsReader) throws {
        self.init(
            server: try ServerSettings(reader, defaultPort: Self.defaultPort),
            database: try DatabaseSettings(reader, defaultPoolSize: 4),
            maxBatchBytes: try reader.int("COLLECTOR_MAX_BATCH_BYTES", default: 64 << 20, range: 1024...(1 << 30))
        )
    }
}
