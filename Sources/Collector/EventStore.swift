import DatongContracts
import DatongJSON
import DatongPostgres
import Prometheus

/// Where the collector writes batches.
protocol EventStore: Sendable {
    /// Writes the whole batch in one transaction and returns only after it committed.
    func write(_ batch: IncomingBatch) async throws -> CollectResult
}

/// Writes batches to PostgreSQL by binary COPY: events straight into `collector.events` (see
/// `EventWriting` for how a retried event is found without a lookup in the common case), profile
/// records through a staging table and `INSERT … ON CONFLICT DO NOTHING`. A retried record (same
/// dedup key) is counted as a duplicate instead of failing the batch. Concurrent batches are folded
/// into shared transactions (`GroupCommit`).
final class PostgresEventStore: EventStore {
    private let pool: PostgresPool
    private let partitions: EventPartitions
    private let group: GroupCommit
    private let catalog: Catalog?

    /// - Parameters:
    ///   - writers: transactions in flight at once (at most the pool's connections).
    ///   - maxRecordsPerTransaction: how many records one shared transaction takes at most.
    ///   - maxWaitingRecords: records that may wait for a writer before batches are refused (503).
    ///   - catalog: the catalog's memory of what it wrote; nil keeps no catalog (benchmarks measure
    ///     its cost so, and tests write as releases before it did).
    init(
        pool: PostgresPool, partitions: EventPartitions? = nil, writers: Int = 4, maxRecordsPerTransaction: Int = 10_000,
        maxWaitingRecords: Int = 200_000, catalog: Catalog? = Catalog(), waitingRecords: Gauge? = nil
    ) {
        let partitions = partitions ?? EventPartitions(pool: pool)
        self.pool = pool
        self.partitions = partitions
        self.catalog = catalog
        group = GroupCommit(
            maxWriters: writers, maxRecordsPerGroup: maxRecordsPerTransaction, maxWaitingRecords: maxWaitingRecords, waiting: waitingRecords
        ) { batches in
            try await Self.commit(batches, pool: pool, partitions: partitions, catalog: catalog)
        }
    }

    func write(_ batch: IncomingBatch) async throws -> CollectResult {
        guard let catalog else { return try await submit(batch) }
        var attempts = 0
        while true {
            let checked = try await TypeCheck.check(batch, catalog: catalog, pool: pool)
            do {
                return try await submit(checked)
            } catch let moved as PropertyTypesMoved where attempts < 3 {
                // Another replica typed a new property first: check again with its type.
                catalog.learn(moved.actual)
                attempts += 1
            }
        }
    }

    private func submit(_ batch: IncomingBatch) async throws -> CollectResult {
        do {
            return try await group.submit(batch)
        } catch let error as PostgresError where error.isDataException {
            // A value PostgreSQL refuses that no check before the write caught (the group commit
            // already retried this batch alone): find the records at fault instead of refusing the
            // batch for them.
            return try await isolate(batch, cause: error)
        }
    }

    /// Writes `batch` when PostgreSQL refused a value in it: halves are written on their own until
    /// the record at fault is alone, and that record is kept in `collector.rejected` instead. One
    /// bad record costs about log2(records) extra transactions, and never a good record. The
    /// halves commit separately, which is safe: a retry of the batch finds the committed records
    /// as duplicates.
    private func isolate(_ batch: IncomingBatch, cause: PostgresError) async throws -> CollectResult {
        guard batch.records.count > 1 else {
            var refused = batch
            if let record = batch.records.first {
                refused.records = []
                refused.refuse(record, reason: "collector: PostgreSQL cannot store a value of this record (SQLSTATE \(cause.sqlState ?? "?"))")
            }
            return try await Self.commit([refused], pool: pool, partitions: partitions, catalog: catalog)[0]
        }
        let middle = batch.records.count / 2
        let halves = [batch.part(0..<middle), batch.part(middle..<batch.records.count)]
        var total = CollectResult(stored: 0, duplicates: 0, rejected: 0, records: [])
        for half in halves {
            let result: CollectResult
            do {
                result = try await Self.commit([half], pool: pool, partitions: partitions, catalog: catalog)[0]
            } catch let error as PostgresError where error.isDataException {
                result = try await isolate(half, cause: error)
            }
            total.merge(result)
        }
        return total
    }

    /// How a transaction stores its events; each mode is tried when the one before met an event
    /// that another transaction had stored (unique violation), so the common case pays for no lookup.
    enum EventWriting: Sendable {
        /// COPY the group's distinct events straight into `collector.events`: an event stored by an
        /// earlier transaction fails the COPY, and the transaction is run again, looking up.
        case optimistic
        /// One indexed lookup for which events are stored already, then COPY the others.
        case lookUp
        /// COPY into a staging table, then `INSERT … ON CONFLICT DO NOTHING`: copies every row
        /// twice, and is kept for the rare race in which a concurrent transaction stores the same
        /// event between the lookup and the COPY.
        case staging
    }

    /// Writes `batches` in one transaction and returns each batch's result after the commit,
    /// trying the next `EventWriting` when an event turns out to be stored already.
    static func commit(
        _ batches: [IncomingBatch], pool: PostgresPool, partitions: EventPartitions, catalog: Catalog?
    ) async throws -> [CollectResult] {
        var writing = EventWriting.optimistic
        var forgotPartitions = false
        let changes = catalog.map { catalogChanges(of: batches, catalog: $0) }
        while true {
            do {
                let (results, confirmed) = try await commit(batches, pool: pool, partitions: partitions, catalog: changes, writing: writing)
                if let changes { catalog?.learn(changes.shapes, day: changes.lastDay) }
                catalog?.learn(confirmed)
                return results
            } catch let error as PostgresError where error.sqlState == "23505" && writing != .staging {
                writing = writing == .optimistic ? .lookUp : .staging
            } catch let error as PostgresError where error.sqlState == "23514" && !forgotPartitions {
                // No partition for a row: another replica's retention dropped one this process
                // still knew. Learn the partitions again and write once more.
                partitions.forgetAll()
                forgotPartitions = true
            }
        }
    }

    /// The catalog rows of the shapes among `batches`' records that this process has not written
    /// today (each once).
    private static func catalogChanges(of batches: [IncomingBatch], catalog: Catalog) -> CatalogChanges {
        var changes = CatalogChanges()
        var shapes: [UInt64] = []
        for batch in batches {
            for index in batch.records.indices {
                // Records of one shape often come in a row.
                if let shape = batch.records[index].catalog?.shape, shape != shapes.last { shapes.append(shape) }
            }
        }
        let unknown = catalog.unknown(shapes)
        guard !unknown.isEmpty else { return changes }
        for batch in batches {
            for index in batch.records.indices {
                guard let mark = batch.records[index].catalog, unknown.contains(mark.shape), !changes.shapes.contains(mark.shape) else { continue }
                changes.observe(batch.records[index], mark: mark, in: batch)
            }
        }
        return changes
    }

    /// Returns each batch's result, and the property types its records set or found set: the
    /// group encoded before the transaction begins, then written, each record's outcome found, and
    /// the counts and catalog written last.
    static func commit(
        _ batches: [IncomingBatch], pool: PostgresPool, partitions: EventPartitions, catalog: CatalogChanges?, writing: EventWriting
    ) async throws -> ([CollectResult], [AssumedType]) {
        let encoded = encode(batches)
        try await partitions.ensure(encoded.partitions)
        let assumed = batches.flatMap(\.assumedTypes)
        return try await pool.transaction { connection in
            try connection.setUpTemporaryTables("collector.staging", stagingTables)
            let inserted = try write(encoded, writing: writing, on: connection)
            var counts = encoded.rejectedCounts
            var changes = catalog
            let results = outcomes(of: batches, encoded.records, inserted: inserted, counts: &counts, catalog: &changes)
            // Last, so the counter and catalog rows are locked only for the moment before commit.
            let statements = try changes?.statements(on: connection) ?? []
            guard !assumed.isEmpty else {
                try counts.writeAndCommit(on: connection, after: statements)
                return (results, [])
            }
            // New properties: their types are the ones in the catalog once it is written (a round
            // trip more, for the few transactions that meet a property first).
            if !statements.isEmpty { _ = try connection.execute(statements.joined(separator: ";\n")) }
            let confirmed = try TypeCheck.confirm(assumed, on: connection)
            try counts.writeAndCommit(on: connection)
            return (results, confirmed)
        }
    }

    /// A group of batches as its transaction writes it, encoded before the transaction begins.
    private struct EncodedGroup: Sendable {
        /// Every record of the batches, in order.
        var records: [WrittenRecord] = []
        var events: [UInt8] = []
        var eventRows: [EventRow] = []
        var profiles: [UInt8] = []
        var profileCount = 0
        var profileKeys = ProfileKeys()
        var rejected: [UInt8] = []
        /// The batches' own refused records, counted by project and minute.
        var rejectedCounts = IngestCounts()
        var partitions = Set<ProjectMonth>()
    }

    /// What the outcome of a record is counted under.
    private struct WrittenRecord: Sendable {
        let key: RecordKey
        let project: String
        let minute: Int64
    }

    /// The COPY rows of the batches' events, profile records and refused records.
    private static func encode(_ batches: [IncomingBatch]) -> EncodedGroup {
        var group = EncodedGroup()
        var events = BinaryCopyWriter()
        var profiles = BinaryCopyWriter()
        var rejected = BinaryCopyWriter()
        for batch in batches {
            let minute = IngestCounts.minute(of: batch.receivedAt)
            for record in batch.records {
                group.records.append(WrittenRecord(key: record.key, project: record.project, minute: minute))
                switch record.content {
                case .event(let row):
                    group.partitions.insert(ProjectMonth(month: MonthPartition(unixMillis: record.time), project: record.project))
                    let start = events.bytes.count
                    events.appendEncodedRow(batch.eventRows[row])
                    group.eventRows.append(EventRow(project: record.project, time: record.time, id: record.key, bytes: start..<events.bytes.count))
                case .profile(let profile):
                    group.profileKeys.add(profile, id: record.key)
                    appendProfileRecord(profile, key: record.key, receivedAt: batch.receivedAt, position: group.profileCount, to: &profiles)
                    group.profileCount += 1
                }
            }
            for record in batch.rejected {
                group.rejectedCounts.add(project: record.project, minute: minute, as: .rejected)
                // What records a refusal must always be storable: a NUL would fail the whole COPY.
                rejected.beginRow(fieldCount: 4)
                rejected.text(record.project)
                rejected.timestamp(unixMillis: batch.receivedAt)
                rejected.text(UntrustedText.storable(record.reason))
                rejected.text(UntrustedText.storable(record.raw))
            }
        }
        group.events = events.finish()
        group.profiles = profiles.finish()
        group.rejected = rejected.finish()
        return group
    }

    /// Writes the group's rows by `writing`; returns the keys of the records the inserts stored.
    private static func write(_ group: EncodedGroup, writing: EventWriting, on connection: PostgresConnection) throws -> Set<RecordKey> {
        var inserted = Set<RecordKey>()
        if !group.eventRows.isEmpty {
            switch writing {
            case .optimistic:
                inserted = try copyEvents(group.eventRows, encoded: group.events, skipping: [], on: connection)
            case .lookUp:
                let existing = try storedEvents(group.eventRows, on: connection)
                inserted = try copyEvents(group.eventRows, encoded: group.events, skipping: existing, on: connection)
            case .staging:
                _ = try connection.copyIn(EventRows.copyIntoStaging, data: group.events)
                for row in try connection.execute(EventRows.insertFromStaging).rows {
                    if let key = row[0].flatMap(RecordKey.init(uuidText:)) { inserted.insert(key) }
                }
            }
        }
        if group.profileCount > 0 {
            _ = try connection.copyIn("COPY pg_temp.incoming_profile_records (\(profileColumns)) FROM STDIN (FORMAT binary)", data: group.profiles)
            for row in try connection.execute(insertProfileRecords).rows {
                if let key = row[0].flatMap(RecordKey.init(uuidText:)) { inserted.insert(key) }
            }
            try refold(group.profileKeys, insertedIDs: inserted, on: connection)
        }
        if !group.rejectedCounts.isEmpty {
            _ = try connection.copyIn("COPY collector.rejected (project, received_at, reason, raw) FROM STDIN (FORMAT binary)", data: group.rejected)
        }
        return inserted
    }

    /// Each batch's result: a record is stored when its key came back from the insert, the first
    /// time it appears in the transaction; every other record was already there (or repeated).
    /// Counts each record's outcome, and the stored ones' events and dropped properties.
    private static func outcomes(
        of batches: [IncomingBatch], _ records: [WrittenRecord], inserted: Set<RecordKey>, counts: inout IngestCounts,
        catalog changes: inout CatalogChanges?
    ) -> [CollectResult] {
        var unclaimed = inserted
        var written = records.makeIterator()
        return batches.map { batch in
            let day = Catalog.day(of: batch.receivedAt)
            var duplicates: [Int] = []
            // By index: a record read in place, not copied (its copy cost 11k instructions a batch of 50).
            for index in batch.records.indices {
                let entry = written.next()!
                let stored = unclaimed.remove(entry.key) != nil
                if !stored { duplicates.append(index) }
                counts.add(project: entry.project, minute: entry.minute, as: stored ? .stored : .duplicate)
                guard stored else { continue }
                if let mark = batch.records[index].catalog, mark.event != 0 { changes?.count(project: entry.project, day: day, mark: mark, in: batch) }
                if !batch.records[index].dropped.isEmpty { changes?.count(dropped: batch.records[index].dropped, project: entry.project, day: day) }
            }
            return batch.result(duplicates: duplicates)
        }
    }

    /// One encoded event: its key and where its COPY row is in the encoded bytes.
    private struct EventRow: Sendable {
        var project: String
        var time: Int64
        var id: RecordKey
        var bytes: Range<Int>
    }

    /// The ids of `rows` that are stored already, by one indexed lookup.
    private static func storedEvents(_ rows: [EventRow], on connection: PostgresConnection) throws -> Set<RecordKey> {
        Set(
            try connection.query(
                """
                SELECT e.event_id::text
                FROM unnest($1::text[], $2::bigint[], $3::uuid[]) AS k(project, ms, id)
                JOIN collector.events e ON e.project = k.project
                 AND e.time = timestamptz 'epoch' + k.ms * interval '1 millisecond' AND e.event_id = k.id
                """,
                [
                    postgresTextArray(rows.map(\.project)), postgresTextArray(rows.map { String($0.time) }), postgresTextArray(rows.map(\.id.uuidText)),
                ]
            ).rows.compactMap { $0[0].flatMap(RecordKey.init(uuidText:)) })
    }

    /// COPYs the events of `rows` not in `existing` (each once: a group may hold a record twice)
    /// straight into `collector.events`, and returns the ids it stored. `encoded` is the finished
    /// COPY data of all the rows, which `rows` point into.
    private static func copyEvents(
        _ rows: [EventRow], encoded: [UInt8], skipping existing: Set<RecordKey>, on connection: PostgresConnection
    ) throws -> Set<RecordKey> {
        var stored = Set<RecordKey>(minimumCapacity: rows.count)
        var keep: [Range<Int>] = []
        keep.reserveCapacity(rows.count)
        for row in rows where !existing.contains(row.id) && stored.insert(row.id).inserted { keep.append(row.bytes) }
        guard !keep.isEmpty else { return stored }
        // Every row goes (the common case): the encoded data is sent as it is, not copied.
        if keep.count == rows.count {
            _ = try connection.copyIn(EventRows.copyIntoEvents, data: encoded)
            return stored
        }
        var fresh = BinaryCopyWriter(reservingCapacity: encoded.count)
        for range in keep { fresh.appendEncodedRow(encoded[range]) }
        _ = try connection.copyIn(EventRows.copyIntoEvents, data: fresh.finish())
        return stored
    }

    /// Rebuilds the profiles and items that newly stored records touch, from all their records in
    /// record-time order (`collector.profile_fold`). Writers of the same user or item take turns on
    /// an advisory lock, so the fold sees every record committed before it.
    private static func refold(_ keys: ProfileKeys, insertedIDs: Set<RecordKey>, on connection: PostgresConnection) throws {
        let touched = keys.touched(by: insertedIDs)
        guard !touched.lockNames.isEmpty else { return }
        try connection.lockInOrder(touched.lockNames)
        if !touched.userProjects.isEmpty {
            try connection.query(refoldProfiles, [postgresTextArray(touched.userProjects), postgresTextArray(touched.userIDs)])
            if !touched.dependentIDs.isEmpty {
                try connection.query(
                    noteUnapplied,
                    [postgresTextArray(touched.userProjects), postgresTextArray(touched.userIDs), postgresTextArray(touched.dependentIDs)])
            }
        }
        if !touched.itemProjects.isEmpty {
            try connection.query(
                refoldItems,
                [
                    postgresTextArray(touched.itemProjects), postgresTextArray(touched.itemTypes), postgresTextArray(touched.itemIDs),
                ])
        }
        if !touched.detailProjects.isEmpty {
            try connection.query(
                refoldDetails,
                [
                    postgresTextArray(touched.detailProjects), postgresTextArray(touched.detailSchemas), postgresTextArray(touched.detailIDs),
                ])
        }
    }

    /// Stores the staged profile and item records that are new, numbering them in the order they
    /// were staged (`seq` there is the position in the transaction): the subquery's ORDER BY runs
    /// before the outer `nextval`, as a subquery with ORDER BY is never merged into its query.
    private static let insertProfileRecords = """
        INSERT INTO collector.profile_records (\(profileColumns))
        SELECT project, record_id, type, time, received_at, distinct_id, user_id, item_type, item_id, properties, track_id,
               nextval('collector.profile_record_order')
        FROM (SELECT * FROM pg_temp.incoming_profile_records ORDER BY seq) AS staged
        ON CONFLICT DO NOTHING RETURNING record_id::text
        """

    private static let refoldProfiles = """
        WITH folded AS (
            SELECT r.project, r.user_id,
                   (array_agg(r.distinct_id ORDER BY r.time DESC, r.seq DESC NULLS LAST, r.received_at DESC))[1] AS distinct_id,
                   collector.profile_fold(r.type, r.properties ORDER BY r.time, r.seq NULLS FIRST, r.received_at, r.record_id) AS properties,
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

    /// Puts each new increment or append that the fold left out (`collector.profile_problem` of the
    /// profile it met, folded from every record before it) in `collector.rejected` with the reason.
    /// The record stays among the profile's records: an earlier record arriving later may make it apply.
    private static let noteUnapplied = """
        INSERT INTO collector.rejected (project, received_at, reason, raw)
        SELECT project, received_at, problem,
               jsonb_build_object(
                   'type', type, 'distinct_id', distinct_id, 'time', (extract(epoch FROM time) * 1000)::bigint, 'properties', properties
               )::text
        FROM (
            SELECT r.record_id, r.project, r.received_at, r.type, r.distinct_id, r.time, r.properties,
                   collector.profile_problem(collector.profile_fold(r.type, r.properties) OVER earlier, r.type, r.properties) AS problem
            FROM collector.profile_records r
            JOIN unnest($1::text[], $2::bigint[]) AS u(project, user_id) ON r.project = u.project AND r.user_id = u.user_id
            WHERE r.item_type IS NULL
            WINDOW earlier AS (
                PARTITION BY r.project, r.user_id ORDER BY r.time, r.seq NULLS FIRST, r.received_at, r.record_id
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
            )
        ) checked
        WHERE problem IS NOT NULL AND record_id = ANY($3::uuid[])
        """

    private static let refoldItems = """
        WITH folded AS (
            SELECT r.project, r.item_type, r.item_id,
                   collector.profile_fold(r.type, r.properties ORDER BY r.time, r.seq NULLS FIRST, r.received_at, r.record_id) AS properties,
                   max(r.time) AS updated_at
            FROM collector.profile_records r
            JOIN unnest($1::text[], $2::text[], $3::text[]) AS u(project, item_type, item_id)
              ON r.project = u.project AND r.item_type = u.item_type AND r.item_id = u.item_id
            WHERE r.type IN ('item_set', 'item_delete')
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

    /// Details fold as items do, from their own records; the user is the one the newest named.
    private static let refoldDetails = """
        WITH folded AS (
            SELECT r.project, r.item_type AS schema, r.item_id AS detail_id,
                   (array_agg(r.user_id ORDER BY r.time DESC, r.seq DESC NULLS LAST, r.received_at DESC))[1] AS user_id,
                   collector.profile_fold(r.type, r.properties ORDER BY r.time, r.seq NULLS FIRST, r.received_at, r.record_id) AS properties,
                   max(r.time) AS updated_at
            FROM collector.profile_records r
            JOIN unnest($1::text[], $2::text[], $3::text[]) AS u(project, schema, detail_id)
              ON r.project = u.project AND r.item_type = u.schema AND r.item_id = u.detail_id
            WHERE r.type IN ('detail_set', 'detail_delete')
            GROUP BY r.project, r.item_type, r.item_id
        ), removed AS (
            DELETE FROM collector.details d USING folded f
            WHERE d.project = f.project AND d.schema = f.schema AND d.detail_id = f.detail_id AND f.properties = 'null'::jsonb
        )
        INSERT INTO collector.details (project, schema, detail_id, user_id, properties, updated_at)
        SELECT project, schema, detail_id, user_id, properties, updated_at FROM folded WHERE properties <> 'null'::jsonb
        ON CONFLICT (project, schema, detail_id) DO UPDATE
            SET user_id = EXCLUDED.user_id, properties = EXCLUDED.properties, updated_at = EXCLUDED.updated_at
        """

    private static let stagingTables = """
        CREATE TEMP TABLE incoming_events (LIKE collector.events) ON COMMIT DELETE ROWS;
        CREATE TEMP TABLE incoming_profile_records (LIKE collector.profile_records) ON COMMIT DELETE ROWS;
        """

    /// The columns of a profile or item record's row, in `appendProfileRecord`'s order.
    private static let profileColumns =
        "project, record_id, type, time, received_at, distinct_id, user_id, item_type, item_id, properties, track_id, seq"

    /// - Parameter position: the record's place among the transaction's profile and item records.
    private static func appendProfileRecord(
        _ record: CollectRecord, key: RecordKey, receivedAt: Int64, position: Int, to writer: inout BinaryCopyWriter
    ) {
        writer.beginRow(fieldCount: 12)
        writer.text(record.project)
        writer.uuid(key)
        writer.text(record.type)
        writer.timestamp(unixMillis: record.time)
        writer.timestamp(unixMillis: receivedAt)
        writer.text(record.distinctId)
        writer.bigint(record.userId)
        writer.text(record.itemType)
        writer.text(record.itemId)
        record.properties.utf8.withUnsafeBufferPointer { writer.jsonb(utf8: $0) }
        writer.bigint(record.trackId)
        writer.bigint(Int64(position))
    }
}
