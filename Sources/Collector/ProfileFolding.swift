import DatongContracts
import DatongPostgres

/// The users and items that a batch's profile and item records belong to, by record id, so that only
/// those whose records were newly stored are folded again.
struct ProfileKeys: Sendable {
    private struct Owner: Hashable, Sendable {
        var project: String
        /// nil for items; a profile record whose user could not be resolved has no profile.
        var userID: Int64?
        var itemType: String?
        var itemID: String?
    }

    private var owners: [String: Owner] = [:]

    /// Notes the owner of a profile or item record stored under `id` (the dedup key as text).
    mutating func add(_ record: CollectRecord, id: String) {
        if let itemType = record.itemType, let itemID = record.itemId {
            owners[id] = Owner(project: record.project, itemType: itemType, itemID: itemID)
        } else if let userID = record.userId {
            owners[id] = Owner(project: record.project, userID: userID)
        }
    }

    /// The parameters of the fold for the owners of the records in `insertedIDs`.
    func touched(by insertedIDs: Set<String>) -> Touched {
        var seen = Set<Owner>()
        var touched = Touched()
        for (id, owner) in owners where insertedIDs.contains(id) && seen.insert(owner).inserted {
            if let itemType = owner.itemType, let itemID = owner.itemID {
                touched.itemProjects.append(owner.project)
                touched.itemTypes.append(itemType)
                touched.itemIDs.append(itemID)
                touched.lockNames.append("item\u{1F}\(owner.project)\u{1F}\(itemType)\u{1F}\(itemID)")
            } else if let userID = owner.userID {
                touched.userProjects.append(owner.project)
                touched.userIDs.append(String(userID))
                touched.lockNames.append("user\u{1F}\(owner.project)\u{1F}\(userID)")
            }
        }
        return touched
    }

    struct Touched {
        var lockNames: [String] = []
        var userProjects: [String] = []
        var userIDs: [String] = []
        var itemProjects: [String] = []
        var itemTypes: [String] = []
        var itemIDs: [String] = []
    }
}

/// What one batch adds to `collector.ingest_counts`, per project: every record received is stored,
/// a duplicate or rejected, so the columns add up by construction.
struct IngestCounts: Sendable {
    private struct Tally: Sendable {
        var stored = 0
        var duplicates = 0
        var rejected = 0
    }

    private var byProject: [String: Tally] = [:]

    init(recordProjects: [String], duplicateIndexes: [Int], rejectedProjects: [String]) {
        let duplicates = Set(duplicateIndexes)
        for (index, project) in recordProjects.enumerated() {
            if duplicates.contains(index) {
                byProject[project, default: Tally()].duplicates += 1
            } else {
                byProject[project, default: Tally()].stored += 1
            }
        }
        for project in rejectedProjects { byProject[project, default: Tally()].rejected += 1 }
    }

    /// Adds the counts to the minute of `receivedAt` in the transaction that stores the batch.
    func add(at receivedAt: Int64, on connection: PostgresConnection) throws {
        guard !byProject.isEmpty else { return }
        let projects = byProject.sorted { $0.key < $1.key }
        func column(_ count: KeyPath<Tally, Int>) -> String {
            postgresTextArray(projects.map { String($0.value[keyPath: count]) })
        }
        try connection.query("""
            INSERT INTO collector.ingest_counts AS c (project, minute, slot, received, stored, duplicates, rejected)
            SELECT t.project, date_trunc('minute', to_timestamp($2::bigint / 1000.0)), (pg_backend_pid() % 8)::smallint,
                   t.stored + t.duplicates + t.rejected, t.stored, t.duplicates, t.rejected
            FROM unnest($1::text[], $3::bigint[], $4::bigint[], $5::bigint[]) AS t(project, stored, duplicates, rejected)
            ON CONFLICT (project, minute, slot) DO UPDATE SET
                received = c.received + EXCLUDED.received, stored = c.stored + EXCLUDED.stored,
                duplicates = c.duplicates + EXCLUDED.duplicates, rejected = c.rejected + EXCLUDED.rejected
            """, [
            postgresTextArray(projects.map(\.key)), String(receivedAt), column(\.stored), column(\.duplicates), column(\.rejected),
        ])
    }
}
