import ArgumentParser
import AsyncHTTPClient
import DatongContracts
import Foundation
import NIOCore
import NIOHTTP1

/// `datongctl user erase|status|export|suppressions|lift`: a user's data on request
/// (docs/PRIVACY.md) through the admin API.
struct User: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Erase or export a user's data, follow erasures, and manage the ids whose records are dropped.",
        subcommands: [EraseUser.self, ErasureStatus.self, ExportUser.self, Suppressions.self, LiftSuppression.self]
    )
}

/// The user a command is about: a user number or one of its ids.
struct UserOptions: ParsableArguments {
    @Argument(help: "The project.")
    var project: String
    @Option(help: "The user number (analytics.events.user_id).")
    var user: Int64?
    @Option(
        help: ArgumentHelp(
            "One of the user's ids: KEY=VALUE (e.g. '$identity_login_id=13800000000'), or a distinct_id as analytics.events holds it.",
            discussion:
                "A distinct_id names a user when every id holding that value is that person's (told otherwise). One with '=' in it is given as '=VALUE'."))
    var id: String?

    func reference() throws -> UserReference {
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        var reference = UserReference(userId: user)
        if let id {
            switch Self.keyAndValue(id) {
            case (let key?, let value): (reference.key, reference.value) = (key, value)
            case (nil, let distinct): reference.distinctId = distinct
            }
        }
        if let problem = reference.problem {
            throw CtlFailure.usage(
                "datongctl: \(problem.replacingOccurrences(of: "userId", with: "--user").replacingOccurrences(of: "key and value", with: "--id").replacingOccurrences(of: "distinctId", with: "--id"))"
            )
        }
        return reference
    }

    /// `--id KEY=VALUE` as its key and value; `--id VALUE` and `--id =VALUE` as a distinct_id alone.
    static func keyAndValue(_ id: String) -> (key: String?, value: String) {
        guard let equals = id.firstIndex(of: "=") else { return (nil, id) }
        let value = String(id[id.index(after: equals)...])
        return equals == id.startIndex ? (nil, value) : (String(id[..<equals]), value)
    }
}

struct EraseUser: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "erase",
        abstract: "Erase everything Datong holds about a user: events, profiles, ids, merges, refused records; suppress later records."
    )
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var target: UserOptions
    @Flag(name: .customLong("keep-receiving"), help: "Do not suppress: later records of the user's ids are stored again.")
    var keepReceiving = false
    @Flag(help: "Wait until the job is done and print its counts.")
    var wait = false

    func execute(_ admin: Admin) async throws -> String {
        let request = ErasureRequest(user: try target.reference(), suppress: !keepReceiving)
        var job = try admin.decode(
            ErasureJob.self, try await admin.send(.POST, "/v1/projects/\(target.project)/erasures", body: Array(try JSONEncoder().encode(request))))
        var lines = ["erasure \(job.erasureId) of \(target.project): \(job.users.count) users, \(job.identityCount) ids\(job.suppress ? ", suppressed" : "")"]
        guard wait else { return (lines + ["follow it with: datongctl user status \(target.project) \(job.erasureId)"]).joined(separator: "\n") }
        while job.state != "done" {
            try await Task.sleep(for: .seconds(1))
            job = try admin.decode(ErasureJob.self, try await admin.send(.GET, "/v1/projects/\(target.project)/erasures/\(job.erasureId)"))
        }
        lines.append(ErasureStatus.describe(job))
        return lines.joined(separator: "\n")
    }
}

struct ErasureStatus: CtlCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Show one erasure job, or a project's newest ones.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String
    @Argument(help: "The erasure number (omit for the newest 50).")
    var erasure: Int64?

    func execute(_ admin: Admin) async throws -> String {
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        if let erasure {
            return Self.describe(try admin.decode(ErasureJob.self, try await admin.send(.GET, "/v1/projects/\(project)/erasures/\(erasure)")))
        }
        let jobs = try admin.decode([ErasureJob].self, try await admin.send(.GET, "/v1/projects/\(project)/erasures"))
        guard !jobs.isEmpty else { return "\(project) has no erasures" }
        return jobs.map(Self.describe).joined(separator: "\n")
    }

    static func describe(_ job: ErasureJob) -> String {
        var line = "\(job.erasureId)\t\(job.state)\tasked \(job.createdAt) by \(job.actor)\tusers \(job.users.map(String.init).joined(separator: ","))"
        if let identity = job.identity {
            line += "\tidentity: \(identity.identities) ids, \(identity.users) users, \(identity.merges) merges, \(identity.history) history"
        }
        if let rows = job.collector {
            line += "\tcollector: \(rows.events) events, \(rows.profiles) profiles, \(rows.profileRecords) profile records, "
            line += "\(rows.details) details, \(rows.rejected) rejected" + (job.state == "done" ? "" : ", \(rows.left) rows left")
        }
        if let finished = job.finishedAt { line += "\tdone \(finished)" }
        if let error = job.lastError, job.state != "done" { line += "\tlast error (tried again): \(error)" }
        return line
    }
}

struct ExportUser: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "export", abstract: "Write everything Datong holds about a user as JSON lines (an access request)."
    )
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var target: UserOptions
    @Option(help: "The file to write (default: standard output).")
    var out: String?

    func execute(_ admin: Admin) async throws -> String {
        let reference = try target.reference()
        var query: [(String, String)] = []
        if let user = reference.userId { query.append(("user", String(user))) }
        if let key = reference.key, let value = reference.value { query += [("key", key), ("value", value)] }
        if let distinct = reference.distinctId { query.append(("distinct_id", distinct)) }
        let handle: FileHandle
        if let out {
            guard FileManager.default.createFile(atPath: out, contents: nil), let file = FileHandle(forWritingAtPath: out) else {
                throw CtlFailure.usage("datongctl: cannot write \(out)")
            }
            handle = file
        } else {
            handle = FileHandle.standardOutput
        }
        defer { if out != nil { try? handle.close() } }
        var last: [UInt8] = []
        let bytes = try await admin.stream("/v1/projects/\(target.project)/user-data", query: query) { part in
            handle.write(Data(part))
            last = Array((last + part).suffix(256))
        }
        // The export's last line says it is whole; a stream cut short has none.
        guard String(decoding: last, as: UTF8.self).contains(#""end":true"#) else {
            throw CtlFailure.unreachable("datongctl: the export stopped early (\(bytes) bytes written); ask again")
        }
        return out.map { "exported \(bytes) bytes to \($0)" } ?? ""
    }
}

struct Suppressions: CtlCommand {
    static let configuration = CommandConfiguration(abstract: "List the ids whose records the gateways drop (erased users').")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String

    func execute(_ admin: Admin) async throws -> String {
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        let list = try admin.decode([Suppression].self, try await admin.send(.GET, "/v1/projects/\(project)/suppressions"))
        guard !list.isEmpty else { return "\(project) suppresses no ids" }
        return list.map { "\($0.key)=\($0.value)\terasure \($0.erasureId.map(String.init) ?? "-")\tsince \($0.createdAt ?? "")" }.joined(separator: "\n")
    }
}

struct LiftSuppression: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "lift", abstract: "Store records of suppressed ids again: one id, or every id an erasure suppressed."
    )
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String
    @Option(help: "The erasure whose ids to lift.")
    var erasure: Int64?
    @Option(help: "One id, as KEY=VALUE.")
    var id: String?

    func execute(_ admin: Admin) async throws -> String {
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        var query: [(String, String)] = []
        switch (erasure, id) {
        case (let erasure?, nil): query.append(("erasure", String(erasure)))
        case (nil, let id?):
            guard case (let key?, let value) = UserOptions.keyAndValue(id) else {
                throw CtlFailure.usage("datongctl: a suppression is one id: --id KEY=VALUE, as 'datongctl user suppressions' lists it")
            }
            query += [("key", key), ("value", value)]
        default: throw CtlFailure.usage("datongctl: give --erasure N or --id KEY=VALUE")
        }
        let answer = try await admin.send(.DELETE, "/v1/projects/\(project)/suppressions", query: query)
        return "lifted: \(String(decoding: answer, as: UTF8.self))"
    }
}

extension Admin {
    /// A GET whose answer is passed to `write` as it arrives, never held whole; answers the bytes.
    func stream(_ path: String, query: [(String, String)], write: ([UInt8]) throws -> Void) async throws -> Int {
        var components = URLComponents(string: target.baseURL + path)
        if !query.isEmpty { components?.queryItems = query.map { URLQueryItem(name: $0.0, value: $0.1) } }
        guard let url = components?.string else { throw CtlFailure.usage("datongctl: \(target.baseURL) is not a URL") }
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Authorization", value: "Bearer \(target.token)")
        let response: HTTPClientResponse
        do {
            // An export is as long as the user's data: its deadline is the whole transfer's.
            response = try await http.execute(request, timeout: .minutes(60))
        } catch {
            throw CtlFailure.unreachable("datongctl: cannot reach config-service at \(target.baseURL): \(error)")
        }
        guard response.status == .ok else {
            let body = Array((try? await response.body.collect(upTo: 1 << 20))?.readableBytesView ?? ByteBuffer().readableBytesView)
            if (400..<500).contains(response.status.code) { throw CtlFailure.refused(Self.describeRefusal(status: response.status.code, body: body)) }
            throw CtlFailure.unreachable("datongctl: config-service failed (HTTP \(response.status.code))")
        }
        var total = 0
        do {
            for try await part in response.body {
                total += part.readableBytes
                try write(Array(part.readableBytesView))
            }
        } catch {
            throw CtlFailure.unreachable("datongctl: the export stopped early (\(total) bytes written): \(error)")
        }
        return total
    }
}
