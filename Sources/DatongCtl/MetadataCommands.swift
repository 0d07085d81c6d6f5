import ArgumentParser
import DatongContracts
import Foundation
import NIOHTTP1

/// `datongctl metadata [show] | export | import | type | replay`: what a project tracks, as the
/// catalog kept it at ingest, the display names and descriptions the team gives it, property types
/// and the records refused for them (docs/ANALYTICS.md "The catalog", "Types at ingest").
struct Metadata: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show a project's events and properties with their types, export them as JSON, import display names and descriptions.",
        subcommands: [
            ShowMetadata.self, ExportMetadata.self, ImportMetadata.self, SetPropertyType.self, ReplayTypeRefusals.self, MetadataRules.self,
            DeclareMetadata.self, HideMetadata.self,
        ],
        defaultSubcommand: ShowMetadata.self
    )

    static func read(_ project: String, _ admin: Admin) async throws -> ProjectMetadata {
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        return try admin.decode(ProjectMetadata.self, try await admin.send(.GET, "/v1/projects/\(project)/metadata"))
    }
}

struct ShowMetadata: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "show", abstract: "List a project's events (stored, days seen, libs) and properties (type, events, a second type seen).")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String

    func execute(_ admin: Admin) async throws -> String {
        Self.describe(try await Metadata.read(project, admin))
    }

    static func describe(_ metadata: ProjectMetadata) -> String {
        var lines = ["\(metadata.project): \(metadata.events.count) events, \(metadata.properties.count) properties"]
        lines.append("event\tstored\tfirst day\tlast day\tlibs")
        for event in metadata.events {
            lines.append("\(event.name)\t\(event.count)\t\(event.firstDay)\t\(event.lastDay)\t\(event.libs.joined(separator: ","))")
        }
        lines.append("property\tkind\ttype\tevents\tother types seen")
        for property in metadata.properties {
            let conflicts = property.conflicts.map { "\($0.type.rawValue) in \($0.name)" }.joined(separator: ", ")
            lines.append(
                "\(property.name)\t\(property.kind)\t\(property.type.rawValue)\t\(property.events.count)\t\(conflicts.isEmpty ? "-" : conflicts)")
        }
        return lines.joined(separator: "\n")
    }
}

struct ExportMetadata: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "export", abstract: "Print a project's catalog as JSON (sorted keys), to keep and review in git.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String

    func execute(_ admin: Admin) async throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(try await Metadata.read(project, admin)), as: UTF8.self)
    }
}

struct ImportMetadata: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Set display names and descriptions from an export (edited, e.g. in git): every event and property in it with a displayName or description.",
        discussion: "An empty displayName and description remove the note. Types, counts and days in the file are ignored: the catalog keeps them."
    )
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String
    @Argument(help: "The JSON file (as `datongctl metadata export` writes it).")
    var file: String

    func execute(_ admin: Admin) async throws -> String {
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: file)) } catch {
            throw CtlFailure.usage("datongctl: cannot read \(file): \(error.localizedDescription)")
        }
        let metadata: ProjectMetadata
        do { metadata = try JSONDecoder().decode(ProjectMetadata.self, from: data) } catch {
            throw CtlFailure.usage("datongctl: \(file) is not a metadata export (datongctl metadata export): \(error)")
        }
        let notes = MetadataNote.notes(of: metadata)
        for note in notes { if let problem = note.problem { throw CtlFailure.usage("datongctl: \(file): \(problem)") } }
        let answer = try admin.decode(
            [String: Int].self, try await admin.send(.PUT, "/v1/projects/\(project)/metadata/notes", body: Array(try JSONEncoder().encode(notes))))
        return "\(project): \(answer["kept"] ?? 0) notes kept, \(answer["removed"] ?? 0) removed"
    }
}

struct SetPropertyType: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "type",
        abstract: "Set a property's type (every later value is checked against it), after showing what it does to the rows stored.",
        discussion: "With --preview nothing changes: the answer says how many stored rows carry the property and how many of them do not read as the type."
    )
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String
    @Argument(help: "event or profile.")
    var kind: String
    @Argument(help: "The property's name.")
    var name: String
    @Argument(help: "NUMBER, BOOL, STRING, LIST, DATETIME or DATE.")
    var type: String
    @Flag(help: "Only show what the change would do.")
    var preview = false

    func execute(_ admin: Admin) async throws -> String {
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        guard let type = SensorsType(rawValue: type.uppercased()) else {
            throw CtlFailure.usage("datongctl: type is one of \(SensorsType.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let change = PropertyTypeChange(kind: kind, name: name, type: type)
        if let problem = change.problem { throw CtlFailure.usage("datongctl: \(problem)") }
        let report = try admin.decode(
            PropertyTypeReport.self,
            try await admin.send(
                preview ? .POST : .PUT, "/v1/projects/\(project)/metadata/types\(preview ? "/preview" : "")", body: Array(try JSONEncoder().encode(change))))
        let before = report.previous.map { "was \($0.rawValue)" } ?? "had no type"
        let rows = "\(report.storedRows) stored rows carry it, \(report.unreadableRows) of them do not read as \(report.type.rawValue)"
        return report.applied
            ? "\(project): \(report.kind) property \(report.name) is \(report.type.rawValue) (\(before)); \(rows)"
            : "\(project): \(report.kind) property \(report.name) would be \(report.type.rawValue) (\(before)); \(rows); nothing changed"
    }
}

struct ReplayTypeRefusals: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Write again the records refused with PROPERTY_WITH_WRONG_TYPE, once the type or the instrumentation is fixed.",
        discussion: "Each record is checked as if it came now: stored, found stored before, or refused again (and kept again with the reason of now)."
    )
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String
    @Option(help: "Records a call.")
    var batch = 1_000

    func execute(_ admin: Admin) async throws -> String {
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        guard ReplayRequest.limits.contains(batch) else { throw CtlFailure.usage("datongctl: --batch is \(ReplayRequest.limits)") }
        var total = ReplayResult(replayed: 0, stored: 0, duplicates: 0, refused: 0, next: nil, before: 0)
        var request = ReplayRequest(limit: batch)
        while true {
            let result = try admin.decode(
                ReplayResult.self,
                try await admin.send(.POST, "/v1/projects/\(project)/rejected/replay", body: Array(try JSONEncoder().encode(request))))
            total.replayed += result.replayed
            total.stored += result.stored
            total.duplicates += result.duplicates
            total.refused += result.refused
            guard let next = result.next else { break }
            request.after = next
            request.before = result.before
        }
        return "\(project): \(total.replayed) records replayed: \(total.stored) stored, \(total.duplicates) stored before, \(total.refused) refused again"
    }
}

struct MetadataRules: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "rules",
        abstract: "Show or set a project's validation: strict (declared events and properties only) and what a value of another type costs.",
        discussion: "Declare first (datongctl metadata declare PROJECT --seen): a strict project refuses every event not declared."
    )
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String
    @Option(help: "on: declared events and properties only; off: any (the default).")
    var strict: String?
    @Option(help: "refuse: the record (the default); drop-property: only the property.")
    var wrongType: String?

    func execute(_ admin: Admin) async throws -> String {
        var settings = try await Metadata.read(project, admin).settings ?? ProjectCatalogSettings()
        if strict != nil || wrongType != nil {
            if let strict {
                guard ["on", "off"].contains(strict) else { throw CtlFailure.usage("datongctl: --strict is on or off") }
                settings.strict = strict == "on"
            }
            if let wrongType {
                guard let choice = ProjectCatalogSettings.WrongType(rawValue: wrongType.replacingOccurrences(of: "-", with: "_")) else {
                    throw CtlFailure.usage("datongctl: --wrong-type is refuse or drop-property")
                }
                settings.wrongType = choice
            }
            settings = try admin.decode(
                ProjectCatalogSettings.self,
                try await admin.send(.PUT, "/v1/projects/\(project)/metadata/settings", body: Array(try JSONEncoder().encode(settings))))
        }
        let wrong = settings.wrongType == .refuse ? "refuses the record" : "drops only the property"
        return "\(project): strict \(settings.strict ? "on" : "off"); a value of another type \(wrong)"
    }
}

struct DeclareMetadata: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "declare",
        abstract: "Declare events, or with --seen every event and property the catalog has (each property with its type now).",
        discussion: "Properties not seen yet are declared one by one with their type: datongctl metadata type PROJECT KIND NAME TYPE."
    )
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String
    @Argument(help: "Events to declare.")
    var events: [String] = []
    @Flag(help: "Also declare every event and property seen.")
    var seen = false

    func execute(_ admin: Admin) async throws -> String {
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        let declarations = MetadataDeclarations(events: events, seen: seen)
        if let problem = declarations.problem { throw CtlFailure.usage("datongctl: \(problem)") }
        guard seen || !events.isEmpty else { throw CtlFailure.usage("datongctl: name events to declare, or --seen") }
        let made = try admin.decode(
            DeclarationsMade.self,
            try await admin.send(.POST, "/v1/projects/\(project)/metadata/declarations", body: Array(try JSONEncoder().encode(declarations))))
        return "\(project): \(made.events) events and \(made.properties) properties declared"
    }
}

struct HideMetadata: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "hide",
        abstract: "Hide an event (its rows) or a property from analysts' views, or show it again (--show).",
        discussion: "Hidden, not erased: collector.events keeps the rows. The entry's display name and description are kept."
    )
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String
    @Argument(help: "event, event_property or profile_property.")
    var kind: String
    @Argument(help: "The event's or property's name.")
    var name: String
    @Flag(help: "Show it again.")
    var show = false

    func execute(_ admin: Admin) async throws -> String {
        let metadata = try await Metadata.read(project, admin)
        var note = MetadataNote(kind: kind, name: name, displayName: "", description: "", hidden: !show)
        if let problem = note.problem { throw CtlFailure.usage("datongctl: \(problem)") }
        // The note's texts stay as they are.
        if let current = MetadataNote.notes(of: metadata).first(where: { $0.kind == kind && $0.name == name }) {
            note.displayName = current.displayName
            note.description = current.description
        }
        _ = try await admin.send(.PUT, "/v1/projects/\(project)/metadata/notes", body: Array(try JSONEncoder().encode([note])))
        return "\(project): \(kind) \(name) \(show ? "shown to" : "hidden from") analysts"
    }
}
