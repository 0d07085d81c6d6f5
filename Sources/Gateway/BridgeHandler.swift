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
        var slots = relay.slots
        let collected = try await ingest.store(&slots, receivedAt: receivedAt, suppressed: [project: grant.suppressed], context: context)
        let answer = BridgeAnswer(slots.answer(collected))
        context.logger.debug(
            "bridge.stored",
            metadata: [
                "bridge.project": "\(project)", "bridge.stored": "\(answer.stored)", "bridge.duplicates": "\(answer.duplicates)",
                "bridge.rejected": "\(answer.rejected)", "bridge.ignored": "\(answer.ignored)",
            ])
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
    /// One slot per message, in the order sent.
    var slots: RecordSlots

    package var accepted: [NormalizedRecord] { slots.accepted }
    package var rejected: [RejectedRecord] { slots.rejected }
    /// Each message's result before anything is stored (a record accepted so far shows as stored).
    var results: [MessageResult] { slots.answer(CollectResult(stored: 0, duplicates: 0, rejected: 0)).results }

    package init(
        messages: [[UInt8]], readings: [Result<BridgeMessage, RecordRefusal>], app: AppContext, project: String,
        whitelists: ProjectWhitelists, limits: UploadLimits, now: Int64, enrichment: RequestEnrichment? = nil
    ) {
        var app = app
        slots = RecordSlots(capacity: messages.count)
        let normalizer = RecordNormalizer(limits: limits)
        for (index, reading) in readings.enumerated() {
            let outcome: Result<NormalizedRecord, RecordRefusal>
            switch reading {
            case .failure(let refusal):
                outcome = .failure(refusal)
            case .success(.ignored(let reason)):
                slots.append(RecordSlot(index: index, fate: .ignored(reason: reason)))
                continue
            case .success(.record(let record)):
                let fields = RecordFields(record)
                outcome = BridgeRewriter.rewrite(record, fields: fields, app: &app, project: project, whitelists: whitelists).flatMap { overrides in
                    // Kept under the relay's project, whatever the page named (`refuse` below).
                    normalizer.normalize(record, fields: fields, bridged: overrides, defaultProject: project, now: now, enrichment: enrichment)
                }
            }
            switch outcome {
            case .success(let normalized):
                slots.accept(normalized, at: index, sent: nil)
            case .failure(let refusal):
                var slot = RecordSlot(index: index, fate: .accepted)
                slot.refuse(
                    project: project, reason: "bridge: \(refusal.reason)", raw: String(decoding: messages[index], as: UTF8.self), answer: refusal.reason)
                slots.append(slot)
            }
        }
    }
}
