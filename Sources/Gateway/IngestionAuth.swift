import DatongContracts
import DatongJSON
import DatongRuntime
import Foundation
import HTTPTypes
import IdentityCore
import Logging
import Synchronization

extension ProjectAccess {
    /// Why an upload to `project` with `token` is refused, or nil when it is accepted.
    ///
    /// Status codes are chosen for what the SDKs do with them (docs/PROTOCOL.md section 1): an
    /// unknown project is 404 and a missing or wrong token 403, both of which the iOS and Android
    /// SDKs keep and retry, so a batch sent before the project was created or the token was fixed
    /// is not lost.
    func refusal(project: String, token: String?) -> ServiceError? {
        switch self {
        case .open:
            return nil
        case .unknown:
            return ServiceError(.notFound, .unknownProject, "there is no project '\(project)'; create it in config-service (PUT /v1/projects/\(project))")
        case .token(let expected):
            guard let token, !token.isEmpty else {
                return ServiceError(.forbidden, .missingToken, "project '\(project)' needs its ingestion token: send token=… with the upload")
            }
            guard SHA256Digest.equalInConstantTime(SHA256Digest.hex(Array(token.utf8)).utf8, expected.utf8) else {
                return ServiceError(.forbidden, .invalidToken, "the token is not project '\(project)'s ingestion token")
            }
            return nil
        }
    }
}

/// The one authentication step of ingestion, taken by uploads and relays before any costly work
/// (no base64, gunzip, decryption or parsing for a request that will be refused).
///
/// Each project's access, and the ids of its erased users whose records are dropped
/// (`SuppressedIDs`), are read from config-service and kept for `refreshInterval`, then read
/// again; while config-service cannot be reached the last answer stays in force. A project never
/// seen cannot be checked without config-service: its uploads get a 503 and the SDK retries.
/// Uploads that find a project's answer missing or stale at once share one read of it: a burst of
/// first uploads is one call to config-service, not one each.
final class IngestionAuth: Sendable {
    private struct Entry {
        var access: ProjectAccess
        var suppressed: SuppressedIDs
        var enrichment = EnrichmentPolicy.defaults
        var fetchedAt: ContinuousClock.Instant
        /// config-service's ETag of the answer, to revalidate it.
        var etag: String? = nil
    }

    private let config: ServiceClient
    private let refreshInterval: Duration
    private let maxProjects: Int
    private let entries = Mutex<[String: Entry]>([:])
    /// The read of each project under way, which every upload that needs it awaits.
    private let reads = Mutex<[String: Task<Entry, any Error>]>([:])

    /// The largest answer read: a project's access and up to `SuppressedIDs.maxIDs` ids.
    static let maxAnswerBytes = 32 << 20

    init(config: ServiceClient, refreshInterval: Duration, maxProjects: Int = 4096) {
        self.config = config
        self.refreshInterval = refreshInterval
        self.maxProjects = maxProjects
    }

    /// What an accepted upload of a project goes by: the ids whose records are dropped, and what
    /// the gateway adds to its records.
    struct Grant: Sendable {
        var suppressed: SuppressedIDs
        var enrichment: EnrichmentPolicy
    }

    /// Throws the refusal (404, 403) for `project` and `token`, or a 503 when the project was never
    /// seen and config-service cannot say; otherwise answers what the upload goes by.
    @discardableResult
    func check(project: String, token: String?, logger: Logger) async throws -> Grant {
        let entry = try await entry(project, logger: logger)
        if let refusal = entry.access.refusal(project: project, token: token) { throw refusal }
        return Grant(suppressed: entry.suppressed, enrichment: entry.enrichment)
    }

    /// The ids whose records are dropped in `project` (a record may name a project of its own).
    func suppressed(_ project: String, logger: Logger) async throws -> SuppressedIDs {
        try await entry(project, logger: logger).suppressed
    }

    /// What the gateway adds to `project`'s records (a record may name a project of its own).
    func enrichment(_ project: String, logger: Logger) async throws -> EnrichmentPolicy {
        try await entry(project, logger: logger).enrichment
    }

    func access(_ project: String, logger: Logger) async throws -> ProjectAccess {
        try await entry(project, logger: logger).access
    }

    private func entry(_ project: String, logger: Logger) async throws -> Entry {
        let cached = entries.withLock { $0[project] }
        if let cached, ContinuousClock.now - cached.fetchedAt < refreshInterval { return cached }
        // The read runs in a task of its own: an upload that gives up does not end it for the others.
        let read = reads.withLock { reads in
            if let running = reads[project] { return running }
            let started = Task { try await self.read(project, cached: cached, logger: logger) }
            reads[project] = started
            return started
        }
        do {
            return try await read.value
        } catch {
            // config-service cannot say now: the last answer stands; never seen is a 503.
            guard let cached else { throw error }
            return cached
        }
    }

    /// Reads the project's answer from config-service and keeps it; the read is then over, so the
    /// next upload that finds it stale starts another.
    private func read(_ project: String, cached: Entry?, logger: Logger) async throws -> Entry {
        defer { reads.withLock { $0[project] = nil } }
        let now = ContinuousClock.now
        let fetched: Entry
        let path = "/v1/projects/\(project)/ingestion"
        switch try await config.fetchDocument(path, etag: cached?.etag, maxBytes: Self.maxAnswerBytes, logger: logger) {
        case .absent:
            fetched = Entry(access: .unknown, suppressed: SuppressedIDs(), fetchedAt: now)
        case .document(let etag, let body):
            guard let ingestion = try? JSONDecoder().decode(ProjectIngestion.self, from: Data(body)) else {
                throw ServiceError.unavailable(.badAnswer(from: config.upstream), "config-service gave an answer the gateway cannot read")
            }
            fetched = Entry(
                access: ingestion.access, suppressed: SuppressedIDs(ingestion.suppressed ?? []),
                enrichment: ingestion.enrichment ?? .defaults, fetchedAt: now, etag: etag)
        case .notModified:
            guard let cached else {
                throw ServiceError.unavailable(.badAnswer(from: config.upstream), "config-service answered 304 to a first read")
            }
            fetched = Entry(access: cached.access, suppressed: cached.suppressed, enrichment: cached.enrichment, fetchedAt: now, etag: cached.etag)
        }
        entries.withLock { entries in
            if entries[project] == nil, entries.count >= maxProjects { entries.removeAll(keepingCapacity: true) }
            entries[project] = fetched
        }
        return fetched
    }
}

/// The ids of a project's erased users (docs/PRIVACY.md): records naming one of them, by an
/// identity the record carries or by its distinct id, are dropped at the gateway and counted,
/// never stored, until an operator lifts the suppression. Compared as bytes, as ids are.
struct SuppressedIDs: Sendable {
    private let identities: Set<IdentityKey>
    private let values: Set<ExactValue>

    /// The most ids a project's list holds (config-service refuses erasures past it).
    static let maxIDs = 100_000

    init(_ pairs: [IdentityPair] = []) {
        identities = Set(pairs.map { IdentityKey(key: $0.key, value: $0.value) })
        values = Set(pairs.map { ExactValue(text: $0.value) })
    }

    var isEmpty: Bool { identities.isEmpty }

    /// True when `record` names a suppressed id: one of its identities, or its distinct id as
    /// the value of any suppressed identity (old SDKs send a distinct id alone).
    func suppresses(_ record: IdentityRecord) -> Bool {
        guard !identities.isEmpty else { return false }
        if values.contains(ExactValue(text: record.distinctId)) { return true }
        if let original = record.originalId, values.contains(ExactValue(text: original)) { return true }
        return IdentityRules.plan(for: record).identities.contains { identities.contains($0) }
    }

    /// True when a refused record's text names a suppressed id: its `distinct_id`,
    /// `original_id` or one of its `identities` (a record that is not JSON names none).
    func suppresses(rawRecord: String) -> Bool {
        guard !identities.isEmpty, let root = try? JSONParser.parse(Array(rawRecord.utf8), maxDepth: 64).root, root.isObject else {
            return false
        }
        for (key, value) in root.members {
            guard let name = key.stringValue else { continue }
            switch name {
            case "distinct_id", "original_id":
                if let text = value.stringValue, values.contains(ExactValue(text: text)) { return true }
            case "identities":
                for (idKey, idValue) in value.members {
                    if let k = idKey.stringValue, let v = idValue.stringValue, identities.contains(IdentityKey(key: k, value: v)) { return true }
                }
            default:
                continue
            }
        }
        return false
    }

    /// A string compared and hashed as its bytes.
    private struct ExactValue: Hashable {
        let text: String
        static func == (a: ExactValue, b: ExactValue) -> Bool { ExactText.equal(a.text, b.text) }
        func hash(into hasher: inout Hasher) { ExactText.hash(text, into: &hasher) }
    }
}
