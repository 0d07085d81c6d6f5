import DatongContracts
import DatongCrypto
import DatongRuntime
import Enrichment
import Foundation

/// bridge-gateway's settings (docs/SETTINGS.md).
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
    /// Identities whose owner the gateway keeps, so a returning device costs no identity-service
    /// call; 0 turns the cache off (`IDENTITY_CACHE_ENTRIES`).
    package var identityCacheEntries: Int
    /// How often the cache reads identity-service's invalidation log, in milliseconds
    /// (`IDENTITY_CACHE_REFRESH_MS`): a merge, undo or unbind is seen within it.
    package var identityCacheRefreshMilliseconds: Int
    /// Resolve calls to identity-service in flight at once (`IDENTITY_CALLS`); the records of uploads
    /// that arrive while all are busy go together in the next (`IdentityCalls`).
    package var identityCalls: Int
    /// Calls to the collector in flight at once (`COLLECTOR_CALLS`); the batches of uploads that
    /// arrive while all are busy go together in the next (`CollectorCalls`).
    package var collectorCalls: Int
    /// The most one such call carries, in bytes of batch JSON (`COLLECTOR_GROUP_BYTES`); keep it
    /// under the collector's `COLLECTOR_MAX_BATCH_BYTES`.
    package var collectorGroupBytes: Int

    /// Load balancers whose `X-Forwarded-For` is believed (`TRUSTED_PROXIES`, CIDR blocks); none by default.
    package var trustedProxies: TrustedProxies
    /// The IP database `$country`, `$province` and `$city` come from (`GEOIP_DATABASE`): a MaxMind DB
    /// (`.mmdb`) or an ip2region `.xdb` file; none by default, and then no region is added.
    package var geoIPDatabase: String?
    /// uap-core's `regexes.yaml`, the User-Agent rules (`USER_AGENT_RULES`); the Debian package's path
    /// by default. `none` turns User-Agent parsing off for every project.
    package var userAgentRules: String?

    package static let defaultPort = 8106
    package static let defaultUserAgentRules = "/usr/share/uap-core/regexes.yaml"

    package init(
        server: ServerSettings = ServerSettings(port: Self.defaultPort),
        identityURL: String = "http://127.0.0.1:8107", collectorURL: String = "http://127.0.0.1:8109",
        configURL: String = "http://127.0.0.1:8108", upstreamTimeoutSeconds: Int = 10, whitelistRefreshSeconds: Int = 2,
        limits: UploadLimits = UploadLimits(), maxInFlightRequests: Int = 512, appLinksProject: String = "default",
        sealer: KeySealer? = nil, identityCacheEntries: Int = 200_000, identityCacheRefreshMilliseconds: Int = 500, identityCalls: Int = 1,
        collectorCalls: Int = 2,
        collectorGroupBytes: Int = 8 << 20, trustedProxies: TrustedProxies = TrustedProxies(), geoIPDatabase: String? = nil,
        userAgentRules: String? = nil
    ) {
        self.trustedProxies = trustedProxies
        self.geoIPDatabase = geoIPDatabase
        self.userAgentRules = userAgentRules
        self.identityCalls = identityCalls
        self.collectorCalls = collectorCalls
        self.collectorGroupBytes = collectorGroupBytes
        self.sealer = sealer
        self.identityCacheEntries = identityCacheEntries
        self.identityCacheRefreshMilliseconds = identityCacheRefreshMilliseconds
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

    /// The defaults are the memberwise initializers', and nowhere else.
    package init(_ reader: SettingsReader) throws {
        let settings = GatewaySettings()
        let defaults = settings.limits
        let maxStringLength = try reader.int("MAX_STRING_LENGTH", default: defaults.maxStringLength, range: 16...(1 << 20))
        self.init(
            server: try ServerSettings(reader, defaultPort: Self.defaultPort),
            identityURL: reader.string("IDENTITY_URL", default: settings.identityURL),
            collectorURL: reader.string("COLLECTOR_URL", default: settings.collectorURL),
            configURL: reader.string("CONFIG_URL", default: settings.configURL),
            upstreamTimeoutSeconds: try reader.int("UPSTREAM_TIMEOUT_SECONDS", default: settings.upstreamTimeoutSeconds, range: 1...300),
            whitelistRefreshSeconds: try reader.int("WHITELIST_REFRESH_SECONDS", default: settings.whitelistRefreshSeconds, range: 1...60),
            limits: UploadLimits(
                maxBodyBytes: try reader.int("MAX_BODY_BYTES", default: defaults.maxBodyBytes, range: 1024...(256 << 20)),
                maxDecompressedBytes: try reader.int("MAX_DECOMPRESSED_BYTES", default: defaults.maxDecompressedBytes, range: 1024...(1 << 30)),
                maxRecordsPerRequest: try reader.int("MAX_RECORDS_PER_REQUEST", default: defaults.maxRecordsPerRequest, range: 1...100_000),
                maxStringLength: maxStringLength,
                maxStringBytes: try reader.int("MAX_STRING_BYTES", default: 3 * maxStringLength, range: 16...(3 << 20)),
                maxPropertiesPerRecord: try reader.int("MAX_PROPERTIES_PER_RECORD", default: defaults.maxPropertiesPerRecord, range: 1...10_000),
                maxJSONDepth: try reader.int("MAX_JSON_DEPTH", default: defaults.maxJSONDepth, range: 4...512),
                maxBridgeMessages: try reader.int("MAX_BRIDGE_MESSAGES", default: defaults.maxBridgeMessages, range: 1...100_000),
                timeWindowPastDays: try reader.int("TIME_WINDOW_PAST_DAYS", default: defaults.timeWindowPastDays, range: 1...36_500),
                timeWindowFutureMinutes: try reader.int("TIME_WINDOW_FUTURE_MINUTES", default: defaults.timeWindowFutureMinutes, range: 0...525_600),
                timeFreePastDays: try reader.int("TIME_FREE_PAST_DAYS", default: defaults.timeFreePastDays, range: 1...36_500),
                bodyTimeoutSeconds: try reader.int("BODY_TIMEOUT_SECONDS", default: defaults.bodyTimeoutSeconds, range: 1...3600),
                maxListItems: try reader.int("MAX_LIST_ITEMS", default: defaults.maxListItems, range: 1...1_000_000)
            ),
            maxInFlightRequests: try reader.int("MAX_IN_FLIGHT_REQUESTS", default: settings.maxInFlightRequests, range: 1...100_000),
            appLinksProject: try requestProject(reader.string("APP_LINKS_PROJECT", default: settings.appLinksProject)),
            sealer: try reader.masterKey(),
            identityCacheEntries: try reader.int("IDENTITY_CACHE_ENTRIES", default: settings.identityCacheEntries, range: 0...100_000_000),
            identityCacheRefreshMilliseconds: try reader.int(
                "IDENTITY_CACHE_REFRESH_MS", default: settings.identityCacheRefreshMilliseconds, range: 50...60_000),
            identityCalls: try reader.int("IDENTITY_CALLS", default: settings.identityCalls, range: 1...1024),
            collectorCalls: try reader.int("COLLECTOR_CALLS", default: settings.collectorCalls, range: 1...1024),
            collectorGroupBytes: try reader.int("COLLECTOR_GROUP_BYTES", default: settings.collectorGroupBytes, range: 1024...(1 << 30)),
            trustedProxies: try Self.trustedProxies(reader.optionalString("TRUSTED_PROXIES")),
            geoIPDatabase: reader.optionalString("GEOIP_DATABASE"),
            userAgentRules: Self.userAgentRules(reader.string("USER_AGENT_RULES", default: Self.defaultUserAgentRules))
        )
    }

    private static func trustedProxies(_ text: String?) throws -> TrustedProxies {
        guard let text else { return TrustedProxies() }
        switch TrustedProxies.parse(text) {
        case .success(let proxies): return proxies
        case .failure(let invalid):
            throw SettingsError(
                name: "TRUSTED_PROXIES", value: invalid.text, expected: "addresses or CIDR blocks (10.0.0.0/8, fd00::/8), separated by commas")
        }
    }

    /// `none` turns parsing off; the default path counts only when the file is there.
    private static func userAgentRules(_ path: String) -> String? {
        if path == "none" { return nil }
        if path == defaultUserAgentRules, !FileManager.default.fileExists(atPath: path) { return nil }
        return path
    }
}

/// Limits on what an upload may contain, each enforced before the work it guards.
package struct UploadLimits: Sendable {
    /// Request body bytes, checked while the body arrives (`MAX_BODY_BYTES`).
    package var maxBodyBytes: Int
    /// Bytes after base64 and gzip decoding, checked while inflating (`MAX_DECOMPRESSED_BYTES`).
    package var maxDecompressedBytes: Int
    /// Records in one `data_list` (`MAX_RECORDS_PER_REQUEST`).
    package var maxRecordsPerRequest: Int
    /// Characters in one string value, counted as the SDKs count them (`TextLength`:
    /// `MAX_STRING_LENGTH`; the Java SDK cuts strings at 8192).
    package var maxStringLength: Int
    /// Bytes of UTF-8 in one string value (`MAX_STRING_BYTES`), a ceiling of its own against abuse;
    /// by default what `maxStringLength` characters take at most, so every SDK-legal string fits.
    package var maxStringBytes: Int
    /// Properties of one record (`MAX_PROPERTIES_PER_RECORD`).
    package var maxPropertiesPerRecord: Int
    /// Items in one list property (`MAX_LIST_ITEMS`; Sensors' own limit is 500).
    package var maxListItems: Int
    /// Nesting levels of JSON objects and arrays in a payload or bridge message (`MAX_JSON_DEPTH`).
    package var maxJSONDepth: Int
    /// Messages in one bridge relay (`MAX_BRIDGE_MESSAGES`).
    package var maxBridgeMessages: Int
    /// How old a record's time may be (`TIME_WINDOW_PAST_DAYS`).
    package var timeWindowPastDays: Int
    /// How far ahead of the server's clock a record's time may be (`TIME_WINDOW_FUTURE_MINUTES`),
    /// `time_free` or not.
    package var timeWindowFutureMinutes: Int
    /// How old a `time_free` record's time may be (`TIME_FREE_PAST_DAYS`; at least
    /// `timeWindowPastDays`). Each month a project's record is stored in is a table, kept until
    /// retention drops it: with both bounds, a project's records (token or not) can reach a fixed
    /// set of about TIME_FREE_PAST_DAYS / 30 months, never any month from 1970 to 9999.
    package var timeFreePastDays: Int
    /// Seconds a request body may take to arrive in full (`BODY_TIMEOUT_SECONDS`; 408 after).
    package var bodyTimeoutSeconds: Int

    package init(
        maxBodyBytes: Int = 5 << 20, maxDecompressedBytes: Int = 20 << 20, maxRecordsPerRequest: Int = 1000,
        maxStringLength: Int = 8192, maxStringBytes: Int? = nil, maxPropertiesPerRecord: Int = 1000, maxJSONDepth: Int = 16,
        maxBridgeMessages: Int = 500, timeWindowPastDays: Int = 730, timeWindowFutureMinutes: Int = 1440, timeFreePastDays: Int? = nil,
        bodyTimeoutSeconds: Int = 30, maxListItems: Int = 500
    ) {
        self.timeFreePastDays = max(timeFreePastDays ?? 3650, timeWindowPastDays)
        self.maxStringBytes = maxStringBytes ?? 3 * maxStringLength
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

    /// Why a string value of `bytes` (valid UTF-8) cannot be stored, or nil: a NUL, more bytes than
    /// `maxStringBytes`, or more characters than `maxStringLength`.
    package func stringProblem(utf8 bytes: UnsafeBufferPointer<UInt8>) -> String? {
        if bytes.contains(0) { return "contains a NUL character" }
        if bytes.count > maxStringBytes { return "\(bytes.count) bytes long; the limit is \(maxStringBytes) bytes" }
        return TextLength.problem(utf8: bytes, maxLength: maxStringLength)
    }

    package func stringProblem(_ text: String) -> String? {
        var text = text
        return text.withUTF8 { stringProblem(utf8: $0) }
    }
}
