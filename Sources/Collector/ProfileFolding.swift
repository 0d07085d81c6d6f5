import DatongContracts
import DatongPostgres

/// The users and items that a batch's profile and item records belong to, by record id, so that only
/// those whose records were newly stored are folded again.
struct ProfileKeys: Sendable {
    private struct Owner: Hashable, Sendable {
        var project: String
        /// nil for items; a profile record whose user could not be resolved has no profile.
        var userID: Int64?
        /// The item type, or a detail's schema.
        var itemType: String?
        var itemID: String?
        var isDetail = false
    }

    private var owners: [RecordKey: Owner] = [:]
    /// The increments and appends: whether they apply depends on the profile they meet.
    private var dependent: Set<RecordKey> = []

    /// Notes the owner of a profile or item record stored under `id` (its dedup key).
    mutating func add(_ record: CollectRecord, id: RecordKey) {
        if let itemType = record.itemType, let itemID = record.itemId {
            owners[id] = Owner(project: record.project, itemType: itemType, itemID: itemID, isDetail: RecordTypes.isDetail(record.type))
        } else if let userID = record.userId {
            owners[id] = Owner(project: record.project, userID: userID)
            if record.type == "profile_increment" || record.type == "profile_append" { dependent.insert(id) }
        }
    }

    /// The parameters of the fold for the owners of the records in `insertedIDs`.
    func touched(by insertedIDs: Set<RecordKey>) -> Touched {
        var seen = Set<Owner>()
        var touched = Touched()
        touched.dependentIDs = dependent.intersection(insertedIDs).map(\.uuidText)
        for (id, owner) in owners where insertedIDs.contains(id) && seen.insert(owner).inserted {
            if let schema = owner.itemType, let detailID = owner.itemID, owner.isDetail {
                touched.detailProjects.append(owner.project)
                touched.detailSchemas.append(schema)
                touched.detailIDs.append(detailID)
                touched.lockNames.append("detail\u{1F}\(owner.project)\u{1F}\(schema)\u{1F}\(detailID)")
            } else if let itemType = owner.itemType, let itemID = owner.itemID {
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
        var detailProjects: [String] = []
        var detailSchemas: [String] = []
        var detailIDs: [String] = []
        /// The newly stored increments and appends (record ids), checked against what they met.
        var dependentIDs: [String] = []
    }
}

/// What one transaction adds to `collector.ingest_counts`, per project and minute of receipt: every
/// record received is stored, a duplicate or rejected, so the columns add up by construction.
struct IngestCounts: Sendable {
    enum Outcome {
        case stored, duplicate, rejected
    }

    private struct Key: Hashable {
        var project: String
        var minute: Int64
    }

    private struct Tally {
        var stored = 0
        var duplicates = 0
        var rejected = 0
    }

    private var tallies: [Key: Tally] = [:]
    /// The tally records are being added to: consecutive records nearly always share a project and
    /// minute, so most adds touch no dictionary.
    private var current: (key: Key, tally: Tally)?

    var isEmpty: Bool { tallies.isEmpty && current == nil }

    /// The start of the minute holding `unixMillis`.
    static func minute(of unixMillis: Int64) -> Int64 {
        unixMillis - ((unixMillis % 60_000) + 60_000) % 60_000
    }

    mutating func add(project: String, minute: Int64, as outcome: Outcome) {
        if current?.key.minute != minute || current?.key.project != project {
            settle()
            current = (Key(project: project, minute: minute), Tally())
        }
        switch outcome {
        case .stored: current!.tally.stored += 1
        case .duplicate: current!.tally.duplicates += 1
        case .rejected: current!.tally.rejected += 1
        }
    }

    /// Moves the current tally into the others.
    private mutating func settle() {
        guard let (key, tally) = current else { return }
        tallies[key, default: Tally()].stored += tally.stored
        tallies[key, default: Tally()].duplicates += tally.duplicates
        tallies[key, default: Tally()].rejected += tally.rejected
        current = nil
    }

    /// Adds the counts and commits the transaction that stores the records, in one round trip
    /// after `statements` (`commit(after:)`: the arrays travel as quoted literals, not parameters).
    func writeAndCommit(on connection: PostgresConnection, after statements: [String] = []) throws {
        var counts = self
        counts.settle()
        let tallies = counts.tallies
        guard !tallies.isEmpty else {
            if !statements.isEmpty { try connection.commit(after: statements.joined(separator: ";\n")) }
            return
        }
        // A fixed order, so concurrent transactions lock counter rows in the same order. Each
        // connection adds to its own row (`slot`, from its process id): writers holding a counter
        // row until their commit would otherwise queue behind one another.
        let rows = tallies.sorted { ($0.key.project, $0.key.minute) < ($1.key.project, $1.key.minute) }
        func column(_ value: (Key, Tally) -> String) throws -> String { try connection.literal(postgresTextArray(rows.map { value($0.key, $0.value) })) }
        try connection.commit(
            after: statements.map { $0 + ";\n" }.joined()
                + """
                INSERT INTO collector.ingest_counts AS c (project, minute, slot, received, stored, duplicates, rejected)
                SELECT t.project, to_timestamp(t.minute / 1000.0), (pg_backend_pid() % 4096)::smallint,
                       t.stored + t.duplicates + t.rejected, t.stored, t.duplicates, t.rejected
                FROM unnest(\(try column { key, _ in key.project })::text[], \(try column { key, _ in String(key.minute) })::bigint[],
                            \(try column { _, tally in String(tally.stored) })::bigint[], \(try column { _, tally in String(tally.duplicates) })::bigint[],
                            \(try column { _, tally in String(tally.rejected) })::bigint[])
                     AS t(project, minute, stored, duplicates, rejected)
                ON CONFLICT (project, minute, slot) DO UPDATE SET
                    received = c.received + EXCLUDED.received, stored = c.stored + EXCLUDED.stored,
                    duplicates = c.duplicates + EXCLUDED.duplicates, rejected = c.rejected + EXCLUDED.rejected
                """)
    }
}
