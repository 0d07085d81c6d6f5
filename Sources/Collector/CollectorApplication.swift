import DatongContracts
import DatongPostgres
import DatongRuntime
import DatongStorage
import Foundation
import Hummingbird
import Logging
import Prometheus

/// Builds the collector: `POST /v1/batches` writes a batch and answers after commit.
/// - Parameter keepsCatalog: false only for the benchmark that measures what the catalog costs.
package func buildCollectorApplication(
    settings: CollectorSettings, runtime: ServiceRuntime, keepsCatalog: Bool = true
) -> some ApplicationProtocol {
    let database = ServiceDatabase(settings: settings.database, logger: runtime.logger)
    let partitions = EventPartitions(pool: database.pool)
    let catalog = keepsCatalog ? Catalog() : nil
    let store = PostgresEventStore(
        pool: database.pool, partitions: partitions, writers: settings.database.poolSize,
        maxRecordsPerTransaction: settings.maxRecordsPerTransaction, maxWaitingRecords: settings.maxWaitingRecords,
        catalog: catalog,
        waitingRecords: runtime.metrics.makeGauge(
            descriptor: MetricNameDescriptor(
                namespace: "datong", subsystem: "collector", metricName: "waiting_records", unitName: "",
                helpText: "Records waiting for a writer (group commit); at COLLECTOR_MAX_WAITING_RECORDS batches are refused with 503"))
    )
    let maintenance = PartitionMaintenance(
        partitions: partitions, settings: RetentionSettings(pool: database.pool), retentionDays: settings.retentionDays, logger: runtime.logger,
        registry: runtime.metrics
    )
    let replication = ReplicationMonitor(pool: database.pool, registry: runtime.metrics, logger: runtime.logger)
    let rollup: [ReportRollup] =
        settings.reportRollupIntervalMs > 0
        ? [ReportRollup(pool: database.pool, interval: .milliseconds(settings.reportRollupIntervalMs), registry: runtime.metrics, logger: runtime.logger)]
        : []
    // Reports run on connections of their own: a long one never holds one a batch waits for.
    let reportPool = PostgresPool(url: settings.database.url, maxConnections: ReportQueries.connections, logger: runtime.logger)
    return database.application(
        name: "collector",
        api: CollectorAPI(
            store: store, reads: PostgresStoredDataReads(pool: database.pool), serviceToken: ServiceToken(settings.server.serviceToken),
            maxBatchBytes: settings.maxBatchBytes, refusals: Refusals(registry: runtime.metrics),
            keyRule: StoredKeyRule(pool: database.pool).current, userData: UserData(pool: database.pool), retention: maintenance,
            notes: CatalogNotes(pool: database.pool), types: TypeSettings(pool: database.pool, catalog: catalog),
            replay: TypeRefusalReplay(pool: database.pool), timeZones: ReportTimeZones(pool: database.pool),
            reports: ReportQueries(pool: reportPool)
        ),
        schema: CollectorSchema.name, migrations: CollectorSchema.migrations, server: settings.server, runtime: runtime,
        services: [maintenance, replication, reportPool] + rollup
            + (catalog.map { [TypeChangeWatch(pool: database.pool, catalog: $0, logger: runtime.logger)] } ?? [])
    )
}

/// The collector's HTTP API: `POST /v1/batches` writes a batch and answers after the commit; the
/// reads behind the console's live view (newest events, rejected records, per-minute counts), which
/// config-service's admin API passes on. Every route takes the service token.
struct CollectorAPI: ServiceAPI {
    let store: any EventStore
    let reads: any StoredDataReads
    let serviceToken: ServiceToken
    let maxBatchBytes: Int
    /// Counts the refusals of batches inside a group, which the group's 200 does not.
    var refusals = Refusals(registry: nil)
    /// Which key the records get: the database's rule, read once it is migrated.
    var keyRule: @Sendable () async throws -> KeyRule = { .trackIDs }
    /// A person's rows, for erasures and exports (config-service runs them); nil: no such routes.
    var userData: UserData? = nil
    /// The partitions' retention, for its dry run; nil: no such route.
    var retention: PartitionMaintenance? = nil
    /// Display names and descriptions of the catalog's entries; nil: no such route.
    var notes: CatalogNotes? = nil
    /// Property types, validation rules and declarations an admin sets; nil: no such routes.
    var types: TypeSettings? = nil
    /// Replays records refused for a value of another type or an undeclared event; nil: no such route.
    var replay: TypeRefusalReplay? = nil
    /// The projects' time zones, for reports; nil: no such routes.
    var timeZones: ReportTimeZones? = nil
    /// The report functions (docs/ANALYTICS.md); nil: no such route.
    var reports: ReportQueries? = nil

    func register(on router: Router<DatongRequestContext>) {
        // Writes: a batch, or a group of batches the gateways folded together.
        router.post("/v1/batches", use: write)
        router.post("/v1/batch-groups", use: writeGroup)
        // The live data config-service passes on to the console.
        let projects = router.group("/v1/projects/:project")
        projects.get("events", use: events)
        projects.get("rejected", use: rejected)
        projects.get("ingest-counts", use: ingestCounts)
        projects.get("metadata", use: metadata)
        // The catalog's notes, types, rules and declarations, and replays of refused records.
        if let notes { projects.put("metadata/notes") { try await saveNotes(notes, $0, $1) } }
        if let types {
            projects.put("metadata/types") { try await changeType(types, apply: true, $0, $1) }
            projects.post("metadata/types/preview") { try await changeType(types, apply: false, $0, $1) }
            projects.put("metadata/settings") { try await setRules(types, $0, $1) }
            projects.post("metadata/declarations") { try await declare(types, $0, $1) }
        }
        if let replay { projects.post("rejected/replay") { try await replayRefused(replay, $0, $1) } }
        // Retention: its dry run, and a project's own months.
        if let retention {
            router.get("/v1/retention") { try await retentionPlan(retention, $0, $1) }
            projects.put("retention") { try await setRetention(retention, $0, $1) }
            projects.delete("retention") { try await clearRetention(retention, $0, $1) }
        }
        // The project's time zone, the days of its reports.
        if let timeZones {
            projects.get("time-zone") { try await timeZone(timeZones, $0, $1) }
            projects.put("time-zone") { try await setTimeZone(timeZones, $0, $1) }
        }
        // The reports: a function's rows for the console and `datongctl report`.
        if let reports { projects.post("reports/:kind") { try await report(reports, $0, $1) } }
        // A person's rows, for the erasures and exports config-service runs.
        if let userData {
            projects.post("erasures/step") { try await eraseStep(userData, $0, $1) }
            projects.post("user-data/export") { try await export(userData, $0, $1) }
        }
    }

    // MARK: Live data

    @Sendable func events(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let query = request.uri.queryParameters
        var events = EventQuery(
            project: project, event: try Self.text(query["event"], name: "event"),
            distinctID: try Self.text(query["distinct_id"], name: "distinct_id"),
            limit: try request.integerParameter("limit", in: ReadBounds.limits, default: ReadBounds.defaultLimit)
        )
        if let user = query["user_id"], !user.isEmpty {
            guard let id = Int64(user), id > 0 else { throw ServiceError.badRequest(.invalidValue, "user_id must be a user number (1, 2, …)") }
            events.userID = id
        }
        if let before = query["before"], !before.isEmpty {
            guard let cursor = EventCursor(String(before)) else {
                throw ServiceError.badRequest(.invalidCursor, "before must be the 'next' of an earlier page")
            }
            events.before = cursor
        }
        return jsonResponse(.ok, try await reads.events(events))
    }

    @Sendable func rejected(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let query = request.uri.queryParameters
        var before: Int64?
        if let text = query["before"], !text.isEmpty {
            guard let id = Int64(text), id > 0 else { throw ServiceError.badRequest(.invalidCursor, "before must be the 'next' of an earlier page") }
            before = id
        }
        let limit = try request.integerParameter("limit", in: ReadBounds.limits, default: ReadBounds.defaultLimit)
        return jsonResponse(.ok, try await reads.rejected(project: project, before: before, limit: limit))
    }

    @Sendable func ingestCounts(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let hours = try request.integerParameter("hours", in: ReadBounds.hours, default: ReadBounds.defaultHours)
        return jsonResponse(.ok, try await reads.ingestCounts(project: project, hours: hours))
    }

    @Sendable func metadata(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        return jsonResponse(.ok, try await reads.metadata(project: project))
    }

    // MARK: The catalog

    private func saveNotes(_ notes: CatalogNotes, _ request: Request, _ context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let list = try await decodeJSONBody([MetadataNote].self, from: request, limit: Self.maxNotesBytes)
        guard list.count <= MetadataNote.maxNotes else {
            throw ServiceError.badRequest(.invalidValue, "at most \(MetadataNote.maxNotes) notes a request")
        }
        for (index, note) in list.enumerated() {
            if let problem = note.problem { throw ServiceError.badRequest(.invalidValue, "notes[\(index)]: \(problem)") }
        }
        let (kept, removed) = try await notes.save(project: project, list)
        return try jsonResponse(.ok, encoding: ["kept": kept, "removed": removed])
    }

    /// A property's type set (`apply`) or previewed: what it does to the stored rows.
    private func changeType(_ types: TypeSettings, apply: Bool, _ request: Request, _ context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        return try jsonResponse(.ok, encoding: try await types.change(project: project, try await Self.typeChange(request), apply: apply))
    }

    private func setRules(_ types: TypeSettings, _ request: Request, _ context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let settings = try await decodeJSONBody(ProjectCatalogSettings.self, from: request, limit: 1024)
        try await types.set(project: project, settings)
        return try jsonResponse(.ok, encoding: settings)
    }

    private func declare(_ types: TypeSettings, _ request: Request, _ context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let declarations = try await decodeJSONBody(MetadataDeclarations.self, from: request, limit: Self.maxNotesBytes)
        if let problem = declarations.problem { throw ServiceError.badRequest(.invalidValue, problem) }
        return try jsonResponse(.ok, encoding: try await types.declare(project: project, declarations))
    }

    private func replayRefused(_ replay: TypeRefusalReplay, _ request: Request, _ context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let asked = try await decodeJSONBody(ReplayRequest.self, from: request, limit: 1024)
        guard ReplayRequest.limits.contains(asked.limit), asked.after >= 0, (asked.before ?? Int64.max) > asked.after else {
            throw ServiceError.badRequest(
                .invalidValue, "limit is \(ReplayRequest.limits) records, after at least 0, and before (if given) above after")
        }
        return try jsonResponse(.ok, encoding: try await replay.replay(project: project, asked, keys: try await keyRule(), store: store))
    }

    // MARK: Retention

    /// What retention would drop now (`?days=N` and `?project=P&months=N` try other settings);
    /// drops nothing.
    private func retentionPlan(_ retention: PartitionMaintenance, _ request: Request, _ context: DatongRequestContext) async throws -> Response {
        try serviceToken.check(request)
        var policy = try await retention.policy()
        policy.days = try request.integerParameter("days", in: 0...36_500, default: retention.retentionDays)
        let project = request.uri.queryParameters["project"].map(String.init)
        if project == nil, request.uri.queryParameters["months"] != nil {
            throw ServiceError.badRequest(.invalidValue, "months is one project's retention: name it with ?project=NAME")
        }
        if let project {
            guard ProjectName.isValid(project) else { throw ServiceError.invalidProject }
            // 0: the project without its own retention.
            let months = try request.integerParameter("months", in: 0...ProjectRetention.months.upperBound, default: 0)
            policy.months[project] = months == 0 ? nil : months
        }
        return try jsonResponse(.ok, encoding: try await retention.plan(policy, nowMillis: Int64(Date().timeIntervalSince1970 * 1000)))
    }

    private func setRetention(_ retention: PartitionMaintenance, _ request: Request, _ context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let setting = try await decodeJSONBody(RetentionSetting.self, from: request, limit: 1024)
        guard ProjectRetention.months.contains(setting.months) else {
            throw ServiceError.badRequest(.invalidValue, "months is \(ProjectRetention.months): this month and the N before are kept")
        }
        let kept = ProjectRetention(project: project, months: setting.months)
        try await retention.settings.set(kept)
        return try jsonResponse(.ok, encoding: kept)
    }

    private func clearRetention(_ retention: PartitionMaintenance, _ request: Request, _ context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        try await retention.settings.clear(project: project)
        return Response(status: .noContent)
    }

    // MARK: Reports

    private func timeZone(_ zones: ReportTimeZones, _ request: Request, _ context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        return try jsonResponse(.ok, encoding: try await zones.zone(of: project))
    }

    private func setTimeZone(_ zones: ReportTimeZones, _ request: Request, _ context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let setting = try await decodeJSONBody(TimeZoneSetting.self, from: request, limit: 1024)
        if let problem = ProjectTimeZone.shapeProblem(setting.timeZone) { throw ServiceError.badRequest(.invalidValue, problem) }
        let zone = ProjectTimeZone(project: project, timeZone: setting.timeZone)
        guard try await zones.set(zone) else {
            throw ServiceError.badRequest(
                .invalidValue, "timeZone '\(setting.timeZone)' is not a time zone PostgreSQL knows (an IANA name such as Asia/Shanghai)")
        }
        return try jsonResponse(.ok, encoding: zone)
    }

    private func report(_ reports: ReportQueries, _ request: Request, _ context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        guard let kind = context.parameters.get("kind").flatMap(ReportKind.init(rawValue:)) else {
            throw ServiceError(
                .notFound, .unknownReport, "no such report; the reports are \(ReportKind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let body = try await collectBody(request, limit: ReportKind.maxBodyBytes)
        let answer = try await reports.run(kind, project: project, body: Array(buffer: body))
        return Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: answer)))
    }

    // MARK: A person's rows

    private func eraseStep(_ userData: UserData, _ request: Request, _ context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let step = try await decodeJSONBody(CollectorErasureStep.self, from: request, limit: Self.maxSubjectBytes)
        guard CollectorErasureStep.limits.contains(step.limit), step.rejectedAfter >= 0 else {
            throw ServiceError.badRequest(.invalidValue, "limit is \(CollectorErasureStep.limits) rows and rejectedAfter at least 0")
        }
        return try jsonResponse(.ok, encoding: try await userData.eraseStep(project: project, step))
    }

    private func export(_ userData: UserData, _ request: Request, _ context: DatongRequestContext) async throws -> Response {
        let project = try authorize(request, context)
        let subject = try await decodeJSONBody(ErasureSubject.self, from: request, limit: Self.maxSubjectBytes)
        return Response(
            status: .ok, headers: [.contentType: "application/x-ndjson; charset=utf-8"],
            body: ResponseBody { [logger = context.logger] writer in
                // Once the 200 is sent a failure can only end the stream early: without its
                // last line ({"end": true}) the reader knows the export is not whole.
                do {
                    try await userData.export(project: project, subject: subject) { lines in
                        try await writer.write(ByteBuffer(string: lines))
                    }
                } catch {
                    logger.error("export.failed", metadata: ["project": "\(project)", "error": "\(String(reflecting: error))"])
                    try await writer.write(ByteBuffer(string: #"{"error":"export_failed","message":"the export stopped early; ask again"}"# + "\n"))
                }
                try await writer.finish(nil)
            })
    }

    private static func typeChange(_ request: Request) async throws -> PropertyTypeChange {
        let change = try await decodeJSONBody(PropertyTypeChange.self, from: request, limit: 4096)
        if let problem = change.problem { throw ServiceError.badRequest(.invalidValue, problem) }
        return change
    }

    /// An erasure's or export's subject: at most `ErasureSubject`'s ids, each at most 1 KiB.
    static let maxSubjectBytes = 16 << 20
    /// A list of notes (a whole project's, as `datongctl metadata import` sends it) in bytes.
    static let maxNotesBytes = 16 << 20

    /// Checks the service token and the project name; returns the project.
    private func authorize(_ request: Request, _ context: DatongRequestContext) throws -> String {
        try serviceToken.check(request)
        return try context.project()
    }

    /// An optional filter: absent or empty is no filter; at most 1024 bytes, no NUL.
    private static func text(_ raw: Substring?, name: String) throws -> String? {
        guard let raw, !raw.isEmpty else { return nil }
        guard raw.utf8.count <= 1024, !raw.utf8.contains(0) else {
            throw ServiceError.badRequest(.invalidValue, "\(name) must be 1 to 1024 bytes without NUL")
        }
        return String(raw)
    }

    // MARK: Writes

    @Sendable func write(_ request: Request, context: DatongRequestContext) async throws -> Response {
        try serviceToken.check(request)
        let body = try await collectBody(request, limit: maxBatchBytes)
        let keys = try await keyRule()
        let batch: IncomingBatch
        do {
            batch = try IncomingBatch(jsonBytes: Array(body.readableBytesView), keys: keys)
        } catch {
            throw ServiceError.badRequest(.invalidBody, "the batch does not match the contract: \(error.message)")
        }
        let result = try await write(batch, logger: context.logger)
        return Response(
            status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: result.jsonBytes))
        )
    }

    /// `POST /v1/batch-groups`: several uploads' batches, which the group commit folds into shared
    /// transactions; each batch is answered as it would be alone, in order, and one refused (not
    /// a batch, or not written) costs the others nothing.
    @Sendable func writeGroup(_ request: Request, context: DatongRequestContext) async throws -> Response {
        try serviceToken.check(request)
        let body = try await collectBody(request, limit: maxBatchBytes)
        let keys = try await keyRule()
        let batches: [Result<IncomingBatch, ContractDecodingError>]
        do {
            batches = try IncomingBatch.group(jsonBytes: Array(body.readableBytesView), keys: keys)
        } catch {
            throw ServiceError.badRequest(.invalidBody, "the group does not match the contract: \(error.message)")
        }
        let logger = context.logger
        let outcomes = await withTaskGroup(of: (Int, CollectOutcome).self) { group in
            for (index, batch) in batches.enumerated() {
                group.addTask {
                    do {
                        let batch = try batch.mapError { ServiceError.badRequest(.invalidBody, "the batch does not match the contract: \($0.message)") }.get()
                        return (index, .written(try await write(batch, logger: logger)))
                    } catch {
                        // What the batch would have been answered alone.
                        let answer = ErrorMiddleware.answer(for: error, logger: logger) as? ServiceError
                        if let answer { refusals.count(answer) }
                        return (
                            index,
                            .refused(
                                status: Int(answer?.status.code ?? 500), error: answer?.code.rawValue ?? ErrorCode.internalError.rawValue,
                                message: answer?.message ?? "the batch failed unexpectedly; it is logged with its request id"
                            )
                        )
                    }
                }
            }
            var outcomes = [CollectOutcome?](repeating: nil, count: batches.count)
            for await (index, outcome) in group { outcomes[index] = outcome }
            return outcomes.map { $0! }
        }
        return Response(
            status: .ok, headers: [.contentType: "application/json"],
            body: .init(byteBuffer: ByteBuffer(bytes: CollectGroupResult(outcomes: outcomes).jsonBytes))
        )
    }

    /// Writes one batch and answers after the commit, positions as sent.
    private func write(_ batch: IncomingBatch, logger: Logger) async throws -> CollectResult {
        if let problem = batch.problem {
            throw ServiceError.badRequest(.invalidBatch, problem)
        }
        let result = try await store.write(batch)
        logger.debug(
            "batch.committed",
            metadata: [
                "batch.stored": "\(result.stored)", "batch.duplicates": "\(result.duplicates)", "batch.rejected": "\(result.rejected)",
            ])
        return result
    }
}
