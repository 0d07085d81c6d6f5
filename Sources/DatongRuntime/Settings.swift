import DatongCrypto
import Synchronization

/// Reads settings from environment variables, with typed parsing and clear errors.
///
/// Every service describes its settings as a struct built from this reader; docs/SETTINGS.md's table
/// lists each variable with its type and default.
package struct SettingsReader: Sendable {
    private let values: [String: String]
    private let recorder: SettingsRecorder?

    /// - Parameter recorder: notes each variable read with its default (the settings table test uses it).
    package init(environment: [String: String], recorder: SettingsRecorder? = nil) {
        self.values = environment
        self.recorder = recorder
    }

    package func string(_ name: String, default fallback: String) -> String {
        recorder?.note(name, fallback)
        guard let value = values[name], !value.isEmpty else { return fallback }
        return value
    }

    package func optionalString(_ name: String) -> String? {
        recorder?.note(name, "unset")
        guard let value = values[name], !value.isEmpty else { return nil }
        return value
    }

    package func int(_ name: String, default fallback: Int, range: ClosedRange<Int>) throws -> Int {
        recorder?.note(name, String(fallback))
        guard let raw = values[name], !raw.isEmpty else { return fallback }
        guard let value = Int(raw), range.contains(value) else {
            throw SettingsError(name: name, value: raw, expected: "a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }

    /// `SERVICE_TOKEN`, which every service requires: without it anyone who reaches an internal
    /// port could write events or read identities.
    package func serviceToken() throws -> String {
        recorder?.note("SERVICE_TOKEN", "required")
        let token = values["SERVICE_TOKEN"] ?? ""
        guard token.utf8.count >= ServerSettings.minServiceTokenLength else {
            throw SettingsError(
                name: "SERVICE_TOKEN", value: token.isEmpty ? "(unset)" : "(\(token.utf8.count) characters)",
                expected:
                    "the shared secret of the calls between the services, at least \(ServerSettings.minServiceTokenLength) characters, the same for all four (e.g. `openssl rand -hex 24`)"
            )
        }
        return token
    }

    /// `LOG_LEVEL`, checked: a level that is not one stops the service at start.
    package func logLevel(default fallback: String) throws -> String {
        let name = "LOG_LEVEL"
        let value = string(name, default: fallback).lowercased()
        let levels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]
        guard levels.contains(value) else {
            throw SettingsError(name: name, value: value, expected: "one of \(levels.joined(separator: ", "))")
        }
        return value
    }
}

/// The variables a `SettingsReader` was asked for, each with its default as text (`unset` for an
/// optional one, `required` for one without a default), in the order asked.
package final class SettingsRecorder: Sendable {
    private let notes = Mutex<[(name: String, defaultValue: String)]>([])

    package init() {}

    func note(_ name: String, _ defaultValue: String) {
        notes.withLock { $0.append((name, defaultValue)) }
    }

    package var variables: [(name: String, defaultValue: String)] { notes.withLock { $0 } }
}

/// A setting whose value cannot be used; the process exits with this message.
package struct SettingsError: Error, CustomStringConvertible {
    package let name: String
    package let value: String
    package let expected: String

    package init(name: String, value: String, expected: String) {
        self.name = name
        self.value = value
        self.expected = expected
    }

    package var description: String { "setting \(name)=\(value) is invalid: expected \(expected)" }
}

/// Where a service listens and who may call it.
package struct ServerSettings: Sendable {
    /// Address to listen on (`HOST`, default 127.0.0.1; 0.0.0.0 in containers).
    package var host: String
    /// Port to listen on (`PORT`; each service has its own default, 0 picks a free port).
    package var port: Int
    /// `SERVICE_TOKEN`: the calls between services carry it and the internal endpoints (resolve,
    /// batches, project ingestion settings) refuse requests without it. A process started from the
    /// environment refuses to start without one; built in code without one, the internal
    /// endpoints refuse every request.
    package var serviceToken: String?

    /// Seconds a connection may stay open without a complete request head or between requests
    /// (`IDLE_TIMEOUT_SECONDS`): a client that sends half its headers and waits is cut off then.
    package var idleTimeoutSeconds: Int

    /// The default `idleTimeoutSeconds`, longer than the gateway's own pool keeps idle connections
    /// to the other services (20 s), so a service never closes one the gateway is about to reuse.
    package static let defaultIdleTimeoutSeconds = 30

    /// `LOG_LEVEL` when unset. The level is set where logging is bootstrapped (`ServiceMain`), before
    /// any service reads its settings.
    package static let defaultLogLevel = "info"

    /// The shortest service token accepted: long enough that it cannot be guessed.
    package static let minServiceTokenLength = 16

    package init(
        host: String = "127.0.0.1", port: Int, serviceToken: String? = nil,
        idleTimeoutSeconds: Int = Self.defaultIdleTimeoutSeconds
    ) {
        self.host = host
        self.port = port
        self.serviceToken = serviceToken
        self.idleTimeoutSeconds = idleTimeoutSeconds
    }

    /// The defaults are the memberwise initializer's, and nowhere else.
    package init(_ reader: SettingsReader, defaultPort: Int) throws {
        let defaults = ServerSettings(port: defaultPort)
        self.init(
            host: reader.string("HOST", default: defaults.host),
            port: try reader.int("PORT", default: defaults.port, range: 0...65535),
            serviceToken: try reader.serviceToken(),
            idleTimeoutSeconds: try reader.int("IDLE_TIMEOUT_SECONDS", default: defaults.idleTimeoutSeconds, range: 1...3600)
        )
    }
}

/// How a service that owns a schema reaches PostgreSQL.
package struct DatabaseSettings: Sendable {
    /// libpq connection URI or conninfo (`DATABASE_URL`).
    package var url: String
    /// Connections (and threads) of the pool (`DATABASE_POOL_SIZE`).
    package var poolSize: Int
    /// Seconds start-up waits for the database before giving up (`DATABASE_STARTUP_TIMEOUT`).
    package var startupTimeout: Int

    /// The database of the local development setup (`scripts/dev up`).
    package static let localURL = "postgresql://postgres@127.0.0.1:55432/datong"

    package init(url: String = Self.localURL, poolSize: Int = 4, startupTimeout: Int = 30) {
        self.url = url
        self.poolSize = poolSize
        self.startupTimeout = startupTimeout
    }

    /// The defaults are the memberwise initializer's (but the pool size, which a service may choose).
    package init(_ reader: SettingsReader, defaultPoolSize: Int) throws {
        let defaults = DatabaseSettings()
        self.init(
            url: reader.string("DATABASE_URL", default: defaults.url),
            poolSize: try reader.int("DATABASE_POOL_SIZE", default: defaultPoolSize, range: 1...256),
            startupTimeout: try reader.int("DATABASE_STARTUP_TIMEOUT", default: defaults.startupTimeout, range: 0...3600)
        )
    }
}

extension SettingsReader {
    /// `ENCRYPTION_MASTER_KEY`: the key private keys are sealed under (config-service) and opened
    /// with (gateway). Never logged; a malformed one stops the service at start.
    package func masterKey() throws -> KeySealer? {
        guard let text = optionalString("ENCRYPTION_MASTER_KEY") else { return nil }
        do {
            return try KeySealer(masterKeyBase64: text)
        } catch {
            throw SettingsError(name: "ENCRYPTION_MASTER_KEY", value: "(\(text.utf8.count) characters, not shown)", expected: error.description)
        }
    }
}
