import Foundation
import Synchronization

/// The newest document per (project, kind, scope, app version) as config-service last read it,
/// kept for `ttl`: SDKs revalidate their config on every start, and most of those reads are 304s
/// that need no database query. A publish or rollback through this process clears its entries at
/// once; one made through another replica is seen here within `ttl` (1 second by default).
final class DocumentCache: Sendable {
    struct Key: Hashable, Sendable {
        let project: String
        let kind: String
        let platform: String
        let appID: String
        let appVersion: [Int]?
    }

    private struct Entry {
        let document: StoredDocument?
        let expires: ContinuousClock.Instant
    }

    private let entries = Mutex<[Key: Entry]>([:])
    private let ttl: Duration
    private let capacity: Int

    init(ttl: Duration = .seconds(1), capacity: Int = 10_000) {
        self.ttl = ttl
        self.capacity = capacity
    }

    /// The cached answer (a document, or `.some(nil)` for "nothing published"), or nil when it
    /// must be read again.
    func lookup(_ key: Key) -> StoredDocument?? {
        let now = ContinuousClock.now
        return entries.withLock { entries in
            guard let entry = entries[key], entry.expires > now else { return nil }
            return .some(entry.document)
        }
    }

    func store(_ document: StoredDocument?, for key: Key) {
        let expires = ContinuousClock.now + ttl
        entries.withLock { entries in
            // Bounded: when full, start over rather than grow (entries live a second anyway).
            if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            entries[key] = Entry(document: document, expires: expires)
        }
    }

    /// Forgets every entry of a document after it changed here.
    func invalidate(project: String, kind: String) {
        entries.withLock { entries in
            entries = entries.filter { $0.key.project != project || $0.key.kind != kind }
        }
    }
}
