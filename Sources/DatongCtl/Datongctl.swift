import ArgumentParser
import AsyncHTTPClient
import DatongContracts
import DatongJSON
import Foundation
import NIOCore
import NIOHTTP1

/// `datongctl`: publishes config-service documents from files, shows their versions, compares and
/// rolls them back, through the admin API. Every command prints what happened in words and exits
/// with a code scripts can act on (`CtlFailure`).
package enum Datongctl {
    /// Runs one command line; the result is what to print and the exit code.
    package static func run(_ arguments: [String], environment: [String: String]) async -> (output: String, exitCode: Int32) {
        let command: any ParsableCommand
        do {
            command = try Root.parseAsRoot(arguments)
        } catch {
            let exit = Root.exitCode(for: error)
            let message = Root.fullMessage(for: error)
            return (message, exit == .success ? 0 : CtlFailure.usage("").exitCode)
        }
        if let importing = command as? ImportCommand {
            return await importing.execute(environment: environment)
        }
        if let status = command as? StatusCommand {
            return await status.execute(environment: environment)
        }
        guard let step = command as? any CtlCommand else {
            // `datongctl help user erase`, or a group named alone (`datongctl keys`): that command's help.
            let named = arguments.first == "help" ? Array(arguments.dropFirst()) : arguments
            return (Root.helpMessage(for: Root.command(at: named.filter { !$0.hasPrefix("-") }) ?? Root.self), 0)
        }
        // A service that refuses connections is reported after a few seconds, not after the default 10.
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(timeout: .init(connect: .seconds(3))))
        let result: (String, Int32)
        do {
            let target = try Target(options: step.connection, environment: environment)
            result = (try await step.execute(Admin(target: target, http: client)), 0)
        } catch let failure as CtlFailure {
            result = (failure.message, failure.exitCode)
        } catch {
            result = ("datongctl: \(error)", CtlFailure.unreachable("").exitCode)
        }
        try? await client.shutdown()
        return result
    }
}

extension Datongctl {
    /// Why `arguments` is not a datongctl command line, or nil when it is one; nothing runs (the
    /// tests check every command the docs show with it).
    package static func usageProblem(_ arguments: [String]) -> String? {
        do {
            _ = try Root.parseAsRoot(arguments)
            return nil
        } catch {
            return Root.fullMessage(for: error)
        }
    }

    /// Every command's path below `datongctl` (`["user", "erase"]`), groups included.
    package static var commandPaths: [[String]] {
        func walk(_ command: any ParsableCommand.Type, _ path: [String]) -> [[String]] {
            command.configuration.subcommands.flatMap { sub in
                let name = sub.configuration.commandName ?? sub._commandName
                return [path + [name]] + walk(sub, path + [name])
            }
        }
        return walk(Root.self, [])
    }
}

extension Root {
    /// The command `names` lead to from here, or nil when one of them names none.
    static func command(at names: [String]) -> (any ParsableCommand.Type)? {
        var command: any ParsableCommand.Type = Root.self
        for name in names {
            guard let next = command.configuration.subcommands.first(where: { ($0.configuration.commandName ?? $0._commandName) == name })
            else { return nil }
            command = next
        }
        return command
    }
}

/// Why a command did not succeed, and its exit code: 1 config-service refused the request (4xx),
/// 2 the command line is wrong, 3 config-service could not be reached or failed (5xx).
package enum CtlFailure: Error, Equatable {
    case refused(String)
    case usage(String)
    case unreachable(String)

    var message: String {
        switch self {
        case .refused(let text), .usage(let text), .unreachable(let text): return text
        }
    }

    var exitCode: Int32 {
        switch self {
        case .refused: return 1
        case .usage: return 2
        case .unreachable: return 3
        }
    }
}

struct Root: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "datongctl",
        abstract:
            "Publish and manage config-service documents (tracking tables, remote and visual config, whitelists, app links), encryption keys, and erasures and exports of users' data.",
        discussion: """
            The admin token comes from --token or DATONG_ADMIN_TOKEN, the service from --url or DATONG_CONFIG_URL \
            (default http://127.0.0.1:8108). Exit codes: 0 done, 1 refused by config-service, 2 wrong command line, \
            3 config-service unreachable or failing.
            """,
        version: DatongRelease.version,
        subcommands: [
            Publish.self, Versions.self, Show.self, Diff.self, Rollback.self, Keys.self, User.self, Retention.self, TimeZoneCommand.self, Report.self,
            Metadata.self,
            Enrichment.self, ImportCommand.self, StatusCommand.self,
        ]
    )
}

/// Where config-service is and which token to use.
struct ConnectionOptions: ParsableArguments {
    @Option(help: "config-service base URL (default: DATONG_CONFIG_URL or http://127.0.0.1:8108).")
    var url: String?
    @Option(help: "Admin token (default: DATONG_ADMIN_TOKEN).")
    var token: String?
}

/// Which document: project, kind and the optional platform / app id scope.
struct DocumentOptions: ParsableArguments {
    @Argument(help: "The project, e.g. default.")
    var project: String
    @Argument(help: "tracking-table, remote-config, visual-config, server-url-whitelist or h5-domain-whitelist.")
    var kind: String
    @Option(help: "ios, android or web (omit for all platforms).")
    var platform: String?
    @Option(name: .customLong("app-id"), help: "The app id (omit for all apps).")
    var appID: String?

    func path(_ suffix: String = "") throws -> String {
        guard DocumentKind(rawValue: kind) != nil else {
            throw CtlFailure.usage("datongctl: unknown kind '\(kind)'; kinds: \(DocumentKind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        return "/v1/projects/\(project)/\(kind)\(suffix)"
    }

    var scope: [(String, String)] {
        [("platform", platform), ("app_id", appID)].compactMap { name, value in value.map { (name, $0) } }
    }
}

protocol CtlCommand: ParsableCommand {
    var connection: ConnectionOptions { get }
    func execute(_ admin: Admin) async throws -> String
}

extension CtlCommand {
    func run() throws {}
}

struct Publish: CtlCommand {
    static let configuration = CommandConfiguration(abstract: "Publish a document from a JSON file as the next version.")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var document: DocumentOptions
    @Argument(help: "The JSON file to publish ('-' reads standard input).")
    var file: String
    @Option(help: "A note kept with the version.")
    var note: String?
    @Option(name: .customLong("min-app-version"), help: "Lowest app version this version is for.")
    var minAppVersion: String?
    @Option(name: .customLong("max-app-version"), help: "Highest app version this version is for.")
    var maxAppVersion: String?

    func execute(_ admin: Admin) async throws -> String {
        let body: Data
        do {
            body = file == "-" ? FileHandle.standardInput.readDataToEndOfFile() : try Data(contentsOf: URL(fileURLWithPath: file))
        } catch {
            throw CtlFailure.usage("datongctl: cannot read \(file): \(error.localizedDescription)")
        }
        var query = document.scope
        for (name, value) in [("note", note), ("min_app_version", minAppVersion), ("max_app_version", maxAppVersion)] {
            if let value { query.append((name, value)) }
        }
        let answer = try await admin.send(.PUT, try document.path(), query: query, body: Array(body))
        let result = try admin.decode(PublishResult.self, answer)
        return "published \(result.project)/\(result.kind.rawValue) version \(result.version) (ETag \(result.etag))"
    }
}

struct Versions: CtlCommand {
    static let configuration = CommandConfiguration(abstract: "List a document's versions, newest first.")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var document: DocumentOptions

    func execute(_ admin: Admin) async throws -> String {
        let versions = try admin.decode([DocumentVersion].self, try await admin.send(.GET, try document.path("/versions"), query: document.scope))
        return versions.map { version in
            var line = "\(version.version)\t\(version.publishedAt)\t\(version.etag)"
            if version.minAppVersion != nil || version.maxAppVersion != nil {
                line += "\tapps \(version.minAppVersion ?? "*")…\(version.maxAppVersion ?? "*")"
            }
            if let note = version.note { line += "\t\(note)" }
            return line
        }.joined(separator: "\n")
    }
}

struct Show: CtlCommand {
    static let configuration = CommandConfiguration(abstract: "Print one version of a document.")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var document: DocumentOptions
    @Argument(help: "The version number.")
    var version: Int

    func execute(_ admin: Admin) async throws -> String {
        String(decoding: try await admin.send(.GET, try document.path("/versions/\(version)"), query: document.scope), as: UTF8.self)
    }
}

struct Diff: CtlCommand {
    static let configuration = CommandConfiguration(abstract: "Show what changed between two versions.")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var document: DocumentOptions
    @Argument(help: "The older version.")
    var from: Int
    @Argument(help: "The newer version.")
    var to: Int

    func execute(_ admin: Admin) async throws -> String {
        let answer = try await admin.send(.GET, try document.path("/diff"), query: document.scope + [("from", String(from)), ("to", String(to))])
        guard let changes = (try? JSONValue(parsing: answer))?["changes"]?.arrayValue else {
            throw CtlFailure.unreachable("datongctl: config-service answered something that is not a diff")
        }
        guard !changes.isEmpty else { return "versions \(from) and \(to) are the same" }
        func text(_ value: JSONValue?) -> String { value?.canonicalText ?? "" }
        return changes.map { change in
            let path = change["path"]?.stringValue ?? ""
            switch change["op"]?.stringValue {
            case "add": return "+ \(path) \(text(change["to"]))"
            case "remove": return "- \(path) \(text(change["from"]))"
            default: return "~ \(path) \(text(change["from"])) -> \(text(change["to"]))"
            }
        }.joined(separator: "\n")
    }
}

struct Rollback: CtlCommand {
    static let configuration = CommandConfiguration(abstract: "Publish an older version again as the newest.")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var document: DocumentOptions
    @Argument(help: "The version to restore.")
    var version: Int
    @Option(help: "A note kept with the new version.")
    var note: String?

    func execute(_ admin: Admin) async throws -> String {
        var query = document.scope + [("to", String(version))]
        if let note { query.append(("note", note)) }
        let result = try admin.decode(PublishResult.self, try await admin.send(.POST, try document.path("/rollback"), query: query))
        return "restored version \(version) of \(result.project)/\(result.kind.rawValue) as version \(result.version) (ETag \(result.etag))"
    }
}

/// The service and token a command uses.
struct Target {
    let baseURL: String
    let token: String

    init(options: ConnectionOptions, environment: [String: String]) throws {
        baseURL = (options.url ?? environment["DATONG_CONFIG_URL"] ?? "http://127.0.0.1:8108").trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        guard let token = options.token ?? environment["DATONG_ADMIN_TOKEN"], !token.isEmpty else {
            throw CtlFailure.usage("datongctl: no admin token: pass --token or set DATONG_ADMIN_TOKEN")
        }
        self.token = token
    }
}

/// The admin API over HTTP: 4xx answers become `refused` with config-service's own message (and
/// every problem of a refused document), anything else that is not a success `unreachable`.
struct Admin {
    let target: Target
    let http: HTTPClient

    func send(
        _ method: HTTPMethod, _ path: String, query: [(String, String)] = [], body: [UInt8]? = nil, timeout: TimeAmount = .seconds(30)
    ) async throws -> [UInt8] {
        var components = URLComponents(string: target.baseURL + path)
        if !query.isEmpty { components?.queryItems = query.map { URLQueryItem(name: $0.0, value: $0.1) } }
        guard let url = components?.string else { throw CtlFailure.usage("datongctl: \(target.baseURL) is not a URL") }
        var request = HTTPClientRequest(url: url)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(target.token)")
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        let response: HTTPClientResponse
        let payload: ByteBuffer
        do {
            response = try await http.execute(request, timeout: timeout)
            payload = try await response.body.collect(upTo: 16 << 20)
        } catch {
            throw CtlFailure.unreachable("datongctl: cannot reach config-service at \(target.baseURL): \(error)")
        }
        let bytes = Array(payload.readableBytesView)
        switch response.status.code {
        case 200..<300:
            return bytes
        case 400..<500:
            throw CtlFailure.refused(Self.describeRefusal(status: response.status.code, body: bytes))
        default:
            throw CtlFailure.unreachable(
                "datongctl: config-service failed (HTTP \(response.status.code)): \(String(decoding: bytes.prefix(500), as: UTF8.self))")
        }
    }

    func decode<T: Decodable>(_ type: T.Type, _ bytes: [UInt8]) throws -> T {
        do {
            return try JSONDecoder().decode(T.self, from: Data(bytes))
        } catch {
            throw CtlFailure.unreachable("datongctl: config-service gave an answer datongctl cannot read: \(error)")
        }
    }

    static func describeRefusal(status: UInt, body: [UInt8]) -> String {
        guard let problem = (try? JSONValue(parsing: body))?.objectValue else {
            return "datongctl: refused (HTTP \(status))"
        }
        var lines = ["datongctl: refused (HTTP \(status) \(problem["error"]?.stringValue ?? "")): \(problem["message"]?.stringValue ?? "")"]
        for item in problem["problems"]?.arrayValue ?? [] {
            let path = item["path"]?.stringValue ?? ""
            lines.append("  \(path.isEmpty ? "(document)" : path): \(item["message"]?.stringValue ?? "")")
        }
        return lines.joined(separator: "\n")
    }
}
