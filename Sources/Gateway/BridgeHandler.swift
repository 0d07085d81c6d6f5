import DatongContracts
import DatongJSON
import DatongRuntime
import Hummingbird
import Logging

/// `POST /v1/bridge?project=NAME`: an app relays the raw messages its H5 pages sent through the JS
/// bridge, with its own context; the gateway does what the app SDK would (docs/PROTOCOL.md section 3):
/// reads each message, verifies where the page meant to send it and which page it is, rewrites it
/// onto the app's user and presets, and stores it. One result per message, in order.
package struct BridgeHandler: Sendable {
    let limits: UploadLimits
    let whitelists: WhitelistCache
    let ingest: ResolveAndStore
    let auth: IngestionAuth
    let enrichment: EnrichmentSources

    func handle(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let project = try requestProject(request.uri.queryParameters["project"].map(String.init))
        // Before the body is read: a refused relay costs no parsing.
        let grant = try await auth.check(project: project, token: request.uri.queryParameters["token"].map(String.init), logger: context.logger)
        let body = try await readRequestBody(request, limits: limits)
        let (app, messages) = try Self.parseRelay(body, limits: limits)
        let receivedAt = ResolveAndStore.now()
        let readings = messages.map { BridgeMessage.read($0, limits: limits) }
        let needsWhitelists = readings.contains { if case .success(.record) = $0 { true } else { false } }
        let projectWhitelists = needsWhitelists ? try await whitelists.whitelists(for: project) : ProjectWhitelists()
        let relay = PreparedRelay(
            messages: messages, readings: readings, app: app, project: project, whitelists: projectWhitelists,
            limits: limits, now: receivedAt, enrichment: enrichment.request(request, context: context, policy: grant.enrichment)
        )
        var results = relay.results
        let outcome = try await ingest.store(
            relay.accepted, rejected: relay.rejected, receivedAt: receivedAt, suppressed: [project: grant.suppressed], context: context)
        let stored = outcome.collected
        let duplicates = Set(stored.duplicateIndexes)
        let refused = Dictionary(stored.rejections.map { ($0.index, $0.reason) }, uniquingKeysWith: { first, _ in first })
        let dropped = Set(outcome.suppressedIndexes)
        for position in outcome.suppressedRejected {
            results[relay.rejectedMessages[position]] = MessageResult(index: relay.rejectedMessages[position], status: .suppressed)
        }
        for (position, index) in relay.acceptedMessages.enumerated() {
            if dropped.contains(position) {
                results[index] = MessageResult(index: index, status: .suppressed)
            } else if let reason = refused[position] {
                results[index] = MessageResult(index: index, status: .rejected, reason: reason.isEmpty ? ResolveAndStore.collectorRefusal : reason)
            } else {
                results[index] = MessageResult(index: index, status: duplicates.contains(position) ? .duplicate : .stored)
            }
        }
        let ignored = results.count(where: { $0.status == .ignored })
        context.logger.debug(
            "bridge.stored",
            metadata: [
                "bridge.project": "\(project)", "bridge.stored": "\(stored.stored)", "bridge.duplicates": "\(stored.duplicates)",
                "bridge.rejected": "\(stored.rejected)", "bridge.ignored": "\(ignored)",
            ])
        let answer = BridgeAnswer(
            stored: stored.stored, duplicates: stored.duplicates, rejected: stored.rejected, ignored: ignored, results: results,
            suppressed: outcome.suppressed == 0 ? nil : outcome.suppressed)
        return jsonResponse(.ok, bytes: answer.jsonBytes)
    }
}

extension BridgeHandler {
    /// Reads the relay body `{"app": {...}, "messages": ["...", ...]}`; a malformed one is a 400.
    /// Each message is its text's UTF-8 bytes, escapes resolved: read as bytes, never as a `String`
    /// (which would check the UTF-8 again and be copied back into bytes to be parsed).
    package static func parseRelay(_ body: [UInt8], limits: UploadLimits) throws -> (AppContext, [[UInt8]]) {
        let root = try UploadPayload.parseJSON(body, limits: limits, what: "the body")
        guard root.isObject else {
            throw ServiceError.badRequest(.invalidBody, #"the body is a JSON object {"app": {...}, "messages": ["...", ...]}"#)
        }
        let app: AppContext
        do {
            app = try AppContext(root["app"]?.value, limits: limits)
        } catch {
            throw ServiceError.badRequest(.invalidAppContext, error.reason)
        }
        guard let list = root["messages"], list.kind == .array else {
            throw ServiceError.badRequest(.invalidMessages, "messages must be an array of the strings the app received from the page")
        }
        let count = Int(list.entry.count)
        guard count <= limits.maxBridgeMessages else {
            throw ServiceError(.contentTooLarge, .tooManyMessages, "\(count) messages in one relay; the limit is \(limits.maxBridgeMessages)")
        }
        var messages: [[UInt8]] = []
        messages.reserveCapacity(count)
        for (index, item) in list.elements.enumerated() {
            guard item.kind == .string else {
                throw ServiceError.badRequest(.invalidMessages, "messages[\(index)] is not a string: relay each message exactly as the page sent it")
            }
            messages.append(item.textArray)
        }
        return (app, messages)
    }
}

/// A relay read, verified, rewritten and validated, before anything is stored. Messages are taken in
/// order, so a `$SignUp` logs the app in for the messages after it.
package struct PreparedRelay: Sendable {
    var results: [MessageResult]
    package var accepted: [NormalizedRecord] = []
    /// `acceptedMessages[i]` is the message `accepted[i]` came from.
    var acceptedMessages: [Int] = []
    package var rejected: [RejectedRecord] = []
    /// `rejectedMessages[i]` is the message `rejected[i]` came from.
    var rejectedMessages: [Int] = []

    package init(
        messages: [[UInt8]], readings: [Result<BridgeMessage, BridgeMessageProblem>], app: AppContext, project: String,
        whitelists: ProjectWhitelists, limits: UploadLimits, now: Int64, enrichment: RequestEnrichment? = nil
    ) {
        var app = app
        results = messages.indices.map { MessageResult(index: $0, status: .ignored) }
        let normalizer = RecordNormalizer(limits: limits)
        for (index, reading) in readings.enumerated() {
            let outcome: Result<NormalizedRecord, BridgeMessageProblem>
            switch reading {
            case .failure(let problem):
                outcome = .failure(problem)
            case .success(.ignored(let reason)):
                results[index].reason = reason
                continue
            case .success(.record(let record)):
                let fields = RecordFields(record)
                outcome = BridgeRewriter.rewrite(record, fields: fields, app: &app, project: project, whitelists: whitelists).flatMap { overrides in
                    normalizer.normalize(record, fields: fields, bridged: overrides, defaultProject: project, now: now, enrichment: enrichment)
                        .mapError { BridgeMessageProblem($0.reason) }
                }
            }
            switch outcome {
            case .success(let normalized):
                accepted.append(normalized)
                acceptedMessages.append(index)
            case .failure(let problem):
                results[index] = MessageResult(index: index, status: .rejected, reason: problem.reason)
                rejected.append(
                    RejectedRecord(project: project, reason: "bridge: \(problem.reason)", raw: String(decoding: messages[index], as: UTF8.self)))
                rejectedMessages.append(index)
            }
        }
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
        /// A record of an erased user (docs/PRIVACY.md); acknowledged and dropped.
        case suppressed
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
    /// Records of erased users, dropped; absent when none.
    var suppressed: Int? = nil
}

extension BridgeAnswer {
    /// The answer as JSON, keys sorted as `jsonResponse(encoding:)` writes them, by hand: a relay
    /// answers one result per message, which `JSONEncoder` makes costly.
    var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(80 + results.count * 40)
        var answer = JSONObjectWriter(&out)
        answer.int("duplicates", Int64(duplicates), &out)
        answer.int("ignored", Int64(ignored), &out)
        answer.int("rejected", Int64(rejected), &out)
        answer.array("results", count: results.count, &out) { position, out in
            let result = results[position]
            var object = JSONObjectWriter(&out)
            object.int("index", Int64(result.index), &out)
            object.string("reason", result.reason, &out)
            object.string("status", result.status.rawValue, &out)
            object.finish(&out)
        }
        answer.int("stored", Int64(stored), &out)
        answer.int("suppressed", suppressed.map(Int64.init), &out)
        answer.finish(&out)
        return out
    }
}
