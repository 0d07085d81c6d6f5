import DatongContracts
import DatongPostgres
import Synchronization

/// Where the collector writes batches.
protocol EventStore: Sendable {
    /// Writes the whole batch in one transaction and returns only after it committed.
    func write(_ batch: CollectBatch) async throws -> CollectResult
}

/// Writes batches to PostgreSQL with binary COPY into per-session staging tables, then one
/// `INSERT … SELECT … ON CONFLICT DO NOTHING` per table: bulk speed, and a retried record (same
/// dedup key) is counted as a duplicate instead of failing the batch.
final class PostgresEventStore: EventStore {
    private let pool: PostgresPool
    private let knownPartitions = Mutex<Set<MonthPartition>>([])

    init(pool: PostgresPool) {
        self.pool = pool
    }

    func write(_ batch: CollectBatch) async throws -> CollectResult {
        var events = BinaryCopyWriter()
        var profiles = BinaryCopyWriter()
        var rejected = BinaryCopyWriter()
        var eventCount = 0
        var profileCount = 0
        var months = Set<MonthPartition>()
        var keys: [[UInt8]] = []
        keys.reserveCapacity(batch.records.count)
        var profileKeys = ProfileKeys()
        for record in batch.records {
            let key = RecordIdentity.key(of: record)
            keys.append(key)
            if RecordTypes.isEvent(record.type) {
                eventCount += 1
                months.insert(MonthPartition(unixMillis: record.time))
                Self.appendEvent(record, key: key, receivedAt: batch.receivedAt, to: &events)
            } else {
                profileCount += 1
                profileKeys.add(record, id: RecordIdentity.uuidText(key))
                Self.appendProfileRecord(record, key: key, receivedAt: batch.receivedAt, to: &profiles)
            }
        }
        for record in batch.rejected {
            rejected.beginRow(fieldCount: 4)
            rejected.text(record.project)
            rejected.timestamp(unixMillis: batch.receivedAt)
            rejected.text(record.reason)
            rejected.text(record.raw)
        }
        try await ensurePartitions(months)

        let eventData = events.finish(), profileData = profiles.finish(), rejectedData = rejected.finish()
        let hasEvents = eventCount > 0, hasProfiles = profileCount > 0
        let receivedAt = batch.receivedAt
        let recordKeys = keys, owners = profileKeys
        let recordProjects = batch.records.map(\.project)
        let rejectedProjects = batch.rejected.map(\.project)
        return try await pool.transaction { connection in
            try connection.setUpSession("collector.staging", Self.stagingTables)
            var inserted = Set<String>()
            if hasEvents {
                _ = try connection.copyIn("COPY pg_temp.incoming_events FROM STDIN (FORMAT binary)", data: eventData)
                let rows = try connection.execute(
                    "INSERT INTO collector.events SELECT * FROM pg_temp.incoming_events ON CONFLICT DO NOTHING RETURNING event_id::text"
                ).rows
                for row in rows { if let id = row[0] { inserted.insert(id) } }
            }
            if hasProfiles {
                _ = try connection.copyIn("COPY pg_temp.incoming_profile_records FROM STDIN (FORMAT binary)", data: profileData)
                let rows = try connection.execute(
                    "INSERT INTO collector.profile_records SELECT * FROM pg_temp.incoming_profile_records ON CONFLICT DO NOTHING RETURNING record_id::text"
                ).rows
                for row in rows { if let id = row[0] { inserted.insert(id) } }
                try Self.refold(owners, insertedIDs: inserted, on: connection)
            }
            if !rejectedProjects.isEmpty {
                _ = try connection.copyIn(
                    "COPY collector.rejected (project, received_at, reason, raw) FROM STDIN (FORMAT binary)", data: rejectedData
                )
            }
            // A record is stored when its key came back from the insert, the first time it appears in
            // the batch; every other record was already there (or repeated in the batch).
            var unclaimed = inserted
            var duplicateIndexes: [Int] = []
            for (index, key) in recordKeys.enumerated() {
                if unclaimed.remove(RecordIdentity.uuidText(key)) == nil { duplicateIndexes.append(index) }
            }
            let counts = IngestCounts(
                recordProjects: recordProjects, duplicateIndexes: duplicateIndexes, rejectedProjects: rejectedProjects
            )
            // Last, so the counter rows are locked only for the moment before commit.
            try counts.add(at: receivedAt, on: connection)
            return CollectResult(
                stored: recordProjects.count - duplicateIndexes.count, duplicates: duplicateIndexes.count,
                rejected: rejectedProjects.count, duplicateIndexes: duplicateIndexes
            )
        }
    }

    /// Rebuilds the profiles and items that newly stored records touch, from all their records in
    /// record-time order (`collector.profile_fold`). Writers of the same user or item take turns on
    /// an advisory lock, so the fold sees every record committed before it.
    private static func refold(_ keys: ProfileKeys, insertedIDs: Set<String>, on connection: PostgresConnection) throws {
        let touched = keys.touched(by: insertedIDs)
        guard !touched.lockNames.isEmpty else { return }
        try connection.query(
            "SELECT count(pg_advisory_xact_lock(\(profileLockClass), k)) FROM (SELECT DISTINCT hashtext(x) AS k FROM unnest($1::text[]) x ORDER BY 1) s",
            [postgresTextArray(touched.lockNames)]
        )
        if !touched.userProjects.isEmpty {
            try connection.query(refoldProfiles, [postgresTextArray(touched.userProjects), postgresTextArray(touched.userIDs)])
        }
        if !touched.itemProjects.isEmpty {
            try connection.query(refoldItems, [
                postgresTextArray(touched.itemProjects), postgresTextArray(touched.itemTypes), postgresTextArray(touched.itemIDs),
            ])
        }
    }

    /// "prof" in ASCII: the advisory lock class (two-key form) for profile and item folds.
    private static let profileLockClass = 0x7072_6F66

    private static let refoldProfiles = """
        WITH folded AS (
            SELECT r.project, r.user_id,
                   (array_agg(r.distinct_id ORDER BY r.time DESC, r.received_at DESC))[1] AS distinct_id,
                   collector.profile_fold(r.type, r.properties ORDER BY r.time, r.received_at, r.record_id) AS properties,
                   max(r.time) AS updated_at
            FROM collector.profile_records r
            JOIN unnest($1::text[], $2::bigint[]) AS u(project, user_id) ON r.project = u.project AND r.user_id = u.user_id
            WHERE r.item_type IS NULL
            GROUP BY r.project, r.user_id
        ), removed AS (
            DELETE FROM collector.profiles p USING folded f
            WHERE p.project = f.project AND p.user_id = f.user_id AND f.properties = 'null'::jsonb
        )
        INSERT INTO collector.profiles (project, user_id, distinct_id, properties, updated_at)
        SELECT project, user_id, distinct_id, properties, updated_at FROM folded WHERE properties <> 'null'::jsonb
        ON CONFLICT (project, user_id) DO UPDATE
            SET distinct_id = EXCLUDED.distinct_id, properties = EXCLUDED.properties, updated_at = EXCLUDED.updated_at
        """

    private static let refoldItems = """
        WITH folded AS (
            SELECT r.project, r.item_type, r.item_id,
                   collector.profile_fold(r.type, r.properties ORDER BY r.time, r.received_at, r.record_id) AS properties,
                   max(r.time) AS updated_at
            FROM collector.profile_records r
            JOIN unnest($1::text[], $2::text[], $3::text[]) AS u(project, item_type, item_id)
              ON r.project = u.project AND r.item_type = u.item_type AND r.item_id = u.item_id
            GROUP BY r.project, r.item_type, r.item_id
        ), removed AS (
            DELETE FROM collector.items i USING folded f
            WHERE i.project = f.project AND i.item_type = f.item_type AND i.item_id = f.item_id AND f.properties = 'null'::jsonb
        )
        INSERT INTO collector.items (project, item_type, item_id, properties, updated_at)
        SELECT project, item_type, item_id, properties, updated_at FROM folded WHERE properties <> 'null'::jsonb
        ON CONFLICT (project, item_type, item_id) DO UPDATE
            SET properties = EXCLUDED.properties, updated_at = EXCLUDED.updated_at
        """

    /// Creates the monthly partitions a batch needs that this process has not seen yet. Replicas
    /// serialise on an advisory lock, and `IF NOT EXISTS` makes a lost race harmless.
    private func ensurePartitions(_ months: Set<MonthPartition>) async throws {
        let missing = knownPartitions.withLock { months.subtracting($0) }
        guard !missing.isEmpty else { return }
        try await pool.transaction { connection in
            try connection.query("SELECT pg_advisory_xact_lock($1)", [String(Self.partitionLockKey)])
            for month in missing { try connection.execute(month.createStatement) }
        }
        knownPartitions.withLock { $0.formUnion(missing) }
    }

    /// "events" in ASCII: the advisory lock key for partition changes.
    private static let partitionLockKey = 0x6576_656E_7473

    private static let stagingTables = """
        CREATE TEMP TABLE incoming_events (LIKE collector.events) ON COMMIT DELETE ROWS;
        CREATE TEMP TABLE incoming_profile_records (LIKE collector.profile_records) ON COMMIT DELETE ROWS;
        """

    private static func appendEvent(_ record: CollectRecord, key: [UInt8], receivedAt: Int64, to writer: inout BinaryCopyWriter) {
        writer.beginRow(fieldCount: 15)
        writer.text(record.project)
        writer.timestamp(unixMillis: record.time)
        writer.uuid(key)
        writer.text(record.type)
        writer.text(record.event ?? "")
        writer.timestamp(unixMillis: receivedAt)
        writer.text(record.distinctId ?? "")
        writer.bigint(record.userId)
        writer.text(record.anonymousId)
        writer.text(record.loginId)
        writer.text(record.lib)
        writer.text(record.libVersion)
        writer.text(record.appVersion)
        writer.boolean(record.hybridH5)
        writer.jsonb(record.properties)
    }

    private static func appendProfileRecord(_ record: CollectRecord, key: [UInt8], receivedAt: Int64, to writer: inout BinaryCopyWriter) {
        writer.beginRow(fieldCount: 10)
        writer.text(record.project)
        writer.uuid(key)
        writer.text(record.type)
        writer.timestamp(unixMillis: record.time)
        writer.timestamp(unixMillis: receivedAt)
        writer.text(record.distinctId)
        writer.bigint(record.userId)
        writer.text(record.itemType)
        writer.text(record.itemId)
        writer.jsonb(record.properties)
    }
}
