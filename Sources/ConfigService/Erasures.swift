import AsyncHTTPClient
import DatongContracts
import DatongPostgres
import DatongRuntime
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOFoundationEssentialsCompat
import NIOHTTP1
import Prometheus
import ServiceLifecycle

/// A user's erasure as a job (docs/PRIVACY.md). Asking records the job, and the ids to suppress,
/// in one transaction; `ErasureRunner` then carries it out step by step, each step saved, so a
/// job cut off by a crash or a restart goes on where it stood, on any replica.
///
/// Steps: `identity` (after `notBefore`, once every gateway has read the suppression list)
/// forgets the users and ids in identity-service; `collector` removes the stored rows in batches
/// until the collector finds none; `done` writes the audit entry with the counts. When done, the
/// job keeps the user numbers and the counts; the ids it covered are gone from it (they remain
/// in the suppression list while suppressed).
struct ErasureStore: Sendable {
    let pool: PostgresPool

    /// A job a runner took, with what it needs to go on.
    struct Claimed: Sendable {
        let project: String
        let id: Int64
        let subject: ErasureSubject
        let state: String
        let collector: CollectorErasure
    }

    func create(
        project: String, requested: UserReference, subject: ErasureSubject, suppress: Bool, settleSeconds: Int, actor: String
    ) async throws -> ErasureJob {
        let requestedText = String(decoding: try JSONEncoder().encode(requested), as: UTF8.self)
        let subjectText = String(decoding: try JSONEncoder().encode(subject), as: UTF8.self)
        let id = try await pool.transaction { connection -> Int64 in
            let suppressed = try connection.query("SELECT count(*) FROM config.suppressions WHERE project = $1", [project]).scalar.flatMap(Int.init) ?? 0
            guard !suppress || suppressed + subject.identities.count <= Self.maxSuppressed else {
                throw ServiceError(
                    .conflict, .tooManySuppressed,
                    "project \(project) already suppresses \(suppressed) ids, and at most \(Self.maxSuppressed) can be; lift some first")
            }
            guard
                let id = try connection.query(
                    """
                    INSERT INTO config.erasures (project, requested, actor, suppress, subject, user_ids, identity_count, state, not_before)
                    VALUES ($1, $2::jsonb, $3, $4::boolean, $5::jsonb, $6::bigint[], $7::integer, 'identity', now() + make_interval(secs => $8::integer))
                    RETURNING erasure_id
                    """,
                    [
                        project, requestedText, actor, suppress ? "true" : "false", subjectText,
                        postgresBigintArray(subject.users), String(subject.identities.count),
                        String(suppress ? settleSeconds : 0),
                    ]
                ).scalar.flatMap(Int64.init)
            else { throw PostgresError.unexpectedResult("the erasure was not recorded") }
            if suppress {
                try connection.query(
                    """
                    INSERT INTO config.suppressions (project, key, value, erasure_id, created_by)
                    SELECT $1, key, value, $2::bigint, $3 FROM unnest($4::text[], $5::text[]) AS s(key, value)
                    ON CONFLICT DO NOTHING
                    """,
                    [project, String(id), actor, postgresTextArray(subject.identities.map(\.key)), postgresTextArray(subject.identities.map(\.value))]
                )
                try Self.bumpSuppressionVersion(project, on: connection)
            }
            try PostgresConfigStore.audit(
                actor, "user.erasure_requested", project: project,
                detail: "erasure \(id): \(subject.users.count) users, \(subject.identities.count) ids\(suppress ? ", suppressed" : "")", on: connection)
            return id
        }
        guard let job = try await job(project: project, id: id) else { throw PostgresError.unexpectedResult("the erasure vanished") }
        return job
    }

    /// Throws 404 `unknown_project` unless config-service knows `project`.
    func requireProject(_ project: String) async throws {
        let known = try await pool.withConnection { connection in
            try connection.query("SELECT 1 FROM config.projects WHERE name = $1", [project]).rows.count == 1
        }
        guard known else { throw ServiceError(.notFound, .unknownProject, "there is no project '\(project)'") }
    }

    func job(project: String, id: Int64) async throws -> ErasureJob? {
        try await pool.withConnection { connection in
            try connection.query(Self.jobSelect + " WHERE project = $1 AND erasure_id = $2", [project, String(id)]).rows.first.flatMap(Self.job)
        }
    }

    func jobs(project: String, limit: Int) async throws -> [ErasureJob] {
        try await pool.withConnection { connection in
            try connection.query(Self.jobSelect + " WHERE project = $1 ORDER BY erasure_id DESC LIMIT $2", [project, String(limit)])
                .rows.compactMap(Self.job)
        }
    }

    /// Seconds since the oldest erasure not done yet was asked for; 0 when every one is done.
    func oldestOpenSeconds() async throws -> Double {
        try await pool.withConnection { connection in
            let row = try connection.query(
                "SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8::text FROM config.erasures WHERE state <> 'done'"
            ).rows.first
            return row?[0].flatMap(Double.init) ?? 0
        }
    }

    /// Takes the oldest job that is due and that no runner holds, for `leaseSeconds`.
    func claim(leaseSeconds: Int) async throws -> Claimed? {
        try await pool.transaction { connection in
            guard
                let row = try connection.query(
                    """
                    UPDATE config.erasures SET lease_until = now() + make_interval(secs => $1::integer)
                    WHERE erasure_id = (
                        SELECT erasure_id FROM config.erasures
                        WHERE state <> 'done' AND not_before <= now() AND (lease_until IS NULL OR lease_until < now())
                        ORDER BY erasure_id LIMIT 1 FOR UPDATE SKIP LOCKED)
                    RETURNING project, erasure_id, subject::text, state, coalesce(collector_counts, '{}')::text
                    """,
                    [String(leaseSeconds)]
                ).rows.first,
                let project = row[0], let id = row[1].flatMap(Int64.init), let state = row[3],
                let subject = try? JSONDecoder().decode(ErasureSubject.self, from: Data((row[2] ?? "").utf8))
            else { return nil }
            let collector = (try? JSONDecoder().decode(CollectorErasure.self, from: Data((row[4] ?? "{}").utf8))) ?? CollectorErasure()
            return Claimed(project: project, id: id, subject: subject, state: state, collector: collector)
        }
    }

    func identityDone(_ id: Int64, _ counts: IdentityErasure) async throws {
        let text = String(decoding: try JSONEncoder().encode(counts), as: UTF8.self)
        try await pool.transaction { connection in
            try connection.query(
                "UPDATE config.erasures SET state = 'collector', identity_counts = $2::jsonb, last_error = NULL WHERE erasure_id = $1",
                [String(id), text])
        }
    }

    /// Saves the collector's counts so far; when `counts.done`, finishes the job: the ids leave
    /// it, the request's id value is blanked, and the audit entry says what went by count.
    func collectorProgress(_ id: Int64, _ counts: CollectorErasure, leaseSeconds: Int) async throws {
        let text = String(decoding: try JSONEncoder().encode(counts), as: UTF8.self)
        try await pool.transaction { connection in
            guard counts.done else {
                try connection.query(
                    """
                    UPDATE config.erasures SET collector_counts = $2::jsonb, last_error = NULL,
                           lease_until = now() + make_interval(secs => $3::integer)
                    WHERE erasure_id = $1
                    """,
                    [String(id), text, String(leaseSeconds)])
                return
            }
            guard
                let row = try connection.query(
                    """
                    UPDATE config.erasures SET collector_counts = $2::jsonb, state = 'done', finished_at = now(), lease_until = NULL,
                           last_error = NULL, subject = '{"users":[],"identities":[]}',
                           requested = CASE WHEN requested ? 'value' THEN jsonb_set(requested, '{value}', '"(erased)"') ELSE requested END
                    WHERE erasure_id = $1 AND state <> 'done'
                    RETURNING project, actor, coalesce(identity_counts, '{}')::text, array_length(user_ids, 1)
                    """,
                    [String(id), text]
                ).rows.first
            else { return }
            try PostgresConfigStore.audit(
                row[1] ?? "", "user.erased", project: row[0],
                detail: "erasure \(id) of \(row[3] ?? "0") users: identity-service \(row[2] ?? "{}"), collector \(text)", on: connection)
        }
    }

    func failed(_ id: Int64, _ error: String, retrySeconds: Int) async throws {
        try await pool.transaction { connection in
            try connection.query(
                "UPDATE config.erasures SET last_error = $2, lease_until = now() + make_interval(secs => $3::integer) WHERE erasure_id = $1",
                [String(id), String(error.prefix(1000)), String(retrySeconds)])
        }
    }

    func suppressions(project: String, limit: Int) async throws -> [Suppression] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT key, value, erasure_id, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                FROM config.suppressions WHERE project = $1 ORDER BY created_at DESC, key, value LIMIT $2
                """,
                [project, String(limit)]
            ).rows.compactMap { row in
                guard let key = row[0], let value = row[1] else { return nil }
                return Suppression(key: key, value: value, erasureId: row[2].flatMap(Int64.init), createdAt: row[3])
            }
        }
    }

    private static func bumpSuppressionVersion(_ project: String, on connection: PostgresConnection) throws {
        try connection.query("UPDATE config.projects SET suppression_version = suppression_version + 1 WHERE name = $1", [project])
    }

    /// The version of `project`'s suppression list (nil: no such project).
    func suppressionVersion(project: String) async throws -> Int64? {
        try await pool.withConnection { connection in
            try connection.query("SELECT suppression_version FROM config.projects WHERE name = $1", [project]).scalar.flatMap(Int64.init)
        }
    }

    /// Every suppressed id of `project`, what the gateways drop records for.
    func suppressedIDs(project: String) async throws -> [IdentityPair] {
        try await pool.withConnection { connection in
            try connection.query(
                "SELECT key, value FROM config.suppressions WHERE project = $1 ORDER BY key, value LIMIT $2", [project, String(Self.maxSuppressed)]
            ).rows.compactMap { row in row[0].flatMap { key in row[1].map { IdentityPair(key: key, value: $0) } } }
        }
    }

    /// Lifts one suppression, or every one an erasure set; answers how many went.
    func lift(project: String, key: String?, value: String?, erasureID: Int64?, actor: String) async throws -> Int {
        try await pool.transaction { connection in
            let lifted = try connection.query(
                """
                DELETE FROM config.suppressions WHERE project = $1
                AND (($2::text IS NOT NULL AND key = $2 AND value = $3) OR ($4::bigint IS NOT NULL AND erasure_id = $4))
                """,
                [project, key, value, erasureID.map(String.init)]
            ).affectedRows
            if lifted > 0 {
                try Self.bumpSuppressionVersion(project, on: connection)
                // The audit names the erasure or the key, never the id's value.
                let what = erasureID.map { "erasure \($0)" } ?? "one \(key ?? "") id"
                try PostgresConfigStore.audit(actor, "suppression.lifted", project: project, detail: "\(lifted) suppressed ids of \(what)", on: connection)
            }
            return lifted
        }
    }

    /// The most ids one project suppresses: the gateways hold them in memory and read them anew
    /// each `WHITELIST_REFRESH_SECONDS`.
    static let maxSuppressed = 100_000

    private static let jobSelect = """
        SELECT project, erasure_id, requested::text, actor, suppress, state, not_before > now(), user_ids::text, identity_count,
               identity_counts::text, collector_counts::text, last_error,
               to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
               to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
        FROM config.erasures
        """

    private static func job(_ row: [String?]) -> ErasureJob? {
        let decoder = JSONDecoder()
        guard let project = row[0], let id = row[1].flatMap(Int64.init), let state = row[5],
            let requested = try? decoder.decode(UserReference.self, from: Data((row[2] ?? "").utf8))
        else { return nil }
        let users = (row[7] ?? "{}").trimmingCharacters(in: CharacterSet(charactersIn: "{}")).split(separator: ",").compactMap { Int64($0) }
        return ErasureJob(
            project: project, erasureId: id, requested: requested, actor: row[3] ?? "", suppress: row[4] == "t",
            state: state == "identity" && row[6] == "t" ? "waiting" : state, users: users, identityCount: row[8].flatMap(Int.init) ?? 0,
            identity: row[9].flatMap { try? decoder.decode(IdentityErasure.self, from: Data($0.utf8)) },
            collector: row[10].flatMap { try? decoder.decode(CollectorErasure.self, from: Data($0.utf8)) },
            lastError: row[11], createdAt: row[12] ?? "", finishedAt: row[13]
        )
    }

}

/// Calls to identity-service and the collector on an erasure's or export's behalf, with the
/// service token. A refusal or an owner that cannot be reached is an error the runner retries.
struct ErasureCalls: Sendable {
    let identity: OwnedDataAPI.Owner
    let collector: OwnedDataAPI.Owner
    var timeout: TimeAmount = .seconds(60)

    func subject(project: String, reference: UserReference) async throws -> ErasureSubject? {
        let (status, body) = try await post(identity, "/v1/projects/\(project)/erasures/subject", reference)
        if status == 404 { return nil }
        if status == 409, let problem = try? JSONDecoder().decode(ProblemBody.self, from: Data(buffer: body)) {
            throw ServiceError(.conflict, .ambiguousId, problem.message)
        }
        return try decode(ErasureSubject.self, status, body, from: identity)
    }

    func eraseIdentities(project: String, subject: ErasureSubject) async throws -> IdentityErasure {
        let (status, body) = try await post(identity, "/v1/projects/\(project)/erasures/apply", subject)
        return try decode(IdentityErasure.self, status, body, from: identity)
    }

    func eraseStep(project: String, step: CollectorErasureStep) async throws -> CollectorErasure {
        let (status, body) = try await post(collector, "/v1/projects/\(project)/erasures/step", step)
        return try decode(CollectorErasure.self, status, body, from: collector)
    }

    /// identity-service's record and history of one user, as JSON text.
    func identityRecord(project: String, user: Int64) async throws -> (user: String?, history: String?) {
        (try await get(identity, "/v1/projects/\(project)/users/\(user)"), try await get(identity, "/v1/projects/\(project)/users/\(user)/history"))
    }

    /// The collector's export of `subject`, streamed to `write` as it arrives.
    func export(project: String, subject: ErasureSubject, write: (ByteBuffer) async throws -> Void) async throws {
        var request = request(collector, "/v1/projects/\(project)/user-data/export")
        request.body = .bytes(ByteBuffer(bytes: try JSONEncoder().encode(subject)))
        let response = try await HTTPClient.shared.execute(request, deadline: .now() + .minutes(30))
        guard response.status == .ok else {
            throw ServiceError.unavailable(.unavailable(collector.upstream), "the collector answered \(response.status.code) to the export")
        }
        for try await part in response.body { try await write(part) }
    }

    private func request(_ owner: OwnedDataAPI.Owner, _ path: String) -> HTTPClientRequest {
        var request = HTTPClientRequest(url: owner.baseURL + path)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        if let token = owner.serviceToken { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        return request
    }

    private func post(_ owner: OwnedDataAPI.Owner, _ path: String, _ body: some Encodable) async throws -> (UInt, ByteBuffer) {
        var request = request(owner, path)
        request.body = .bytes(ByteBuffer(bytes: try JSONEncoder().encode(body)))
        do {
            let response = try await HTTPClient.shared.execute(request, timeout: timeout)
            return (response.status.code, try await response.body.collect(upTo: OwnedDataAPI.Owner.maxAnswerBytes))
        } catch {
            throw ServiceError.unavailable(.unavailable(owner.upstream), "\(owner.name) cannot be reached at \(owner.baseURL) now")
        }
    }

    private func get(_ owner: OwnedDataAPI.Owner, _ path: String) async throws -> String? {
        var request = request(owner, path)
        request.method = .GET
        let response = try await HTTPClient.shared.execute(request, timeout: timeout)
        let body = try await response.body.collect(upTo: OwnedDataAPI.Owner.maxAnswerBytes)
        switch response.status.code {
        case 200: return String(buffer: body)
        case 404: return nil  // erased since the export began
        default:
            // An export missing a part must not look whole: the stream ends without its last line.
            throw ServiceError.unavailable(.unavailable(owner.upstream), "\(owner.name) answered \(response.status.code) during an export")
        }
    }

    private func decode<T: Decodable>(_ type: T.Type, _ status: UInt, _ body: ByteBuffer, from owner: OwnedDataAPI.Owner) throws -> T {
        guard status == 200, let value = try? JSONDecoder().decode(T.self, from: Data(buffer: body)) else {
            throw ServiceError.unavailable(
                .badAnswer(from: owner.upstream), "\(owner.name) answered \(status): \(String(buffer: body).prefix(300))")
        }
        return value
    }
}

/// Carries out erasure jobs, one step at a time, on every config-service replica: a job is held
/// by one runner at a time (a lease in its row), and a runner that dies leaves it to another
/// once the lease runs out.
struct ErasureRunner: Service {
    let store: ErasureStore
    let calls: ErasureCalls
    /// Rows the collector removes from each table in one step (`ERASURE_BATCH_ROWS`).
    let batchRows: Int
    var interval: Duration = .seconds(1)
    let logger: Logger
    /// `datong_erasure_failures_total`: claims and steps that failed (a failed step is tried
    /// again in `retrySeconds`).
    var failures: Counter? = nil
    /// `datong_erasure_oldest_open_seconds`: how long the oldest erasure not done yet has waited,
    /// looked at every 30 s.
    var oldestOpen: Gauge? = nil

    static let leaseSeconds = 120
    static let retrySeconds = 5

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            var looked = ContinuousClock.now - .seconds(60)
            while true {
                while await self.runOne() {}
                if let oldestOpen = self.oldestOpen, ContinuousClock.now - looked >= .seconds(30) {
                    looked = ContinuousClock.now
                    if let seconds = try? await self.store.oldestOpenSeconds() { oldestOpen.set(to: seconds) }
                }
                try await Task.sleep(for: self.interval)
            }
        }
    }

    /// Runs one job that is due as far as it goes; false when none was due.
    func runOne() async -> Bool {
        let claimed: ErasureStore.Claimed?
        do {
            claimed = try await store.claim(leaseSeconds: Self.leaseSeconds)
        } catch {
            logger.warning("erasure.claim_failed", metadata: ["error": "\(error)"])
            failures?.increment()
            return false
        }
        guard let job = claimed else { return false }
        do {
            if job.state == "identity" {
                let counts = try await calls.eraseIdentities(project: job.project, subject: job.subject)
                try await store.identityDone(job.id, counts)
                logger.info("erasure.identity_done", metadata: ["erasure": "\(job.id)", "identities": "\(counts.identities)"])
            }
            var total = job.collector
            while !total.done {
                try Task.checkCancellation()
                let step = try await calls.eraseStep(
                    project: job.project, step: CollectorErasureStep(subject: job.subject, rejectedAfter: total.rejectedAfter, limit: batchRows))
                total = step.adding(to: total)
                try await store.collectorProgress(job.id, total, leaseSeconds: Self.leaseSeconds)
            }
            logger.info("erasure.done", metadata: ["erasure": "\(job.id)", "events": "\(total.events)"])
        } catch {
            logger.warning("erasure.step_failed", metadata: ["erasure": "\(job.id)", "error": "\(error)"])
            failures?.increment()
            try? await store.failed(job.id, "\(error)", retrySeconds: Self.retrySeconds)
        }
        return true
    }
}

/// The admin API of a user's data on request (erasures, suppressions, exports; docs/PRIVACY.md),
/// and of the data the collector keeps that an admin changes (a project's retention, the catalog's
/// notes, types and rules, replays), audited here.
struct ErasureAPI: ServiceAPI {
    let auth: AdminAuth
    let store: ErasureStore
    let calls: ErasureCalls
    /// Seconds from an erasure's request to its first step, for every gateway to read the
    /// suppression first (`ERASURE_SETTLE_SECONDS`).
    let settleSeconds: Int

    func register(on router: Router<DatongRequestContext>) {
        let projects = router.group("/v1/projects/:project")
        // A user's data on request: erasure jobs, the ids they suppress, exports.
        projects.post("erasures", use: requestErasure)
        projects.get("erasures", use: erasures)
        projects.get("erasures/:erasure", use: erasure)
        projects.get("suppressions", use: suppressions)
        projects.delete("suppressions", use: liftSuppression)
        projects.get("user-data", use: export)
        // Data the collector keeps, changed through here so that the change is audited: a
        // project's retention, the catalog's notes, types, rules and declarations, replays.
        projects.put("retention", use: setRetention)
        projects.delete("retention", use: clearRetention)
        projects.get("time-zone", use: timeZone)
        projects.put("time-zone", use: setTimeZone)
        projects.put("metadata/notes", use: saveNotes)
        projects.put("metadata/types", use: setType)
        projects.post("metadata/types/preview", use: previewType)
        projects.put("metadata/settings", use: setRules)
        projects.post("metadata/declarations", use: declare)
        projects.post("rejected/replay", use: replay)
    }

    // MARK: A user's data on request

    @Sendable func requestErasure(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        let asked = try await readBody(ErasureRequest.self, request)
        if let problem = asked.user.problem { throw ServiceError.badRequest(.invalidUser, problem) }
        try await store.requireProject(project)
        guard let subject = try await person(project: project, reference: asked.user) else {
            throw Self.noSuchUser(project)
        }
        let job = try await store.create(
            project: project, requested: asked.user, subject: subject, suppress: asked.suppress ?? true, settleSeconds: settleSeconds,
            actor: actor)
        context.logger.info("audit.user.erasure_requested", metadata: ["project": "\(project)", "erasure": "\(job.erasureId)", "actor": "\(actor)"])
        return try jsonResponse(.accepted, encoding: job)
    }

    @Sendable func erasures(_ request: Request, context: DatongRequestContext) async throws -> Response {
        _ = try await auth.authorize(request)
        let project = try context.project()
        let limit = try request.integerParameter("limit", in: 1...500, default: 50)
        try await store.requireProject(project)
        return try jsonResponse(.ok, encoding: try await store.jobs(project: project, limit: limit))
    }

    @Sendable func erasure(_ request: Request, context: DatongRequestContext) async throws -> Response {
        _ = try await auth.authorize(request)
        let project = try context.project()
        guard let text = context.parameters.get("erasure"), let id = Int64(text), id > 0 else {
            throw ServiceError.badRequest(.invalidValue, "erasure must be a positive whole number")
        }
        guard let job = try await store.job(project: project, id: id) else {
            throw ServiceError(.notFound, .unknownErasure, "project \(project) has no erasure \(id)")
        }
        return try jsonResponse(.ok, encoding: job)
    }

    @Sendable func suppressions(_ request: Request, context: DatongRequestContext) async throws -> Response {
        _ = try await auth.authorize(request)
        let project = try context.project()
        let limit = try request.integerParameter("limit", in: 1...10_000, default: 1000)
        try await store.requireProject(project)
        return try jsonResponse(.ok, encoding: try await store.suppressions(project: project, limit: limit))
    }

    @Sendable func liftSuppression(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        let query = request.uri.queryParameters
        let erasure = query["erasure"].flatMap { Int64($0) }
        let (key, value) = (query["key"].map(String.init), query["value"].map(String.init))
        guard (key != nil && value != nil) != (erasure != nil) else {
            throw ServiceError.badRequest(.invalidValue, "name what to lift: ?key=…&value=… (one id) or ?erasure=N (every id an erasure suppressed)")
        }
        let lifted = try await store.lift(project: project, key: key, value: value, erasureID: erasure, actor: actor)
        guard lifted > 0 else { throw ServiceError(.notFound, .unknownSuppression, "project \(project) suppresses no such id") }
        return jsonResponse(.ok, #"{"lifted":\#(lifted)}"#)
    }

    /// An access request: everything Datong holds about the person, as JSON lines.
    @Sendable func export(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        let query = request.uri.queryParameters
        let reference = UserReference(
            userId: query["user"].flatMap { Int64($0) }, key: query["key"].map(String.init), value: query["value"].map(String.init),
            distinctId: query["distinct_id"].map(String.init))
        if let problem = reference.problem {
            throw ServiceError.badRequest(
                .invalidUser, problem.replacingOccurrences(of: "userId", with: "user").replacingOccurrences(of: "distinctId", with: "distinct_id"))
        }
        try await store.requireProject(project)
        guard let subject = try await person(project: project, reference: reference) else {
            throw Self.noSuchUser(project)
        }
        try await store.pool.transaction { connection in
            try PostgresConfigStore.audit(
                actor, "user.exported", project: project, detail: "\(subject.users.count) users, \(subject.identities.count) ids", on: connection)
        }
        let calls = self.calls
        return Response(
            status: .ok,
            headers: [.contentType: "application/x-ndjson; charset=utf-8", .contentDisposition: #"attachment; filename="user-data.jsonl""#],
            body: ResponseBody { writer in
                for user in subject.users {
                    let (record, history) = try await calls.identityRecord(project: project, user: user)
                    if let record { try await writer.write(ByteBuffer(string: #"{"table":"identity.users","row":\#(record)}"# + "\n")) }
                    if let history { try await writer.write(ByteBuffer(string: #"{"table":"identity.history","row":\#(history)}"# + "\n")) }
                }
                try await calls.export(project: project, subject: subject) { part in try await writer.write(part) }
                try await writer.finish(nil)
            })
    }

    // MARK: Data the collector keeps

    /// A project's own retention in months. The collector keeps and applies it (hourly, whole
    /// tables); the change is audited here. `GET /v1/retention` (OwnedDataAPI) is the dry run.
    @Sendable func setRetention(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        let body = try await collectBody(request, limit: 1024)
        guard let setting = try? JSONDecoder().decode(RetentionSetting.self, from: Data(buffer: body)),
            ProjectRetention.months.contains(setting.months)
        else {
            throw ServiceError.badRequest(
                .invalidBody, #"send {"months": N}, N from 1 to 1200: this month and the N before are kept"#)
        }
        return try await changeInCollector(
            .PUT, "retention", body: Array(try JSONEncoder().encode(setting)), done: .ok, audit: "retention.set",
            detail: "\(setting.months) months", actor: actor, project: project, context: context)
    }

    @Sendable func clearRetention(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        return try await changeInCollector(
            .DELETE, "retention", done: .noContent, audit: "retention.cleared", actor: actor, project: project, context: context)
    }

    /// The project's time zone: the days of its reports. The collector keeps it beside the report
    /// rollups it builds again in a new zone; the change is audited here.
    @Sendable func timeZone(_ request: Request, context: DatongRequestContext) async throws -> Response {
        _ = try await auth.authorize(request)
        let project = try context.project()
        try await store.requireProject(project)
        return try await calls.collector.call(.GET, "/v1/projects/\(project)/time-zone", requestID: context.requestID, logger: context.logger)
    }

    @Sendable func setTimeZone(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        let body = try await collectBody(request, limit: 1024)
        guard let setting = try? JSONDecoder().decode(TimeZoneSetting.self, from: Data(buffer: body)) else {
            throw ServiceError.badRequest(.invalidBody, #"send {"timeZone": "Asia/Shanghai"} (an IANA name)"#)
        }
        if let problem = ProjectTimeZone.shapeProblem(setting.timeZone) { throw ServiceError.badRequest(.invalidValue, problem) }
        return try await changeInCollector(
            .PUT, "time-zone", body: Array(try JSONEncoder().encode(setting)), done: .ok, audit: "reports.time_zone_set",
            detail: setting.timeZone, actor: actor, project: project, context: context)
    }

    /// Display names and descriptions of the catalog's entries: the collector keeps them beside
    /// the catalog (analysts read them there); the change is audited here.
    @Sendable func saveNotes(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        let body = try await collectBody(request, limit: Self.maxNotesBytes)
        // The collector checks each note; the count is for the audit trail.
        let notes = (try? JSONDecoder().decode([MetadataNote].self, from: Data(buffer: body)))?.count ?? 0
        return try await changeInCollector(
            .PUT, "metadata/notes", body: Array(buffer: body), done: .ok, audit: "metadata.noted", detail: "\(notes) notes", actor: actor,
            project: project, context: context)
    }

    /// A property's type (audited); the collector checks the change, applies it and counts the
    /// stored rows it concerns.
    @Sendable func setType(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        let body = try await collectBody(request, limit: 4096)
        let change = try? JSONDecoder().decode(PropertyTypeChange.self, from: Data(buffer: body))
        return try await changeInCollector(
            .PUT, "metadata/types", body: Array(buffer: body), done: .ok, audit: "metadata.typed",
            detail: change.map { "\($0.kind) property \($0.name) is \($0.type.rawValue)" }, actor: actor, project: project, context: context)
    }

    /// What a type change would do, changing nothing.
    @Sendable func previewType(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        let body = try await collectBody(request, limit: 4096)
        return try await changeInCollector(
            .POST, "metadata/types/preview", body: Array(buffer: body), done: .ok, audit: nil, actor: actor, project: project, context: context)
    }

    @Sendable func setRules(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        let body = try await collectBody(request, limit: 1024)
        let settings = try? JSONDecoder().decode(ProjectCatalogSettings.self, from: Data(buffer: body))
        return try await changeInCollector(
            .PUT, "metadata/settings", body: Array(buffer: body), done: .ok, audit: "metadata.settings_set",
            detail: settings.map { "strict \($0.strict), wrong type: \($0.wrongType.rawValue)" }, actor: actor, project: project, context: context)
    }

    @Sendable func declare(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        let body = try await collectBody(request, limit: Self.maxNotesBytes)
        let declarations = try? JSONDecoder().decode(MetadataDeclarations.self, from: Data(buffer: body))
        return try await changeInCollector(
            .POST, "metadata/declarations", body: Array(buffer: body), done: .ok, audit: "metadata.declared",
            detail: declarations.map { "\($0.events.count) events\($0.seen ? " and everything seen" : "")" }, actor: actor, project: project,
            context: context)
    }

    /// Records refused with PROPERTY_WITH_WRONG_TYPE, written again (audited).
    @Sendable func replay(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        let body = try await collectBody(request, limit: 1024)
        let asked = try? JSONDecoder().decode(ReplayRequest.self, from: Data(buffer: body))
        return try await changeInCollector(
            .POST, "rejected/replay", body: Array(buffer: body), done: .ok, audit: "rejected.replayed",
            detail: asked.map { "up to \($0.limit) records after \($0.after)" }, actor: actor, project: project, context: context)
    }

    // MARK: Helpers

    private static func noSuchUser(_ project: String) -> ServiceError {
        ServiceError(
            .notFound, .unknownUser,
            "project \(project) has no such user: no user has that number, or no user holds that distinct_id (a person known only from refused records is named by key and value)"
        )
    }

    /// The person `reference` names: identity-service's, or for an id no user holds, that id alone
    /// (a person may be known only from records that were refused, which name it); nil for a user
    /// number that does not exist.
    private func person(project: String, reference: UserReference) async throws -> ErasureSubject? {
        if let subject = try await calls.subject(project: project, reference: reference) { return subject }
        guard let key = reference.key, let value = reference.value else { return nil }
        return ErasureSubject(users: [], identities: [IdentityPair(key: key, value: value)])
    }

    /// A change to data the collector keeps for `project` (`/v1/projects/{project}/<path>` there),
    /// passed on once the project is known, and audited as `audit` (if any) when the collector
    /// answered `done`; its answer is returned as it gave it.
    private func changeInCollector(
        _ method: HTTPMethod, _ path: String, body: [UInt8]? = nil, done: HTTPResponse.Status, audit action: String?, detail: String? = nil,
        actor: String, project: String, context: DatongRequestContext
    ) async throws -> Response {
        try await store.requireProject(project)
        let answer = try await calls.collector.call(
            method, "/v1/projects/\(project)/\(path)", body: body, requestID: context.requestID, logger: context.logger)
        if answer.status == done, let action {
            try await store.pool.transaction { connection in
                try PostgresConfigStore.audit(actor, action, project: project, detail: detail, on: connection)
            }
        }
        return answer
    }

    /// The collector's own bound on a list of notes.
    static let maxNotesBytes = 16 << 20

    private func readBody<T: Decodable>(_ type: T.Type, _ request: Request) async throws -> T {
        let body = try await collectBody(request, limit: 8192)
        guard let value = try? JSONDecoder().decode(T.self, from: Data(buffer: body)) else {
            throw ServiceError.badRequest(
                .invalidBody,
                #"send {"user": {"userId": N}}, {"user": {"key": "…", "value": "…"}} or {"user": {"distinctId": "…"}}, and "suppress": false to keep later records"#
            )
        }
        return value
    }
}
