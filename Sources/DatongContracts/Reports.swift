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

/// One of the report functions of docs/ANALYTICS.md as the HTTP API, the console and `datongctl
/// report` call it (`POST …/projects/{p}/reports/{kind}`): the body's members are the function's
/// own argument names, so the SQL documentation serves all three and an error the function raises
/// names what the caller sent.
package enum ReportKind: String, CaseIterable, Sendable {
    case trend, funnel, retention, distribution, user

    /// The function in schema `analytics` that answers it.
    package var function: String {
        switch self {
        case .trend: "analytics.event_trend"
        case .funnel: "analytics.funnel"
        case .retention: "analytics.retention"
        case .distribution: "analytics.distribution"
        case .user: "analytics.user_events"
        }
    }

    /// Its arguments after `project`, in the function's order.
    package var parameters: [ReportParameter] {
        switch self {
        case .trend:
            [
                .init("events", .names, required: true), .init("from_day", .day, required: true), .init("to_day", .day, required: true),
                .init("unit", .text), .init("measure", .text), .init("property", .text), .init("group_by", .text),
                .init("filters", .conditions), .init("top", .integer),
            ]
        case .funnel:
            [
                .init("steps", .conditions, required: true), .init("from_day", .day, required: true), .init("to_day", .day, required: true),
                .init("window_seconds", .integer), .init("group_by", .text), .init("top", .integer),
            ]
        case .retention:
            [
                .init("start_event", .text, required: true), .init("return_event", .text, required: true),
                .init("from_day", .day, required: true), .init("to_day", .day, required: true), .init("unit", .text), .init("periods", .integer),
                .init("start_filters", .conditions), .init("return_filters", .conditions),
            ]
        case .distribution:
            [
                .init("event", .text, required: true), .init("from_day", .day, required: true), .init("to_day", .day, required: true),
                .init("measure", .text), .init("property", .text), .init("buckets", .numbers), .init("filters", .conditions),
            ]
        case .user:
            [.init("user_id", .userNumber, required: true), .init("before", .text), .init("page_size", .integer)]
        }
    }

    /// The columns of its rows, in order (the function's `RETURNS TABLE`).
    package var columns: [String] {
        switch self {
        case .trend: ["bucket", "event", "group_value", "value"]
        case .funnel: ["group_value", "step", "event", "people", "conversion", "median_seconds"]
        case .retention: ["cohort", "people", "period", "returned", "returned_within"]
        case .distribution: ["bucket_from", "bucket_to", "people"]
        case .user: ["time", "event", "distinct_id", "lib", "hybrid_h5", "stored_user_id", "event_id", "properties", "next"]
        }
    }

    /// The largest request body taken: filters and steps are small.
    package static let maxBodyBytes = 64 << 10
    /// Longest a report runs before the collector stops it (its statement timeout), in seconds.
    package static let timeoutSeconds = 30
}

/// An argument of a report function, as a member of the request body.
package struct ReportParameter: Sendable {
    package enum Shape: Sendable {
        /// A string (`unit`, `property`, `before`).
        case text
        /// A non-empty array of strings (`events`).
        case names
        /// A day, `YYYY-MM-DD`.
        case day
        /// An integer (`top`, `periods`, `window_seconds`).
        case integer
        /// A user number, 1 or more (`user_id`).
        case userNumber
        /// A JSON array: conditions, or funnel steps.
        case conditions
        /// A non-empty array of numbers (`buckets`).
        case numbers
    }

    package let name: String
    package let shape: Shape
    package let required: Bool

    init(_ name: String, _ shape: Shape, required: Bool = false) {
        self.name = name
        self.shape = shape
        self.required = required
    }

    /// What a value of this shape is, for an error message.
    package var expected: String {
        switch shape {
        case .text: "a string"
        case .names: "an array of 1 to 100 event names"
        case .day: "a day, YYYY-MM-DD"
        case .integer: "an integer (at most 2147483647)"
        case .userNumber: "a user number (1, 2, …)"
        case .conditions: "a JSON array"
        case .numbers: "an array of 1 to 100 numbers"
        }
    }
}
