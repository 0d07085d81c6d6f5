import Synchronization

/// The deadlines of the request bodies being read, watched by one task for the whole process.
///
/// A timer per request (a child task sleeping beside the read in a task group, a libdispatch timer
/// armed and cancelled, libdispatch's timer thread woken for each) was a few per cent of every
/// service's CPU at full speed (docs/BENCHMARKS.md). Here a read registers its deadline (a lock
/// and a dictionary entry), and one task, ticking while any read is registered and stopping when
/// none is, cancels the reads past their deadline. A deadline is kept to within one tick.
package final class BodyDeadlines: Sendable {
    /// The process's watch: every service's request bodies.
    package static let shared = BodyDeadlines(tick: .milliseconds(250))

    private struct Watched: Sendable {
        let deadline: ContinuousClock.Instant
        let cancel: @Sendable () -> Void
    }

    private struct State: Sendable {
        var nextID = 0
        var watched: [Int: Watched] = [:]
        var watching = false
    }

    private let state = Mutex(State())
    private let tick: Duration

    package init(tick: Duration) {
        self.tick = tick
    }

    /// Runs `read` in a task of its own and returns what it returned, or nil when it had not ended
    /// `timeout` from now: it is cancelled then, and whatever it returns afterwards is dropped.
    /// Cancelling the caller cancels the read, and the caller gets a `CancellationError`.
    package func run<T: Sendable>(within timeout: Duration, _ read: @escaping @Sendable () async throws -> T) async throws -> T? {
        let reader = Task { try await read() }
        let deadline = ContinuousClock.now.advanced(by: timeout)
        let (id, startWatching) = state.withLock { state in
            let id = state.nextID
            state.nextID &+= 1
            state.watched[id] = Watched(deadline: deadline, cancel: { reader.cancel() })
            defer { state.watching = true }
            return (id, !state.watching)
        }
        if startWatching { watch() }
        let outcome = await withTaskCancellationHandler {
            await reader.result
        } onCancel: {
            reader.cancel()
        }
        // Still registered: it ended before the watch reached it.
        let inTime = state.withLock { $0.watched.removeValue(forKey: id) != nil }
        try Task.checkCancellation()
        guard inTime else { return nil }
        return try outcome.get()
    }

    /// How many reads are being watched, and whether the watching task runs (for tests).
    package var watching: (reads: Int, running: Bool) { state.withLock { ($0.watched.count, $0.watching) } }

    private func watch() {
        Task.detached { [self] in
            while true {
                try? await Task.sleep(for: tick)
                let now = ContinuousClock.now
                let (expired, goOn) = state.withLock { state in
                    var expired: [Watched] = []
                    for (id, watched) in state.watched where watched.deadline <= now {
                        expired.append(watched)
                        state.watched[id] = nil
                    }
                    if state.watched.isEmpty { state.watching = false }
                    return (expired, state.watching)
                }
                for watched in expired { watched.cancel() }
                if !goOn { return }
            }
        }
    }
}
