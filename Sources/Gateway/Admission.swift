import DatongRuntime
import Hummingbird
import Logging
import Synchronization

/// Load shedding: at most `limit` requests are worked on at once. Past that, a request is answered
/// 503 `overloaded` with `Retry-After` before its body is read, so a flood beyond capacity costs
/// neither memory nor latency for the requests already admitted, and the SDKs keep the refused
/// batches and send them again later. `/health`, `/ready` and `/metrics` are always answered.
struct AdmissionMiddleware: RouterMiddleware {
    typealias Context = DatongRequestContext

    let limit: Int
    private let inFlight = InFlight()

    init(limit: Int) { self.limit = limit }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        switch request.uri.path {
        case "/health", "/ready", "/metrics": return try await next(request, context)
        default: break
        }
        guard inFlight.enter(below: limit) else {
            context.logger.debug("gateway.overloaded", metadata: ["gateway.limit": "\(limit)"])
            throw ServiceError(
                .serviceUnavailable, .overloaded, "the gateway is working on \(limit) requests; send this one again later",
                retryAfterSeconds: 1
            )
        }
        defer { inFlight.leave() }
        return try await next(request, context)
    }

    private final class InFlight: Sendable {
        private let count = Atomic<Int>(0)

        func enter(below limit: Int) -> Bool {
            if count.add(1, ordering: .relaxed).newValue <= limit { return true }
            count.subtract(1, ordering: .relaxed)
            return false
        }

        func leave() { count.subtract(1, ordering: .relaxed) }
    }
}
