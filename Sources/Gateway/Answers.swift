import DatongJSON

/// One refused record of an upload: its position in `data_list` and why.
struct RecordProblem: Codable, Sendable, Equatable {
    let index: Int
    let reason: String
}

/// The answer to an upload: every record is accounted for.
struct UploadAnswer: Codable, Sendable, Equatable {
    let stored: Int
    let duplicates: Int
    let rejected: Int
    let problems: [RecordProblem]
    /// Records of erased users, dropped (docs/PRIVACY.md); absent when none.
    var suppressed: Int? = nil
    /// Records of crawlers, dropped as the project asks (`bots: drop`); absent when none.
    var bots: Int? = nil
}

extension UploadAnswer {
    /// An upload's rendering of what became of its records.
    init(_ answer: IntakeAnswer) {
        self.init(
            stored: answer.stored, duplicates: answer.duplicates, rejected: answer.rejected, problems: answer.problems,
            suppressed: answer.suppressed == 0 ? nil : answer.suppressed, bots: answer.bots == 0 ? nil : answer.bots)
    }

    /// The answer as JSON, keys sorted as `jsonResponse(encoding:)` writes them, by hand: one is
    /// written for every upload, and `JSONEncoder` costs more than the writing itself.
    var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64 + problems.count * 64)
        var answer = JSONObjectWriter(&out)
        answer.int("bots", bots.map(Int64.init), &out)
        answer.int("duplicates", Int64(duplicates), &out)
        answer.array("problems", count: problems.count, &out) { position, out in
            var object = JSONObjectWriter(&out)
            object.int("index", Int64(problems[position].index), &out)
            object.string("reason", problems[position].reason, &out)
            object.finish(&out)
        }
        answer.int("rejected", Int64(rejected), &out)
        answer.int("stored", Int64(stored), &out)
        answer.int("suppressed", suppressed.map(Int64.init), &out)
        answer.finish(&out)
        return out
    }
}

/// What happened to one relayed message.
struct MessageResult: Codable, Sendable, Equatable {
    enum Status: String, Codable, Sendable {
        /// Stored as a new record.
        case stored
        /// The same record was already stored (a retried relay).
        case duplicate
        /// Refused; kept in `analytics.rejected` with the reason.
        case rejected
        /// Not a record (`getAppInfo`, `visualized_track`, …); acknowledged and dropped.
        case ignored
        /// A record of an erased user (docs/PRIVACY.md); acknowledged and dropped.
        case suppressed
        /// A crawler's record its project drops (`bots: drop`); acknowledged and dropped. Only
        /// uploads carry a browser's User-Agent, so a relay never answers it.
        case bot
    }

    let index: Int
    let status: Status
    var reason: String?

    init(index: Int, status: Status, reason: String? = nil) {
        self.index = index
        self.status = status
        self.reason = reason
    }
}

/// The answer to a bridge relay: counts, and one result per message in the order sent.
struct BridgeAnswer: Codable, Sendable, Equatable {
    let stored: Int
    let duplicates: Int
    let rejected: Int
    let ignored: Int
    let results: [MessageResult]
    /// Records of erased users, dropped; absent when none.
    var suppressed: Int? = nil
}

extension BridgeAnswer {
    /// A relay's rendering of what became of its messages: one result each.
    init(_ answer: IntakeAnswer) {
        self.init(
            stored: answer.stored, duplicates: answer.duplicates, rejected: answer.rejected,
            ignored: answer.results.count(where: { $0.status == .ignored }), results: answer.results,
            suppressed: answer.suppressed == 0 ? nil : answer.suppressed)
    }

    /// The answer as JSON, keys sorted as `jsonResponse(encoding:)` writes them, by hand: a relay
    /// answers one result per message, which `JSONEncoder` makes costly.
    var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(80 + results.count * 40)
        var answer = JSONObjectWriter(&out)
        answer.int("duplicates", Int64(duplicates), &out)
        answer.int("ignored", Int64(ignored), &out)
        answer.int("rejected", Int64(rejected), &out)
        answer.array("results", count: results.count, &out) { position, out in
            let result = results[position]
            var object = JSONObjectWriter(&out)
            object.int("index", Int64(result.index), &out)
            object.string("reason", result.reason, &out)
            object.string("status", result.status.rawValue, &out)
            object.finish(&out)
        }
        answer.int("stored", Int64(stored), &out)
        answer.int("suppressed", suppressed.map(Int64.init), &out)
        answer.finish(&out)
        return out
    }
}
