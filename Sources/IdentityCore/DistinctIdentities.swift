import DatongContracts

/// The identity records of a batch that need resolving, each once, with the positions of the
/// records that carry it: the rule the gateway's cached path and identity-service share.
///
/// A record repeats an earlier one when both carry the same ids and no record between them may
/// change more than its own user (an unbind, a refusal): resolving it again would give the same
/// user. After such a record nothing before it is repeated: the records after it are resolved
/// after it, as if they came in a later batch. A record with no legal identity has no user and
/// is left out.
package struct DistinctIdentities: Sendable {
    package struct Entry: Sendable {
        package let record: IdentityRecord
        package let plan: IdentityPlan
        /// Positions in the batch of the records carrying it; the first is its own.
        package var positions: [Int]
    }

    package private(set) var entries: [Entry] = []

    /// `records` in the batch's order; nil for a record that names no user (an item).
    package init(_ records: [IdentityRecord?]) {
        var seen: [IdentityRecord: Int] = [:]
        for position in records.indices {
            guard let record = records[position] else { continue }
            if let entry = seen[record] {
                entries[entry].positions.append(position)
                continue
            }
            let plan = IdentityRules.plan(for: record)
            // No legal identity: no user.
            guard !plan.identities.isEmpty else { continue }
            if plan.answerableFromCache {
                seen[record] = entries.count
            } else {
                seen.removeAll(keepingCapacity: true)
            }
            entries.append(Entry(record: record, plan: plan, positions: [position]))
        }
    }
}
