import ArgumentParser
import DatongContracts
import Foundation
import NIOHTTP1

/// `datongctl timezone [show] | set`: the project's time zone, the days of its reports (docs/ANALYTICS.md).
struct TimeZoneCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "timezone", abstract: "Show or set the time zone whose days a project's reports count in.",
        subcommands: [ShowTimeZone.self, SetTimeZone.self], defaultSubcommand: ShowTimeZone.self
    )
}

struct ShowTimeZone: CtlCommand {
    static let configuration = CommandConfiguration(commandName: "show", abstract: "Show a project's time zone (UTC unless set).")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String

    func execute(_ admin: Admin) async throws -> String {
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        let zone = try admin.decode(ProjectTimeZone.self, try await admin.send(.GET, "/v1/projects/\(project)/time-zone"))
        return "\(zone.project) counts its reports' days in \(zone.timeZone)"
    }
}

struct SetTimeZone: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "set", abstract: "Set a project's time zone (an IANA name such as Asia/Shanghai); its report rollups are built again in it."
    )
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String
    @Argument(help: "An IANA time zone name, such as Asia/Shanghai.")
    var zone: String

    func execute(_ admin: Admin) async throws -> String {
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        if let problem = ProjectTimeZone.shapeProblem(zone) { throw CtlFailure.usage("datongctl: \(problem)") }
        let body = Array(try JSONEncoder().encode(TimeZoneSetting(timeZone: zone)))
        let kept = try admin.decode(ProjectTimeZone.self, try await admin.send(.PUT, "/v1/projects/\(project)/time-zone", body: body))
        return "\(kept.project) counts its reports' days in \(kept.timeZone) from the rollups' next look"
    }
}
