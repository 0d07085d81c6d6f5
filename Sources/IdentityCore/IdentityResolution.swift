import DatongContracts

/// The one resolve procedure, which the gateway (misses fetched from identity-service over HTTP)
/// and identity-service (misses applied to the graph in PostgreSQL) both run: each distinct
/// identity record once (`DistinctIdentities`), the cache's answers by its own rule
/// (`IdentityCache.answers`), the rest fetched in the records' order, what the fetch says learned
/// into the cache as of the look before it, and each record given its distinct record's user.
/// Only `fetch` differs between them; `ResolveDifferentialTests` shows they agree.
package enum IdentityResolution {
    /// What resolving the misses gave: one user per entry asked, in order; the owners the cache
    /// may learn; the identities whose owner moved, which it forgets.
    package struct Fetched: Sendable {
        package var users: [ResolvedUser]
        package var learned: [(ScopedIdentity, Int64)]
        package var forgetting: [ScopedIdentity]

        package init(users: [ResolvedUser], learned: [(ScopedIdentity, Int64)] = [], forgetting: [ScopedIdentity] = []) {
            self.users = users
            self.learned = learned
            self.forgetting = forgetting
        }
    }

    /// What became of a batch's records.
    package struct Resolved: Sendable {
        /// One per record: nil for one that names no user (an item, or no legal identity).
        /// Only the first record of a distinct identity record can have `created` its user.
        package var users: [ResolvedUser?]
        /// Records the cache answered.
        package var answered = 0
        /// Distinct identity records fetched.
        package var asked = 0
        /// The identities `fetch` said moved (the gateway's caller passes them on).
        package var forgetting: [ScopedIdentity] = []
    }

    /// Resolves `records` (nil: a record that names no user).
    /// - Parameters:
    ///   - answerFromCache: whether `cache` may answer (identity-service's does not answer a
    ///     caller with a cache of its own, which must learn only what PostgreSQL says now).
    ///   - fetch: resolves the entries the cache did not answer, in their order.
    package static func resolve(
        _ records: [IdentityRecord?], cache: IdentityCache?, answerFromCache: Bool = true,
        fetch: ([DistinctIdentities.Entry]) async throws -> Fetched
    ) async throws -> Resolved {
        let distinct = DistinctIdentities(records).entries
        var resolved = Resolved(users: Array(repeating: nil, count: records.count))
        // Learned as of this moment: an invalidation read while the fetch runs wins over it.
        let epoch = cache?.epoch ?? 0
        let known = answerFromCache ? cache?.answers(for: distinct.map { ($0.record.project, $0.plan) }) : nil
        var misses: [DistinctIdentities.Entry] = []
        for (index, entry) in distinct.enumerated() {
            if let user = known?[index] {
                for position in entry.positions { resolved.users[position] = ResolvedUser(userId: user, created: false) }
                resolved.answered += entry.positions.count
            } else {
                misses.append(entry)  // in the records' order: they are applied in it
            }
        }
        resolved.asked = misses.count
        guard !misses.isEmpty else { return resolved }
        let fetched = try await fetch(misses)
        cache?.update(learned: fetched.learned, readAt: epoch, forgetting: fetched.forgetting)
        resolved.forgetting = fetched.forgetting
        for (entry, user) in zip(misses, fetched.users) {
            for position in entry.positions {
                // A repeat made no user: only its first record can have created one.
                resolved.users[position] = position == entry.positions[0] ? user : ResolvedUser(userId: user.userId, created: false, owned: user.owned)
            }
        }
        return resolved
    }
}
