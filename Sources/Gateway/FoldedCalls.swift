import DatongRuntime
import Logging
import NIOCore

/// A service's calls, folded when they wait: the gateway's calls to identity-service
/// (`IdentityCalls`) and to the collector (`CollectorCalls`). At most `maxCalls` are in flight; a
/// request that arrives while every call is busy waits, and the next call to end takes every
/// waiting request (up to `maxGroupWeight`) in one call. An idle gateway sends each request at
/// once and alone, so folding never adds a wait; a busy one makes fewer, larger calls, which cost
/// the service per call rather than per record (docs/BENCHMARKS.md). Each request's wait counts in
/// the service's timeout (`UPSTREAM_TIMEOUT_SECONDS`): one still waiting when that has passed is
/// answered 503 without being sent, and a call ends by the earliest deadline it carries.
final class FoldedCalls<Calls: FoldableCalls>: Sendable {
    private let queue: FoldingQueue<Waiting<Calls.Request>, Calls.Answer>
    private let timeout: TimeAmount

    init(service: ServiceClient, maxCalls: Int, maxGroupWeight: Int, calls: Calls) {
        timeout = service.timeout
        let tooLate = service.tooLate
        queue = FoldingQueue(maxWorkers: maxCalls, maxGroupWeight: maxGroupWeight) { group in
            await group.sendingInTime(\.deadline, tooLate: tooLate) { members in
                guard members.count > 1 else { return await calls.eachAlone(members) }
                return await calls.together(members, deadline: members.map(\.deadline).min())
            }
        }
    }

    /// `request`'s answer, from a call of its own or one it shared.
    func submit(_ request: Calls.Request, weight: Int, requestID: String, logger: Logger) async throws -> Calls.Answer {
        try await queue.submit(Waiting(request: request, requestID: requestID, deadline: .now() + timeout, logger: logger), weight: weight)
    }
}

/// One request waiting for a call, with what its own call would carry.
struct Waiting<Request: Sendable>: Sendable {
    let request: Request
    let requestID: String
    let deadline: NIODeadline
    let logger: Logger
}

/// How a service's calls are made: a request alone, or the requests that waited together.
protocol FoldableCalls: Sendable {
    associatedtype Request: Sendable
    associatedtype Answer: Sendable
    /// One request's call, by its own deadline.
    func alone(_ waiting: Waiting<Request>) async throws -> Answer
    /// One call for two or more requests that waited, by the earliest of their deadlines: one
    /// outcome per request, in order.
    func together(_ group: [Waiting<Request>], deadline: NIODeadline?) async -> [Result<Answer, any Error>]
}

extension FoldableCalls {
    /// Each request in a call of its own, one after another: one outcome per request, in order.
    func eachAlone(_ group: [Waiting<Request>]) async -> [Result<Answer, any Error>] {
        var outcomes: [Result<Answer, any Error>] = []
        outcomes.reserveCapacity(group.count)
        for waiting in group {
            do {
                outcomes.append(.success(try await alone(waiting)))
            } catch {
                outcomes.append(.failure(error))
            }
        }
        return outcomes
    }
}
