import DatongPostgres
import Foundation
import Logging
import Synchronization

/// What the benchmark executables share: their command-line options, a quiet logger, a fresh
/// database, a work counter for concurrent clients, and medians.
package enum Bench {
    /// `--name N` from the command line, when it is a positive integer; otherwise `value`.
    package static func option(_ name: String, default value: Int) -> Int {
        guard let text = text(name), let parsed = Int(text), parsed > 0 else { return value }
        return parsed
    }

    /// `--name VALUE` from the command line.
    package static func text(_ name: String) -> String? {
        let arguments = CommandLine.arguments
        guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
        return arguments[index + 1]
    }

    /// A logger that prints only errors: the services run inside the benchmark process.
    package static func quietLogger(_ label: String) -> Logger {
        var logger = Logger(label: label)
        logger.logLevel = .error
        return logger
    }

    /// A new empty database on the server `adminURL` points at; returns its URL.
    package static func freshDatabase(adminURL: String, logger: Logger) async throws -> String {
        let name = "datong_bench_\(UInt64.random(in: 0...UInt64.max))"
        try await administer(adminURL: adminURL, "CREATE DATABASE \(name)", logger: logger)
        return try replacingDatabase(in: adminURL, with: name)
    }

    /// Runs `statement` (CREATE or DROP DATABASE, which cannot run in a transaction) on its own
    /// connection to `adminURL`.
    package static func administer(adminURL: String, _ statement: String, logger: Logger) async throws {
        let admin = PostgresPool(url: adminURL, maxConnections: 1, logger: logger)
        do {
            try await admin.withConnection { try $0.execute(statement) }
            await admin.close()
        } catch {
            await admin.close()
            throw error
        }
    }

    /// Runs `body` with a one-connection pool on `url`, closed after it.
    package static func withPool<T: Sendable>(url: String, logger: Logger, _ body: (PostgresPool) async throws -> T) async throws -> T {
        let pool = PostgresPool(url: url, maxConnections: 1, logger: logger)
        do {
            let value = try await body(pool)
            await pool.close()
            return value
        } catch {
            await pool.close()
            throw error
        }
    }

    /// `url` (a libpq URI, one host or several) naming database `name` instead.
    package static func replacingDatabase(in url: String, with name: String) throws -> String {
        guard let scheme = url.range(of: "://") else { throw BenchError("DATABASE_URL is not a URI") }
        let authorityEnd = url[scheme.upperBound...].firstIndex { $0 == "/" || $0 == "?" } ?? url.endIndex
        let queryStart = url[authorityEnd...].firstIndex(of: "?") ?? url.endIndex
        return String(url[..<authorityEnd]) + "/" + name + String(url[queryStart...])
    }

    /// Prints `line` at once, also when the output is a pipe or a file (a CI log).
    package static func say(_ line: String) {
        print(line)
        fflush(nil)
    }

    package static func median(_ values: [Double]) -> Double {
        values.sorted()[values.count / 2]
    }

    package static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}

/// Hands out 0, 1, 2, … to concurrent workers.
package final class WorkCounter: Sendable {
    private let next = Atomic<Int>(0)

    package init() {}

    /// The next index, or nil once `count` are handed out.
    package func take(below count: Int) -> Int? {
        let index = next.add(1, ordering: .relaxed).oldValue
        return index < count ? index : nil
    }
}

package struct BenchError: Error, CustomStringConvertible {
    package let description: String

    package init(_ description: String) { self.description = description }
}
