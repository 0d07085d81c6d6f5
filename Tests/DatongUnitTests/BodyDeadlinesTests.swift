import DatongRuntime
import Foundation
import Testing

/// The one task that keeps every request body's deadline (`collectBody`; the 408 a trickling
/// client gets through the real stack is in HostileInputTests).
@Suite("body deadlines")
struct BodyDeadlinesTests {
    struct Slow: Error {}

    /// Waits `duration` whether cancelled or not.
    static func ignoringCancellation(_ duration: Duration) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().asyncAfter(deadline: .now() + Double(duration.components.attoseconds) / 1e18 + Double(duration.components.seconds)) {
                done.resume()
            }
        }
    }

    @Test("a read that ends in time gives its value; one that does not is stopped within a tick of its deadline")
    func deadlines() async throws {
        let deadlines = BodyDeadlines(tick: .milliseconds(50))
        #expect(try await deadlines.run(within: .seconds(5)) { 42 } == 42)
        await #expect(throws: Slow.self) { _ = try await deadlines.run(within: .seconds(5)) { () async throws -> Int in throw Slow() } }

        // A read that would wait a minute: cancelled at its deadline, so it ends then.
        let clock = ContinuousClock()
        let start = clock.now
        let stopped = try await deadlines.run(within: .milliseconds(200)) { () async throws -> Int in
            try await Task.sleep(for: .seconds(60))
            return 1
        }
        let elapsed = clock.now - start
        #expect(stopped == nil)
        // The watch runs on the threads every test shares (two here), which a test doing seconds of
        // work without yielding can hold: the bound is the read's minute, not the tick.
        #expect(elapsed >= .milliseconds(200) && elapsed < .seconds(30), "\(elapsed)")

        // A read that ignores its cancellation and returns late: what it returns is dropped.
        #expect(
            try await deadlines.run(within: .milliseconds(100)) {
                await Self.ignoringCancellation(.milliseconds(400))
                return 7
            } == nil)

        // Nothing stays watched, and the watching task stops when there is nothing to watch.
        try await Task.sleep(for: .milliseconds(150))
        #expect(deadlines.watching.reads == 0)
        #expect(deadlines.watching.running == false)
    }

    @Test("many reads at once: each gets its own outcome; cancelling a caller cancels its read")
    func concurrentAndCancelled() async throws {
        let deadlines = BodyDeadlines(tick: .milliseconds(50))
        let clock = ContinuousClock()
        let readsStart = clock.now
        let outcomes = try await withThrowingTaskGroup(of: (Int, Int?).self) { group in
            for index in 0..<200 {
                group.addTask {
                    let value = try await deadlines.run(within: .milliseconds(index.isMultiple(of: 2) ? 5_000 : 150)) { () async throws -> Int in
                        if !index.isMultiple(of: 2) { try await Task.sleep(for: .seconds(60)) }
                        return index
                    }
                    return (index, value)
                }
            }
            return try await group.reduce(into: [Int: Int?]()) { $0.updateValue($1.1, forKey: $1.0) }
        }
        #expect(outcomes.count == 200)
        #expect(outcomes.allSatisfy { index, value in value == (index.isMultiple(of: 2) ? index : nil) })
        // The slow reads were stopped at their deadline, not left to sleep their minute.
        #expect(clock.now - readsStart < .seconds(30))

        let start = clock.now
        let caller = Task {
            try await deadlines.run(within: .seconds(60)) { () async throws -> Int in
                try await Task.sleep(for: .seconds(60))
                return 1
            }
        }
        try await Task.sleep(for: .milliseconds(50))
        caller.cancel()
        await #expect(throws: CancellationError.self) { _ = try await caller.value }
        #expect(clock.now - start < .seconds(30))
        #expect(deadlines.watching.reads == 0)
    }
}
