import DatongContracts
import DatongJSON
import DatongRuntime
import Logging
import ServiceLifecycle
import Synchronization

/// The bridge whitelists of the projects this gateway relays for, read from config-service.
///
/// A project's whitelists are fetched the first time a bridged record needs them; from then on a
/// background loop revalidates every known project each `refreshInterval` (ETag, so an unchanged
/// list costs a 304). A published change is therefore applied within one interval without a restart.
/// When config-service cannot be reached the last known lists stay in force; a project nobody has
/// seen yet cannot be checked, so its records get a 503 and the app retries.
final class WhitelistCache: Service, Sendable {
    private struct Entry: Sendable {
        /// The published lists as fetched, kept to revalidate with their ETags.
        var lists: [DocumentKind: [String]] = [:]
        var etags: [DocumentKind: String] = [:]
        /// `lists`, read for checking.
        var whitelists = ProjectWhitelists()
        var lastUsed: ContinuousClock.Instant
    }

    private let config: ServiceClient
    private let refreshInterval: Duration
    private let maxProjects: Int
    private let logger: Logger
    private let entries = Mutex<[String: Entry]>([:])

    static let maxDocumentBytes = DocumentKind.largestDocumentBytes

    init(config: ServiceClient, refreshInterval: Duration, maxProjects: Int = 4096, logger: Logger) {
        self.config = config
        self.refreshInterval = refreshInterval
        self.maxProjects = maxProjects
        self.logger = logger
    }

    /// The project's whitelists: from memory when known, otherwise fetched now (503 when that fails).
    func whitelists(for project: String) async throws -> ProjectWhitelists {
        let now = ContinuousClock.now
        let known = entries.withLock { entries -> ProjectWhitelists? in
            entries[project]?.lastUsed = now
            return entries[project]?.whitelists
        }
        if let known { return known }
        let fetched = try await fetch(project, previous: Entry(lastUsed: now))
        entries.withLock { entries in
            if entries[project] == nil, entries.count >= maxProjects,
                let stalest = entries.min(by: { $0.value.lastUsed < $1.value.lastUsed })?.key
            {
                entries[stalest] = nil
            }
            entries[project] = fetched
        }
        return fetched.whitelists
    }

    /// Revalidates every known project each interval until the service group shuts down.
    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while true {
                try await Task.sleep(for: self.refreshInterval)
                await self.refreshAll()
            }
        }
    }

    func refreshAll() async {
        let known = entries.withLock { $0 }
        for (project, entry) in known {
            do {
                let fresh = try await fetch(project, previous: entry)
                entries.withLock { entries in
                    guard entries[project] != nil else { return }
                    entries[project]?.lists = fresh.lists
                    entries[project]?.etags = fresh.etags
                    entries[project]?.whitelists = fresh.whitelists
                }
            } catch {
                logger.warning("whitelists.refresh_failed", metadata: ["project": "\(project)", "error": "\(error)"])
            }
        }
    }

    private func fetch(_ project: String, previous: Entry) async throws -> Entry {
        async let servers = fetchList(project, kind: .serverURLWhitelist, etag: previous.etags[.serverURLWhitelist])
        async let domains = fetchList(project, kind: .h5DomainWhitelist, etag: previous.etags[.h5DomainWhitelist])
        var entry = previous
        for (kind, fetch) in [(DocumentKind.serverURLWhitelist, try await servers), (.h5DomainWhitelist, try await domains)] {
            switch fetch {
            case .notModified:
                continue
            case .absent:
                entry.lists[kind] = nil
                entry.etags[kind] = nil
            case .document(let etag, let body):
                entry.lists[kind] = Self.strings(body)
                entry.etags[kind] = etag
                if entry.lists[kind] == nil {
                    logger.error("whitelists.unreadable", metadata: ["project": "\(project)", "kind": "\(kind.rawValue)"])
                }
            }
        }
        entry.whitelists = ProjectWhitelists(serverURLs: entry.lists[.serverURLWhitelist], h5Domains: entry.lists[.h5DomainWhitelist])
        return entry
    }

    private func fetchList(_ project: String, kind: DocumentKind, etag: String?) async throws -> ServiceClient.DocumentFetch {
        try await config.fetchDocument(
            "/v1/projects/\(project)/\(kind.rawValue)", etag: etag, maxBytes: Self.maxDocumentBytes, logger: logger
        )
    }

    /// A published whitelist is a JSON array of strings (config-service validates it on publish).
    private static func strings(_ body: [UInt8]) -> [String]? {
        guard let list = try? JSONParser.parse(body, maxDepth: 4).root, list.kind == .array else { return nil }
        let strings = list.elements.compactMap(\.stringValue)
        return strings.count == Int(list.entry.count) ? strings : nil
    }
}
