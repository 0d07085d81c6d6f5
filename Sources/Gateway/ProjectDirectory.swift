import DatongContracts
import DatongRuntime
import Foundation
import HTTPTypes
import Logging
import Synchronization

/// Which projects exist and which ingestion token each needs, read from config-service and kept
/// for `refreshInterval` (then read again; while config-service cannot be reached the last answer
/// stays in force). A project nobody has seen yet cannot be checked without config-service, so
/// its uploads get a 503 and the SDK retries.
///
/// Status codes are chosen for what the SDKs do with them (docs/PROTOCOL.md section 1): an unknown
/// project is 404 and a missing or wrong token 403, both of which the iOS and Android SDKs keep and
/// retry, so a batch sent before the project was created or the token was fixed is not lost.
final class ProjectDirectory: Sendable {
    private struct Entry {
        /// nil: no such project; otherwise the token digest (nil inside: no token needed).
        var tokenDigest: String??
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

    /// Throws 404 for an unknown project, 403 when its token is missing or wrong, 503 when the
    /// project was never seen and config-service cannot say.
    func check(project: String, token: String?, logger: Logger) async throws {
        guard let reason = try await problem(project: project, token: token, logger: logger) else { return }
        throw reason
    }

    /// The refusal for `project` and `token`, or nil when uploads are accepted.
    func problem(project: String, token: String?, logger: Logger) async throws -> ServiceError? {
        let digest = try await tokenDigest(project: project, logger: logger)
        guard let required = digest else {
            return ServiceError(.notFound, .unknownProject, "there is no project '\(project)'; create it in config-service (PUT /v1/projects/\(project))")
        }
        guard let expected = required else { return nil }
        guard let token, !token.isEmpty else {
            return ServiceError(.forbidden, .missingToken, "project '\(project)' needs its ingestion token: send token=… with the upload")
        }
        guard SHA256Digest.equalInConstantTime(SHA256Digest.hex(Array(token.utf8)).utf8, expected.utf8) else {
            return ServiceError(.forbidden, .invalidToken, "the token is not project '\(project)'s ingestion token")
        }
        return nil
    }

    private func tokenDigest(project: String, logger: Logger) async throws -> String?? {
        let now = ContinuousClock.now
        let cached = entries.withLock { $0[project] }
        if let cached, now - cached.fetchedAt < refreshInterval { return cached.tokenDigest }
        let fetched: String??
        do {
            switch try await config.fetchDocument("/v1/projects/\(project)/ingestion", etag: nil, maxBytes: 64 << 10, logger: logger) {
            case .absent:
                fetched = nil
            case .document(_, let body):
                guard let ingestion = try? JSONDecoder().decode(ProjectIngestion.self, from: Data(body)) else {
                    throw ServiceError.unavailable(.configBadAnswer, "config-service gave an answer the gateway cannot read")
                }
                fetched = .some(ingestion.tokenSHA256)
            case .notModified:
                fetched = cached?.tokenDigest ?? nil
            }
        } catch {
            // config-service cannot say now: the last answer stands; never seen is a 503.
            guard let cached else { throw error }
            return cached.tokenDigest
        }
        entries.withLock { entries in
            if entries[project] == nil, entries.count >= maxProjects { entries.removeAll(keepingCapacity: true) }
            entries[project] = Entry(tokenDigest: fetched, fetchedAt: now)
        }
        return fetched
    }
}
