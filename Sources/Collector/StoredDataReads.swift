import DatongContracts
import DatongPostgres
import DatongRuntime
import Foundation

/// What an operator looks at to see that data arrives: the newest events, the rejected records and
/// the per-minute counts. Every read names its project, is bounded (`limit`, `hours`) and pages by
/// a cursor that continues where the last page stopped. Answers are JSON built by PostgreSQL
/// (`json_agg` over the rows), passed on as they are.
package protocol StoredDataReads: Sendable {
    func events(_ query: EventQuery) async throws -> String
    func rejected(project: String, before: Int64?, limit: Int) async throws -> String
    func ingestCounts(project: String, hours: Int) async throws -> String
    /// The project's catalog (`ProjectMetadata`'s JSON).
    func metadata(project: String) async throws -> String
}

/// A page of a project's newest events, optionally only one event name, distinct id or user.
package struct EventQuery: Sendable, Equatable {
    package var project: String
    package var event: String?
    package var distinctID: String?
    /// The user as identity-service knows it now: events stored with a user merged into it count.
    package var userID: Int64?
    package var before: EventCursor?
    package var limit: Int
}

/// The bounds of every live-data read.
package enum ReadBounds {
    /// Rows in one page of events or rejected records.
    package static let limits = 1...200
    package static let defaultLimit = 50
    /// A rejected record's raw text is cut after this many characters (`raw_truncated`).
    package static let maxRawCharacters = 16 << 10
    /// How far back the per-minute counts reach.
    package static let hours = 1...72
    package static let defaultHours = 6
    /// Events, and properties, in one metadata answer at most (by name; a project with more is
    /// read with SQL from `analytics.catalog_*`).
    package static let maxCatalogRows = 10_000
}

/// Where a page of events stopped: the last event's time (µs since 1970) and id. Its text form is
/// `<micros>.<event id>`, what a page's `next` holds (PostgreSQL writes it with the page).
package struct EventCursor: Sendable, Equatable {
    package var micros: Int64
    package var eventID: UUID

    package init(micros: Int64, eventID: UUID) {
        self.micros = micros
        self.eventID = eventID
    }

    package init?(_ text: String) {
        let parts = text.split(separator: ".", maxSplits: 1)
        guard parts.count == 2, let micros = Int64(parts[0]), micros >= 0, let id = UUID(uuidString: String(parts[1])) else { return nil }
        self.init(micros: micros, eventID: id)
    }
}

package struct PostgresStoredDataReads: StoredDataReads {
    let pool: PostgresPool
    /// How long one read may run before PostgreSQL cancels it (a 503 `query_timeout`).
    let statementTimeoutMillis: Int

    package init(pool: PostgresPool, statementTimeoutMillis: Int = 5000) {
        self.pool = pool
        self.statementTimeoutMillis = statementTimeoutMillis
    }

    package func events(_ query: EventQuery) async throws -> String {
        // What analysts see in analytics.events: hidden events and properties left out, users
        // followed through merges. Written on the table, not the view: the view's per-row check
        // of hidden events makes PostgreSQL read every row of a filtered event and sort them (7 ms
        // for 8,000 rows, seconds for millions), where a list computed once keeps the page an
        // ordered index scan that stops after `limit` rows. The user filter: the user's own events
        // and those of every user merged into it, found through the (project, user_id) index.
        let sql = """
            WITH page AS (
                SELECT e.event_id, e.type, e.event, e.time, e.received_at, e.distinct_id,
                       COALESCE(c.canonical_user_id, e.user_id) AS user_id, e.user_id AS stored_user_id,
                       e.anonymous_id, e.login_id, e.lib, e.lib_version, e.app_version, e.hybrid_h5,
                       e.lib_method, e.lib_detail, e.original_id, e.identities,
                       e.properties - (SELECT coalesce(array_agg(n.name), '{}') FROM collector.catalog_notes n
                                       WHERE n.project = $1 AND n.kind = 'event_property' AND n.hidden) AS properties
                FROM collector.events e
                LEFT JOIN analytics.user_canonical c ON c.project = e.project AND c.user_id = e.user_id
                WHERE e.project = $1
                  AND e.event NOT IN (SELECT n.name FROM collector.catalog_notes n WHERE n.project = $1 AND n.kind = 'event' AND n.hidden)
                  AND ($2::text IS NULL OR e.event = $2)
                  AND ($3::text IS NULL OR e.distinct_id = $3)
                  AND ($4::bigint IS NULL OR e.user_id = $4
                       OR e.user_id IN (SELECT u.user_id FROM analytics.user_canonical u WHERE u.project = $1 AND u.canonical_user_id = $4))
                  AND ($5::bigint IS NULL OR (e.time, e.event_id) < ('epoch'::timestamptz + $5::bigint * interval '1 microsecond', $6::uuid))
                ORDER BY e.time DESC, e.event_id DESC
                LIMIT $7
            )
            SELECT COALESCE((SELECT json_agg(page ORDER BY time DESC, event_id DESC) FROM page), '[]')::text,
                   (SELECT (extract(epoch FROM time) * 1000000)::bigint || '.' || event_id FROM page ORDER BY time, event_id LIMIT 1),
                   (SELECT count(*) FROM page)
            """
        let parameters: [String?] = [
            query.project, query.event, query.distinctID, query.userID.map(String.init), query.before.map { String($0.micros) },
            query.before?.eventID.uuidString, String(query.limit),
        ]
        return try await page(sql, parameters, member: "events", limit: query.limit)
    }

    package func rejected(project: String, before: Int64?, limit: Int) async throws -> String {
        let sql = """
            WITH page AS (
                SELECT id, received_at, reason, left(raw, \(ReadBounds.maxRawCharacters)) AS raw,
                       length(raw) > \(ReadBounds.maxRawCharacters) AS raw_truncated
                FROM collector.rejected
                WHERE project = $1 AND ($2::bigint IS NULL OR id < $2)
                ORDER BY id DESC
                LIMIT $3
            )
            SELECT COALESCE((SELECT json_agg(page ORDER BY id DESC) FROM page), '[]')::text,
                   (SELECT min(id)::text FROM page),
                   (SELECT count(*) FROM page)
            """
        return try await page(sql, [project, before.map(String.init), String(limit)], member: "rejected", limit: limit)
    }

    package func ingestCounts(project: String, hours: Int) async throws -> String {
        let sql = """
            SELECT COALESCE(json_agg(c ORDER BY minute), '[]')::text FROM (
                SELECT minute, received, stored, duplicates, rejected
                FROM analytics.ingest_counts
                WHERE project = $1 AND minute >= date_trunc('minute', now()) - $2::int * interval '1 hour'
            ) c
            """
        let minutes = try await read(sql, [project, String(hours)]).first?.first.flatMap { $0 } ?? "[]"
        return #"{"hours":\#(hours),"minutes":\#(minutes)}"#
    }

    package func metadata(project: String) async throws -> String {
        let sql = """
            SELECT json_build_object(
                'project', $1::text,
                'events', COALESCE((
                    SELECT json_agg(json_build_object(
                        'name', e.event, 'firstDay', e.first_day::text, 'lastDay', e.last_day::text, 'count', e.count,
                        'libs', COALESCE(e.libs, '{}'), 'appVersions', COALESCE(e.app_versions, '{}'),
                        'displayName', e.display_name, 'description', e.description, 'hidden', nullif(e.hidden, false),
                        'properties', COALESCE((
                            SELECT json_agg(json_build_object('name', p.name, 'type', p.type) ORDER BY p.name, p.type)
                            FROM collector.catalog_event_properties p WHERE p.project = e.project AND p.event = e.event), '[]')
                    ) ORDER BY e.event)
                    FROM (SELECT * FROM analytics.catalog_events WHERE project = $1 ORDER BY event LIMIT \(ReadBounds.maxCatalogRows)) e), '[]'),
                'properties', COALESCE((
                    SELECT json_agg(json_build_object(
                        'kind', p.kind, 'name', p.name, 'type', p.type, 'firstDay', coalesce(p.first_day::text, ''), 'lastDay', coalesce(p.last_day::text, ''),
                        'sample', coalesce(p.sample, ''), 'events', p.events, 'displayName', p.display_name, 'description', p.description,
                        'declared', p.declared_at IS NOT NULL, 'hidden', nullif(p.hidden, false),
                        'conflicts', COALESCE((
                            SELECT json_agg(json_build_object('name', x.event, 'type', x.type) ORDER BY x.event, x.type)
                            FROM collector.catalog_event_properties x
                            WHERE p.kind = 'event' AND x.project = p.project AND x.name = p.name AND x.type <> p.type), '[]')
                    ) ORDER BY p.kind, p.name)
                    FROM (SELECT * FROM analytics.catalog_properties WHERE project = $1 ORDER BY kind, name LIMIT \(ReadBounds.maxCatalogRows)) p), '[]'),
                'typeRefusals', COALESCE((
                    SELECT json_agg(json_build_object(
                        'day', r.day::text, 'property', r.property, 'type', r.type, 'sentType', r.sent_type, 'records', r.records
                    ) ORDER BY r.day DESC, r.records DESC, r.property)
                    FROM (SELECT * FROM analytics.type_refusals WHERE project = $1 AND day > current_date - 30
                          ORDER BY day DESC, records DESC, property LIMIT \(ReadBounds.maxCatalogRows)) r), '[]'),
                'drops', COALESCE((
                    SELECT json_agg(json_build_object(
                        'day', d.day::text, 'kind', d.kind, 'property', d.name, 'reason', d.reason, 'count', d.count
                    ) ORDER BY d.day DESC, d.count DESC, d.name)
                    FROM (SELECT * FROM analytics.dropped_properties WHERE project = $1 AND day > current_date - 30
                          ORDER BY day DESC, count DESC, name LIMIT \(ReadBounds.maxCatalogRows)) d), '[]'),
                'undeclaredEvents', COALESCE((
                    SELECT json_agg(json_build_object('day', u.day::text, 'event', u.event, 'records', u.records)
                                    ORDER BY u.day DESC, u.records DESC, u.event)
                    FROM (SELECT * FROM analytics.undeclared_events WHERE project = $1 AND day > current_date - 30
                          ORDER BY day DESC, records DESC, event LIMIT \(ReadBounds.maxCatalogRows)) u), '[]'),
                'settings', COALESCE((
                    SELECT json_build_object('strict', s.strict, 'wrongType', s.wrong_type) FROM collector.catalog_settings s WHERE s.project = $1),
                    json_build_object('strict', false, 'wrongType', 'refuse')),
                'declaredEvents', COALESCE((
                    SELECT json_agg(e.event ORDER BY e.event)
                    FROM (SELECT event FROM collector.catalog_declared_events WHERE project = $1 ORDER BY event LIMIT \(ReadBounds.maxCatalogRows)) e), '[]')
            )::text
            """
        return try await read(sql, [project]).first?.first.flatMap { $0 } ?? "{}"
    }

    /// A read bounded in time too: the console's reads must not hold the database (a filter that
    /// matches few rows of a large table can scan long). Past it, PostgreSQL cancels the statement.
    private func read(_ sql: String, _ parameters: [String?]) async throws -> [[String?]] {
        try await pool.transaction { connection in
            try connection.execute("SET LOCAL statement_timeout = \(statementTimeoutMillis)")
            return try connection.query(sql, parameters).rows
        }
    }

    /// `{"<member>": [rows], "next": cursor or null}`; `next` only when the page is full.
    private func page(_ sql: String, _ parameters: [String?], member: String, limit: Int) async throws -> String {
        let row = try await read(sql, parameters).first ?? []
        let rows = row.first.flatMap { $0 } ?? "[]"
        let full = row.count > 2 && row[2].flatMap { Int($0) } == limit
        // The cursor is digits, a dot and a uuid: nothing to escape.
        let next = full ? row[1].map { #""\#($0)""# } ?? "null" : "null"
        return #"{"\#(member)":\#(rows),"next":\#(next)}"#
    }
}
