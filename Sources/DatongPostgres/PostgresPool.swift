import Logging
import NIOPosix
import ServiceLifecycle
import Synchronization

/// A bounded pool of libpq connections with one dedicated thread per connection.
///
/// libpq calls block, so they never run on a NIO event loop or the cooperative pool: `withConnection`
/// borrows a connection and runs the caller's synchronous body on the pool's own threads. Connections
/// open lazily up to `maxConnections`; a connection the server dropped (restart, failover, idle kill)
/// is re-established before its next use, and a body that fails because the connection broke is run
/// once more on the re-established connection — so bodies must be safe to repeat (a transaction that
/// broke was rolled back by the server; writes use conflict-free inserts).
///
/// As a `Service` it stays up until graceful shutdown, then closes every connection.
package final class PostgresPool: Service, Sendable {
    package let maxConnections: Int
    private let conninfo: String
    private let threads: NIOThreadPool
    private let state: Mutex<State>
    private let logger: Logger

    private enum Grant: Sendable {
        case connection(PostgresConnection)
        case open
        case closed
    }

    private struct State: ~Copyable {
        var idle: [PostgresConnection] = []
        var open = 0
        var waiters: [CheckedContinuation<Grant, Never>] = []
        var closed = false
    }

    /// - Parameters:
    ///   - url: a libpq connection URI or key/value conninfo string (`sslmode`, several hosts and
    ///     `target_session_attrs` work as libpq documents them).
    ///   - maxConnections: the most connections (and threads) this pool uses.
    package init(url: String, maxConnections: Int, logger: Logger) {
        precondition(maxConnections > 0, "a pool needs at least one connection")
        self.conninfo = url
        self.maxConnections = maxConnections
        self.logger = logger
        self.threads = NIOThreadPool(numberOfThreads: maxConnections)
        self.state = Mutex(State())
        threads.start()
    }

    /// Borrows a connection for `body`, which runs on one of the pool's threads.
    @discardableResult
    package func withConnection<T: Sendable>(
        _ body: @escaping @Sendable (PostgresConnection) throws -> T
    ) async throws -> T {
        let connection = try await acquire()
        defer { release(connection) }
        return try await threads.runIfActive {
            if !connection.isHealthy { try connection.reset() }
            do {
                return try body(connection)
            } catch let error as PostgresError where error.isConnectionLost {
                try connection.reset()
                return try body(connection)
            }
        }
    }

    /// Runs `body` in one transaction on a borrowed connection.
    @discardableResult
    package func transaction<T: Sendable>(
        _ body: @escaping @Sendable (PostgresConnection) throws -> T
    ) async throws -> T {
        try await withConnection { try $0.transaction(body) }
    }

    /// True when a connection answers `SELECT 1` now.
    package func ping() async -> Bool {
        (try? await withConnection { try $0.execute("SELECT 1") }) != nil
    }

    package func run() async throws {
        try? await gracefulShutdown()
        await close()
    }

    /// Closes idle connections now and the borrowed ones as they come back; later borrows fail.
    package func close() async {
        let (idle, waiters) = state.withLock { state -> ([PostgresConnection], [CheckedContinuation<Grant, Never>]) in
            state.closed = true
            defer {
                state.idle = []
                state.waiters = []
            }
            return (state.idle, state.waiters)
        }
        for waiter in waiters { waiter.resume(returning: .closed) }
        for connection in idle { connection.close() }
        try? await threads.shutdownGracefully()
    }

    // MARK: Borrowing

    private func acquire() async throws -> PostgresConnection {
        while true {
            let grant: Grant = await withCheckedContinuation { continuation in
                let immediate: Grant? = state.withLock { state in
                    if state.closed { return .closed }
                    if let connection = state.idle.popLast() { return .connection(connection) }
                    if state.open < maxConnections {
                        state.open += 1
                        return .open
                    }
                    state.waiters.append(continuation)
                    return nil
                }
                if let immediate { continuation.resume(returning: immediate) }
            }
            switch grant {
            case .connection(let connection):
                return connection
            case .closed:
                throw PostgresError.poolClosed
            case .open:
                do {
                    let conninfo = self.conninfo
                    return try await threads.runIfActive { try PostgresConnection(conninfo: conninfo) }
                } catch {
                    giveBackOpenSlot()
                    logger.warning("postgres.connect.failed", metadata: ["error": "\(error)"])
                    throw error
                }
            }
        }
    }

    private func release(_ connection: PostgresConnection) {
        let waiter: CheckedContinuation<Grant, Never>? = state.withLock { state in
            if state.closed {
                state.open -= 1
                return nil
            }
            if !state.waiters.isEmpty { return state.waiters.removeFirst() }
            state.idle.append(connection)
            return nil
        }
        if let waiter {
            waiter.resume(returning: .connection(connection))
        } else if state.withLock({ $0.closed }) {
            connection.close()
        }
    }

    /// A connection could not be opened: free its slot, or hand the slot to a waiter so that no
    /// waiter sleeps forever while nothing is open.
    private func giveBackOpenSlot() {
        let waiter: CheckedContinuation<Grant, Never>? = state.withLock { state in
            if !state.closed, !state.waiters.isEmpty { return state.waiters.removeFirst() }
            state.open -= 1
            return nil
        }
        waiter?.resume(returning: .open)
    }
}
