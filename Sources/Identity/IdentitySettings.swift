import DatongContracts
import DatongRuntime

/// identity-service's settings (docs/SETTINGS.md).
package struct IdentitySettings: Sendable {
    package var server: ServerSettings
    package var database: DatabaseSettings
    /// Largest resolve request accepted, in bytes (`IDENTITY_MAX_REQUEST_BYTES`); at least twice
    /// the gateway's largest call (`ResolveRequest.maxCallBytes`).
    package var maxRequestBytes: Int
    /// Identities kept in memory; 0 turns the cache off (`IDENTITY_CACHE_ENTRIES`).
    package var cacheEntries: Int
    /// How often the cache reads what other replicas changed, in milliseconds
    /// (`IDENTITY_CACHE_REFRESH_MS`): a merge, undo or unbind is seen by every replica within it.
    package var cacheRefreshMilliseconds: Int

    package static let defaultPort = 8107

    package init(
        server: ServerSettings, database: DatabaseSettings, maxRequestBytes: Int = 16 << 20,
        cacheEntries: Int = 200_000, cacheRefreshMilliseconds: Int = 500
    ) {
        self.server = server
        self.database = database
        self.maxRequestBytes = maxRequestBytes
        self.cacheEntries = cacheEntries
        self.cacheRefreshMilliseconds = cacheRefreshMilliseconds
    }

    /// The defaults are the memberwise initializer's, and nowhere else.
    package init(_ reader: SettingsReader) throws {
        let defaults = IdentitySettings(server: ServerSettings(port: Self.defaultPort), database: DatabaseSettings())
        self.init(
            server: try ServerSettings(reader, defaultPort: Self.defaultPort),
            database: try DatabaseSettings(reader, defaultPoolSize: defaults.database.poolSize),
            maxRequestBytes: try reader.int(
                "IDENTITY_MAX_REQUEST_BYTES", default: defaults.maxRequestBytes, range: (2 * ResolveRequest.maxCallBytes)...(1 << 30)),
            cacheEntries: try reader.int("IDENTITY_CACHE_ENTRIES", default: defaults.cacheEntries, range: 0...100_000_000),
            cacheRefreshMilliseconds: try reader.int("IDENTITY_CACHE_REFRESH_MS", default: defaults.cacheRefreshMilliseconds, range: 50...60_000)
        )
    }
}
