import ArgumentParser
import DatongContracts
import Foundation
import NIOHTTP1

/// `datongctl metadata [show] | export | import`: what a project tracks, as the catalog kept it at ingest,
/// and the display names and descriptions the team gives it (docs/ANALYTICS.md "The catalog").
struct Metadata: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show a project's events and properties with their types, export them as JSON, import display names and descriptions.",
        subcommands: [ShowMetadata.self, ExportMetadata.self, ImportMetadata.self], defaultSubcommand: ShowMetadata.self
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
