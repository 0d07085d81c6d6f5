import DatongContracts
import DatongJSON
import DatongPostgres
import Synchronization

// The catalog: which events and properties each project sends, with their Sensors types, kept
// while storing records, never by a write per record.
//
// Reading a batch gives each event and profile record a shape (`CatalogMark.shape`): one hash over
// its project, event, `$lib`, app version, the UTC day it was received and its properties' names and
// types. A collector writes the catalog rows of a shape once a day (`Catalog`); records whose shape
// it wrote already cost only that hash. How many events of each name were stored is added up in the
// transaction that stores them, beside `collector.ingest_counts`: counted once, after the dedup,
// by every replica alike.

/// What the catalog needs of a record, found while reading it.
struct CatalogMark: Sendable {
    /// The record's shape (see above).
    var shape: UInt64
    /// The hash of its project and event name, which its count is kept under; 0 for a profile record.
    var event: UInt64
    /// Where the event's name is in the batch's bytes (the string's content, escapes as sent);
    /// empty for a record without one.
    var name: Range<Int32>
    var nameEscaped: Bool

    /// The event's name, from the batch's bytes.
    func eventName(in body: [UInt8]) -> String {
        let bytes = body[Int(name.lowerBound)..<Int(name.upperBound)]
        return String(decoding: nameEscaped ? bytes.withUnsafeBufferPointer { JSONParser.unescape($0) } : Array(bytes), as: UTF8.self)
    }
}

/// A 64-bit hash over byte strings, eight bytes at a time: cache keys, not security (a crafted
/// collision only keeps a property out of the catalog until the next day).
struct ShapeHasher {
    private(set) var value: UInt64 = 0x243F_6A88_85A3_08D3

    @inline(__always)
    mutating func combine(_ word: UInt64) {
        value = (value ^ word) &* 0x9E37_79B9_7F4A_7C15
        value ^= value >> 29
    }

    /// The bytes and their length, so that ("ab", "c") and ("a", "bc") differ; nil is not "".
    mutating func combine(_ bytes: UnsafeBufferPointer<UInt8>?) {
        guard let bytes else { return combine(0x5A5A) }
        combine(0..<bytes.count, in: bytes)
    }

    /// `buffer[range]`, eight bytes at a time. The last ones are read in one load that ends where
    /// the range does when the buffer has 8 bytes up to there (a property name inside the batch:
    /// a few loads, not a loop over its bytes), else byte by byte; both give the same hash.
    @inline(__always)
    mutating func combine(_ range: Range<Int>, in buffer: UnsafeBufferPointer<UInt8>) {
        guard let base = buffer.baseAddress else { return combine(UInt64(0)) }
        let raw = UnsafeRawPointer(base)
        var offset = range.lowerBound
        while offset + 8 <= range.upperBound {
            combine(raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
            offset += 8
        }
        let left = range.upperBound - offset
        var tail = UInt64(range.count) << 56
        if left > 0, range.upperBound >= 8 {
            // Little-endian: the last `left` bytes are the word's high ones.
            let word = raw.loadUnaligned(fromByteOffset: range.upperBound - 8, as: UInt64.self)
            tail |= UInt64(littleEndian: word) >> UInt64(64 - 8 * left)
        } else {
            for shift in 0..<left { tail |= UInt64(buffer[offset + shift]) << (shift * 8) }
        }
        combine(tail)
    }
}

extension SensorsType {
    /// The type of a property value as stored (the gateway wrote date-times with three digits of
    /// milliseconds): nil for null and anything no Sensors type holds.
    @inline(__always)
    static func of(_ entry: JSONDocument.Entry, bytes: UnsafeBufferPointer<UInt8>) -> SensorsType? {
        switch entry.kind {
        case .number: return .number
        case .bool: return .bool
        case .array: return .list
        case .null, .object: return nil
        case .string:
            guard !entry.flag else { return .string }
            let text = UnsafeBufferPointer(rebasing: bytes[Int(entry.start)..<Int(entry.end)])
            if text.count == 10, matches(text, datePattern), isCalendarTime(text) { return .date }
            if text.count == 23, matches(text, dateTimePattern), isCalendarTime(text) { return .datetime }
            return .string
        }
    }

    /// Whether digits in the date (and time) pattern name a real day (and time of day): a text like
    /// `2026-02-30` is a STRING, as `analytics.sensors_datetime` reads it as no date.
    private static func isCalendarTime(_ text: UnsafeBufferPointer<UInt8>) -> Bool {
        func number(_ range: Range<Int>) -> Int { range.reduce(0) { $0 * 10 + Int(text[$1] - UInt8(ascii: "0")) } }
        let year = number(0..<4)
        let month = number(5..<7)
        let day = number(8..<10)
        guard year > 0, (1...12).contains(month), day >= 1 else { return false }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let days = month == 2 ? (leap ? 29 : 28) : [4, 6, 9, 11].contains(month) ? 30 : 31
        guard day <= days else { return false }
        return text.count == 10 || (number(11..<13) < 24 && number(14..<16) < 60 && number(17..<19) < 60)
    }

    private static let datePattern = Array("dddd-dd-dd".utf8)
    private static let dateTimePattern = Array("dddd-dd-dd dd:dd:dd.ddd".utf8)

    private static func matches(_ text: UnsafeBufferPointer<UInt8>, _ pattern: [UInt8]) -> Bool {
        for (byte, expected) in zip(text, pattern) {
            if expected == UInt8(ascii: "d") {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return false }
            } else if byte != expected {
                return false
            }
        }
        return true
    }

    /// One number for a shape's hash.
    var code: UInt64 {
        switch self {
        case .number: 1
        case .bool: 2
        case .string: 3
        case .list: 4
        case .datetime: 5
        case .date: 6
        }
    }
}

/// What this process knows of the catalog: the shapes it wrote today (a record of a known shape
/// adds nothing to it but its count, and its values need no type check), the shapes whose records
/// hold a value not of its property's type (checked every time), and each project's property types
/// (`PropertyTypes.swift`).
final class Catalog: Sendable {
    private let known = Mutex(Known())
    private let types = Mutex([String: ProjectTypes]())

    private struct Known {
        var day: Int64 = 0
        var shapes = Set<UInt64>()
        var misfits = Set<UInt64>()
        /// The names of dropped properties counted under their own name, per project.
        var droppedNames: [String: Set<String>] = [:]

        mutating func forget() {
            shapes.removeAll(keepingCapacity: true)
            misfits.removeAll(keepingCapacity: true)
            droppedNames.removeAll()
        }
    }

    /// Dropped properties counted under their own name per project (a client inventing names
    /// in a strict project is counted under `otherDroppedNames` past them).
    static let maxDroppedNames = 1_000
    static let otherDroppedNames = "(other names)"

    /// The name `name`, dropped from a record of `project`, is counted under.
    func countedName(dropped name: String, project: String) -> String {
        known.withLock { known in
            if known.droppedNames[project]?.contains(name) == true { return name }
            guard known.droppedNames[project, default: []].count < Self.maxDroppedNames else { return Self.otherDroppedNames }
            known.droppedNames[project, default: []].insert(name)
            return name
        }
    }

    /// A project's property types and rules as loaded, and their version then.
    struct ProjectTypes: Sendable {
        var version: Int64
        var types: [TypedName: SensorsType]
        /// The properties an admin declared.
        var declared: Set<TypedName> = []
        /// The events declared.
        var events: Set<String> = []
        /// Declared events and properties only (`ProjectCatalogSettings.strict`).
        var strict = false
        /// A value of another type drops the property, not the record.
        var dropsWrongType = false
    }

    struct TypedName: Hashable, Sendable {
        /// `event` or `profile`.
        var kind: String
        var name: String
    }

    /// Past this many, the set starts again (and shapes are written once more: harmless).
    static let maxKnownShapes = 100_000

    init() {}

    /// Which of `shapes` this process has not written today.
    func unknown(_ shapes: [UInt64]) -> Set<UInt64> {
        known.withLock { known in
            var unknown = Set<UInt64>()
            for shape in shapes where !known.shapes.contains(shape) { unknown.insert(shape) }
            return unknown
        }
    }

    /// Which of `shapes` need their records' values checked: not written today, or misfits.
    func unchecked(_ shapes: [UInt64]) -> Set<UInt64> {
        known.withLock { known in
            var unchecked = Set<UInt64>()
            for shape in shapes where !known.shapes.contains(shape) || known.misfits.contains(shape) { unchecked.insert(shape) }
            return unchecked
        }
    }

    /// Notes that records of `shape` hold a value not of its property's type.
    func misfit(_ shape: UInt64) {
        known.withLock { known in
            if known.misfits.count >= Self.maxKnownShapes { known.misfits.removeAll(keepingCapacity: true) }
            known.misfits.insert(shape)
        }
    }

    /// Notes `shapes` as written, after the transaction writing them committed on `day`.
    func learn(_ shapes: Set<UInt64>, day: Int64) {
        guard !shapes.isEmpty else { return }
        known.withLock { known in
            // Shapes hash their day: yesterday's will not come again (only late uploads). Misfits
            // stay (bounded on their own): one noted before this commit, perhaps of a shape it
            // adds, must still be checked, or its next records would be stored unconverted.
            if day > known.day || known.shapes.count + shapes.count > Self.maxKnownShapes {
                known.shapes.removeAll(keepingCapacity: true)
                known.droppedNames.removeAll()
                known.day = max(known.day, day)
            }
            known.shapes.formUnion(shapes)
        }
    }

    /// The property types of `projects` that are loaded (those not loaded are missing).
    func types(of projects: Set<String>) -> [String: ProjectTypes] {
        types.withLock { types in types.filter { projects.contains($0.key) } }
    }

    /// Keeps the types loaded for `project`.
    func load(_ project: String, _ loaded: ProjectTypes) {
        types.withLock { $0[project] = loaded }
    }

    /// Adds types that a committed transaction set (first values) or found set.
    func learn(_ learned: [AssumedType]) {
        guard !learned.isEmpty else { return }
        types.withLock { types in
            for type in learned { types[type.project]?.types[TypedName(kind: type.kind, name: type.name)] = type.type }
        }
    }

    /// Forgets the types of the projects whose declared types changed since they were loaded (by
    /// their version: `current`), and, when any did, which shapes were checked: their records are
    /// checked again under the new types.
    func forgetChanged(_ current: [String: Int64]) {
        let changed = types.withLock { types in
            let changed = types.filter { $0.value.version != (current[$0.key] ?? 0) }.map(\.key)
            for project in changed { types[project] = nil }
            return !changed.isEmpty
        }
        if changed { forgetShapes() }
    }

    /// Forgets `project`'s types (this process changed them) and which shapes were checked.
    func forgetTypes(of project: String) {
        types.withLock { $0[project] = nil }
        forgetShapes()
    }

    private func forgetShapes() {
        known.withLock { $0.forget() }
    }

    /// The UTC day (days since 1970-01-01) holding `unixMillis`.
    static func day(of unixMillis: Int64) -> Int64 { unixMillis / 86_400_000 }
}

/// What one transaction adds to the catalog: the rows of shapes not known before it, and the
/// number of events of each name it stored.
struct CatalogChanges {
    private var properties: [PropertyKey: Seen] = [:]
    private var eventProperties: [EventPropertyKey: Seen] = [:]
    private var sources: [SourceKey: Seen] = [:]
    /// Events stored, by their mark's `event` and day (one hash).
    private var counts: [UInt64: Counted] = [:]
    /// Properties left out of stored records.
    private var drops: [DropKey: Int] = [:]
    /// The shapes written, to learn once the transaction committed.
    private(set) var shapes = Set<UInt64>()
    private(set) var lastDay: Int64 = 0

    private struct PropertyKey: Hashable {
        var project: String
        var kind: String
        var name: String
    }

    private struct EventPropertyKey: Hashable {
        var project: String
        var event: String
        var name: String
        var type: SensorsType
    }

    private struct SourceKey: Hashable {
        var project: String
        var event: String
        var lib: String
        var appVersion: String
    }

    private struct CountKey: Hashable {
        var project: String
        var event: String
        var day: Int64
    }

    private struct DropKey: Hashable {
        var project: String
        var day: Int64
        var dropped: DroppedProperty
    }

    private struct Counted {
        var key: CountKey
        var count: Int
    }

    /// The days a row was seen on, and for a property, the first value's type and text.
    private struct Seen {
        var first: Int64
        var last: Int64
        var type: SensorsType? = nil
        var sample = ""

        mutating func add(_ day: Int64) {
            first = min(first, day)
            last = max(last, day)
        }
    }

    /// Rows a project may have in each catalog table: a client sending made-up names (an id as a
    /// property name) fills its project's catalog up to them, never more; rows there already are
    /// kept up to date. Events are the names in `catalog_event_sources`; only they are counted.
    static let maxProperties = 10_000
    static let maxSources = 50_000
    static let maxEventProperties = 100_000

    /// The statement that adds `columns` (text arrays, named as in `table`, `first` and `last`
    /// days last) to `table`, or widens the days of the rows there already (by `key`). Rows not
    /// there yet are taken, in key order, only while the project (`group`) has fewer than `limit`
    /// rows: counted once a statement, stopping at `limit` index entries (`MATERIALIZED`, or the
    /// planner moves the count into the join, once a row: 1.4 s for 1,000 new names instead of 30 ms).
    private static func upsert(
        _ table: String, key: [String], group: [String], limit: Int, columns: [(name: String, values: String)]
    ) -> String {
        let names = columns.map(\.name)
        let inserted = names.filter { $0 != "first" && $0 != "last" }
        func tuple(_ alias: String, _ columns: [String]) -> String { "(" + columns.map { "\(alias).\($0)" }.joined(separator: ", ") + ")" }
        return """
            WITH t AS (
                SELECT * FROM unnest(\(columns.map { "\($0.values)::\($0.name == "first" || $0.name == "last" ? "bigint" : "text")[]" }.joined(separator: ", ")))
                    AS t(\(names.joined(separator: ", ")))
            ), ranked AS MATERIALIZED (
                SELECT t.*, k.known, row_number() OVER (PARTITION BY \(group.map { "t.\($0)" }.joined(separator: ", ")), k.known ORDER BY \(key.map { "t.\($0)" }.joined(separator: ", "))) AS position
                FROM t CROSS JOIN LATERAL (
                    SELECT EXISTS (SELECT 1 FROM collector.\(table) r WHERE \(tuple("r", key)) = \(tuple("t", key))) AS known
                ) AS k
            ), room AS MATERIALIZED (
                SELECT \(group.map { "g.\($0)" }.joined(separator: ", ")),
                       \(limit) - (SELECT count(*) FROM (SELECT 1 FROM collector.\(table) r WHERE \(tuple("r", group)) = \(tuple("g", group)) LIMIT \(limit)) AS n) AS free
                FROM (SELECT DISTINCT \(group.joined(separator: ", ")) FROM t) AS g
            )
            INSERT INTO collector.\(table) AS c (\(inserted.joined(separator: ", ")), first_day, last_day)
            SELECT \(inserted.joined(separator: ", ")), date 'epoch' + first::int, date 'epoch' + last::int
            FROM ranked JOIN room USING (\(group.joined(separator: ", ")))
            WHERE known OR position <= free
            ORDER BY \(key.joined(separator: ", "))
            ON CONFLICT (\(key.joined(separator: ", "))) DO UPDATE
                SET first_day = least(c.first_day, EXCLUDED.first_day), last_day = greatest(c.last_day, EXCLUDED.last_day)
                WHERE c.first_day IS NULL OR c.first_day > EXCLUDED.first_day OR c.last_day < EXCLUDED.last_day
            """
    }

    /// Longer names are no names the gateway lets through: left out.
    private static let maxNameBytes = 255
    /// Samples are cut to this many characters.
    static let sampleCharacters = 64

    /// Adds the rows of `record`'s shape, read again from its JSON (this is rare: a collector's
    /// first record of a shape each day; the batch keeps its bytes, not its parse).
    mutating func observe(_ record: IncomingBatch.Record, mark: CatalogMark, in batch: IncomingBatch) {
        let day = Catalog.day(of: batch.receivedAt)
        let project = record.project
        lastDay = max(lastDay, day)
        shapes.insert(mark.shape)
        // The batch was read with this depth bound: its record parses again.
        guard let document = try? JSONParser.parse(Array(batch.body[record.raw]), maxDepth: CollectBatch.maxDepth) else { return }
        let object = document.root
        let event = mark.event == 0 ? nil : object["event"]?.stringValue ?? ""
        let kind = event == nil ? "profile" : "event"
        if let event {
            let key = SourceKey(
                project: project, event: event, lib: object["lib"]?.stringValue ?? "", appVersion: object["appVersion"]?.stringValue ?? "")
            sources[key, default: Seen(first: day, last: day)].add(day)
        }
        guard let members = object["properties"], members.kind == .object else { return }
        document.bytes.withUnsafeBufferPointer { bytes in
            for (name, value) in members.members {
                guard let type = SensorsType.of(value.entry, bytes: bytes), let name = name.stringValue,
                    name.utf8.count <= Self.maxNameBytes, !name.utf8.contains(0)
                else { continue }
                let key = PropertyKey(project: project, kind: kind, name: name)
                if properties[key] == nil {
                    properties[key] = Seen(first: day, last: day, type: type, sample: Self.sample(value))
                } else {
                    properties[key]!.add(day)
                }
                if let event {
                    eventProperties[EventPropertyKey(project: project, event: event, name: name, type: type), default: Seen(first: day, last: day)]
                        .add(day)
                }
            }
        }
    }

    /// Counts a stored event of `project` received on `day` (its batch's); its name is read from
    /// the batch the first time.
    mutating func count(project: String, day: Int64, mark: CatalogMark, in batch: IncomingBatch) {
        let key = mark.event &+ UInt64(day) &* 0x9E37_79B9_7F4A_7C15
        if let index = counts.index(forKey: key) {
            counts.values[index].count += 1
        } else {
            counts[key] = Counted(key: CountKey(project: project, event: mark.eventName(in: batch.body), day: day), count: 1)
        }
    }

    /// Counts the properties left out of a stored record of `project` received on `day`.
    mutating func count(dropped: [DroppedProperty], project: String, day: Int64) {
        for property in dropped { drops[DropKey(project: project, day: day, dropped: property), default: 0] += 1 }
    }

    /// A value as the sample's text: a string as itself, anything else as its JSON; NUL left out.
    private static func sample(_ value: JSONRef) -> String {
        var text = value.stringValue ?? value.rawText
        if text.count > sampleCharacters { text = String(text.prefix(sampleCharacters)) }
        return UntrustedText.storable(text)
    }

    /// The statements that write these changes, to run in the transaction that stores the records
    /// (`IngestCounts.writeAndCommit`). Rows go in key order (each upsert's `ORDER BY`), tables in
    /// this order, so concurrent transactions lock catalog rows in the same order and never deadlock; event counts go to the connection's own row, as ingest
    /// counts do.
    func statements(on connection: PostgresConnection) throws -> [String] {
        func array(_ values: [String]) throws -> String { try connection.literal(postgresTextArray(values)) }
        var sql: [String] = []
        func days(_ rows: [(key: some Any, value: Seen)]) throws -> [(name: String, values: String)] {
            [("first", try array(rows.map { String($0.value.first) })), ("last", try array(rows.map { String($0.value.last) }))]
        }
        if !properties.isEmpty {
            let rows = properties.sorted { ($0.key.project, $0.key.kind, $0.key.name) < ($1.key.project, $1.key.kind, $1.key.name) }
            sql.append(
                Self.upsert(
                    "catalog_properties", key: ["project", "kind", "name"], group: ["project", "kind"], limit: Self.maxProperties,
                    columns: [
                        ("project", try array(rows.map(\.key.project))), ("kind", try array(rows.map(\.key.kind))), ("name", try array(rows.map(\.key.name))),
                        ("type", try array(rows.map { $0.value.type!.rawValue })), ("sample", try array(rows.map(\.value.sample))),
                    ] + (try days(rows))))
        }
        if !eventProperties.isEmpty {
            let rows = eventProperties.sorted {
                ($0.key.project, $0.key.event, $0.key.name, $0.key.type.rawValue) < ($1.key.project, $1.key.event, $1.key.name, $1.key.type.rawValue)
            }
            sql.append(
                Self.upsert(
                    "catalog_event_properties", key: ["project", "event", "name", "type"], group: ["project"], limit: Self.maxEventProperties,
                    columns: [
                        ("project", try array(rows.map(\.key.project))), ("event", try array(rows.map(\.key.event))),
                        ("name", try array(rows.map(\.key.name))), ("type", try array(rows.map(\.key.type.rawValue))),
                    ] + (try days(rows))))
        }
        if !sources.isEmpty {
            let rows = sources.sorted {
                ($0.key.project, $0.key.event, $0.key.lib, $0.key.appVersion) < ($1.key.project, $1.key.event, $1.key.lib, $1.key.appVersion)
            }
            sql.append(
                Self.upsert(
                    "catalog_event_sources", key: ["project", "event", "lib", "app_version"], group: ["project"], limit: Self.maxSources,
                    columns: [
                        ("project", try array(rows.map(\.key.project))), ("event", try array(rows.map(\.key.event))),
                        ("lib", try array(rows.map(\.key.lib))), ("app_version", try array(rows.map(\.key.appVersion))),
                    ] + (try days(rows))))
        }
        if !counts.isEmpty {
            // By name and day: should two (event, day) hashes ever meet, one statement must still
            // not upsert a row twice.
            var byName: [CountKey: Int] = [:]
            for counted in counts.values { byName[counted.key, default: 0] += counted.count }
            let rows = byName.map { (key: $0.key, count: $0.value) }
                .sorted { ($0.key.project, $0.key.event, $0.key.day) < ($1.key.project, $1.key.event, $1.key.day) }
            sql.append(
                """
                INSERT INTO collector.catalog_event_counts AS c (project, event, day, slot, count)
                SELECT project, event, date 'epoch' + day::int, (pg_backend_pid() % 4096)::smallint, count
                FROM unnest(\(try array(rows.map(\.key.project)))::text[], \(try array(rows.map(\.key.event)))::text[],
                            \(try array(rows.map { String($0.key.day) }))::bigint[], \(try array(rows.map { String($0.count) }))::bigint[])
                     AS t(project, event, day, count)
                WHERE EXISTS (SELECT 1 FROM collector.catalog_event_sources r WHERE r.project = t.project AND r.event = t.event)
                ON CONFLICT (project, event, day, slot) DO UPDATE SET count = c.count + EXCLUDED.count
                """)
        }
        if !drops.isEmpty {
            let rows = drops.sorted {
                ($0.key.project, $0.key.day, $0.key.dropped.kind, $0.key.dropped.name, $0.key.dropped.reason.rawValue)
                    < ($1.key.project, $1.key.day, $1.key.dropped.kind, $1.key.dropped.name, $1.key.dropped.reason.rawValue)
            }
            sql.append(
                """
                INSERT INTO collector.catalog_drops AS c (project, day, kind, name, reason, slot, count)
                SELECT project, date 'epoch' + day::int, kind, name, reason, (pg_backend_pid() % 4096)::smallint, count
                FROM unnest(\(try array(rows.map(\.key.project)))::text[], \(try array(rows.map { String($0.key.day) }))::bigint[],
                            \(try array(rows.map(\.key.dropped.kind)))::text[], \(try array(rows.map(\.key.dropped.name)))::text[],
                            \(try array(rows.map(\.key.dropped.reason.rawValue)))::text[], \(try array(rows.map { String($0.value) }))::bigint[])
                     AS t(project, day, kind, name, reason, count)
                ON CONFLICT (project, day, kind, name, reason, slot) DO UPDATE SET count = c.count + EXCLUDED.count
                """)
        }
        return sql
    }
}

/// The display names and descriptions of catalog entries (`collector.catalog_notes`).
struct CatalogNotes: Sendable {
    let pool: PostgresPool

    /// Keeps `notes` of `project` (one transaction); a note that says nothing (both texts empty,
    /// not hidden) removes it.
    /// Returns how many were kept and removed.
    func save(project: String, _ notes: [MetadataNote]) async throws -> (kept: Int, removed: Int) {
        let kept = notes.filter { !$0.isEmpty }
        let removed = notes.filter(\.isEmpty)
        return try await pool.transaction { connection in
            let written = try connection.query(
                """
                INSERT INTO collector.catalog_notes (project, kind, name, display_name, description, hidden)
                SELECT DISTINCT ON (kind, name) $1, kind, name, display_name, description, hidden
                FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::boolean[])
                     WITH ORDINALITY AS t(kind, name, display_name, description, hidden, position)
                ORDER BY kind, name, position DESC
                ON CONFLICT (project, kind, name) DO UPDATE
                    SET display_name = EXCLUDED.display_name, description = EXCLUDED.description, hidden = EXCLUDED.hidden, updated_at = now()
                """,
                [
                    project, postgresTextArray(kept.map(\.kind)), postgresTextArray(kept.map(\.name)), postgresTextArray(kept.map(\.displayName)),
                    postgresTextArray(kept.map(\.description)), postgresTextArray(kept.map { String($0.hidden == true) }),
                ]
            ).affectedRows
            let deleted = try connection.query(
                """
                DELETE FROM collector.catalog_notes n USING unnest($2::text[], $3::text[]) AS t(kind, name)
                WHERE n.project = $1 AND n.kind = t.kind AND n.name = t.name
                """, [project, postgresTextArray(removed.map(\.kind)), postgresTextArray(removed.map(\.name))]
            ).affectedRows
            return (written, deleted)
        }
    }
}
