/// A failure talking to PostgreSQL. `code` is a short label (usable as a metric label); `message`
/// carries libpq's text, and `sqlState` the server's SQLSTATE when the server answered.
package struct PostgresError: Error, CustomStringConvertible, Sendable {
    private enum Code: String, Sendable {
        case connectionFailed = "connection_failed"
        case connectionLost = "connection_lost"
        case server = "server_error"
        case copyFailed = "copy_failed"
        case poolClosed = "pool_closed"
        case unexpectedResult = "unexpected_result"
    }

    private let code: Code
    package let message: String
    package let sqlState: String?
    /// The server's primary message alone (no `ERROR:`, context or detail lines): what a function
    /// of ours raised for its caller to read.
    package let primaryMessage: String?

    private init(_ code: Code, _ message: String, sqlState: String? = nil, primaryMessage: String? = nil) {
        self.code = code
        self.message = message
        self.sqlState = sqlState
        self.primaryMessage = primaryMessage
    }

    static func connectionFailed(_ message: String) -> Self { .init(.connectionFailed, message) }
    static func connectionLost(_ message: String) -> Self { .init(.connectionLost, message) }
    static func server(_ message: String, sqlState: String?, primaryMessage: String? = nil) -> Self {
        .init(.server, message, sqlState: sqlState, primaryMessage: primaryMessage)
    }
    static func copyFailed(_ message: String) -> Self { .init(.copyFailed, message) }
    static let poolClosed = Self(.poolClosed, "the connection pool is shut down")
    package static func unexpectedResult(_ message: String) -> Self { .init(.unexpectedResult, message) }

    /// A short label without details.
    package var label: String { code.rawValue }

    /// True when the database could not be reached or the connection broke: the work did not happen
    /// (or its transaction was rolled back) and can be tried again later. Callers answer 503.
    package var isUnavailable: Bool {
        switch code {
        case .connectionFailed, .connectionLost, .poolClosed: return true
        case .server:
            // 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now, 53300 too_many_connections
            // 40001 serialization_failure and 40P01 deadlock_detected succeed when tried again.
            guard let state = sqlState else { return false }
            return state.hasPrefix("57P") || state == "53300" || state == "40001" || state == "40P01"
        case .copyFailed, .unexpectedResult: return false
        }
    }

    /// True when a value in the statement's data is what PostgreSQL refused: class 22 "data
    /// exception" (a NUL byte, invalid JSON or a number `numeric` cannot hold) or class 54 "program
    /// limit exceeded" (a `jsonb` too large or too deep). The input is at fault, not the server.
    package var isDataException: Bool {
        guard let state = sqlState else { return false }
        return state.hasPrefix("22") || state.hasPrefix("54")
    }

    /// True when the connection itself broke, so the pool resets it before its next use.
    var isConnectionLost: Bool { code == .connectionLost || code == .connectionFailed }

    package var description: String {
        if let sqlState { return "PostgresError.\(code.rawValue) [\(sqlState)]: \(message)" }
        return "PostgresError.\(code.rawValue): \(message)"
    }
}
