import Foundation
import Hummingbird
import Logging
import Metrics
import Prometheus

/// What every executable's `main` does: read the environment, bootstrap logging and metrics (here
/// only, never in code the tests run), build the application and run it until SIGTERM/SIGINT, when
/// in-flight requests finish before the process exits.
package enum ServiceMain {
    /// `LOG_LEVEL`, the level of every logger of the process.
    package static func logLevel(_ reader: SettingsReader) throws -> Logger.Level {
        Logger.Level(rawValue: try reader.logLevel(default: ServerSettings.defaultLogLevel)) ?? .info
    }

    package static func run<App: ApplicationProtocol>(
        name: String,
        build: (SettingsReader, ServiceRuntime) async throws -> App
    ) async {
        let reader = SettingsReader(environment: ProcessInfo.processInfo.environment)
        let level: Logger.Level
        do {
            level = try logLevel(reader)
        } catch {
            // Before logging exists: said on standard error, and the process stops.
            FileHandle.standardError.write(Data("\(name): \(error)\n".utf8))
            exit(1)
        }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardOutput(label: label)
            handler.logLevel = level
            return handler
        }
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        let logger = Logger(label: name)
        do {
            let app = try await build(reader, ServiceRuntime(logger: logger, metrics: registry))
            try await app.runService()
        } catch {
            logger.critical("service.failed", metadata: ["error": "\(error)"])
            exit(1)
        }
    }
}
