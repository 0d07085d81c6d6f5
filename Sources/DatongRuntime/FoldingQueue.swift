import NIOCore
import Synchronization

/// Work that waits is folded: callers submit items, and up to `maxWorkers` workers each take every
/// item waiting (up to `maxGroupWeight`) and process them together; each caller gets its own item's
/// outcome. An idle queue processes an item at once, alone, so folding adds no wait; a busy one
/// makes fewer, larger units of work. The collector's group commit (batches into one transaction)
/// and the gateway's collector calls (uploads into one call) are both this.
package final class FoldingQueue<Item: Sendable, Output: Sendable>: Sendable {
    /// Processes a group and returns one outcome per item, in order.
    package typealias Process = @Sendable ([Item]) async -> [Result<Output, any Error>]

    private struct Waiting: Sendable {
        let item: Item
        let weight: Int
        let continuation: CheckedContinuation<Output, any Error>
    }

    private struct State: Sendable {
        var waiting: [Waiting] = []
        var waitingWeight = 0
        var workers = 0
    }

    /// How much may wait before an item is refused at once (with `refusal(waiting weight)`)
    /// instead of queued.
    package struct WaitingLimit: Sendable {
        let weight: Int
        let refusal: @Sendable (_ waitingWeight: Int) -> any Error

        package init(weight: Int, refusal: @escaping @Sendable (_ waitingWeight: Int) -> any Error) {
            self.weight = weight
            self.refusal = refusal
        }
    }

    private let state = Mutex(State())
    private let maxWorkers: Int
    private let maxGroupWeight: Int
    private let waitingLimit: WaitingLimit?
    private let process: Process

    /// - Parameters:
    ///   - maxWorkers: groups processed at once.
    ///   - maxGroupWeight: the most one group weighs (a heavier item goes alone).
    ///   - waitingLimit: nil queues without bound (the callers are bounded elsewhere).
    package init(maxWorkers: Int, maxGroupWeight: Int, waitingLimit: WaitingLimit? = nil, process: @escaping Process) {
        self.maxWorkers = max(1, maxWorkers)
        self.maxGroupWeight = maxGroupWeight
        self.waitingLimit = waitingLimit
        self.process = process
    }

    /// The weight of the items waiting for a worker now.
    package var waitingWeight: Int { state.withLock { $0.waitingWeight } }

    /// Queues `item` and returns its outcome once the group holding it was processed.
    package func submit(_ item: Item, weight: Int) async throws -> Output {
        try await withCheckedThrowingContinuation { continuation in
            let start: Bool = state.withLock { state in
                if let waitingLimit, state.waitingWeight > 0, state.waitingWeight + weight > waitingLimit.weight {
                    continuation.resume(throwing: waitingLimit.refusal(state.waitingWeight))
                    return false
                }
                state.waiting.append(Waiting(item: item, weight: weight, continuation: continuation))
                state.waitingWeight += weight
                guard state.workers < maxWorkers else { return false }
                state.workers += 1
                return true
            }
            if start { Task { await self.work() } }
        }
    }

    /// One worker: takes what waits (up to a group's weight) and processes it, until nothing waits.
    private func work() async {
        while let group = nextGroup() {
            let outcomes = await process(group.map(\.item))
            for (index, waiting) in group.enumerated() {
                waiting.continuation.resume(with: index < outcomes.count ? outcomes[index] : .failure(FoldingQueueError.noOutcome))
            }
        }
    }

    private func nextGroup() -> [Waiting]? {
        state.withLock { state in
            guard !state.waiting.isEmpty else {
                state.workers -= 1
                return nil
            }
            var weight = 0
            var count = 0
            for waiting in state.waiting {
                if count > 0, weight + waiting.weight > maxGroupWeight { break }
                weight += waiting.weight
                count += 1
            }
            let group = Array(state.waiting.prefix(count))
            state.waiting.removeFirst(count)
            state.waitingWeight -= weight
            return group
        }
    }
}

/// A `FoldingQueue`'s process returned fewer outcomes than it was given items (a bug).
package enum FoldingQueueError: Error {
    case noOutcome
}

extension Array where Element: Sendable {
    /// A folded group's outcomes, one per member in order: members whose `deadline` has passed (they
    /// waited in the queue that long) are answered `tooLate` without being sent, the others `send`.
    /// The gateway's identity and collector calls use it, so a wait in the queue counts against a
    /// call's timeout.
    package func sendingInTime<Output>(
        _ deadline: KeyPath<Element, NIODeadline>, tooLate: any Error, send: ([Element]) async -> [Result<Output, any Error>]
    ) async -> [Result<Output, any Error>] {
        let now = NIODeadline.now()
        let live = indices.filter { self[$0][keyPath: deadline] > now }
        guard live.count < count else { return await send(self) }
        var outcomes = map { _ in Result<Output, any Error>.failure(tooLate) }
        guard !live.isEmpty else { return outcomes }
        for (position, outcome) in zip(live, await send(live.map { self[$0] })) { outcomes[position] = outcome }
        return outcomes
    }
}
