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
        /// The type of the first value seen.
        package var type: SensorsType
        package var firstDay: String
        package var lastDay: String
        /// The first value seen, as text, cut to 64 characters.
        package var sample: String
        /// The events that carried it (none for a profile property).
        package var events: [String]
        /// Events in which it had another type than `type`: the records a type check would refuse.
        package var conflicts: [TypedName]

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
