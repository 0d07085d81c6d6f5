import DatongContracts
import DatongJSON
import DatongPostgres
import Logging
import ServiceLifecycle

// Types at ingest, as Sensors Analytics applies them: a property's type is its first value's (or
// the one an admin set: `collector.catalog_properties.type`), preset `$` properties have theirs
// from the start, and every later value is checked against it. A number or boolean for a STRING
// property is stored as its text; a value no conversion fits (a text for NUMBER, a number for
// LIST, an impossible date) refuses the record with `PROPERTY_WITH_WRONG_TYPE`, kept in
// `collector.rejected` with the record, to replay once the type or the instrumentation is fixed.
//
// Per project (`collector.catalog_settings`), a value of another type may cost only the property
// instead of the record, and strict validation refuses events not declared and leaves out
// properties not declared (the SDKs' `$` ones are always taken); what is left out is counted.
//
// Only the records of shapes this process has not checked today are looked at (`Catalog`): a shape
// hashes its event and its properties' names and types, so a record of a known shape holds values
// of the types checked before. A shape with a misfit value is checked at every record. Types first
// set by a record are confirmed in the transaction that stores it, so two replicas meeting a new
// property with values of two types at once settle on the one committed first. A change of types
// or rules raises the project's version, which every collector watches (`TypeChangeWatch`).

/// A property type a record would set, or one the database has.
struct AssumedType: Sendable, Hashable {
    var project: String
    var kind: String
    var name: String
    var type: SensorsType
}

/// The transaction found a property typed otherwise than the batch was checked with (another
/// replica set it first); the batch is checked again with `actual`.
struct PropertyTypesMoved: Error {
    var actual: [AssumedType]
}

/// What becomes of a value in a property of a type.
enum Admission {
    case asIs
    /// Stored as its JSON text: a number or a boolean for a STRING property.
    case asString
    case refused
}

extension SensorsType {
    func admits(_ sent: SensorsType) -> Admission {
        if sent == self { return .asIs }
        switch (self, sent) {
        // A text shaped like a date is still a text; a day is a time and a time has a day.
        case (.string, .datetime), (.string, .date), (.datetime, .date), (.date, .datetime): return .asIs
        case (.string, .number), (.string, .bool): return .asString
        default: return .refused
        }
    }

    /// The types of the preset event properties the official SDKs send, as Sensors documents them;
    /// the others' types are set by their first value.
    static let presets: [String: SensorsType] = {
        var presets: [String: SensorsType] = [:]
        for name in [
            "$app_version", "$lib", "$lib_version", "$lib_method", "$manufacturer", "$model", "$os", "$os_version", "$carrier",
            "$network_type", "$device_id", "$screen_name", "$title", "$url", "$url_path", "$referrer", "$referrer_host", "$browser",
            "$browser_version", "$element_id", "$element_content", "$element_type", "$element_name", "$element_selector", "$app_id", "$app_name",
        ] { presets[name] = .string }
        for name in ["$screen_width", "$screen_height", "$event_duration", "$latitude", "$longitude", "$timezone_offset"] { presets[name] = .number }
        for name in ["$wifi", "$is_first_day", "$is_first_time", "$resume_from_background"] { presets[name] = .bool }
        return presets
    }()
}

/// A property left out of a stored record, and why.
struct DroppedProperty: Sendable, Hashable {
    var kind: String
    var name: String
    var reason: Reason

    enum Reason: String, Sendable {
        /// Not declared, in a strict project.
        case undeclared
        /// Of another type, in a project that drops only the property.
        case wrongType = "wrong_type"
    }
}

enum TypeCheck {
    /// Checks `batch`'s records of shapes not checked today against their project's rules:
    /// converts what converts, drops what the project drops, moves what it refuses to `rejected`,
    /// and notes in `assumedTypes` the types new properties get from their first values.
    static func check(_ batch: IncomingBatch, catalog: Catalog, pool: PostgresPool) async throws -> IncomingBatch {
        var shapes: [UInt64] = []
        for record in batch.records {
            if let shape = record.catalog?.shape, shape != shapes.last { shapes.append(shape) }
        }
        let unchecked = catalog.unchecked(shapes)
        guard !unchecked.isEmpty else { return batch }
        let projects = Set(batch.records.filter { $0.catalog.map { unchecked.contains($0.shape) } ?? false }.map(\.project))
        let rules = try await catalog.loadedTypes(of: projects, pool: pool)

        var checked = batch
        checked.records = []
        var assumed: [String: [Catalog.TypedName: SensorsType]] = [:]
        var eventRows: [UInt8]? = nil
        // A record that fits decides for its shape: the others of the batch hold values of the same
        // names and types (and the same event). A misfit's others are each rewritten or refused.
        var fits = Set<UInt64>()
        for record in batch.records {
            guard let mark = record.catalog, unchecked.contains(mark.shape), !fits.contains(mark.shape), let project = rules[record.project] else {
                checked.records.append(record)
                continue
            }
            let verdict = Self.verdict(
                of: batch.body[record.raw], kind: mark.event == 0 ? "profile" : "event", rules: project, assumed: &assumed[record.project, default: [:]])
            switch verdict {
            case nil:
                fits.insert(mark.shape)
                checked.records.append(record)
            case .refused(let reason):
                catalog.misfit(mark.shape)
                checked.refuse(record, reason: reason)
            case .rewritten(let properties, let dropped):
                catalog.misfit(mark.shape)
                var rewritten = record
                rewritten.dropped = dropped.map {
                    DroppedProperty(kind: $0.kind, name: catalog.countedName(dropped: $0.name, project: record.project), reason: $0.reason)
                }
                switch record.content {
                case .event(let row):
                    if eventRows == nil { eventRows = batch.eventRows }
                    let start = eventRows!.count
                    EventRows.append(batch.eventRows[row], replacingProperties: properties, to: &eventRows!)
                    rewritten.content = .event(row: start..<eventRows!.count)
                case .profile(var profile):
                    profile.properties = PropertiesText(utf8: properties)
                    rewritten.content = .profile(profile)
                }
                checked.records.append(rewritten)
            }
        }
        if let eventRows { checked.eventRows = eventRows }
        checked.assumedTypes = assumed.flatMap { project, types in
            types.map { AssumedType(project: project, kind: $0.key.kind, name: $0.key.name, type: $0.value) }
        }
        return checked
    }

    enum Verdict {
        case refused(String)
        /// The properties to store instead (values converted, properties left out), as JSON.
        case rewritten([UInt8], dropped: [DroppedProperty])
    }

    /// What becomes of a record (its JSON, `raw`) under its project's `rules`: nil when it is stored
    /// as it came. `assumed` has the types that earlier records of the batch gave to properties
    /// without one, and gets those this record's values give.
    static func verdict(
        of raw: ArraySlice<UInt8>, kind: String, rules: Catalog.ProjectTypes, assumed: inout [Catalog.TypedName: SensorsType]
    ) -> Verdict? {
        // The batch was read with this depth bound: its record parses again.
        guard let document = try? JSONParser.parse(Array(raw), maxDepth: CollectBatch.maxDepth) else { return nil }
        let root = document.root
        if rules.strict, kind == "event", let event = root["event"]?.stringValue, !SDKNames.isSDKEvent(event), !rules.events.contains(event) {
            return .refused(
                "\(Self.undeclaredEvent): event '\(UntrustedText.quoted(event))' is not declared, and the project stores declared events only")
        }
        guard let properties = root["properties"], properties.kind == .object else { return nil }
        enum Fate {
            case keep, asString, drop
        }
        var fates: [Fate] = []
        var dropped: [DroppedProperty] = []
        let refusal: String? = document.bytes.withUnsafeBufferPointer { bytes in
            for (name, value) in properties.members {
                fates.append(.keep)
                guard let name = name.stringValue else { continue }
                let key = Catalog.TypedName(kind: kind, name: name)
                let preset = kind == "event" ? SensorsType.presets[name] : nil
                if rules.strict, !SDKNames.isSDKProperty(name), !rules.declared.contains(key) {
                    fates[fates.count - 1] = .drop
                    dropped.append(DroppedProperty(kind: kind, name: name, reason: .undeclared))
                    continue
                }
                guard let sent = SensorsType.of(value.entry, bytes: bytes) else { continue }
                guard let type = rules.types[key] ?? assumed[key] ?? preset else {
                    assumed[key] = sent
                    continue
                }
                switch type.admits(sent) {
                case .asIs: continue
                case .asString: fates[fates.count - 1] = .asString
                case .refused where rules.dropsWrongType:
                    fates[fates.count - 1] = .drop
                    dropped.append(DroppedProperty(kind: kind, name: name, reason: .wrongType))
                case .refused:
                    var text = value.rawText
                    if text.count > CatalogChanges.sampleCharacters { text = String(text.prefix(CatalogChanges.sampleCharacters)) + "…" }
                    return "\(Self.wrongType): property '\(UntrustedText.quoted(name))' is \(type.rawValue); the value \(text) is \(sent.rawValue)"
                }
            }
            return nil
        }
        if let refusal { return .refused(refusal) }
        guard fates.contains(where: { if case .keep = $0 { false } else { true } }) else { return nil }
        var out: [UInt8] = []
        var object = JSONObjectWriter(&out)
        for ((name, value), fate) in zip(properties.members, fates) {
            switch fate {
            case .drop: continue
            case .keep:
                object.key(name.rawBytes.dropFirst().dropLast(), &out)
                out.append(contentsOf: value.rawBytes)
            case .asString:
                object.key(name.rawBytes.dropFirst().dropLast(), &out)
                JSONValue.writeString(utf8: value.rawText.utf8, to: &out)
            }
        }
        object.finish(&out)
        return .rewritten(out, dropped: dropped)
    }

    /// Why a strict project refuses an event it was not told of.
    static let undeclaredEvent = "EVENT_NOT_DECLARED"

    /// The reason code of a record refused for a value not of its property's type, as Sensors names it.
    static let wrongType = "PROPERTY_WITH_WRONG_TYPE"

    /// Checks, in the transaction that stores them, that the types `assumed` are the ones the
    /// catalog has (written by this transaction, or committed by another first): throws
    /// `PropertyTypesMoved` if not, also when batches of one group assumed two types for one
    /// property (the catalog got one of them; the group is then written batch by batch). Returns
    /// the types found (a property past its project's bound has none, and no type is enforced for it).
    static func confirm(_ assumed: [AssumedType], on connection: PostgresConnection) throws -> [AssumedType] {
        let rows = try connection.query(
            """
            SELECT c.project, c.kind, c.name, c.type
            FROM unnest($1::text[], $2::text[], $3::text[]) AS t(project, kind, name)
            JOIN collector.catalog_properties c USING (project, kind, name)
            """, [postgresTextArray(assumed.map(\.project)), postgresTextArray(assumed.map(\.kind)), postgresTextArray(assumed.map(\.name))]
        ).rows
        let found = rows.compactMap { row -> AssumedType? in
            guard let project = row[0], let kind = row[1], let name = row[2], let type = row[3].flatMap(SensorsType.init(rawValue:)) else { return nil }
            return AssumedType(project: project, kind: kind, name: name, type: type)
        }
        // Every assumption about a property must be its type: one matching it is not enough.
        let moved = found.filter { type in
            assumed.contains { $0.name == type.name && $0.kind == type.kind && $0.project == type.project && $0.type != type.type }
        }
        if !moved.isEmpty { throw PropertyTypesMoved(actual: moved) }
        return found
    }
}

extension Catalog {
    /// The property types of `projects`, loading those not loaded from the catalog (with their
    /// declared types' version, read first: a change made meanwhile is seen by the next watch).
    func loadedTypes(of projects: Set<String>, pool: PostgresPool) async throws -> [String: ProjectTypes] {
        var loaded = types(of: projects)
        let missing = projects.subtracting(loaded.keys)
        guard !missing.isEmpty else { return loaded }
        let list = postgresTextArray(Array(missing))
        let (versions, settings, events, rows) = try await pool.withConnection { connection in
            (
                try connection.query("SELECT project, version FROM collector.catalog_type_versions WHERE project = ANY($1::text[])", [list]).rows,
                try connection.query(
                    "SELECT project, strict::text, wrong_type FROM collector.catalog_settings WHERE project = ANY($1::text[])", [list]
                ).rows,
                try connection.query("SELECT project, event FROM collector.catalog_declared_events WHERE project = ANY($1::text[])", [list]).rows,
                try connection.query(
                    "SELECT project, kind, name, type, (declared_at IS NOT NULL)::text FROM collector.catalog_properties WHERE project = ANY($1::text[])",
                    [list]
                ).rows
            )
        }
        for project in missing { loaded[project] = ProjectTypes(version: 0, types: [:]) }
        for row in versions {
            if let project = row[0], let version = row[1].flatMap(Int64.init) { loaded[project]?.version = version }
        }
        for row in settings {
            guard let project = row[0] else { continue }
            loaded[project]?.strict = row[1] == "true"
            loaded[project]?.dropsWrongType = row[2] == ProjectCatalogSettings.WrongType.dropProperty.rawValue
        }
        for row in events {
            if let project = row[0], let event = row[1] { loaded[project]?.events.insert(event) }
        }
        for row in rows {
            guard let project = row[0], let kind = row[1], let name = row[2], let type = row[3].flatMap(SensorsType.init(rawValue:)) else { continue }
            let key = TypedName(kind: kind, name: name)
            loaded[project]?.types[key] = type
            if row[4] == "true" { loaded[project]?.declared.insert(key) }
        }
        for project in missing { load(project, loaded[project]!) }
        return loaded
    }
}

extension EventRows {
    /// Appends `row` (one encoded event) to `out` with `properties` (JSON) in place of its properties.
    static func append(_ row: ArraySlice<UInt8>, replacingProperties properties: [UInt8], to out: inout [UInt8]) {
        var offset = row.startIndex + 2  // the field count
        for _ in 0..<propertiesColumn {
            let length = row[offset..<offset + 4].reduce(0) { $0 << 8 | Int32($1) }
            offset += 4 + max(0, Int(length))
        }
        let length = Int(row[offset..<offset + 4].reduce(0) { $0 << 8 | Int32($1) })
        out.append(contentsOf: row[row.startIndex..<offset])
        withUnsafeBytes(of: Int32(properties.count + 1).bigEndian) { out.append(contentsOf: $0) }
        out.append(1)  // jsonb's version
        out.append(contentsOf: properties)
        out.append(contentsOf: row[(offset + 4 + length)...])
    }

    private static let propertiesColumn = columns.firstIndex(of: "properties")!
}

/// Watches the declared types' versions (`collector.catalog_type_versions`, raised by every type
/// an admin sets) every `interval`, so that a replica that did not make a change checks records
/// under it within that time.
final class TypeChangeWatch: Service, Sendable {
    private let pool: PostgresPool
    private let catalog: Catalog
    private let interval: Duration
    private let logger: Logger

    init(pool: PostgresPool, catalog: Catalog, interval: Duration = .seconds(2), logger: Logger) {
        self.pool = pool
        self.catalog = catalog
        self.interval = interval
        self.logger = logger
    }

    /// Reads the versions once and makes the catalog forget the projects whose rules changed.
    func poll() async throws {
        let rows = try await pool.withConnection { connection in
            try connection.query("SELECT project, version FROM collector.catalog_type_versions").rows
        }
        var versions: [String: Int64] = [:]
        for row in rows {
            if let project = row[0], let version = row[1].flatMap(Int64.init) { versions[project] = version }
        }
        catalog.forgetChanged(versions)
    }

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while true {
                do {
                    try await self.poll()
                } catch {
                    self.logger.debug("catalog.type_watch_failed", metadata: ["error": "\(error)"])
                }
                try await Task.sleep(for: self.interval)
            }
        }
    }
}

/// What an admin declares: property types (with what they do to stored rows), events, and a
/// project's validation rules. Each change raises the project's version in the same transaction.
struct TypeSettings: Sendable {
    let pool: PostgresPool
    /// This process's catalog, which forgets the project's types at once (other replicas do
    /// within `TypeChangeWatch`'s interval).
    let catalog: Catalog?

    /// How long counting a project's stored rows may take.
    static let countTimeout = "60s"

    /// What setting `change` would do, or does when `apply`: one transaction, which counts the
    /// stored rows carrying the property, and sets the type and raises the project's version.
    func change(project: String, _ change: PropertyTypeChange, apply: Bool) async throws -> PropertyTypeReport {
        let reader = Self.typedRead[change.type]!
        let table = change.kind == "event" ? "collector.events" : "collector.profiles"
        let report = try await pool.transaction { connection in
            _ = try connection.execute("SET LOCAL statement_timeout = '\(Self.countTimeout)'")
            let previous = try connection.query(
                "SELECT type FROM collector.catalog_properties WHERE project = $1 AND kind = $2 AND name = $3 \(apply ? "FOR UPDATE" : "")",
                [project, change.kind, change.name]
            ).rows.first.flatMap { $0[0] }.flatMap(SensorsType.init(rawValue:))
            let counts = try connection.query(
                """
                SELECT count(*)::text, count(*) FILTER (WHERE analytics.\(reader)(properties, $2) IS NULL)::text
                FROM \(table) WHERE project = $1 AND properties ? $2
                """, [project, change.name]
            ).rows.first
            if apply {
                _ = try connection.query(
                    """
                    INSERT INTO collector.catalog_properties (project, kind, name, type, sample, declared_at) VALUES ($1, $2, $3, $4, '', now())
                    ON CONFLICT (project, kind, name) DO UPDATE SET type = EXCLUDED.type, declared_at = now()
                    """, [project, change.kind, change.name, change.type.rawValue])
                try Self.raiseVersion(of: project, on: connection)
            }
            return PropertyTypeReport(
                kind: change.kind, name: change.name, type: change.type, previous: previous,
                storedRows: Int(counts?[0] ?? "") ?? 0, unreadableRows: Int(counts?[1] ?? "") ?? 0, applied: apply)
        }
        if apply { catalog?.forgetTypes(of: project) }
        return report
    }

    /// Sets `project`'s validation rules.
    func set(project: String, _ settings: ProjectCatalogSettings) async throws {
        try await pool.transaction { connection in
            _ = try connection.query(
                """
                INSERT INTO collector.catalog_settings (project, strict, wrong_type) VALUES ($1, $2::boolean, $3)
                ON CONFLICT (project) DO UPDATE SET strict = EXCLUDED.strict, wrong_type = EXCLUDED.wrong_type, updated_at = now()
                """, [project, String(settings.strict), settings.wrongType.rawValue])
            try Self.raiseVersion(of: project, on: connection)
        }
        catalog?.forgetTypes(of: project)
    }

    /// Declares `declarations.events`, and with `seen` every event and property the catalog has.
    func declare(project: String, _ declarations: MetadataDeclarations) async throws -> DeclarationsMade {
        let made = try await pool.transaction { connection in
            var events = try connection.query(
                """
                INSERT INTO collector.catalog_declared_events (project, event)
                SELECT $1, event FROM unnest($2::text[]) AS t(event) ON CONFLICT DO NOTHING
                """, [project, postgresTextArray(declarations.events)]
            ).affectedRows
            var properties = 0
            if declarations.seen {
                events += try connection.query(
                    """
                    INSERT INTO collector.catalog_declared_events (project, event)
                    SELECT DISTINCT project, event FROM collector.catalog_event_sources WHERE project = $1 ON CONFLICT DO NOTHING
                    """, [project]
                ).affectedRows
                properties = try connection.query(
                    "UPDATE collector.catalog_properties SET declared_at = now() WHERE project = $1 AND declared_at IS NULL", [project]
                ).affectedRows
            }
            try Self.raiseVersion(of: project, on: connection)
            return DeclarationsMade(events: events, properties: properties)
        }
        catalog?.forgetTypes(of: project)
        return made
    }

    /// Raises `project`'s version of its types and rules, which every collector watches.
    private static func raiseVersion(of project: String, on connection: PostgresConnection) throws {
        _ = try connection.query(
            """
            INSERT INTO collector.catalog_type_versions AS v (project, version) VALUES ($1, 1)
            ON CONFLICT (project) DO UPDATE SET version = v.version + 1
            """, [project])
    }

    /// The typed read of each type (collector migration 9).
    private static let typedRead: [SensorsType: String] = [
        .number: "as_number", .string: "as_string", .bool: "as_bool", .list: "as_list", .datetime: "as_datetime", .date: "as_date",
    ]
}

/// Writes again the records refused with `PROPERTY_WITH_WRONG_TYPE`, once the type or the
/// instrumentation is fixed: each is checked as if it came now, and stored, found stored before,
/// or refused again (kept again, with the reason of now); the rows replayed leave
/// `collector.rejected`. Should the collector stop between the write and that delete, a later
/// replay finds the stored records as duplicates.
struct TypeRefusalReplay: Sendable {
    let pool: PostgresPool

    func replay(project: String, _ request: ReplayRequest, keys: KeyRule, store: any EventStore) async throws -> ReplayResult {
        let (before, rows) = try await pool.withConnection { connection in
            let before =
                try request.before
                ?? Int64(
                    try connection.query("SELECT coalesce(max(id), 0) + 1 FROM collector.rejected WHERE project = $1", [project]).rows.first?[0] ?? "")
                ?? 0
            let rows = try connection.query(
                """
                SELECT id::text, (extract(epoch FROM received_at) * 1000)::bigint::text, raw FROM collector.rejected
                WHERE project = $1 AND id > $2 AND id < $3 AND (reason LIKE '\(TypeCheck.wrongType):%' OR reason LIKE '\(TypeCheck.undeclaredEvent):%')
                ORDER BY id LIMIT $4
                """, [project, String(request.after), String(before), String(request.limit)]
            ).rows
            return (before, rows)
        }
        var result = ReplayResult(replayed: 0, stored: 0, duplicates: 0, refused: 0, next: nil, before: before)
        var replayed: [String] = []
        // Records received together go back together, with the time they were received.
        var start = 0
        while start < rows.count {
            var end = start + 1
            while end < rows.count, rows[end][1] == rows[start][1] { end += 1 }
            let receivedAt = rows[start][1] ?? "0"
            let part = rows[start..<end]
            start = end
            let body = #"{"receivedAt":\#(receivedAt),"records":["# + part.map { $0[2] ?? "null" }.joined(separator: ",") + "]}"
            guard let batch = try? IncomingBatch(jsonBytes: Array(body.utf8), keys: keys), batch.problem == nil else {
                // Not a batch of records (a row written by hand?): left where it is.
                result.refused += part.count
                continue
            }
            let written = try await store.write(batch)
            result.stored += written.stored
            result.duplicates += written.duplicates
            result.refused += written.rejected
            result.replayed += part.count
            replayed += part.compactMap { $0[0] }
        }
        if !replayed.isEmpty {
            let ids = postgresTextArray(replayed)
            _ = try await pool.withConnection { connection in
                try connection.query("DELETE FROM collector.rejected WHERE project = $1 AND id = ANY($2::bigint[])", [project, ids])
            }
        }
        if rows.count == request.limit, let last = rows.last?[0].flatMap(Int64.init) { result.next = last }
        return result
    }
}
