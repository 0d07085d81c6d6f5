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

    func handle(_ request: Request, context: DatongRequestContext, mode: Mode) async throws -> Response {
        let body = try await readRequestBody(request, limits: limits)
        let receivedAt = ResolveAndStore.now()
        let parameters = FormParameters(query: request.uri.query, body: body)
        // Before any decoding: a refused upload costs no base64, gunzip, decryption or parsing.
        let project = try requestProject(parameters["project"])
        let grant = try await auth.check(project: project, token: parameters["token"], logger: context.logger)
        let enrichment = self.enrichment.request(request, context: context, policy: grant.enrichment)
        var keys: ProjectKeys?
        if UploadPayload.isEncrypted(parameters) {
            // A request that can never succeed is refused first, whatever the keys.
            guard let data = parameters["data_list"] ?? parameters["data"], !data.isEmpty else {
                throw ServiceError.badRequest(.missingData, "the request has no data or data_list parameter")
            }
            // Never a status the SDK deletes the batch for: without keys the answer is a 503.
            guard keyring.canDecrypt else {
                context.logger.error("encryption.no_master_key")
                throw ServiceError.unavailable(
                    .encryptionUnavailable,
                    "this gateway has no ENCRYPTION_MASTER_KEY, so it cannot open encrypted payloads; the SDK keeps the batch and retries")
            }
            keys = try await keyring.keys(for: project, logger: context.logger)
        }
        var upload = try PreparedUpload(parameters: parameters, project: project, limits: limits, now: receivedAt, keys: keys, enrichment: enrichment)
        if !upload.unknownPKVs.isEmpty {
            // A key made a moment ago: read the keys again at once, then decode again.
            keys = try await keyring.keys(for: project, fresh: true, logger: context.logger)
            upload = try PreparedUpload(parameters: parameters, project: project, limits: limits, now: receivedAt, keys: keys, enrichment: enrichment)
        }
        if upload.bots > 0 { botsDropped?.increment(by: Int64(upload.bots)) }
        try await upload.checkRecordProjects(auth, enrichment: enrichment, limits: limits, now: receivedAt, logger: context.logger)
        if upload.hasRelayedRecords {
            upload.checkRelayedPages(try await whitelists.whitelists(for: upload.project))
        }
        var problems = upload.problems
        // Records may name projects of their own (server SDKs): each is checked against its list.
        var suppression = [project: grant.suppressed]
        for record in upload.accepted {
            guard let other = record.identity?.project, other != project, suppression[other] == nil else { continue }
            suppression[other] = try await auth.suppressed(other, logger: context.logger)
        }

        if mode == .debug, request.headers[.dryRun]?.lowercased() == "true" {
            return try debugAnswer(problems)
        }

        let outcome = try await ingest.store(
            upload.accepted, rejected: upload.rejected, receivedAt: receivedAt, suppressed: suppression, context: context)
        let result = outcome.collected
        if !outcome.suppressedRejected.isEmpty {
            // Refused, but of an erased user: answered as suppressed, not as a problem.
            let dropped = Set(outcome.suppressedRejected.compactMap { upload.rejectedIndexes[$0] })
            problems.removeAll { dropped.contains($0.index) }
        }
        if !result.rejectedIndexes.isEmpty {
            problems += result.rejections.filter { upload.acceptedIndexes.indices.contains($0.index) }.map {
                RecordProblem(index: upload.acceptedIndexes[$0.index], reason: $0.reason.isEmpty ? ResolveAndStore.collectorRefusal : $0.reason)
            }
            problems.sort { $0.index < $1.index }
        }
        context.logger.debug(
            "upload.stored",
            metadata: [
                "upload.project": "\(upload.project)", "upload.stored": "\(result.stored)",
                "upload.duplicates": "\(result.duplicates)", "upload.rejected": "\(result.rejected)",
            ])
        switch mode {
        case .debug:
            return try debugAnswer(problems)
        case .beacon:
            return Response(
                status: .ok,
                headers: [.contentType: "image/gif", .cacheControl: "no-store"],
                body: .init(byteBuffer: ByteBuffer(bytes: Self.pixel))
            )
        case .upload:
            return jsonResponse(
                .ok,
                bytes: UploadAnswer(
                    stored: result.stored, duplicates: result.duplicates, rejected: result.rejected, problems: problems,
                    suppressed: outcome.suppressed == 0 ? nil : outcome.suppressed, bots: upload.bots == 0 ? nil : upload.bots
                ).jsonBytes)
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

/// One refused record of an upload: its position in `data_list` and why.
struct RecordProblem: Codable, Sendable, Equatable {
    let index: Int
    let reason: String
}

/// The answer to an upload: every record is accounted for.
struct UploadAnswer: Codable, Sendable, Equatable {
    let stored: Int
    let duplicates: Int
    let rejected: Int
    let problems: [RecordProblem]
    /// Records of erased users, dropped (docs/PRIVACY.md); absent when none.
    var suppressed: Int? = nil
    /// Records of crawlers, dropped as the project asks (`bots: drop`); absent when none.
    var bots: Int? = nil
}

extension UploadAnswer {
    /// The answer as JSON, keys sorted as `jsonResponse(encoding:)` writes them, by hand: one is
    /// written for every upload, and `JSONEncoder` costs more than the writing itself.
    var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64 + problems.count * 64)
        var answer = JSONObjectWriter(&out)
        answer.int("bots", bots.map(Int64.init), &out)
        answer.int("duplicates", Int64(duplicates), &out)
        answer.array("problems", count: problems.count, &out) { position, out in
            var object = JSONObjectWriter(&out)
            object.int("index", Int64(problems[position].index), &out)
            object.string("reason", problems[position].reason, &out)
            object.finish(&out)
        }
        answer.int("rejected", Int64(rejected), &out)
        answer.int("stored", Int64(stored), &out)
        answer.int("suppressed", suppressed.map(Int64.init), &out)
        answer.finish(&out)
        return out
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
    package var accepted: [NormalizedRecord] = []
    /// `acceptedIndexes[i]` is the position in `data_list` of `accepted[i]`.
    var acceptedIndexes: [Int] = []
    package var rejected: [RejectedRecord] = []
    /// `rejectedIndexes[i]` is the position in `data_list` of `rejected[i]`; nil for an envelope
    /// that could not be opened.
    var rejectedIndexes: [Int?] = []
    var problems: [RecordProblem] = []
    /// The text of accepted records that name another project than the request's, by position:
    /// kept in case that project refuses them.
    private var foreignRecords: [Int: JSONRef] = [:]
    /// Accepted records an app relayed from an H5 page (`_hybrid_h5: true`), by position, for the H5
    /// domain whitelist (read only when the project has one).
    private var relayedRecords: [Int: JSONRef] = [:]

    var hasRelayedRecords: Bool { !relayedRecords.isEmpty }

    /// pkvs of envelopes the given keys could not open for want of the key.
    private(set) var unknownPKVs: Set<Int> = []
    /// Records of crawlers dropped as the project asks (`EnrichmentPolicy.bots`).
    private(set) var bots = 0

    /// Decodes the form parameters and payload and validates each record; a request that can never
    /// succeed throws a `ServiceError`, a bad record is kept as rejected with its reason.
    package init(
        query: String?, body: [UInt8], limits: UploadLimits, now: Int64, keys: ProjectKeys? = nil, enrichment: RequestEnrichment? = nil
    ) throws {
        let parameters = FormParameters(query: query, body: body)
        try self.init(
            parameters: parameters, project: try requestProject(parameters["project"]), limits: limits, now: now, keys: keys, enrichment: enrichment)
    }

    /// `project` is the request's, as `requestProject` read it from `parameters` (once, before
    /// anything was decoded).
    init(parameters: FormParameters, project: String, limits: UploadLimits, now: Int64, keys: ProjectKeys?, enrichment: RequestEnrichment?) throws {
        self.project = project
        token = parameters["token"].flatMap { $0.isEmpty ? nil : $0 }
        let payload = try UploadPayload.decode(parameters, limits: limits, project: project, keys: keys)
        unknownPKVs = payload.unknownPKVs
        rejected = payload.undecryptable
        rejectedIndexes = Array(repeating: nil, count: rejected.count)
        let values = payload.records
        let normalizer = RecordNormalizer(limits: limits)
        accepted.reserveCapacity(values.count)
        for (index, value) in values.enumerated() {
            switch normalizer.normalize(value, defaultProject: project, now: now, enrichment: enrichment) {
            // A record of another project goes by that project's settings (`checkRecordProjects`).
            case .success(let record) where record.isBot && enrichment?.policy.bots == .drop && record.collect.project == project:
                bots += 1
            case .success(let record):
                accepted.append(record)
                acceptedIndexes.append(index)
                if record.collect.project != project { foreignRecords[index] = value }
                if record.collect.hybridH5 { relayedRecords[index] = value }
            case .failure(let rejection):
                rejected.append(RejectedRecord(project: rejection.project, reason: rejection.reason, raw: value.rawText))
                rejectedIndexes.append(index)
                problems.append(RecordProblem(index: index, reason: rejection.reason))
            }
        }
    }
}

extension PreparedUpload {
    /// Records that name a project of their own must name one that exists, with its token (theirs,
    /// or the request's); the others are kept as rejected with the reason, under the project they
    /// name when it exists (its operators are the ones to see a wrong token), else the request's.
    /// An accepted one goes by its own project's enrichment settings: made again with them when
    /// they are not the request's project's (a project that stores no `$ip` stores none, whichever
    /// project's URL its records came through).
    mutating func checkRecordProjects(
        _ auth: IngestionAuth, enrichment: RequestEnrichment? = nil, limits: UploadLimits = UploadLimits(), now: Int64 = 0, logger: Logger
    ) async throws {
        guard !foreignRecords.isEmpty else { return }
        var refusals: [Int: (reason: String, raw: String)] = [:]
        var filedUnder: [Int: String] = [:]
        // Crawlers' records their own project drops: counted, not refused.
        var droppedBots: Set<Int> = []
        for (position, index) in acceptedIndexes.enumerated() {
            guard let value = foreignRecords[index] else { continue }
            let record = accepted[position]
            if let refusal = try await auth.access(record.collect.project, logger: logger)
                .refusal(project: record.collect.project, token: record.token ?? token)
            {
                refusals[index] = (refusal.message, value.rawText)
                if refusal.code != .unknownProject { filedUnder[index] = record.collect.project }
                continue
            }
            guard let enrichment else { continue }
            let policy = try await auth.enrichment(record.collect.project, logger: logger)
            var isBot = record.isBot
            // Read with the same limits and clock, it normalizes again; only its presets differ.
            if policy != enrichment.policy,
                case .success(let again) = RecordNormalizer(limits: limits)
                    .normalize(value, defaultProject: project, now: now, enrichment: enrichment.with(policy: policy))
            {
                accepted[position] = again
                isBot = again.isBot
            }
            if isBot, policy.bots == .drop { droppedBots.insert(index) }
        }
        if !droppedBots.isEmpty {
            bots += droppedBots.count
            let kept = zip(accepted, acceptedIndexes).filter { !droppedBots.contains($0.1) }
            accepted = kept.map(\.0)
            acceptedIndexes = kept.map(\.1)
        }
        refuse(refusals, project: project, filedUnder: filedUnder)
    }

    /// Records an app SDK relayed from an H5 page must come from a page the project's H5 domain
    /// whitelist allows, as they must in a relay; the others are kept as rejected with the reason.
    mutating func checkRelayedPages(_ whitelists: ProjectWhitelists) {
        guard whitelists.restrictsPages else { return }
        var refusals: [Int: (reason: String, raw: String)] = [:]
        for (index, value) in relayedRecords {
            if let problem = whitelists.pageProblem(pageURL: value["properties"]?["$url"]?.stringValue, project: project) {
                refusals[index] = ("bridge: \(problem)", value.rawText)
            }
        }
        refuse(refusals, project: project)
    }

    /// Moves the accepted records at the positions of `refusals` to the rejected ones, each kept
    /// under `project` unless `filedUnder` names another for it.
    private mutating func refuse(_ refusals: [Int: (reason: String, raw: String)], project: String, filedUnder: [Int: String] = [:]) {
        guard !refusals.isEmpty else { return }
        var kept: [NormalizedRecord] = []
        var keptIndexes: [Int] = []
        for (record, index) in zip(accepted, acceptedIndexes) {
            if let refusal = refusals[index] {
                rejected.append(RejectedRecord(project: filedUnder[index] ?? project, reason: refusal.reason, raw: refusal.raw))
                rejectedIndexes.append(index)
                problems.append(RecordProblem(index: index, reason: refusal.reason))
            } else {
                kept.append(record)
                keptIndexes.append(index)
            }
        }
        accepted = kept
        acceptedIndexes = keptIndexes
    }
}

/// The project a request names (`?project=`, missing or empty = `default`); an invalid name is a 400.
func requestProject(_ value: String?) throws -> String {
    let project = value.flatMap { $0.isEmpty ? nil : $0 } ?? "default"
    guard ProjectName.isValid(project) else { throw ServiceError.invalidProject }
    return project
}
