/// A property's type as Sensors Analytics names it. The catalog gives each property the type of
/// the first value it saw (`collector.catalog_properties`); `analytics.as_number` and the other
/// typed reads read a value as one of them.
package enum SensorsType: String, Codable, Sendable, CaseIterable {
    case number = "NUMBER"
    case bool = "BOOL"
    case string = "STRING"
    case list = "LIST"
    case datetime = "DATETIME"
    case date = "DATE"
}

/// `GET /v1/projects/{p}/metadata`: what a project tracks, as the catalog kept it at ingest. Days
/// are UTC days on which the collector stored a record carrying it (`yyyy-MM-dd`).
package struct ProjectMetadata: Codable, Sendable, Equatable {
    package var project: String
    package var events: [Event]
    package var properties: [Property]
    /// Records refused with `PROPERTY_WITH_WRONG_TYPE` in the last 30 days, by UTC day and
    /// property (newest day first); nil in an export written before types were checked.
    package var typeRefusals: [TypeRefusal]?
    /// Properties left out of stored records in the last 30 days, by UTC day, property and reason
    /// (`undeclared`, `wrong_type`); nil as `typeRefusals`.
    package var drops: [Drop]?
    /// Events refused as not declared (a strict project) in the last 30 days, by UTC day; nil as
    /// `typeRefusals`.
    package var undeclaredEvents: [UndeclaredEvent]?
    /// The project's validation rules; nil as `typeRefusals`.
    package var settings: ProjectCatalogSettings?
    /// The events declared (strict validation takes no other); nil as `typeRefusals`.
    package var declaredEvents: [String]?

    package struct UndeclaredEvent: Codable, Sendable, Equatable {
        package var day: String
        package var event: String
        package var records: Int
    }

    package struct Drop: Codable, Sendable, Equatable {
        package var day: String
        package var kind: String
        package var property: String
        package var reason: String
        package var count: Int
    }

    package struct TypeRefusal: Codable, Sendable, Equatable {
        package var day: String
        package var property: String
        /// The property's type then, and the type of the value sent (Sensors type names, as the
        /// reason has them).
        package var type: String
        package var sentType: String
        package var records: Int
    }

    package struct Event: Codable, Sendable, Equatable {
        package var name: String
        package var firstDay: String
        package var lastDay: String
        /// Events of this name stored, all days.
        package var count: Int
        /// The `$lib`s and app versions that sent it.
        package var libs: [String]
        package var appVersions: [String]
        /// Its properties, each with the type its values had in this event.
        package var properties: [TypedName]
        /// What the data team calls it and means by it (`MetadataNote`); nil without a note.
        package var displayName: String?
        package var description: String?
        /// Hidden from analysts (`MetadataNote.hidden`); nil when not.
        package var hidden: Bool?

        package init(
            name: String, firstDay: String, lastDay: String, count: Int, libs: [String], appVersions: [String], properties: [TypedName]
        ) {
            self.name = name
            self.firstDay = firstDay
            self.lastDay = lastDay
            self.count = count
            self.libs = libs
            self.appVersions = appVersions
            self.properties = properties
        }
    }

    package struct TypedName: Codable, Sendable, Equatable {
        package var name: String
        package var type: SensorsType

        package init(name: String, type: SensorsType) {
            self.name = name
            self.type = type
        }
    }

    package struct Property: Codable, Sendable, Equatable {
        /// `event` for event properties, `profile` for profile properties.
        package var kind: String
        package var name: String
        /// The type every value is checked against: the first value's, or the one declared.
        package var type: SensorsType
        /// Whether an admin declared it (set its type); nil in an export written before.
        package var declared: Bool?
        package var firstDay: String
        package var lastDay: String
        /// The first value seen, as text, cut to 64 characters.
        package var sample: String
        /// The events that carried it (none for a profile property).
        package var events: [String]
        /// Events in which it had another type than `type`: the records a type check would refuse.
        package var conflicts: [TypedName]
        package var displayName: String?
        package var description: String?
        /// Hidden from analysts (`MetadataNote.hidden`); nil when not.
        package var hidden: Bool?

        package init(
            kind: String, name: String, type: SensorsType, firstDay: String, lastDay: String, sample: String, events: [String],
            conflicts: [TypedName]
        ) {
            self.kind = kind
            self.name = name
            self.type = type
            self.firstDay = firstDay
            self.lastDay = lastDay
            self.sample = sample
            self.events = events
            self.conflicts = conflicts
        }
    }

    package init(project: String, events: [Event], properties: [Property]) {
        self.project = project
        self.events = events
        self.properties = properties
    }
}

/// A display name and description the data team gives an event or a property, kept beside the
/// catalog (`PUT /v1/projects/{p}/metadata/notes` takes a list; empty texts remove the note).
package struct MetadataNote: Codable, Sendable, Equatable {
    /// `event`, `event_property` or `profile_property`.
    package var kind: String
    package var name: String
    package var displayName: String
    package var description: String
    /// Hidden from analysts: a hidden event's rows leave `analytics.events`, a hidden property
    /// leaves the `properties` of `analytics.events` or `analytics.profiles`. nil is false.
    package var hidden: Bool?

    package init(kind: String, name: String, displayName: String, description: String, hidden: Bool? = nil) {
        self.kind = kind
        self.name = name
        self.displayName = displayName
        self.description = description
        self.hidden = hidden
    }

    /// Whether the note says nothing (it is removed).
    package var isEmpty: Bool { displayName.isEmpty && description.isEmpty && hidden != true }

    package static let kinds = ["event", "event_property", "profile_property"]
    /// Notes in one request, and the longest texts.
    package static let maxNotes = 10_000
    package static let maxNameCharacters = 255
    package static let maxDisplayNameCharacters = 100
    package static let maxDescriptionCharacters = 2_000

    /// Why the note cannot be kept, or nil.
    package var problem: String? {
        guard Self.kinds.contains(kind) else { return "kind '\(UntrustedText.quoted(kind))' is not one of \(Self.kinds.joined(separator: ", "))" }
        guard !name.isEmpty, name.count <= Self.maxNameCharacters else { return "name must be 1 to \(Self.maxNameCharacters) characters" }
        guard displayName.count <= Self.maxDisplayNameCharacters else {
            return "displayName of '\(UntrustedText.quoted(name))' is over \(Self.maxDisplayNameCharacters) characters"
        }
        guard description.count <= Self.maxDescriptionCharacters else {
            return "description of '\(UntrustedText.quoted(name))' is over \(Self.maxDescriptionCharacters) characters"
        }
        for text in [name, displayName, description] where text.utf8.contains(0) { return "a note of '\(UntrustedText.quoted(name))' contains a NUL character" }
        return nil
    }

    /// The notes an edited export carries: each event and property with a display name or description.
    package static func notes(of metadata: ProjectMetadata) -> [MetadataNote] {
        metadata.events.compactMap { event in
            guard event.displayName != nil || event.description != nil || event.hidden == true else { return nil }
            return MetadataNote(
                kind: "event", name: event.name, displayName: event.displayName ?? "", description: event.description ?? "",
                hidden: event.hidden == true ? true : nil)
        }
            + metadata.properties.compactMap { property in
                guard property.displayName != nil || property.description != nil || property.hidden == true else { return nil }
                return MetadataNote(
                    kind: property.kind == "profile" ? "profile_property" : "event_property", name: property.name,
                    displayName: property.displayName ?? "", description: property.description ?? "", hidden: property.hidden == true ? true : nil)
            }
    }
}

/// `PUT /v1/projects/{p}/metadata/types` sets a property's type, which every later value is
/// checked against (a property not seen yet is declared); `POST …/metadata/types/preview` answers
/// the same without changing it.
package struct PropertyTypeChange: Codable, Sendable, Equatable {
    /// `event` or `profile`.
    package var kind: String
    package var name: String
    package var type: SensorsType

    package init(kind: String, name: String, type: SensorsType) {
        self.kind = kind
        self.name = name
        self.type = type
    }

    package static let kinds = ["event", "profile"]

    /// Why the change cannot be made, or nil.
    package var problem: String? {
        guard Self.kinds.contains(kind) else { return "kind '\(UntrustedText.quoted(kind))' is not one of \(Self.kinds.joined(separator: ", "))" }
        guard !name.isEmpty, name.count <= MetadataNote.maxNameCharacters, !name.utf8.contains(0) else {
            return "name must be 1 to \(MetadataNote.maxNameCharacters) characters without NUL"
        }
        return nil
    }
}

/// What a type change does: the property's type before, and how many stored rows carry the
/// property and how many of them the typed read (`analytics.as_<type>`) cannot read as the type.
package struct PropertyTypeReport: Codable, Sendable, Equatable {
    package var kind: String
    package var name: String
    package var type: SensorsType
    /// nil: the property had no type (never seen nor declared).
    package var previous: SensorsType?
    package var storedRows: Int
    package var unreadableRows: Int
    /// false for a preview.
    package var applied: Bool

    package init(kind: String, name: String, type: SensorsType, previous: SensorsType?, storedRows: Int, unreadableRows: Int, applied: Bool) {
        self.kind = kind
        self.name = name
        self.type = type
        self.previous = previous
        self.storedRows = storedRows
        self.unreadableRows = unreadableRows
        self.applied = applied
    }
}

/// `POST /v1/projects/{p}/rejected/replay`: writes again the records refused for a value not of
/// its property's type (`PROPERTY_WITH_WRONG_TYPE`), oldest first, with row ids after `after` and
/// before `before` (nil: the first call, which takes the rows there are now; a record refused
/// again is kept with a later id, so a replay run to its end takes each record once).
package struct ReplayRequest: Codable, Sendable, Equatable {
    package var after: Int64
    package var before: Int64?
    package var limit: Int

    package init(after: Int64 = 0, before: Int64? = nil, limit: Int = 1_000) {
        self.after = after
        self.before = before
        self.limit = limit
    }

    package static let limits = 1...10_000
}

/// What a replay did: records taken from `analytics.rejected`, and what became of them (a record
/// refused again is kept there again, with today's reason). `next` is the `after` of the next
/// call, with `before` as it is here; nil when no such record is left.
package struct ReplayResult: Codable, Sendable, Equatable {
    package var replayed: Int
    package var stored: Int
    package var duplicates: Int
    package var refused: Int
    package var next: Int64?
    package var before: Int64

    package init(replayed: Int, stored: Int, duplicates: Int, refused: Int, next: Int64?, before: Int64) {
        self.replayed = replayed
        self.stored = stored
        self.duplicates = duplicates
        self.refused = refused
        self.next = next
        self.before = before
    }
}

/// A project's validation rules (`PUT /v1/projects/{p}/metadata/settings`). By default a project
/// stores any event, types each property by its first value and refuses a record with a value of
/// another type.
package struct ProjectCatalogSettings: Codable, Sendable, Equatable {
    /// Strict validation (Sensors' 强校验): an event not declared is refused (`EVENT_NOT_DECLARED`;
    /// the SDKs' own `$` events are always taken), and a property not declared is left out of the
    /// record and counted (`analytics.dropped_properties`).
    package var strict: Bool
    /// What a value no conversion fits costs: the record (`refuse`), or only the property
    /// (`drop_property`, counted).
    package var wrongType: WrongType

    package enum WrongType: String, Codable, Sendable {
        case refuse
        case dropProperty = "drop_property"
    }

    package init(strict: Bool = false, wrongType: WrongType = .refuse) {
        self.strict = strict
        self.wrongType = wrongType
    }
}

/// `POST /v1/projects/{p}/metadata/declarations`: declares events, and with `seen` every event
/// and property the catalog has (each property with the type it has now), the usual start of
/// strict validation. Properties are declared one by one with their type through
/// `PUT …/metadata/types`.
package struct MetadataDeclarations: Codable, Sendable, Equatable {
    package var events: [String]
    package var seen: Bool

    package init(events: [String] = [], seen: Bool = false) {
        self.events = events
        self.seen = seen
    }

    package static let maxEvents = 10_000

    /// Why they cannot be declared, or nil.
    package var problem: String? {
        guard events.count <= Self.maxEvents else { return "at most \(Self.maxEvents) events a request" }
        for event in events where event.isEmpty || event.count > MetadataNote.maxNameCharacters || event.utf8.contains(0) {
            return "event names are 1 to \(MetadataNote.maxNameCharacters) characters without NUL"
        }
        return nil
    }
}

/// What a declaration added: events and properties declared that were not before.
package struct DeclarationsMade: Codable, Sendable, Equatable {
    package var events: Int
    package var properties: Int

    package init(events: Int, properties: Int) {
        self.events = events
        self.properties = properties
    }
}
