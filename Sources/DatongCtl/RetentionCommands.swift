import ArgumentParser
import DatongContracts
import Foundation
import NIOHTTP1

/// `datongctl retention [show] | set | clear`: how long events are kept (docs/PRIVACY.md).
struct Retention: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show what retention drops now, or set a project's own retention in months.",
        subcommands: [ShowRetention.self, SetRetention.self, ClearRetention.self], defaultSubcommand: ShowRetention.self
    )
}

struct ShowRetention: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Show what retention drops now (whole months of events, by project), without dropping anything."
    )
    @OptionGroup var connection: ConnectionOptions
    @Option(help: "The retention to try for projects without their own, in days (default: the collector's RETENTION_DAYS; 0 keeps all).")
    var days: Int?
    @Option(help: "Try a retention of --months for this project.")
    var project: String?
    @Option(help: "The months to try for --project (0: as if it had none of its own).")
    var months: Int?

    func execute(_ admin: Admin) async throws -> String {
        var query: [(String, String)] = []
        if let days {
            guard (0...36_500).contains(days) else { throw CtlFailure.usage("datongctl: --days is 0 to 36500") }
            query.append(("days", String(days)))
        }
        switch (project, months) {
        case (nil, nil): break
        case (let project?, let months?):
            guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
            guard (0...ProjectRetention.months.upperBound).contains(months) else { throw CtlFailure.usage("datongctl: --months is 0 to 1200") }
            query += [("project", project), ("months", String(months))]
        default: throw CtlFailure.usage("datongctl: --project and --months go together")
        }
        return Self.describe(try admin.decode(RetentionPlan.self, try await admin.send(.GET, "/v1/retention", query: query)))
    }

    static func describe(_ plan: RetentionPlan) -> String {
        var lines: [String] = []
        for project in plan.projects { lines.append("\(project.project) keeps \(project.months) months besides this one") }
        let setting = plan.retentionDays > 0 ? "RETENTION_DAYS is \(plan.retentionDays)" : "RETENTION_DAYS is 0"
        if let cutoff = plan.cutoff {
            lines.append("other projects keep \(plan.days) days (\(setting)): their events before \(cutoff) go")
        } else {
            lines.append("other projects keep all their events (\(setting))")
        }
        let rows = plan.partitions.flatMap(\.rows).map(\.rows).reduce(0, +)
        lines.append("dropped now: \(plan.partitions.count) tables, \(rows) events")
        for partition in plan.partitions {
            let counts = partition.rows.map { "\($0.project) \($0.rows)" }.joined(separator: ", ")
            lines.append("\(partition.name)\t\(partition.from) … \(partition.to)\t\(counts.isEmpty ? "empty" : counts)")
        }
        return lines.joined(separator: "\n")
    }
}

struct SetRetention: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "set", abstract: "Keep a project's events for this month and the N before; older months are dropped within the hour."
    )
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String
    @Option(help: "Months kept besides the current one (1 to 1200).")
    var months: Int

    func execute(_ admin: Admin) async throws -> String {
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        guard ProjectRetention.months.contains(months) else { throw CtlFailure.usage("datongctl: --months is 1 to 1200") }
        let body = Array(try JSONEncoder().encode(RetentionSetting(months: months)))
        let kept = try admin.decode(ProjectRetention.self, try await admin.send(.PUT, "/v1/projects/\(project)/retention", body: body))
        let plan = try admin.decode(RetentionPlan.self, try await admin.send(.GET, "/v1/retention"))
        let going = plan.partitions.filter { $0.project == project || $0.project == nil }
        let rows = going.flatMap(\.rows).filter { $0.project == project }.map(\.rows).reduce(0, +)
        return "\(kept.project) keeps \(kept.months) months besides this one; the next run drops \(rows) of its events "
            + "(see: datongctl retention)"
    }
}

struct ClearRetention: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "clear", abstract: "Remove a project's own retention: it keeps RETENTION_DAYS as other projects do."
    )
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String

    func execute(_ admin: Admin) async throws -> String {
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        _ = try await admin.send(.DELETE, "/v1/projects/\(project)/retention")
        return "\(project) keeps RETENTION_DAYS, as projects without their own do"
    }
}
