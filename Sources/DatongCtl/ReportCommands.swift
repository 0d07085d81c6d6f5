import ArgumentParser
import DatongContracts
import DatongJSON
import Foundation
import NIOCore
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

/// `datongctl report trend|funnel|retention|distribution|user`: a report function's rows
/// (docs/ANALYTICS.md, Reports) through config-service, as a table, CSV or the answer's JSON.
/// Each option is the function's argument of the same name (`--from-day` is `from_day`).
struct Report: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a report (trend, funnel, retention, distribution, a person's events) and print its rows.",
        discussion: "The options are the report functions' arguments (docs/ANALYTICS.md, Reports); days are the project's (datongctl timezone).",
        subcommands: [TrendReport.self, FunnelReport.self, RetentionReport.self, DistributionReport.self, UserReport.self]
    )
}

/// How a report's rows are printed.
enum ReportFormat: String, ExpressibleByArgument, CaseIterable {
    case table, csv, json
}

/// What every report command takes: where, which project, which days, how to print.
struct ReportOptions: ParsableArguments {
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String
    @Option(help: "table (aligned columns), csv (RFC 4180, a header line) or json (the answer as config-service gives it).")
    var format: ReportFormat = .table
}

/// Days of a report that covers a range of them.
struct ReportDays: ParsableArguments {
    @Option(name: .customLong("from-day"), help: "The first day, YYYY-MM-DD, in the project's time zone.")
    var fromDay: String
    @Option(name: .customLong("to-day"), help: "The last day, YYYY-MM-DD (included).")
    var toDay: String

    var members: [String: JSONValue] { ["from_day": .string(fromDay), "to_day": .string(toDay)] }
}

protocol ReportCommand: CtlCommand {
    static var kind: ReportKind { get }
    var report: ReportOptions { get }
    /// The body's members besides the days: the function's arguments by name.
    func arguments() throws -> [String: JSONValue]
}

extension ReportCommand {
    var connection: ConnectionOptions { report.connection }

    func execute(_ admin: Admin) async throws -> String {
        guard ProjectName.isValid(report.project) else { throw CtlFailure.usage("datongctl: '\(report.project)' is not a project name") }
        var body: [UInt8] = []
        JSONValue.object(try arguments()).write(to: &body)
        let answer = try await admin.send(
            .POST, "/v1/projects/\(report.project)/reports/\(Self.kind.rawValue)", body: body,
            timeout: .seconds(Int64(ReportKind.timeoutSeconds) + 10))
        if report.format == .json { return String(decoding: answer, as: UTF8.self) }
        guard let tree = try? JSONValue(parsing: answer), let columns = tree["columns"]?.arrayValue?.compactMap(\.stringValue),
            let rows = tree["rows"]?.arrayValue?.map({ $0.arrayValue ?? [] })
        else { throw CtlFailure.unreachable("datongctl: config-service gave a report datongctl cannot read") }
        let cells = rows.map { $0.map(ReportTable.cell) }
        return report.format == .csv ? ReportTable.csv(columns, cells) : ReportTable.aligned(columns, cells)
    }
}

/// A JSON condition or array given on the command line.
func jsonArgument(_ text: String, option: String, example: String) throws -> JSONValue {
    guard let value = try? JSONValue(parsing: Array(text.utf8), maxDepth: 16) else {
        throw CtlFailure.usage("datongctl: \(option) is JSON, such as \(example)")
    }
    return value
}

let conditionExample = #"'{"property": "price", "op": ">", "value": 100}'"#

struct TrendReport: ReportCommand {
    static let configuration = CommandConfiguration(
        commandName: "trend", abstract: "Events, people or a property's sum/avg/min/max per hour, day, week or month (analytics.event_trend).")
    static let kind = ReportKind.trend
    @OptionGroup var report: ReportOptions
    @OptionGroup var days: ReportDays
    @Option(help: "An event to count (repeat for several; * for any event).")
    var event: [String]
    @Option(help: "hour, day, week, month or all.")
    var unit: String?
    @Option(help: "events, people, sum, avg, min or max.")
    var measure: String?
    @Option(help: "The NUMBER event property sum/avg/min/max read.")
    var property: String?
    @Option(name: .customLong("group-by"), help: "lib, app_version, an event property or user.NAME (a profile property).")
    var groupBy: String?
    @Option(help: "A condition on an event property, as JSON (repeat for several; all must hold).")
    var filter: [String] = []
    @Option(help: "The groups with the largest values kept (default 10).")
    var top: Int?

    func arguments() throws -> [String: JSONValue] {
        guard !event.isEmpty else { throw CtlFailure.usage("datongctl: name an --event (or --event '*')") }
        var members = days.members
        members["events"] = .array(event.map { .string($0) })
        members["unit"] = unit.map { .string($0) }
        members["measure"] = measure.map { .string($0) }
        members["property"] = property.map { .string($0) }
        members["group_by"] = groupBy.map { .string($0) }
        members["top"] = top.map { .int(Int64($0)) }
        if !filter.isEmpty { members["filters"] = .array(try filter.map { try jsonArgument($0, option: "--filter", example: conditionExample) }) }
        return members
    }
}

struct FunnelReport: ReportCommand {
    static let configuration = CommandConfiguration(
        commandName: "funnel", abstract: "People reaching each of 2 to 10 ordered steps within a window, and the median time between steps (analytics.funnel).")
    static let kind = ReportKind.funnel
    @OptionGroup var report: ReportOptions
    @OptionGroup var days: ReportDays
    @Option(help: #"A step, in order: an event name, or JSON {"event": NAME, "filters": [...]} (repeat, 2 to 10)."#)
    var step: [String]
    @Option(name: .customLong("window-seconds"), help: "The conversion window from the first step (default 86400).")
    var windowSeconds: Int?
    @Option(name: .customLong("group-by"), help: "A property of the first step (lib, app_version, an event property).")
    var groupBy: String?
    @Option(help: "The groups with the most people at the first step kept (default 10).")
    var top: Int?

    func arguments() throws -> [String: JSONValue] {
        var members = days.members
        members["steps"] = .array(
            try step.map { text in
                text.hasPrefix("{") ? try jsonArgument(text, option: "--step", example: #"'{"event": "Pay", "filters": []}'"#) : .string(text)
            })
        members["window_seconds"] = windowSeconds.map { .int(Int64($0)) }
        members["group_by"] = groupBy.map { .string($0) }
        members["top"] = top.map { .int(Int64($0)) }
        return members
    }
}

struct RetentionReport: ReportCommand {
    static let configuration = CommandConfiguration(
        commandName: "retention", abstract: "Of the people who did a start event each day (week), those who came back on day (week) k (analytics.retention).")
    static let kind = ReportKind.retention
    @OptionGroup var report: ReportOptions
    @OptionGroup var days: ReportDays
    @Option(name: .customLong("start-event"), help: "The event that puts a person in a cohort.")
    var startEvent: String
    @Option(name: .customLong("return-event"), help: "The event that counts as coming back.")
    var returnEvent: String
    @Option(help: "day or week.")
    var unit: String?
    @Option(help: "Periods after the cohort's, 1 to 30 (default 7).")
    var periods: Int?
    @Option(name: .customLong("start-filter"), help: "A condition on the start event, as JSON (repeatable).")
    var startFilter: [String] = []
    @Option(name: .customLong("return-filter"), help: "A condition on the return event, as JSON (repeatable).")
    var returnFilter: [String] = []

    func arguments() throws -> [String: JSONValue] {
        var members = days.members
        members["start_event"] = .string(startEvent)
        members["return_event"] = .string(returnEvent)
        members["unit"] = unit.map { .string($0) }
        members["periods"] = periods.map { .int(Int64($0)) }
        if !startFilter.isEmpty {
            members["start_filters"] = .array(try startFilter.map { try jsonArgument($0, option: "--start-filter", example: conditionExample) })
        }
        if !returnFilter.isEmpty {
            members["return_filters"] = .array(try returnFilter.map { try jsonArgument($0, option: "--return-filter", example: conditionExample) })
        }
        return members
    }
}

struct DistributionReport: ReportCommand {
    static let configuration = CommandConfiguration(
        commandName: "distribution", abstract: "People by how often they did an event (or a property's sum), in buckets (analytics.distribution).")
    static let kind = ReportKind.distribution
    @OptionGroup var report: ReportOptions
    @OptionGroup var days: ReportDays
    @Option(help: "The event.")
    var event: String
    @Option(help: "events (how many times) or sum (of --property).")
    var measure: String?
    @Option(help: "The NUMBER event property summed.")
    var property: String?
    @Option(help: "The buckets' lower bounds, ascending, comma-separated (such as 1,2,5,10).")
    var buckets: String?
    @Option(help: "A condition on the event, as JSON (repeatable).")
    var filter: [String] = []

    func arguments() throws -> [String: JSONValue] {
        var members = days.members
        members["event"] = .string(event)
        members["measure"] = measure.map { .string($0) }
        members["property"] = property.map { .string($0) }
        if let buckets {
            let bounds = buckets.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            guard !bounds.isEmpty, bounds.allSatisfy({ Double($0)?.isFinite == true }) else {
                throw CtlFailure.usage("datongctl: --buckets is numbers separated by commas, such as 1,2,5,10")
            }
            members["buckets"] = .array(try bounds.map { try jsonArgument($0, option: "--buckets", example: "1,2,5,10") })
        }
        if !filter.isEmpty { members["filters"] = .array(try filter.map { try jsonArgument($0, option: "--filter", example: conditionExample) }) }
        return members
    }
}

struct UserReport: ReportCommand {
    static let configuration = CommandConfiguration(
        commandName: "user", abstract: "A person's events across their merged users, apps and H5 pages, newest first (analytics.user_events).")
    static let kind = ReportKind.user
    @OptionGroup var report: ReportOptions
    @Argument(help: "The user number (user_id in analytics.events; datongctl user show finds it).")
    var userID: Int64
    @Option(help: "The next column of the last row of the page before.")
    var before: String?
    @Option(name: .customLong("page-size"), help: "Rows, 1 to 1000 (default 100).")
    var pageSize: Int?

    func arguments() throws -> [String: JSONValue] {
        ["user_id": .int(userID), "before": before.map { .string($0) }, "page_size": pageSize.map { .int(Int64($0)) }].compactMapValues { $0 }
    }
}

/// A report's rows as text.
enum ReportTable {
    /// A value as a cell: text as it is, numbers as sent, null empty, arrays and objects as JSON.
    static func cell(_ value: JSONValue) -> String {
        switch value {
        case .null: ""
        case .bool(let flag): flag ? "true" : "false"
        case .int(let number): String(number)
        case .number(let text), .string(let text): text
        case .array, .object: value.canonicalText
        }
    }

    /// Columns padded to their widest cell (a cell over 60 characters is cut with "…").
    static func aligned(_ columns: [String], _ rows: [[String]]) -> String {
        let cut = rows.map { $0.map { $0.count > 60 ? $0.prefix(59) + "…" : $0 } }
        let widths = columns.indices.map { index in ([columns[index]] + cut.map { index < $0.count ? $0[index] : "" }).map(\.count).max() ?? 0 }
        let lines = ([columns.map { $0.uppercased() }] + cut).map { row in
            row.enumerated().map { index, value in
                index == row.count - 1 ? value : value.padding(toLength: widths[index] + 2, withPad: " ", startingAt: 0)
            }.joined()
        }
        return (lines + ["(\(rows.count) \(rows.count == 1 ? "row" : "rows"))"]).joined(separator: "\n")
    }

    /// RFC 4180: a header line, fields with a comma, quote or line break quoted, quotes doubled.
    static func csv(_ columns: [String], _ rows: [[String]]) -> String {
        func field(_ value: String) -> String {
            value.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" })
                ? "\"" + value.replacingOccurrences(of: "\"", with: "\"\"") + "\"" : value
        }
        return ([columns] + rows).map { $0.map(field).joined(separator: ",") }.joined(separator: "\r\n")
    }
}
