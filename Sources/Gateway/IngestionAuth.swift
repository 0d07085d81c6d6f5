import DatongContracts
import DatongRuntime
import Foundation
import HTTPTypes
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
/// Each project's access is read from config-service and kept for `refreshInterval`, then read
/// again; while config-service cannot be reached the last answer stays in force. A project never
/// seen cannot be checked without config-service: its uploads get a 503 and the SDK retries.
final class IngestionAuth: Sendable {
    private struct Entry {
        var access: ProjectAccess
        var fetchedAt: ContinuousClock.Instant
    }

    private let config: ServiceClient
    private let refreshInterval: Duration
    private let maxProjects: Int
    private let entries = Mutex<[String: Entry]>([:])

    init(config: ServiceClient, refreshInterval: Duration, maxProjects: Int = 4096) {
        self.config = config
        self.refreshInterval = refreshInterval
        self.maxProjects = maxProjects
    }

    /// Throws the refusal (404, 403) for `project` and `token`, or a 503 when the project was never
    /// seen and config-service cannot say.
    func check(project: String, token: String?, logger: Logger) async throws {
        if let refusal = try await access(project, logger: logger).refusal(project: project, token: token) { throw refusal }
    }

    func access(_ project: String, logger: Logger) async throws -> ProjectAccess {
        let now = ContinuousClock.now
        let cached = entries.withLock { $0[project] }
        if let cached, now - cached.fetchedAt < refreshInterval { return cached.access }
        let fetched: ProjectAccess
        do {
            switch try await config.fetchDocument("/v1/projects/\(project)/ingestion", etag: nil, maxBytes: 64 << 10, logger: logger) {
            case .absent:
                fetched = .unknown
            case .document(_, let body):
                guard let ingestion = try? JSONDecoder().decode(ProjectIngestion.self, from: Data(body)) else {
                    throw ServiceError.unavailable(.badAnswer(from: config.upstream), "config-service gave an answer the gateway cannot read")
                }
                fetched = ingestion.access
            case .notModified:
                fetched = cached?.access ?? .unknown
            }
        } catch {
            // config-service cannot say now: the last answer stands; never seen is a 503.
            guard let cached else { throw error }
            return cached.access
        }
        entries.withLock { entries in
            if entries[project] == nil, entries.count >= maxProjects { entries.removeAll(keepingCapacity: true) }
            entries[project] = Entry(access: fetched, fetchedAt: now)
        }
        return fetched
    }
}
