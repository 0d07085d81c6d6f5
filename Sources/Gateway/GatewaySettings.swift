import DatongCrypto
import DatongRuntime

/// bridge-gateway's settings (see the README's settings table).
package struct GatewaySettings: Sendable {
    package var server: ServerSettings
    /// Base URLs of the services the gateway calls.
    package var identityURL: String
    package var collectorURL: String
    package var configURL: String
    /// Seconds to wait for another service before answering 503 (`UPSTREAM_TIMEOUT_SECONDS`).
    package var upstreamTimeoutSeconds: Int
    /// Seconds between revalidations of the bridge whitelists: a published change applies within
    /// this time (`WHITELIST_REFRESH_SECONDS`).
    package var whitelistRefreshSeconds: Int
    package var limits: UploadLimits
    /// Requests the gateway works on at once; beyond it, 503 with `Retry-After` at once, so that
    /// overload costs neither memory nor latency for the requests admitted (`MAX_IN_FLIGHT_REQUESTS`).
    package var maxInFlightRequests: Int
    /// The project whose app-links document `/.well-known/apple-app-site-association` and
    /// `/.well-known/assetlinks.json` are built from: those paths belong to the host, not to a
    /// project (`APP_LINKS_PROJECT`).
    package var appLinksProject: String
    /// Opens the private keys of encrypted uploads (`ENCRYPTION_MASTER_KEY`, the same as
    /// config-service's); without it encrypted uploads are answered 503 and kept on the devices.
    package var sealer: KeySealer?

    package static let defaultPort = 8106

    package init(
        server: ServerSettings = ServerSettings(port: Self.defaultPort),
        identityURL: String = "http://127.0.0.1:8107", collectorURL: String = "http://127.0.0.1:8109",
        configURL: String = "http://127.0.0.1:8108", upstreamTimeoutSeconds: Int = 10, whitelistRefreshSeconds: Int = 2,
        limits: UploadLimits = UploadLimits(), maxInFlightRequests: Int = 512, appLinksProject: String = "default",
        sealer: KeySealer? = nil
    ) {
        self.sealer = sealer
        self.maxInFlightRequests = maxInFlightRequests
        self.appLinksProject = appLinksProject
        self.server = server
        self.identityURL = identityURL
        self.collectorURL = collectorURL
        self.configURL = configURL
        self.upstreamTimeoutSeconds = upstreamTimeoutSeconds
        self.whitelistRefreshSeconds = whitelistRefreshSeconds
        self.limits = limits
    }

    package init(_ reader: SettingsReader) throws {
        let defaults = UploadLimits()
        self.init(
            server: try ServerSettings(reader, defaultPort: Self.defaultPort),
            identityURL: reader.string("IDENTITY_URL", default: "http://127.0.0.1:8107"),
            collectorURL: reader.string("COLLECTOR_URL", default: "http://127.0.0.1:8109"),
            configURL: reader.string("CONFIG_URL", default: "http://127.0.0.1:8108"),
            upstreamTimeoutSeconds: try reader.int("UPSTREAM_TIMEOUT_SECONDS", default: 10, range: 1...300),
            whitelistRefreshSeconds: try reader.int("WHITELIST_REFRESH_SECONDS", default: 2, range: 1...60),
            limits: UploadLimits(
                maxBodyBytes: try reader.int("MAX_BODY_BYTES", default: defaults.maxBodyBytes, range: 1024...(256 << 20)),
                maxDecompressedBytes: try reader.int("MAX_DECOMPRESSED_BYTES", default: defaults.maxDecompressedBytes, range: 1024...(1 << 30)),
                maxRecordsPerRequest: try reader.int("MAX_RECORDS_PER_REQUEST", default: defaults.maxRecordsPerRequest, range: 1...100_000),
                maxStringLength: try reader.int("MAX_STRING_LENGTH", default: defaults.maxStringLength, range: 16...(1 << 20)),
                maxPropertiesPerRecord: try reader.int("MAX_PROPERTIES_PER_RECORD", default: defaults.maxPropertiesPerRecord, range: 1...10_000),
                maxJSONDepth: try reader.int("MAX_JSON_DEPTH", default: defaults.maxJSONDepth, range: 4...512),
                maxBridgeMessages: try reader.int("MAX_BRIDGE_MESSAGES", default: defaults.maxBridgeMessages, range: 1...100_000),
                timeWindowPastDays: try reader.int("TIME_WINDOW_PAST_DAYS", default: defaults.timeWindowPastDays, range: 1...36_500),
                timeWindowFutureMinutes: try reader.int("TIME_WINDOW_FUTURE_MINUTES", default: defaults.timeWindowFutureMinutes, range: 0...525_600),
                bodyTimeoutSeconds: try reader.int("BODY_TIMEOUT_SECONDS", default: defaults.bodyTimeoutSeconds, range: 1...3600),
                maxListItems: try reader.int("MAX_LIST_ITEMS", default: defaults.maxListItems, range: 1...1_000_000)
            ),
            maxInFlightRequests: try reader.int("MAX_IN_FLIGHT_REQUESTS", default: 512, range: 1...100_000),
            appLinksProject: try requestProject(reader.optionalString("APP_LINKS_PROJECT")),
            sealer: try reader.masterKey()
        )
    }
}

/// Limits on what an upload may contain, each enforced before the work it guards.
package struct UploadLimits: Sendable {
    /// Request body bytes, checked while the body arrives (`MAX_BODY_BYTES`).
    package var maxBodyBytes = 5 << 20
    /// Bytes after base64 and gzip decoding, checked while inflating (`MAX_DECOMPRESSED_BYTES`).
    package var maxDecompressedBytes = 20 << 20
    /// Records in one `data_list` (`MAX_RECORDS_PER_REQUEST`).
    package var maxRecordsPerRequest = 1000
    /// Characters in one string value or id (`MAX_STRING_LENGTH`).
    package var maxStringLength = 8191
    /// Properties of one record (`MAX_PROPERTIES_PER_RECORD`).
    package var maxPropertiesPerRecord = 1000
    /// Items in one list property (`MAX_LIST_ITEMS`; Sensors' own limit is 500).
    package var maxListItems = 500
    /// Nesting levels of JSON objects and arrays in a payload or bridge message (`MAX_JSON_DEPTH`).
    package var maxJSONDepth = 16
    /// Messages in one bridge relay (`MAX_BRIDGE_MESSAGES`).
    package var maxBridgeMessages = 500
    /// How old a record's time may be (`TIME_WINDOW_PAST_DAYS`).
    package var timeWindowPastDays = 730
    /// How far ahead of the server's clock a record's time may be (`TIME_WINDOW_FUTURE_MINUTES`).
    package var timeWindowFutureMinutes = 1440
    /// Seconds a request body may take to arrive in full (`BODY_TIMEOUT_SECONDS`; 408 after).
    package var bodyTimeoutSeconds = 30

    package init(
        maxBodyBytes: Int = 5 << 20, maxDecompressedBytes: Int = 20 << 20, maxRecordsPerRequest: Int = 1000,
        maxStringLength: Int = 8191, maxPropertiesPerRecord: Int = 1000, maxJSONDepth: Int = 16,
        maxBridgeMessages: Int = 500, timeWindowPastDays: Int = 730, timeWindowFutureMinutes: Int = 1440,
        bodyTimeoutSeconds: Int = 30, maxListItems: Int = 500
    ) {
        self.maxListItems = maxListItems
        self.bodyTimeoutSeconds = bodyTimeoutSeconds
        self.maxBodyBytes = maxBodyBytes
        self.maxDecompressedBytes = maxDecompressedBytes
        self.maxRecordsPerRequest = maxRecordsPerRequest
        self.maxStringLength = maxStringLength
        self.maxPropertiesPerRecord = maxPropertiesPerRecord
        self.maxJSONDepth = maxJSONDepth
        self.maxBridgeMessages = maxBridgeMessages
        self.timeWindowPastDays = timeWindowPastDays
        self.timeWindowFutureMinutes = timeWindowFutureMinutes
    }
}
