/// Reads settings from environment variables, with typed parsing and clear errors.
///
/// Every service describes its settings as a struct built from this reader; the README's table
/// lists each variable with its type and default.
public struct SettingsReader: Sendable {
    private let values: [String: String]

    public init(environment: [String: String]) {
        self.values = environment
    }

    public func string(_ name: String, default fallback: String) -> String {
        guard let value = values[name], !value.isEmpty else { return fallback }
        return value
    }

    public func optionalString(_ name: String) -> String? {
        guard let value = values[name], !value.isEmpty else { return nil }
        return value
    }

    public func int(_ name: String, default fallback: Int, range: ClosedRange<Int>) throws -> Int {
        guard let raw = values[name], !raw.isEmpty else { return fallback }
        guard let value = Int(raw), range.contains(value) else {
            throw SettingsError(name: name, value: raw, expected: "a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }

    public func logLevel(_ name: String, default fallback: String) throws -> String {
        let value = string(name, default: fallback).lowercased()
        let levels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]
        guard levels.contains(value) else {
            throw SettingsError(name: name, value: value, expected: "one of \(levels.joined(separator: ", "))")
        }
        return value
    }
}

/// A setting whose value cannot be used; the process exits with this message.
public struct SettingsError: Error, CustomStringConvertible {
    public let name: String
    public let value: String
    public let expected: String

    public var description: String { "setting \(name)=\(value) is invalid: expected \(expected)" }
}

/// Where a service listens and how much it logs.
public struct ServerSettings: Sendable {
    /// Address to listen on (`HOST`, default 127.0.0.1; 0.0.0.0 in containers).
    public var host: String
    /// Port to listen on (`PORT`; each service has its own default, 0 picks a free port).
    public var port: Int
    /// `LOG_LEVEL`: trace, debug, info, notice, warning, error, critical.
    public var logLevel: String
    /// `SERVICE_TOKEN`: when set, the calls between services carry it and the internal endpoints
    /// (resolve, batches, project ingestion settings) refuse requests without it.
    public var serviceToken: String?

    public init(host: String = "127.0.0.1", port: Int, logLevel: String = "info", serviceToken: String? = nil) {
        self.host = host
        self.port = port
        self.logLevel = logLevel
        self.serviceToken = serviceToken
    }

    public init(_ reader: SettingsReader, defaultPort: Int) throws {
        self.init(
            host: reader.string("HOST", default: "127.0.0.1"),
            port: try reader.int("PORT", default: defaultPort, range: 0...65535),
            logLevel: try reader.logLevel("LOG_LEVEL", default: "info"),
            serviceToken: reader.optionalString("SERVICE_TOKEN")
        )
    }
}

/// How a service that owns a schema reaches PostgreSQL.
public struct DatabaseSettings: Sendable {
    /// libpq connection URI or conninfo (`DATABASE_URL`).
    public var url: String
    /// Connections (and threads) of the pool (`DATABASE_POOL_SIZE`).
    public var poolSize: Int
    /// Seconds start-up waits for the database before giving up (`DATABASE_STARTUP_TIMEOUT`).
    public var startupTimeout: Int

    /// The database of the local development setup (`scripts/dev up`).
    public static let localURL = "postgresql://postgres@127.0.0.1:55432/datong"

    public init(url: String = Self.localURL, poolSize: Int = 4, startupTimeout: Int = 30) {
        self.url = url
        self.poolSize = poolSize
        self.startupTimeout = startupTimeout
    }

    public init(_ reader: SettingsReader, defaultPoolSize: Int = 4) throws {
        self.init(
            url: reader.string("DATABASE_URL", default: Self.localURL),
            poolSize: try reader.int("DATABASE_POOL_SIZE", default: defaultPoolSize, range: 1...256),
            startupTimeout: try reader.int("DATABASE_STARTUP_TIMEOUT", default: 30, range: 0...3600)
        )
    }
}
