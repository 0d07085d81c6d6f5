import Collector
import ConfigService
import DatongRuntime
import Foundation
import Gateway
import Identity
import Testing

/// The settings table (docs/SETTINGS.md) is what the services read: every variable a service reads is in it,
/// for that service, with the default the code has; every variable in it is read by some service.
@Suite("settings: the documented table matches the code")
struct SettingsTableTests {
    /// The table's rows: variable → (services, default) cells.
    static func readmeTable() throws -> [String: (services: String, defaultValue: String)] {
        let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/SETTINGS.md")
        var rows: [String: (String, String)] = [:]
        for line in try String(contentsOf: readme, encoding: .utf8).split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 5, cells[1].hasPrefix("`"), cells[1].dropFirst().first?.isUppercase == true else { continue }
            rows[cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`"))] = (cells[2], cells[3])
        }
        return rows
    }

    /// The words of a cell: split at spaces, commas and brackets, without Markdown marks.
    static func words(_ cell: String) -> Set<String> {
        Set(
            cell.components(separatedBy: CharacterSet(charactersIn: " ,()`*;")).filter { !$0.isEmpty }
        )
    }

    /// What each service reads, from an environment holding only the required token.
    static func read() throws -> [(service: String, variables: [(name: String, defaultValue: String)])] {
        let environment = ["SERVICE_TOKEN": String(repeating: "t", count: ServerSettings.minServiceTokenLength)]
        let builders: [(String, (SettingsReader) throws -> Void)] = [
            ("gateway", { _ = try GatewaySettings($0) }),
            ("identity", { _ = try IdentitySettings($0) }),
            ("config", { _ = try ConfigSettings($0) }),
            ("collector", { _ = try CollectorSettings($0) }),
        ]
        return try builders.map { service, build in
            let recorder = SettingsRecorder()
            let reader = SettingsReader(environment: environment, recorder: recorder)
            _ = try ServiceMain.logLevel(reader)
            try build(reader)
            return (service, recorder.variables)
        }
    }

    @Test("every variable a service reads is in the table, for that service, with the code's default")
    func codeIsDocumented() throws {
        let table = try Self.readmeTable()
        #expect(table.count > 20, "the settings table was not found in docs/SETTINGS.md")
        for (service, variables) in try Self.read() {
            for variable in variables {
                guard let row = table[variable.name] else {
                    Issue.record("\(service) reads \(variable.name), which docs/SETTINGS.md does not list")
                    continue
                }
                let services = Self.words(row.services)
                #expect(services.contains("all") || services.contains(service), "docs/SETTINGS.md: \(variable.name) is not marked for \(service)")
                #expect(
                    Self.words(row.defaultValue).contains(variable.defaultValue),
                    "docs/SETTINGS.md: \(variable.name)'s default for \(service) is \(variable.defaultValue), the table says \(row.defaultValue)"
                )
            }
        }
    }

    @Test("every variable in the table is read by some service")
    func tableIsRead() throws {
        let read = Set(try Self.read().flatMap { $0.variables.map(\.name) })
        for name in try Self.readmeTable().keys.sorted() {
            #expect(read.contains(name), "docs/SETTINGS.md lists \(name), which no service reads")
        }
    }
}
