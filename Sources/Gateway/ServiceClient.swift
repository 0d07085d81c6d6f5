import AsyncHTTPClient
import DatongContracts
import DatongRuntime
import Foundation
import HTTPTypes
import Logging
import NIOCore
import NIOFoundationEssentialsCompat
import NIOHTTP1
import ServiceLifecycle

/// JSON over HTTP to another Datong service. Any failure to get an answer (connection refused,
/// timeout, 5xx) is a `503` for the caller: the SDK keeps the batch and retries it later.
struct ServiceClient: Sendable {
    let upstream: Upstream
    let baseURL: String
    let http: HTTPClient
    let timeout: TimeAmount
    /// `SERVICE_TOKEN`, sent with every call when set.
    var serviceToken: String? = nil

    var name: String { upstream.serviceName }

    /// The most a service's answer may hold.
    static let maxResponseBytes = 64 << 20

    func post<Body: WireCodable, Answer: WireCodable>(
        _ path: String, _ body: Body, as: Answer.Type, requestID: String, deadline: NIODeadline? = nil, logger: Logger
    ) async throws -> Answer {
        try await post(path, bytes: body.jsonBytes, as: Answer.self, requestID: requestID, deadline: deadline, logger: logger)
    }

    /// `post` of a body already encoded. With a `deadline` (a caller that waited for its turn), the
    /// call ends by then too, whichever comes first of it and the client's own timeout.
    func post<Answer: WireCodable>(
        _ path: String, bytes: [UInt8], as: Answer.Type, requestID: String, deadline: NIODeadline? = nil, logger: Logger
    ) async throws -> Answer {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: DatongHeader.requestID, value: requestID)
        request.body = .bytes(ByteBuffer(bytes: bytes))
        return try await answer(to: request, as: Answer.self, deadline: deadline, logger: logger)
    }

    /// What an upload whose time ran out while it waited for a call is answered (503, retried).
    var tooLate: ServiceError {
        ServiceError.unavailable(.unavailable(upstream), "\(name) did not answer in time; try again later")
    }

    func get<Answer: WireCodable>(_ path: String, as: Answer.Type, logger: Logger) async throws -> Answer {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = .GET
        return try await answer(to: request, as: Answer.self, logger: logger)
    }

    /// Sends `request` and decodes a 2xx answer; a 4xx is the caller's 400 with the reason, anything
    /// else a 503.
    private func answer<Answer: WireCodable>(
        to request: HTTPClientRequest, as: Answer.Type, deadline: NIODeadline? = nil, logger: Logger
    ) async throws -> Answer {
        let (response, payload) = try await exchange(request, maxBytes: Self.maxResponseBytes, deadline: deadline, logger: logger)
        switch response.status.code {
        case 200..<300:
            do {
                return try Answer(jsonBytes: Array(payload.readableBytesView))
            } catch {
                logger.error("upstream.bad_answer", metadata: ["upstream": "\(name)", "error": "\(error)"])
                throw ServiceError.unavailable(.badAnswer(from: upstream), "\(name) gave an answer the gateway cannot read")
            }
        case 404:
            // The service has no such route: during a rolling upgrade, an older version. The
            // caller's data is not at fault, so it is told to retry, never to drop it.
            logger.warning("upstream.lacks_route", metadata: ["upstream": "\(name)", "url": "\(request.url)"])
            throw ServiceError.unavailable(.lacksRoute(upstream), "\(name) does not offer this call (an older version?); try again later")
        default:
            let problem = try? JSONDecoder().decode(ProblemBody.self, from: Data(buffer: payload))
            if (400..<500).contains(response.status.code) {
                logger.warning("upstream.refused", metadata: ["upstream": "\(name)", "status": "\(response.status.code)"])
            }
            throw refusal(status: Int(response.status.code), error: problem?.error, message: problem?.message)
        }
    }

    /// The caller's answer when this service refused a request with `status`: a 4xx is the
    /// caller's 400 with the reason (passed on), anything else a 503 to retry.
    func refusal(status: Int, error: String?, message: String?) -> ServiceError {
        guard (400..<500).contains(status) else {
            return ServiceError.unavailable(.unavailable(upstream), "\(name) answered \(status); try again later")
        }
        if status == 413 {
            // The gateway's calls stay within what the services accept (limits derived from one
            // another); a 413 means a deployment set them apart. The SDK's data met the public
            // limits: it keeps it and retries (a 400 would make it delete the batch).
            return ServiceError.unavailable(
                .unavailable(upstream), "\(name) refused a call as too large (\(message ?? "413")): its size limit is below the gateway's; try again later")
        }
        return ServiceError.badRequest(error.map { ErrorCode(passedOn: $0) } ?? .refused, "\(name) refused the request: \(message ?? "status \(status)")")
    }

    /// What a conditional GET of a config-service document found.
    enum DocumentFetch: Sendable, Equatable {
        /// The document, with its ETag.
        case document(etag: String?, body: [UInt8])
        /// `If-None-Match` matched: the copy the caller holds is current.
        case notModified
        /// Nothing is published (404).
        case absent
    }

    /// GETs a document, revalidating with `etag` when the caller holds a copy. Any failure to get an
    /// answer throws `ServiceError.unavailable`, like `post`.
    func fetchDocument(_ path: String, etag: String?, maxBytes: Int, logger: Logger) async throws -> DocumentFetch {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = .GET
        if let etag { request.headers.add(name: "If-None-Match", value: etag) }
        let (response, payload) = try await exchange(request, maxBytes: maxBytes, logger: logger)
        switch response.status.code {
        case 200: return .document(etag: response.headers.first(name: "ETag"), body: Array(payload.readableBytesView))
        case 304: return .notModified
        case 404: return .absent
        case 400..<500:
            // The caller's request was at fault (a parameter config-service refuses): a 4xx with
            // its reason, never a 503 that SDKs would retry forever.
            let problem = try? JSONDecoder().decode(ProblemBody.self, from: Data(buffer: payload))
            throw ServiceError.badRequest(
                problem.map { ErrorCode(passedOn: $0.error) } ?? .refused,
                "\(name) refused the request: \(problem?.message ?? "status \(response.status.code)")")
        default:
            logger.warning("upstream.refused", metadata: ["upstream": "\(name)", "status": "\(response.status.code)"])
            throw ServiceError.unavailable(.unavailable(upstream), "\(name) answered \(response.status.code); try again later")
        }
    }

    /// Sends `request` and reads the whole answer; not getting one is a 503 for the caller.
    private func exchange(
        _ request: HTTPClientRequest, maxBytes: Int, deadline: NIODeadline? = nil, logger: Logger
    ) async throws -> (HTTPClientResponse, ByteBuffer) {
        var request = request
        if let serviceToken { request.headers.replaceOrAdd(name: "Authorization", value: "Bearer \(serviceToken)") }
        let ownDeadline = NIODeadline.now() + timeout
        do {
            let response = try await http.execute(request, deadline: min(ownDeadline, deadline ?? ownDeadline))
            return (response, try await response.body.collect(upTo: maxBytes))
        } catch is NIOTooManyBytesError {
            // Not a service that cannot be reached (retrying will not help): its answer is larger
            // than any this caller reads. Limits that derive from one another make this unreachable.
            logger.error("upstream.answer_too_large", metadata: ["upstream": "\(name)", "url": "\(request.url)", "limit": "\(maxBytes)"])
            throw ServiceError(.badGateway, .answerTooLarge, "\(name) answered with more than \(maxBytes) bytes, more than the gateway reads")
        } catch {
            logger.warning("upstream.unreachable", metadata: ["upstream": "\(name)", "error": "\(error)"])
            throw ServiceError.unavailable(.unavailable(upstream), "\(name) cannot be reached now; try again later")
        }
    }

    /// True when the service answers its `/health`.
    func isHealthy() async -> Bool {
        var request = HTTPClientRequest(url: baseURL + "/health")
        request.method = .GET
        guard let response = try? await http.execute(request, timeout: .seconds(2)) else { return false }
        _ = try? await response.body.collect(upTo: 4096)
        return response.status == .ok
    }
}

/// Keeps the shared HTTP client alive until the server has drained, then shuts it down.
struct HTTPClientService: Service {
    let client: HTTPClient

    func run() async throws {
        try? await gracefulShutdown()
        try await client.shutdown()
    }
}

extension HTTPClient {
    /// A client sized for service-to-service traffic (AsyncHTTPClient's default of 8 connections per
    /// host throttles a busy gateway; docs/BENCHMARKS.md, building blocks: 64 gave 9k req/s through a hop where 8 gave 5.8k).
    static func forServices(connectTimeout: TimeAmount) -> HTTPClient {
        HTTPClient(
            eventLoopGroupProvider: .singleton,
            configuration: .init(
                timeout: .init(connect: connectTimeout),
                // Idle connections go after 20 s, before the services' own idle timeout (30 s by
                // default) would close one under a request.
                connectionPool: .init(idleTimeout: .seconds(20), concurrentHTTP1ConnectionsPerHostSoftLimit: 64)
            )
        )
    }
}
