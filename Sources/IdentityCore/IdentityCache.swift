import Synchronization

/// The owners of identities a process has seen, so resolving known identities needs no query:
/// identity-service keeps one per replica, and so does the gateway (so a returning device costs
/// no call at all).
///
/// Freshness: an identity's owner only changes by a merge, an undo or an unbind, and every one of
/// those writes the identity to `identity.invalidations`. A `CacheFeed` (reading PostgreSQL in
/// identity-service, identity-service's `GET /v1/invalidations` in the gateway) reads the entries
/// of every transaction that finished since its last look, every refresh interval, and forgets
/// those identities. A change made elsewhere is therefore seen here within one refresh interval
/// plus the time of one refresh. From the first failed refresh until one succeeds again, the cache
/// does not answer (every resolve goes to PostgreSQL) and learns nothing; a refresh that has not
/// succeeded for `maxStaleness` (one that hangs) stops it answering too, and failing for that long
/// forgets everything.
///
/// A different database server (a promoted standby after a failover, or a restart) may not have
/// every transaction this replica saw: with asynchronous replication a merge committed on the old
/// primary can be lost, and its transaction ids used again. So the first refresh that reads from a
/// server other than the last one's forgets everything.
///
/// A lookup made in PostgreSQL before a refresh forgot something is not learned afterwards: every
/// forgetting starts a new epoch, and `update` learns only from reads of the current epoch.
///
/// Bounded: two generations of at most `capacity / 2` entries each; when the young one is full it
/// becomes the old one and the old one is dropped, so the identities in use stay.
package final class IdentityCache: Sendable {
    private struct State {
        var young: [ScopedIdentity: Int64] = [:]
        var old: [ScopedIdentity: Int64] = [:]
        var epoch: UInt64 = 0
        /// When the last refresh succeeded; nil before the first and after a failed one.
        var refreshedAt: ContinuousClock.Instant?
        /// The server the last refresh read from (its postmaster's start time).
        var server: String?
    }

    private let state = Mutex(State())
    private let generationSize: Int
    package let maxStaleness: Duration

    package init(capacity: Int, maxStaleness: Duration) {
        generationSize = max(1, capacity / 2)
        self.maxStaleness = maxStaleness
    }

    /// A cache refreshed every `refreshInterval`: it stops answering after four intervals (at
    /// least 2 s) without a successful refresh.
    package convenience init(capacity: Int, refreshInterval: Duration) {
        self.init(capacity: capacity, maxStaleness: max(refreshInterval * 4, .seconds(2)))
    }

    /// The epoch to pass to `update` with what a read that starts now learns.
    package var epoch: UInt64 { state.withLock { $0.epoch } }

    package var count: Int { state.withLock { $0.young.count + $0.old.count } }

    /// For each list of identities, the user that owns all of them, when the cache knows every
    /// one and they agree; nil otherwise (and for empty lists). A record with an alias (an old
    /// SDK's `distinct_id` as a login id, `IdentityPlan.loginAlias`) is the alias's owner first.
    package func users(of records: [[ScopedIdentity]], aliases: [ScopedIdentity?] = []) -> [Int64?] {
        let now = ContinuousClock.now
        return state.withLock { state in
            guard let refreshed = state.refreshedAt, refreshed.advanced(by: maxStaleness) > now else {
                return [Int64?](repeating: nil, count: records.count)
            }
            func owner(_ identity: ScopedIdentity) -> Int64? {
                if let owner = state.young[identity] { return owner }
                guard let aged = state.old[identity] else { return nil }
                Self.insert(identity, aged, into: &state, generationSize: generationSize)
                return aged
            }
            return records.indices.map { index in
                if index < aliases.count, let alias = aliases[index], let user = owner(alias) { return user }
                var user: Int64?
                for identity in records[index] {
                    guard let owner = owner(identity), user == nil || user == owner else { return nil }
                    user = owner
                }
                return user
            }
        }
    }

    /// Forgets `forgetting` (changes this replica made), then learns `learned` if no refresh or
    /// change forgot anything since the read that found them began (`readAt`).
    package func update(learned: [(ScopedIdentity, Int64)], readAt: UInt64, forgetting: [ScopedIdentity]) {
        state.withLock { state in
            let current = state.epoch
            if !forgetting.isEmpty { Self.forget(forgetting, in: &state) }
            guard readAt == current, state.refreshedAt != nil else { return }
            for (identity, user) in learned { Self.insert(identity, user, into: &state, generationSize: generationSize) }
        }
    }

    /// A refresh read the invalidation log of `server`: forgets what changed elsewhere, or
    /// everything when `server` is not the one the last refresh read from. True in that case.
    @discardableResult
    package func refreshed(forgetting: [ScopedIdentity], at instant: ContinuousClock.Instant, server: String? = nil) -> Bool {
        state.withLock { state in
            let changed = server != nil && state.server != nil && server != state.server
            if server != nil { state.server = server }
            if changed {
                state.young.removeAll()
                state.old.removeAll()
                state.epoch &+= 1
            } else if !forgetting.isEmpty {
                Self.forget(forgetting, in: &state)
            }
            // Reads that began before the first look may have missed changes the log will
            // never show this replica: nothing they found is learned.
            if state.refreshedAt == nil { state.epoch &+= 1 }
            state.refreshedAt = instant
            return changed
        }
    }

    /// A refresh failed: the cache neither answers nor learns until one succeeds (the database
    /// may be failing over, and what it says next may differ from what was cached).
    package func refreshFailed() {
        state.withLock { $0.refreshedAt = nil }
    }

    /// Refreshing failed for too long: forget everything (it is not used until a refresh works).
    package func clear() {
        state.withLock { state in
            state.young.removeAll()
            state.old.removeAll()
            state.epoch &+= 1
        }
    }

    private static func forget(_ identities: [ScopedIdentity], in state: inout State) {
        for identity in identities {
            state.young[identity] = nil
            state.old[identity] = nil
        }
        state.epoch &+= 1
    }

    private static func insert(_ identity: ScopedIdentity, _ user: Int64, into state: inout State, generationSize: Int) {
        if state.young.count >= generationSize, state.young[identity] == nil {
            state.old = state.young
            state.young = [:]
            state.young.reserveCapacity(generationSize)
        }
        state.young[identity] = user
        state.old[identity] = nil
    }
}

extension IdentityCache {
    /// What this cache answers for a batch's records, in order (nil: ask PostgreSQL). The rule the
    /// gateway and identity-service both follow: only records before the first that changes the
    /// graph (an unbind, a refused part) are answered, as those after it must see that change; a
    /// record with a login alias (an old SDK's `distinct_id`) is its alias's owner when the cache
    /// knows one, otherwise the one owner of all its identities.
    package func answers(for records: [(project: String, plan: IdentityPlan)]) -> [Int64?] {
        let firstChange = records.firstIndex { !$0.plan.answerableFromCache && !$0.plan.identities.isEmpty } ?? records.endIndex
        var lookups: [[ScopedIdentity]] = []
        var aliases: [ScopedIdentity?] = []
        lookups.reserveCapacity(records.count)
        aliases.reserveCapacity(records.count)
        for (index, record) in records.enumerated() {
            guard index < firstChange, record.plan.answerableFromCache else {
                lookups.append([])
                aliases.append(nil)
                continue
            }
            lookups.append(record.plan.identities.map { ScopedIdentity(project: record.project, identity: $0) })
            aliases.append(record.plan.loginAlias.map { ScopedIdentity(project: record.project, identity: $0) })
        }
        return users(of: lookups, aliases: aliases)
    }
}
