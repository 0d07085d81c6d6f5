import DatongContracts
import DatongPostgres
import Foundation

/// A person's rows in the collector's tables (docs/PRIVACY.md): removed in bounded steps for an
/// erasure, each step a few short transactions so that ingestion never waits long behind it, or
/// read page by page for an export, so that memory stays flat however much the person has.
///
/// The rows are the events and profile and detail records stored with one of the subject's user
/// numbers, their profiles and details, and the rejected records that are theirs: whose text gives
/// one of their ids as the record's own user (`distinct_id`, `original_id`, `login_id`,
/// `anonymous_id`, or a value in `identities`). A refused record of another person that quotes one
/// of their ids in a property is that other person's, not theirs. Items are not among them: an item
/// record names no user (the SDKs send none).
package struct UserData: Sendable {
    let pool: PostgresPool

    package init(pool: PostgresPool) { self.pool = pool }

    /// Removes at most `step.limit` rows of each table and scans at most `step.limit` rejected
    /// records; `done` when nothing was left anywhere and the scan reached the end.
    package func eraseStep(project: String, _ step: CollectorErasureStep) async throws -> CollectorErasure {
        let users = postgresBigintArray(step.subject.users)
        let limit = String(step.limit)
        var erased = CollectorErasure(rejectedAfter: step.rejectedAfter)
        erased.events = try await pool.transaction { connection in
            try connection.query(Self.events, [project, users, limit]).scalar.flatMap(Int.init) ?? 0
        }
        erased.profileRecords = try await delete(Self.profileRecords, [project, users, limit])
        erased.details = try await delete(Self.details, [project, users, limit])
        erased.profiles = try await delete(Self.profiles, [project, users])
        // The catalog keeps no ids, but a property's sample is one value as sent: one of the
        // person's ids there goes too (as the catalog cut it).
        let samples = postgresTextArray(step.subject.identities.map { String($0.value.prefix(CatalogChanges.sampleCharacters)) })
        _ = try await delete(Self.samples, [project, samples])
        let needles = postgresTextArray(step.subject.identities.map { Self.ownIDPattern($0.value) })
        let scan = try await pool.transaction { connection in
            try connection.query(Self.rejected, [project, String(step.rejectedAfter), limit, needles]).rows.first
        }
        let scanned = scan?[0].flatMap(Int.init) ?? 0
        erased.rejected = scan?[2].flatMap(Int.init) ?? 0
        if let last = scan?[1].flatMap(Int64.init) { erased.rejectedAfter = last }
        erased.left = try await pool.withConnection { connection in
            try connection.query(Self.left, [project, users]).scalar.flatMap(Int.init) ?? 0
        }
        erased.done = scanned < step.limit && erased.events + erased.profileRecords + erased.details + erased.profiles == 0
        return erased
    }

    private func delete(_ sql: String, _ parameters: [String?]) async throws -> Int {
        try await pool.transaction { connection in try connection.query(sql, parameters).affectedRows }
    }

    /// Writes every row of `subject` as JSON lines, `{"table": …, "row": {…}}`, then a last line
    /// `{"end": true, "rows": N}` that says the export is whole (a stream cut short has none).
    package func export(project: String, subject: ErasureSubject, write: (String) async throws -> Void) async throws {
        let users = postgresBigintArray(subject.users)
        let needles = postgresTextArray(subject.identities.map { Self.ownIDPattern($0.value) })
        var rows = 0
        for table in ExportTable.allCases {
            var after = table.start
            while true {
                // PostgreSQL types every parameter from its statement: each gets only those it reads.
                let parameters =
                    table == .rejected
                    ? [project, after, String(Self.exportPage), needles] : [project, users, after, String(Self.exportPage)]
                let page = try await pool.withConnection { connection in try connection.query(table.page, parameters).rows }
                var lines = ""
                for row in page {
                    guard let line = row[0] else { continue }
                    lines += line
                    lines += "\n"
                }
                rows += page.count
                if !lines.isEmpty { try await write(lines) }
                guard page.count == Self.exportPage, let next = page.last?[1] else { break }
                after = next
            }
        }
        try await write(#"{"end":true,"rows":\#(rows)}"# + "\n")
    }

    static let exportPage = 1000

    /// Each table an export reads, a page at a time after a cursor (column 1 of each row).
    enum ExportTable: CaseIterable {
        case events, profiles, profileRecords, details, rejected

        var start: String {
            switch self {
            case .events: return "-infinity\u{1F}00000000-0000-0000-0000-000000000000"
            case .profiles, .rejected: return "0"
            case .profileRecords: return "00000000-0000-0000-0000-000000000000"
            case .details: return ""
            }
        }

        /// $1 project, $2 user numbers, $3 cursor, $4 page size; for rejected records, $1 project,
        /// $2 cursor, $3 page size, $4 the ids' `ownIDPattern`s.
        var page: String {
            switch self {
            case .events:
                return """
                    SELECT json_build_object('table', 'events', 'row', to_jsonb(e))::text,
                           e.time::text || chr(31) || e.event_id::text
                    FROM collector.events e
                    WHERE e.project = $1 AND e.user_id = ANY($2::bigint[])
                      AND (e.time, e.event_id) > (split_part($3, chr(31), 1)::timestamptz, split_part($3, chr(31), 2)::uuid)
                    ORDER BY e.time, e.event_id LIMIT $4
                    """
            case .profiles:
                return """
                    SELECT json_build_object('table', 'profiles', 'row', to_jsonb(p))::text, p.user_id::text
                    FROM collector.profiles p WHERE p.project = $1 AND p.user_id = ANY($2::bigint[]) AND p.user_id > $3::bigint
                    ORDER BY p.user_id LIMIT $4
                    """
            case .profileRecords:
                return """
                    SELECT json_build_object('table', 'profile_records', 'row', to_jsonb(r))::text, r.record_id::text
                    FROM collector.profile_records r
                    WHERE r.project = $1 AND r.user_id = ANY($2::bigint[]) AND r.record_id > $3::uuid
                    ORDER BY r.record_id LIMIT $4
                    """
            case .details:
                return """
                    SELECT json_build_object('table', 'details', 'row', to_jsonb(d))::text, d.schema || chr(31) || d.detail_id
                    FROM collector.details d
                    WHERE d.project = $1 AND d.user_id = ANY($2::bigint[]) AND d.schema || chr(31) || d.detail_id > $3
                    ORDER BY d.schema || chr(31) || d.detail_id LIMIT $4
                    """
            case .rejected:
                return """
                    SELECT json_build_object('table', 'rejected', 'row', to_jsonb(r))::text, r.id::text
                    FROM collector.rejected r
                    WHERE r.project = $1 AND r.id > $2::bigint
                      AND r.raw ~ ANY ($4::text[])
                    ORDER BY r.id LIMIT $3
                    """
            }
        }
    }

    /// A PostgreSQL regular expression that finds `value` in a record's JSON text where it names the
    /// record's own user: as `distinct_id`, `original_id`, `login_id` or `anonymous_id`, or as a
    /// value of its `identities` object. On the text, not a parse: a refused record may not be JSON.
    static func ownIDPattern(_ value: String) -> String {
        var literal = ""
        for character in jsonString(value) {
            // In PostgreSQL's regular expressions a backslash before any other than a letter or
            // digit is that character itself.
            if character.isASCII, !(character.isLetter || character.isNumber) { literal.append("\\") }
            literal.append(character)
        }
        let space = "[[:space:]]*"
        return #"("(distinct_id|original_id|login_id|anonymous_id)"\#(space):|"identities"\#(space):\#(space)\{[^{}]*:)\#(space)\#(literal)"#
    }

    /// A value as it appears in a record's JSON text: quoted, with JSON's escapes. Matching the
    /// quotes keeps a short id ("1") from matching every record that holds the digit.
    static func jsonString(_ value: String) -> String {
        let data = (try? JSONEncoder().encode([value])) ?? Data()
        let text = String(decoding: data, as: UTF8.self)
        return String(text.dropFirst().dropLast()).replacingOccurrences(of: "\\/", with: "/")
    }

    /// Deletes a batch of the person's events and marks their days, in the project's time zone, for
    /// the report rollups to build again without them (ReportRollup); answers how many went.
    private static let events = """
        WITH gone AS (
            DELETE FROM collector.events e USING (
                SELECT time, event_id FROM collector.events WHERE project = $1 AND user_id = ANY($2::bigint[]) LIMIT $3
            ) picked
            WHERE e.project = $1 AND e.time = picked.time AND e.event_id = picked.event_id
            RETURNING e.time
        ), marked AS (
            INSERT INTO collector.report_dirty (project, day)
            SELECT DISTINCT $1, (time AT TIME ZONE collector.report_zone($1))::date FROM gone
        )
        SELECT count(*)::text FROM gone
        """

    private static let profileRecords = """
        DELETE FROM collector.profile_records WHERE project = $1 AND record_id IN (
            SELECT record_id FROM collector.profile_records WHERE project = $1 AND user_id = ANY($2::bigint[]) LIMIT $3)
        """

    private static let details = """
        DELETE FROM collector.details WHERE (project, schema, detail_id) IN (
            SELECT project, schema, detail_id FROM collector.details WHERE project = $1 AND user_id = ANY($2::bigint[]) LIMIT $3)
        """

    private static let profiles = "DELETE FROM collector.profiles WHERE project = $1 AND user_id = ANY($2::bigint[])"
    private static let samples = "UPDATE collector.catalog_properties SET sample = '' WHERE project = $1 AND sample = ANY($2::text[])"

    /// Rows still to remove after a step (through the user indexes; refused records are scanned, not counted).
    private static let left = """
        SELECT (SELECT count(*) FROM collector.events WHERE project = $1 AND user_id = ANY($2::bigint[]))
             + (SELECT count(*) FROM collector.profile_records WHERE project = $1 AND user_id = ANY($2::bigint[]))
             + (SELECT count(*) FROM collector.details WHERE project = $1 AND user_id = ANY($2::bigint[]))
        """

    /// Scans rejected records after $2 (at most $3) and removes those whose own user is one of the
    /// ids (`ownIDPattern`s, $4); answers how many were scanned, the last scanned and how many went.
    private static let rejected = """
        WITH scanned AS (
            SELECT id, raw FROM collector.rejected WHERE project = $1 AND id > $2::bigint ORDER BY id LIMIT $3
        ), gone AS (
            DELETE FROM collector.rejected r USING scanned s
            WHERE r.project = $1 AND r.id = s.id
              AND s.raw ~ ANY ($4::text[])
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM scanned), (SELECT max(id) FROM scanned), (SELECT count(*) FROM gone)
        """
}
