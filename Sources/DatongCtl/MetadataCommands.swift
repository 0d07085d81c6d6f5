import ArgumentParser
import DatongContracts
import Foundation
import NIOHTTP1

/// `datongctl metadata [show] | export`: what a project tracks, as the catalog kept it at ingest
/// (docs/ANALYTICS.md "The catalog").
struct Metadata: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show a project's events and properties with their types, or export them as JSON.",
        subcommands: [ShowMetadata.self, ExportMetadata.self], defaultSubcommand: ShowMetadata.self
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
