import DatongContracts
import Foundation
import Hummingbird
import Logging
import Prometheus

/// An expected failure of a request: an HTTP status, a short stable code and a message for the caller,
/// answered as a `ProblemBody`. 503s carry `Retry-After`, which the SDKs honour by retrying later.
package struct ServiceError: HTTPResponseError, CustomStringConvertible {
    package let status: HTTPResponse.Status
    package let code: ErrorCode
    package let message: String
    package let retryAfterSeconds: Int?
    /// The request's body was not read to its end (too large, timed out, malformed framing): the
    /// connection cannot carry another request, so the answer says `Connection: close`.
    package let closesConnection: Bool

    package init(
        _ status: HTTPResponse.Status, _ code: ErrorCode, _ message: String, retryAfterSeconds: Int? = nil, closesConnection: Bool = false
    ) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfterSeconds = retryAfterSeconds
        self.closesConnection = closesConnection || status == .requestTimeout
    }

    package static func badRequest(_ code: ErrorCode, _ message: String) -> Self { .init(.badRequest, code, message) }
    package static func unavailable(_ code: ErrorCode, _ message: String) -> Self {
        .init(.serviceUnavailable, code, message, retryAfterSeconds: 5)
    }

    /// A project name that breaks `ProjectName`'s rule (400).
    package static let invalidProject = badRequest(
        .invalidProject, "project names are a letter followed by letters, digits or underscores (at most \(ProjectName.maxLength))"
    )

    package var description: String { "\(status.code) \(code): \(message)" }

    package func response(from request: Request, context: some RequestContext) throws -> Response {
        var headers: HTTPFields = [.contentType: "application/json; charset=utf-8"]
        if let retryAfterSeconds { headers[.retryAfter] = String(retryAfterSeconds) }
        if closesConnection { headers[.connection] = "close" }
        let body = (try? JSONEncoder().encode(ProblemBody(error: code.rawValue, message: message))) ?? Data()
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }
}

/// An error of a library the services use that has an honest answer of its own (the storage
/// target's `PostgresError`: an unreachable database is a 503, a value it cannot store a 400).
package protocol ServiceErrorConvertible: Error {
    /// The answer; what the caller must not see (internal text) goes to `logger` instead.
    func serviceError(logger: Logger) -> ServiceError
}

/// `datong_refusals_total{code}`: every refusal a service answers, also those inside an answer that
/// is itself a 200 (a batch refused within a group).
package struct Refusals: Sendable {
    /// nil counts nothing.
    private let registry: PrometheusCollectorRegistry?

    package init(registry: PrometheusCollectorRegistry?) {
        self.registry = registry
    }

    package func count(_ refusal: ServiceError) {
        registry?.makeCounter(descriptor: Self.name, labels: [("code", refusal.code.rawValue)]).increment()
    }

    /// A value type of constants, made per refusal.
    private static var name: MetricNameDescriptor {
        MetricNameDescriptor(
            namespace: "datong", metricName: "refusals", unitName: "total",
            helpText: "Requests refused (4xx and 5xx answers), by the code of the answer"
        )
    }
}

/// Turns every error a handler throws into an honest answer: typed errors keep their status;
/// `ServiceErrorConvertible` errors say their own (an unreachable database becomes 503 with
/// `Retry-After`); a body that does not decode becomes 400; anything else is logged in full and
/// answered with a generic 500.
package struct ErrorMiddleware: RouterMiddleware {
    package typealias Context = DatongRequestContext

    /// Where refusals are counted (`datong_refusals_total{code}`, exported at `/metrics`).
    private let refusals: Refusals

    package init(registry: PrometheusCollectorRegistry? = nil) {
        self.refusals = Refusals(registry: registry)
    }

    package func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            let answer = Self.answer(for: error, logger: context.logger)
            if let refusal = answer as? ServiceError { refusals.count(refusal) }
            throw answer
        }
    }

    /// What `error` is answered with (every refusal is counted by its code in `datong_refusals_total`).
    package static func answer(for error: any Error, logger: Logger) -> any Error {
        switch error {
        case let error as any HTTPResponseError:
            return error
        case let error as any ServiceErrorConvertible:
            return error.serviceError(logger: logger)
        case let error as DecodingError:
            return ServiceError.badRequest(.invalidBody, "the request body does not match the expected JSON: \(Self.describe(error))")
        default:
            logger.error("request.failed", metadata: ["error": "\(String(reflecting: error))"])
            return ServiceError(.internalServerError, .internalError, "the request failed unexpectedly; it is logged with its request id")
        }
    }

    static func describe(_ error: DecodingError) -> String {
        switch error {
        case .dataCorrupted(let context): return context.debugDescription
        case .keyNotFound(let key, let context): return "missing \(path(context.codingPath + [key]))"
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            return "wrong type at \(path(context.codingPath)): \(context.debugDescription)"
        @unknown default: return "\(error)"
        }
    }

    private static func path(_ keys: [any CodingKey]) -> String {
        keys.isEmpty ? "the top level" : keys.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
    }
}
