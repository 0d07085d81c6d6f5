import AsyncHTTPClient
import DatongContracts
import DatongRuntime
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1

/// The admin API's window on data other services own: the collector's newest events, rejected
/// records, per-minute counts and catalog (metadata), identity-service's lookups and merge undo. config-service is the
/// one place that knows the admin tokens, so it checks the token, then asks the owner on the same
/// path with the service token; the owner's answer (or refusal) is passed on as it is. An owner
/// that cannot be reached is a 503 naming it.
struct OwnedDataAPI: ServiceAPI {
    let auth: AdminAuth
    let collector: Owner
    let identity: Owner
    /// The gateway's URL (`GATEWAY_URL`), for `GET /v1/status` only: config-service never calls it.
    var gatewayURL: String? = nil
    /// Throws the 404 `unknown_project` for a project that does not exist: a read of one answers as
    /// a write does, not with an empty list.
    let requireProject: @Sendable (String) async throws -> Void

    /// A service the admin API passes calls on to.
    struct Owner: Sendable {
        let upstream: Upstream
        let baseURL: String
        let serviceToken: String?
        var timeout: TimeAmount = .seconds(5)
        var name: String { upstream.serviceName }
        /// The largest answer passed on; the owners bound their pages well below it.
        static let maxAnswerBytes = 16 << 20

        func call(_ method: HTTPMethod, _ pathAndQuery: String, body: [UInt8]? = nil, requestID: String, logger: Logger) async throws -> Response {
            var request = HTTPClientRequest(url: baseURL + pathAndQuery)
            request.method = method
            request.headers.add(name: DatongHeader.requestID, value: requestID)
            if let serviceToken { request.headers.add(name: "Authorization", value: "Bearer \(serviceToken)") }
            if let body {
                request.headers.add(name: "Content-Type", value: "application/json")
                request.body = .bytes(ByteBuffer(bytes: body))
            }
            let response: HTTPClientResponse
            let payload: ByteBuffer
            do {
                response = try await HTTPClient.shared.execute(request, timeout: timeout)
                payload = try await response.body.collect(upTo: Self.maxAnswerBytes)
            } catch {
                logger.warning("upstream.unreachable", metadata: ["upstream": "\(name)", "error": "\(error)"])
                throw ServiceError.unavailable(.unavailable(upstream), "\(name) cannot be reached at \(baseURL) now; try again later")
            }
            switch response.status.code {
            case 200..<300, 400, 404, 409, 413, 422, 503:
                // The owner's answer, refusals included: a 503 says why (`query_timeout`, the
                // database) and when to try again.
                var headers: HTTPFields = [:]
                headers[.contentType] = response.headers.first(name: "Content-Type") ?? "application/json; charset=utf-8"
                headers[.retryAfter] = response.headers.first(name: "Retry-After")
                return Response(status: .init(code: Int(response.status.code)), headers: headers, body: .init(byteBuffer: payload))
            case 401, 403:
                // The owner refused config-service's own service token: a deployment mistake.
                logger.error("upstream.refused_service_token", metadata: ["upstream": "\(name)"])
                throw ServiceError.unavailable(.unavailable(upstream), "\(name) refused config-service's SERVICE_TOKEN; the services must share one")
            default:
                throw ServiceError.unavailable(.unavailable(upstream), "\(name) answered \(response.status.code); try again later")
            }
        }
    }

    func register(on router: Router<DatongRequestContext>) {
        let projects = router.group("/v1/projects/:project")
        for path in ["events", "rejected", "ingest-counts", "metadata"] {
            projects.get(RouterPath(stringLiteral: path)) { request, context in
                try await passOn(request, context, to: collector)
            }
        }
        for path in ["identities", "users/:user", "users/:user/history", "merges/:merge"] {
            projects.get(RouterPath(stringLiteral: path)) { request, context in
                try await passOn(request, context, to: identity)
            }
        }
        // The collector's retention dry run: what RETENTION_DAYS (or ?days=N) would drop now.
        router.get("/v1/retention") { request, context in
            _ = try await auth.authorize(request)
            let query = request.uri.query.map { "?" + $0 } ?? ""
            return try await collector.call(.GET, "/v1/retention" + query, requestID: context.requestID, logger: context.logger)
        }
        // `datongctl status` and the console: the readiness and metrics of each replica of the
        // services config-service knows, which an operator's host usually cannot reach (they
        // listen on the services' network only).
        router.get("/v1/status") { request, context in
            _ = try await auth.authorize(request)
            async let gateways = ServiceProbes.replicas(name: "bridge-gateway", baseURL: gatewayURL)
            async let identities = ServiceProbes.replicas(name: identity.name, baseURL: identity.baseURL)
            async let collectors = ServiceProbes.replicas(name: collector.name, baseURL: collector.baseURL)
            return try jsonResponse(.ok, encoding: ServicesStatus(services: await gateways + identities + collectors))
        }
        // The reports (docs/ANALYTICS.md), which the collector runs for as long as its report
        // timeout allows: the console's Reports page and `datongctl report`.
        projects.post("reports/:kind") { request, context in
            _ = try await authorizeProject(request, context)
            guard let kind = context.parameters.get("kind").flatMap(ReportKind.init(rawValue:)) else {
                throw ServiceError(
                    .notFound, .unknownReport, "no such report; the reports are \(ReportKind.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            let body = try await collectBody(request, limit: ReportKind.maxBodyBytes)
            var reports = collector
            reports.timeout = .seconds(Int64(ReportKind.timeoutSeconds) + 5)
            return try await reports.call(
                .POST, "/v1/projects/\(try context.project())/reports/\(kind.rawValue)", body: Array(buffer: body), requestID: context.requestID,
                logger: context.logger)
        }
        projects.post("merges/:merge/undo") { request, context in
            // The undo is recorded in identity's history under the admin token's name.
            let actor = try await authorizeProject(request, context)
            let body = try JSONEncoder().encode(["actor": "admin:\(actor)"])
            context.logger.info("audit.merge.undo", metadata: ["path": "\(request.uri.path)", "actor": "\(actor)"])
            return try await identity.call(.POST, request.uri.path, body: Array(body), requestID: context.requestID, logger: context.logger)
        }
    }

    private func passOn(_ request: Request, _ context: DatongRequestContext, to owner: Owner) async throws -> Response {
        _ = try await authorizeProject(request, context)
        let query = request.uri.query.map { "?" + $0 } ?? ""
        return try await owner.call(.GET, request.uri.path + query, requestID: context.requestID, logger: context.logger)
    }

    /// The admin token's name, after checking it and that the project exists.
    private func authorizeProject(_ request: Request, _ context: DatongRequestContext) async throws -> String {
        let actor = try await auth.authorize(request)
        try await requireProject(try context.project())
        return actor
    }
}
