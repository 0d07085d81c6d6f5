/// A project's time zone: the days and hours of its reports and rollups (`GET|PUT
/// …/projects/{p}/time-zone`). Projects that never set one count in UTC.
package struct ProjectTimeZone: Codable, Sendable, Equatable {
    package var project: String
    /// An IANA name (`Asia/Shanghai`, `UTC`).
    package var timeZone: String

    package init(project: String, timeZone: String) {
        self.project = project
        self.timeZone = timeZone
    }

    /// The zone of a project that never set one.
    package static let defaultZone = "UTC"
    /// Longest name taken (the longest IANA name is 32 characters).
    package static let maxNameBytes = 64

    /// Why `name` cannot be a time zone setting, or nil: an IANA name as PostgreSQL's `pg_timezone_names`
    /// lists them is what the database checks; this is the shape every such name has.
    package static func shapeProblem(_ name: String) -> String? {
        guard !name.isEmpty, name.utf8.count <= maxNameBytes else { return "timeZone is an IANA name such as Asia/Shanghai (1 to 64 characters)" }
        let allowed = name.unicodeScalars.allSatisfy {
            $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "/_+-".unicodeScalars.contains($0))
        }
        return allowed ? nil : "timeZone '\(UntrustedText.quoted(name))' is not an IANA name such as Asia/Shanghai"
    }
}

/// The body of `PUT …/time-zone`.
package struct TimeZoneSetting: Codable, Sendable, Equatable {
    package var timeZone: String

    package init(timeZone: String) { self.timeZone = timeZone }
}
