import DatongContracts
import DatongJSON
import DatongRuntime
import Foundation
import Hummingbird
import Logging
import Prometheus

/// Handles SDK uploads (docs/PROTOCOL.md section 1): authenticate, decode once, validate each
/// record, resolve every record's user in one identity-service call, store the batch through the
/// collector, and answer only after the collector says it is committed.
struct UploadHandler: Sendable {
    let limits: UploadLimits
    let ingest: ResolveAndStore
    let auth: IngestionAuth
    /// The H5 domain whitelists, which an app's upload of relayed records meets as a relay does.
    let whitelists: WhitelistCache
    /// The projects' encryption keys, for `gzip=9` / `gzip=13` uploads.
    let keyring: EncryptionKeyring
    let enrichment: EnrichmentSources
    /// `datong_gateway_bot_records_dropped_total`.
    var botsDropped: Counter?

    /// A 1×1 transparent GIF, the answer to image beacons.
    static let pixel: [UInt8] = [
        0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x01, 0x00, 0x01, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0xFF, 0xFF, 0xFF, 0x21, 0xF9, 0x04, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2C, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x00, 0x01, 0x00, 0x00, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3B,
    ]

    enum Mode: Sendable {
        case upload
        case beacon
        case debug
    }

    /// Authenticates, decodes once, checks every record, stores the accepted ones and answers once
    /// the collector committed them.
    func handle(_ request: Request, context: DatongRequestContext, mode: Mode) async throws -> Response {
        let body = try await readRequestBody(request, limits: limits)
        let receivedAt = ResolveAndStore.now()
        let parameters = FormParameters(query: request.uri.query, body: body)
        // Before any decoding: a refused upload costs no base64, gunzip, decryption or parsing.
        let project = try requestProject(parameters["project"])
        let grant = try await auth.check(project: project, token: parameters["token"], logger: context.logger)
        let enrichment = self.enrichment.request(request, context: context, policy: grant.enrichment)
        let payload = try await decode(parameters, project: project, logger: context.logger)
        var upload = try await prepare(payload, parameters, project: project, receivedAt: receivedAt, enrichment: enrichment, logger: context.logger)
        let suppression = try await suppressions(of: upload, grant: grant, logger: context.logger)
        if mode == .debug, request.headers[.dryRun]?.lowercased() == "true" {
            return try debugAnswer(upload.slots.problems)
        }
        let collected = try await ingest.store(&upload.slots, receivedAt: receivedAt, suppressed: suppression, context: context)
        return try respond(upload.slots.answer(collected), project: upload.project, mode: mode, logger: context.logger)
    }

    /// The upload's records: decrypted first when the SDK encrypted them (`gzip=9` / `gzip=13`).
    private func decode(_ parameters: FormParameters, project: String, logger: Logger) async throws -> DecodedPayload {
        guard UploadPayload.isEncrypted(parameters) else {
            return try UploadPayload.decode(parameters, limits: limits, project: project, keys: nil)
        }
        // A request that can never succeed is refused first, whatever the keys.
        guard let data = parameters["data_list"] ?? parameters["data"], !data.isEmpty else {
            throw ServiceError.badRequest(.missingData, "the request has no data or data_list parameter")
        }
        // Never a status the SDK deletes the batch for: without keys the answer is a 503.
        guard keyring.canDecrypt else {
            logger.error("encryption.no_master_key")
            throw ServiceError.unavailable(
                .encryptionUnavailable,
                "this gateway has no ENCRYPTION_MASTER_KEY, so it cannot open encrypted payloads; the SDK keeps the batch and retries")
        }
        let envelopes = try EncryptedPayload.Envelopes(parameters, limits: limits)
        var keys = try await keyring.keys(for: project, logger: logger)
        if !envelopes.pkvs.allSatisfy(keys.knows) {
            // A key made a moment ago: read the keys again at once, before opening any envelope.
            keys = try await keyring.keys(for: project, fresh: true, logger: logger)
        }
        return try envelopes.open(with: keys, project: project, limits: limits)
    }

    /// Every record checked: its own, its project's (a server SDK's record may name one), the H5
    /// domain whitelist for records an app relayed; crawlers' records dropped as the project asks.
    private func prepare(
        _ payload: DecodedPayload, _ parameters: FormParameters, project: String, receivedAt: Int64, enrichment: RequestEnrichment?,
        logger: Logger
    ) async throws -> PreparedUpload {
        var upload = PreparedUpload(payload, parameters: parameters, project: project, limits: limits, now: receivedAt, enrichment: enrichment)
        try await upload.checkRecordProjects(auth, enrichment: enrichment, limits: limits, now: receivedAt, logger: logger)
        if upload.hasRelayedRecords {
            upload.checkRelayedPages(try await whitelists.whitelists(for: upload.project))
        }
        let bots = upload.slots.count(.bot)
        if bots > 0 { botsDropped?.increment(by: Int64(bots)) }
        return upload
    }

    /// The erased users' ids of each project the upload's accepted records belong to.
    private func suppressions(of upload: PreparedUpload, grant: IngestionAuth.Grant, logger: Logger) async throws -> [String: SuppressedIDs] {
        var suppression = [upload.project: grant.suppressed]
        for slot in upload.slots.all.indices where upload.namesOtherProjects && upload.slots[slot].fate == .accepted {
            guard let other = upload.slots[recordOf: slot].identity?.project, suppression[other] == nil else { continue }
            suppression[other] = try await auth.suppressed(other, logger: logger)
        }
        return suppression
    }

    /// The answer in the form the request's path asks for.
    private func respond(_ answer: IntakeAnswer, project: String, mode: Mode, logger: Logger) throws -> Response {
        logger.debug(
            "upload.stored",
            metadata: [
                "upload.project": "\(project)", "upload.stored": "\(answer.stored)",
                "upload.duplicates": "\(answer.duplicates)", "upload.rejected": "\(answer.rejected)",
            ])
        switch mode {
        case .debug:
            return try debugAnswer(answer.problems)
        case .beacon:
            return Response(
                status: .ok,
                headers: [.contentType: "image/gif", .cacheControl: "no-store"],
                body: .init(byteBuffer: ByteBuffer(bytes: Self.pixel))
            )
        case .upload:
            return jsonResponse(.ok, bytes: UploadAnswer(answer).jsonBytes)
        }
    }

    /// Debug mode answers `{}` when every record is valid, otherwise 400 naming each problem.
    private func debugAnswer(_ problems: [RecordProblem]) throws -> Response {
        guard !problems.isEmpty else { return jsonResponse(.ok, "{}") }
        return try jsonResponse(
            .badRequest,
            encoding: DebugProblems(
                error: "invalid_records",
                message: problems.map { "record \($0.index): \($0.reason)" }.joined(separator: "; "),
                problems: problems
            ))
    }
}

private struct DebugProblems: Encodable {
    let error: String
    let message: String
    let problems: [RecordProblem]
}

/// An upload decoded and validated, before anything is stored: the gateway's hot path, parsed once.
package struct PreparedUpload: Sendable {
    let project: String
    /// The request's ingestion token (`token=`).
    let token: String?
    /// Every record of the upload, in the order sent, with what became of it so far.
    var slots: RecordSlots
    /// Whether an accepted record names another project than the request's (`checkRecordProjects`).
    private(set) var namesOtherProjects = false
    /// Whether an accepted record was relayed by an app from an H5 page (`_hybrid_h5: true`), to be
    /// checked against the H5 domain whitelist (read only when the project has one).
    private(set) var hasRelayedRecords = false

    package var accepted: [NormalizedRecord] { slots.accepted }
    package var rejected: [RejectedRecord] { slots.rejected }
    var problems: [RecordProblem] { slots.problems }

    /// Decodes the form parameters and payload and validates each record; a request that can never
    /// succeed throws a `ServiceError`, a bad record is kept as rejected with its reason.
    package init(
        query: String?, body: [UInt8], limits: UploadLimits, now: Int64, keys: ProjectKeys? = nil, enrichment: RequestEnrichment? = nil
    ) throws {
        let parameters = FormParameters(query: query, body: body)
        let project = try requestProject(parameters["project"])
        self.init(
            try UploadPayload.decode(parameters, limits: limits, project: project, keys: keys), parameters: parameters, project: project,
            limits: limits, now: now, enrichment: enrichment)
    }

    /// Validates each record of `payload`, decoded from `parameters`; `project` is the request's,
    /// as `requestProject` read it (once, before anything was decoded).
    init(_ payload: DecodedPayload, parameters: FormParameters, project: String, limits: UploadLimits, now: Int64, enrichment: RequestEnrichment?) {
        self.project = project
        token = parameters["token"].flatMap { $0.isEmpty ? nil : $0 }
        slots = RecordSlots(capacity: payload.undecryptable.count + payload.records.count)
        for envelope in payload.undecryptable {
            slots.append(RecordSlot(index: nil, fate: .refused(kept: envelope, answer: nil)))
        }
        let normalizer = RecordNormalizer(limits: limits)
        for (index, value) in payload.records.enumerated() {
            switch normalizer.normalize(value, defaultProject: project, now: now, enrichment: enrichment) {
            // A record of another project goes by that project's settings (`checkRecordProjects`).
            case .success(let record) where record.isBot && enrichment?.policy.bots == .drop && record.collect.project == project:
                slots.append(RecordSlot(index: index, fate: .bot))
            case .success(let record):
                let foreign = record.collect.project != project
                namesOtherProjects = namesOtherProjects || foreign
                hasRelayedRecords = hasRelayedRecords || record.collect.hybridH5
                slots.accept(record, at: index, sent: foreign || record.collect.hybridH5 ? value : nil)
            case .failure(let refusal):
                var slot = RecordSlot(index: index, fate: .accepted)
                slot.refuse(project: refusal.project ?? project, reason: refusal.reason, raw: value.rawText)
                slots.append(slot)
            }
        }
    }
}

extension PreparedUpload {
    /// Records that name a project of their own must name one that exists, with its token (theirs,
    /// or the request's); the others are refused with the reason, kept under the project they
    /// name when it exists (its operators are the ones to see a wrong token), else the request's.
    /// An accepted one goes by its own project's enrichment settings: made again with them when
    /// they are not the request's project's (a project that stores no `$ip` stores none, whichever
    /// project's URL its records came through).
    mutating func checkRecordProjects(
        _ auth: IngestionAuth, enrichment: RequestEnrichment? = nil, limits: UploadLimits = UploadLimits(), now: Int64 = 0, logger: Logger
    ) async throws {
        guard namesOtherProjects else { return }
        for slot in slots.all.indices {
            guard let value = slots[slot].sent, let record = slots.record(of: slot), record.collect.project != project else { continue }
            let other = record.collect.project
            if let refusal = try await auth.access(other, logger: logger).refusal(project: other, token: record.token ?? token) {
                slots[slot].refuse(project: refusal.code == .unknownProject ? project : other, reason: refusal.message, raw: value.rawText)
                continue
            }
            guard let enrichment else { continue }
            let policy = try await auth.enrichment(other, logger: logger)
            var isBot = record.isBot
            // Read with the same limits and clock, it normalizes again; only its presets differ.
            if policy != enrichment.policy,
                case .success(let again) = RecordNormalizer(limits: limits)
                    .normalize(value, defaultProject: project, now: now, enrichment: enrichment.with(policy: policy))
            {
                slots[recordOf: slot] = again
                isBot = again.isBot
            }
            if isBot, policy.bots == .drop { slots[slot].drop(as: .bot) }
        }
    }

    /// Records an app SDK relayed from an H5 page must come from a page the project's H5 domain
    /// whitelist allows, as they must in a relay; the others are refused with the reason.
    mutating func checkRelayedPages(_ whitelists: ProjectWhitelists) {
        guard whitelists.restrictsPages else { return }
        for slot in slots.all.indices where slots[slot].fate == .accepted && slots[recordOf: slot].collect.hybridH5 {
            guard let value = slots[slot].sent else { continue }
            if let problem = whitelists.pageProblem(pageURL: value["properties"]?["$url"]?.stringValue, project: project) {
                slots[slot].refuse(project: project, reason: "bridge: \(problem)", raw: value.rawText)
            }
        }
    }
}

/// The project a request names (`?project=`, missing or empty = `default`); an invalid name is a 400.
func requestProject(_ value: String?) throws -> String {
    let project = value.flatMap { $0.isEmpty ? nil : $0 } ?? "default"
    guard ProjectName.isValid(project) else { throw ServiceError.invalidProject }
    return project
}
