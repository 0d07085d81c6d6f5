/// One project's own retention: its events of a month are dropped once the month ended `months`
/// months ago (collector `PUT /v1/projects/{p}/retention`; config-service passes it on).
package struct ProjectRetention: Codable, Sendable, Equatable {
    package var project: String
    package var months: Int

    /// What a project may keep: at least one month (this one and the one before), at most a century.
    package static let months = 1...1200

    package init(project: String, months: Int) {
        self.project = project
        self.months = months
    }
}

/// The body of `PUT …/retention`.
package struct RetentionSetting: Codable, Sendable, Equatable {
    package var months: Int

    package init(months: Int) { self.months = months }
}

/// `GET /v1/retention`: what retention would drop now, without dropping it. Whole tables go, never
/// single rows: a project's month, or a month stored before events were split by project, once it
/// is past for every project in it. Each table's rows are counted by project.
package struct RetentionPlan: Codable, Sendable, Equatable {
    /// The retention in days of the projects without their own (`?days=N`, else RETENTION_DAYS;
    /// 0 keeps all), and the collector's RETENTION_DAYS.
    package var days: Int
    package var retentionDays: Int
    /// The projects' own retention in this plan (`?project=P&months=N` tries one).
    package var projects: [ProjectRetention]
    /// Events older than this instant are past `days`; nil when `days` is 0.
    package var cutoff: String?
    package var partitions: [Partition]

    package struct Partition: Codable, Sendable, Equatable {
        package var name: String
        /// The project whose table it is; nil for a month shared by its projects.
        package var project: String?
        package var from: String
        package var to: String
        package var rows: [ProjectRows]

        package init(name: String, project: String?, from: String, to: String, rows: [ProjectRows]) {
            self.name = name
            self.project = project
            self.from = from
            self.to = to
            self.rows = rows
        }
    }

    package struct ProjectRows: Codable, Sendable, Equatable {
        package var project: String
        package var rows: Int

        package init(project: String, rows: Int) {
            self.project = project
            self.rows = rows
        }
    }

    package init(days: Int, retentionDays: Int, projects: [ProjectRetention], cutoff: String?, partitions: [Partition]) {
        self.days = days
        self.retentionDays = retentionDays
        self.projects = projects
        self.cutoff = cutoff
        self.partitions = partitions
    }
}
