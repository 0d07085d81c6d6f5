import DatongContracts
import DatongJSON
import DatongPostgres
import DatongRuntime
import Synchronization

/// The report functions behind the HTTP API (`POST /v1/projects/{p}/reports/{kind}`), which the
/// console and `datongctl report` call through config-service: the body's members become the
/// function's named arguments, each checked here for its shape and by the function for its meaning
/// (its 22023 message is the answer's). The function runs read-only under a statement timeout;
/// PostgreSQL writes the answer's JSON: `{"report", "columns", "rows": [[…], …]}`.
///
/// Reports run on a pool of their own (`connections`, 2): a report of many seconds never holds a
/// connection a batch waits for. At most `maxWaiting` wait beyond those; more are a 503.
final class ReportQueries: Sendable {
    let pool: PostgresPool
    private let inFlight = Mutex(0)
    private let maxInFlight: Int

    /// Connections of the reports' pool, and reports waiting for one beyond them.
    static let connections = 2
    static let maxWaiting = 4
    /// Most rows an answer carries (a trend by hour over months with many groups can ask for more).
    static let maxRows = 100_000

    init(pool: PostgresPool) {
        self.pool = pool
        maxInFlight = pool.maxConnections + Self.maxWaiting
    }

    func run(_ kind: ReportKind, project: String, body: [UInt8]) async throws -> String {
        let call = try Self.call(kind, project: project, body: body)
        let admitted = inFlight.withLock { count in
            guard count < maxInFlight else { return false }
            count += 1
            return true
        }
        guard admitted else {
            throw ServiceError.unavailable(.reportsBusy, "\(maxInFlight) reports are running or waiting; try again shortly")
        }
        defer { inFlight.withLock { $0 -= 1 } }
        let answer: [String?]
        do {
            answer = try await pool.transaction { connection in
                _ = try connection.query("SET TRANSACTION READ ONLY")
                _ = try connection.query("SET LOCAL statement_timeout = \(ReportKind.timeoutSeconds * 1000)")
                return try connection.query(call.sql, call.parameters).rows.first ?? []
            }
        } catch let error as PostgresError where error.sqlState?.hasPrefix("22") == true {
            // The function's own check (22023), or a day PostgreSQL has no date for (22008).
            throw ServiceError.badRequest(.invalidValue, error.primaryMessage ?? "an argument of the report is not valid")
        }
        guard answer.count == 2, let count = answer[0].flatMap({ Int($0) }), let json = answer[1] else {
            throw PostgresError.unexpectedResult("a report answered no row")
        }
        guard count <= Self.maxRows else {
            throw ServiceError.badRequest(
                .invalidValue, "the report has more than \(Self.maxRows) rows: ask for fewer days, a longer unit, fewer events or a smaller top")
        }
        return json
    }

    /// `SELECT` of the rows' count and the answer's JSON from the function called with the body's
    /// members by name (absent ones keep the function's defaults).
    static func call(_ kind: ReportKind, project: String, body: [UInt8]) throws(ServiceError) -> (sql: String, parameters: [String?]) {
        guard let tree = try? JSONValue(parsing: body, maxDepth: 16), let members = tree.objectValue else {
            throw .badRequest(.invalidBody, "send a JSON object of the \(kind.rawValue) report's arguments (docs/ANALYTICS.md)")
        }
        let known = kind.parameters
        if let stray = members.keys.sorted().first(where: { name in !known.contains { $0.name == name } }) {
            throw .badRequest(
                .invalidValue,
                "the \(kind.rawValue) report has no argument '\(UntrustedText.quoted(stray))'; it takes \(known.map(\.name).joined(separator: ", "))")
        }
        var parameters: [String?] = [project]
        var arguments = ["project => $1::text"]
        for parameter in known {
            guard let value = members[parameter.name], value != .null else {
                if parameter.required { throw .badRequest(.invalidValue, "\(parameter.name) is needed: \(parameter.expected)") }
                continue
            }
            guard let text = argumentText(value, parameter.shape) else {
                throw .badRequest(.invalidValue, "\(parameter.name) is \(parameter.expected)")
            }
            parameters.append(text)
            arguments.append("\(parameter.name) => \(argumentSQL(parameter.shape, "$\(parameters.count)"))")
        }
        let row = kind.columns.map { "r.\"\($0)\"" }.joined(separator: ", ")
        let columns = "[" + kind.columns.map { "\"\($0)\"" }.joined(separator: ",") + "]"
        let sql = """
            SELECT count(*), json_build_object('report', '\(kind.rawValue)', 'columns', '\(columns)'::json,
                                               'rows', coalesce(json_agg(json_build_array(\(row)) ORDER BY r.ordinality), '[]'::json))::text
            FROM (SELECT * FROM \(kind.function)(\(arguments.joined(separator: ", "))) WITH ORDINALITY LIMIT \(maxRows + 1)) r
            """
        return (sql, parameters)
    }

    /// The argument as the text its SQL (`argumentSQL`) reads, or nil when it is not of its shape.
    static func argumentText(_ value: JSONValue, _ shape: ReportParameter.Shape) -> String? {
        switch shape {
        case .text:
            return value.stringValue.flatMap { $0.utf8.count <= 1024 && !$0.utf8.contains(0) ? $0 : nil }
        case .names:
            guard let names = value.arrayValue, (1...100).contains(names.count),
                names.allSatisfy({ argumentText($0, .text) != nil })
            else { return nil }
            return value.canonicalText
        case .day:
            guard let day = value.stringValue, day.utf8.count == 10,
                day.utf8.enumerated().allSatisfy({ i, c in i == 4 || i == 7 ? c == UInt8(ascii: "-") : (48...57).contains(c) })
            else { return nil }
            return day
        case .integer:
            return value.integerValue.flatMap { Int32(exactly: $0) }.map { String($0) }
        case .userNumber:
            return value.integerValue.flatMap { $0 >= 1 ? String($0) : nil }
        case .conditions:
            return value.arrayValue != nil ? value.canonicalText : nil
        case .numbers:
            guard let numbers = value.arrayValue, (1...100).contains(numbers.count),
                numbers.allSatisfy({ $0.doubleValue?.isFinite == true })
            else { return nil }
            return value.canonicalText
        }
    }

    static func argumentSQL(_ shape: ReportParameter.Shape, _ placeholder: String) -> String {
        switch shape {
        case .text: "\(placeholder)::text"
        case .names: "ARRAY(SELECT v FROM jsonb_array_elements_text(\(placeholder)::jsonb) WITH ORDINALITY AS a(v, i) ORDER BY i)"
        case .day: "\(placeholder)::date"
        case .integer: "\(placeholder)::integer"
        case .userNumber: "\(placeholder)::bigint"
        case .conditions: "\(placeholder)::jsonb"
        case .numbers: "ARRAY(SELECT v::numeric FROM jsonb_array_elements_text(\(placeholder)::jsonb) WITH ORDINALITY AS a(v, i) ORDER BY i)"
        }
    }
}
