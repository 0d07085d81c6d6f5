import DatongContracts
import DatongRuntime
import Hummingbird

/// `POST /v1/bridge?project=NAME`: an app relays the raw messages its H5 pages sent through the JS
/// bridge, with its own context; the gateway does what the app SDK would (PROTOCOL.md section 3):
/// reads each message, verifies where the page meant to send it and which page it is, rewrites it
/// onto the app's user and presets, and stores it. One result per message, in order.
struct BridgeHandler: Sendable {
    let limits: UploadLimits
    let whitelists: WhitelistCache
    let ingest: Ingest

    func handle(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let project = request.uri.queryParameters["project"].map(String.init).flatMap { $0.isEmpty ? nil : $0 } ?? "default"
        guard ProjectName.isValid(project) else {
            throw ServiceError.badRequest("invalid_project", "project names are a letter followed by letters, digits or underscores (at most \(ProjectName.maxLength))")
        }
        let body = try await readRequestBody(request, limits: limits)
        guard case .object(let root) = try UploadPayload.parseJSON(body, limits: limits, what: "the body") else {
            throw ServiceError.badRequest("invalid_body", #"the body is a JSON object {"app": {...}, "messages": ["...", ...]}"#)
        }
        var app: AppContext
        do {
            app = try AppContext(root["app"])
        } catch {
            throw ServiceError.badRequest("invalid_app_context", error.reason)
        }
        guard case .array(let items)? = root["messages"] else {
            throw ServiceError.badRequest("invalid_messages", "messages must be an array of the strings the app received from the page")
        }
        guard items.count <= limits.maxBridgeMessages else {
            throw ServiceError(.contentTooLarge, "too_many_messages", "\(items.count) messages in one relay; the limit is \(limits.maxBridgeMessages)")
        }
        var messages: [String] = []
        messages.reserveCapacity(items.count)
        for (index, item) in items.enumerated() {
            guard case .string(let text) = item else {
                throw ServiceError.badRequest("invalid_messages", "messages[\(index)] is not a string: relay each message exactly as the page sent it")
            }
            messages.append(text)
        }

        let receivedAt = Ingest.now()
        let normalizer = RecordNormalizer(limits: limits)
        var results: [MessageResult] = Array(repeating: MessageResult(index: 0, status: .ignored), count: messages.count)
        var accepted: [NormalizedRecord] = []
        var acceptedMessages: [Int] = []
        var rejected: [RejectedRecord] = []
        var projectWhitelists: ProjectWhitelists?
        func reject(_ index: Int, _ reason: String) {
            results[index] = MessageResult(index: index, status: .rejected, reason: reason)
            rejected.append(RejectedRecord(project: project, reason: "bridge: \(reason)", raw: messages[index]))
        }

        for (index, message) in messages.enumerated() {
            let record: [String: JSONValue]
            switch BridgeMessage.read(message, limits: limits) {
            case .failure(let problem):
                reject(index, problem.reason)
                continue
            case .success(.ignored(let reason)):
                results[index] = MessageResult(index: index, status: .ignored, reason: reason)
                continue
            case .success(.record(let found)):
                record = found
            }
            // Fetched once, when the first record needs them: a 503 if config-service was never reached.
            if projectWhitelists == nil { projectWhitelists = try await whitelists.whitelists(for: project) }
            switch BridgeRewriter.rewrite(record, app: &app, project: project, whitelists: projectWhitelists!) {
            case .failure(let problem):
                reject(index, problem.reason)
            case .success(let rewritten):
                switch normalizer.normalize(.object(rewritten), defaultProject: project, now: receivedAt) {
                case .success(let normalized):
                    accepted.append(normalized)
                    acceptedMessages.append(index)
                case .failure(let rejection):
                    reject(index, rejection.reason)
                }
            }
        }

        let stored = try await ingest.store(accepted, rejected: rejected, receivedAt: receivedAt, context: context)
        let duplicates = Set(stored.duplicateIndexes)
        for (position, index) in acceptedMessages.enumerated() {
            results[index] = MessageResult(index: index, status: duplicates.contains(position) ? .duplicate : .stored)
        }
        let ignored = results.count(where: { $0.status == .ignored })
        context.logger.debug("bridge.stored", metadata: [
            "bridge.project": "\(project)", "bridge.stored": "\(stored.stored)", "bridge.duplicates": "\(stored.duplicates)",
            "bridge.rejected": "\(stored.rejected)", "bridge.ignored": "\(ignored)",
        ])
        return try jsonResponse(.ok, encoding: BridgeAnswer(
            stored: stored.stored, duplicates: stored.duplicates, rejected: stored.rejected, ignored: ignored, results: results
        ))
    }
}

/// What happened to one relayed message.
struct MessageResult: Codable, Sendable, Equatable {
    enum Status: String, Codable, Sendable {
        /// Stored as a new record.
        case stored
        /// The same record was already stored (a retried relay).
        case duplicate
        /// Refused; kept in `analytics.rejected` with the reason.
        case rejected
        /// Not a record (`getAppInfo`, `visualized_track`, …); acknowledged and dropped.
        case ignored
    }

    let index: Int
    let status: Status
    var reason: String?

    init(index: Int, status: Status, reason: String? = nil) {
        self.index = index
        self.status = status
        self.reason = reason
    }
}

/// The answer to a bridge relay: counts, and one result per message in the order sent.
struct BridgeAnswer: Codable, Sendable, Equatable {
    let stored: Int
    let duplicates: Int
    let rejected: Int
    let ignored: Int
    let results: [MessageResult]
}
