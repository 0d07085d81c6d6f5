import DatongJSON

// The collector's contract on the wire (`POST /v1/batches`): a batch in, a result out.

extension CollectBatch: WireCodable {
    /// How deep a batch may nest: the batch, its records array and a record, then the properties
    /// as deep as the gateway's `MAX_JSON_DEPTH` allows at most.
    package static let maxDepth = 3 + 512

    package var jsonBytes: [UInt8] {
        Self.jsonBytes(
            receivedAt: receivedAt, records: records.count, propertiesBytes: records.reduce(0) { $0 + $1.properties.utf8.count }, rejected: rejected
        ) { records[$0].write(to: &$1, userId: records[$0].userId) }
    }

    /// A batch's text, its records written by `record(i, &out)` (with `CollectRecord.write(to:userId:)`)
    /// from wherever they are held: the gateway writes its normalized records with the users it
    /// resolved for them, without copying each into a `CollectBatch` first.
    /// - Parameter propertiesBytes: the records' `properties` text together, to size the buffer once.
    package static func jsonBytes(
        receivedAt: Int64, records count: Int, propertiesBytes: Int, rejected: [RejectedRecord], record: (Int, inout [UInt8]) -> Void
    ) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64 + propertiesBytes + count * 400)
        var batch = JSONObjectWriter(&out)
        batch.int("receivedAt", receivedAt, &out)
        batch.array("records", count: count, &out, record)
        batch.array("rejected", count: rejected.count, &out) { rejected[$0].write(to: &$1) }
        batch.finish(&out)
        return out
    }

    package init(jsonBytes: [UInt8]) throws(ContractDecodingError) {
        try self.init(wire: try WireField.object(jsonBytes, maxDepth: Self.maxDepth, "the batch"), path: nil)
    }

    /// Reads a batch from its JSON object; `path` names it inside a group (nil: the whole body).
    package init(wire root: JSONRef, path: String?) throws(ContractDecodingError) {
        let members = try Self.members(of: root, path: path)
        var records: [CollectRecord] = []
        records.reserveCapacity(members.records.count)
        for (position, record) in members.records.enumerated() {
            records.append(try CollectRecord(wire: record, path: Self.at(path, "records[\(position)]")))
        }
        self.init(receivedAt: members.receivedAt, records: records, rejected: members.rejected)
    }

    /// A batch object's members, which every reader of a batch reads alike: when it was received,
    /// its records (not read yet: the typed batch and the collector read them each their way, with
    /// `CollectRecordReader`) and the records the gateway refused.
    package static func members(
        of root: JSONRef, path: String?
    ) throws(ContractDecodingError) -> (receivedAt: Int64, records: [JSONRef], rejected: [RejectedRecord]) {
        guard root.isObject else { throw ContractDecodingError("\(path ?? "the batch") is not an object") }
        var receivedAt: Int64?
        var records: [JSONRef] = []
        var rejected: [RejectedRecord] = []
        for (key, value) in root.members {
            if key.textEquals("receivedAt") {
                receivedAt = try WireField.int(value, at(path, "receivedAt"))
            } else if key.textEquals("records") {
                records = Array(try WireField.array(value, at(path, "records")))
            } else if key.textEquals("rejected") {
                for (index, element) in try WireField.array(value, at(path, "rejected")).enumerated() {
                    rejected.append(try RejectedRecord(wire: element, path: at(path, "rejected[\(index)]")))
                }
            }
        }
        guard let receivedAt else { throw ContractDecodingError("\(at(path, "receivedAt")) is missing") }
        return (receivedAt, records, rejected)
    }

    /// A member's path in problems: `name`, or `batches[i].name` inside a group.
    package static func at(_ path: String?, _ name: String) -> String { path.map { "\($0).\(name)" } ?? name }
}

extension RejectedRecord {
    fileprivate func write(to out: inout [UInt8]) {
        var record = JSONObjectWriter(&out)
        record.string("project", project, &out)
        record.string("reason", reason, &out)
        record.string("raw", raw, &out)
        record.finish(&out)
    }

    /// Reads an entry of a batch's `rejected`.
    package init(wire value: JSONRef, path: String) throws(ContractDecodingError) {
        guard value.isObject else { throw ContractDecodingError("\(path) is not an object") }
        var project: String?
        var reason: String?
        var raw: String?
        for (key, field) in value.members {
            if key.textEquals("project") {
                project = try WireField.string(field, "\(path).project")
            } else if key.textEquals("reason") {
                reason = try WireField.string(field, "\(path).reason")
            } else if key.textEquals("raw") {
                raw = try WireField.string(field, "\(path).raw")
            }
        }
        guard let project, let reason, let raw else { throw ContractDecodingError("\(path) needs project, reason and raw") }
        self.init(project: project, reason: reason, raw: raw)
    }
}

extension CollectResult: WireCodable {
    /// `records` holds one outcome per record: `"stored"`, `"duplicate"` or `{"refused": reason}`.
    /// The positions of 0.4's answer (`duplicateIndexes`, `rejectedIndexes`, `rejectedReasons`)
    /// are written too, for gateways of 0.4 during a rolling upgrade; 0.6 drops them
    /// (openapi/collector.yaml).
    package var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(96 + records.count * 12)
        var result = JSONObjectWriter(&out)
        result.int("stored", Int64(stored), &out)
        result.int("duplicates", Int64(duplicates), &out)
        result.int("rejected", Int64(rejected), &out)
        result.array("records", count: records.count, &out) { index, out in
            switch records[index] {
            case .stored: out.append(contentsOf: Self.storedText)
            case .duplicate: out.append(contentsOf: Self.duplicateText)
            case .refused(let reason):
                out.append(contentsOf: Self.refusedText)
                JSONValue.writeString(utf8: reason.utf8, to: &out)
                out.append(UInt8(ascii: "}"))
            }
        }
        let duplicateIndexes = duplicateIndexes
        let rejections = rejections
        result.array("duplicateIndexes", count: duplicateIndexes.count, &out) { $1.append(contentsOf: String(duplicateIndexes[$0]).utf8) }
        result.array("rejectedIndexes", count: rejections.count, &out) { $1.append(contentsOf: String(rejections[$0].index).utf8) }
        if !rejections.isEmpty {
            result.array("rejectedReasons", count: rejections.count, &out) { JSONValue.writeString(utf8: rejections[$0].reason.utf8, to: &$1) }
        }
        result.finish(&out)
        return out
    }

    private static let storedText = Array(#""stored""#.utf8)
    private static let duplicateText = Array(#""duplicate""#.utf8)
    private static let refusedText = Array(#"{"refused":"#.utf8)

    package init(jsonBytes: [UInt8]) throws(ContractDecodingError) {
        try self.init(wire: try WireField.object(jsonBytes, maxDepth: 4, "the collector's answer"), path: nil)
    }

    /// Reads a result from its JSON object; `path` names it inside a group's answer. `records`
    /// when the answer has it; otherwise (a collector of 0.4) the positions.
    package init(wire root: JSONRef, path: String?) throws(ContractDecodingError) {
        func at(_ name: String) -> String { path.map { "\($0).\(name)" } ?? name }
        var counts: [Int64?] = [nil, nil, nil]
        var records: [RecordOutcome]?
        var duplicateIndexes: [Int] = []
        var rejectedIndexes: [Int] = []
        var rejectedReasons: [String] = []
        for (key, value) in root.members {
            if key.textEquals("stored") {
                counts[0] = try WireField.int(value, at("stored"))
            } else if key.textEquals("duplicates") {
                counts[1] = try WireField.int(value, at("duplicates"))
            } else if key.textEquals("rejected") {
                counts[2] = try WireField.int(value, at("rejected"))
            } else if key.textEquals("records") {
                records = try WireField.array(value, at("records")).enumerated().map { (index, element) throws(ContractDecodingError) in
                    try RecordOutcome(wire: element, at("records[\(index)]"))
                }
            } else if key.textEquals("duplicateIndexes") {
                duplicateIndexes = try WireField.positions(value, at("duplicateIndexes"))
            } else if key.textEquals("rejectedIndexes") {
                rejectedIndexes = try WireField.positions(value, at("rejectedIndexes"))
            } else if key.textEquals("rejectedReasons") {
                rejectedReasons = try WireField.array(value, at("rejectedReasons")).enumerated().map { (index, element) throws(ContractDecodingError) in
                    try WireField.string(element, at("rejectedReasons[\(index)]")) ?? ""
                }
            }
        }
        for (count, name) in zip(counts, ["stored", "duplicates", "rejected"]) {
            guard let count else { throw ContractDecodingError("\(at(name)) is missing") }
            guard (0...Int64(Int32.max)).contains(count) else { throw ContractDecodingError("\(at(name)) is not a count") }
        }
        let (stored, duplicates, rejected) = (Int(counts[0]!), Int(counts[1]!), Int(counts[2]!))
        if let records {
            self.init(stored: stored, duplicates: duplicates, rejected: rejected, records: records)
        } else {
            self.init(
                stored: stored, duplicates: duplicates, rejected: rejected, duplicateIndexes: duplicateIndexes, rejectedIndexes: rejectedIndexes,
                rejectedReasons: rejectedReasons)
        }
    }
}

extension RecordOutcome {
    /// `"stored"`, `"duplicate"` or `{"refused": reason}`.
    init(wire value: JSONRef, _ path: @autoclosure () -> String) throws(ContractDecodingError) {
        if value.isObject, let reason = value["refused"] {
            self = .refused(reason: try WireField.string(reason, "\(path()).refused") ?? "")
        } else if let text = value.stringValue, text == "stored" || text == "duplicate" {
            self = text == "stored" ? .stored : .duplicate
        } else {
            throw ContractDecodingError("\(path()) is not \"stored\", \"duplicate\" or {\"refused\": reason}")
        }
    }
}

extension CollectBatchGroup: WireCodable {
    package var jsonBytes: [UInt8] { Self.jsonBytes(joining: batches.map(\.jsonBytes)) }

    /// A group's text from its batches' texts, which the gateway encodes as each upload arrives.
    package static func jsonBytes(joining batches: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(16 + batches.reduce(0) { $0 + $1.count + 1 })
        var group = JSONObjectWriter(&out)
        group.array("batches", count: batches.count, &out) { $1.append(contentsOf: batches[$0]) }
        group.finish(&out)
        return out
    }

    package init(jsonBytes: [UInt8]) throws(ContractDecodingError) {
        let root = try WireField.object(jsonBytes, maxDepth: CollectBatch.maxDepth + 2, "the group")
        guard let list = root["batches"] else { throw ContractDecodingError("batches is missing") }
        var batches: [CollectBatch] = []
        for (index, element) in try WireField.array(list, "batches").enumerated() {
            batches.append(try CollectBatch(wire: element, path: "batches[\(index)]"))
        }
        self.init(batches: batches)
    }
}

extension CollectGroupResult: WireCodable {
    package var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        var answer = JSONObjectWriter(&out)
        answer.array("outcomes", count: outcomes.count, &out) { position, out in
            switch outcomes[position] {
            case .written(let result): out.append(contentsOf: result.jsonBytes)
            case .refused(let status, let error, let message):
                var refusal = JSONObjectWriter(&out)
                refusal.int("status", Int64(status), &out)
                refusal.string("error", error, &out)
                refusal.string("message", message, &out)
                refusal.finish(&out)
            }
        }
        answer.finish(&out)
        return out
    }

    package init(jsonBytes: [UInt8]) throws(ContractDecodingError) {
        // The group, its outcomes, a result, its records, a refused record's object.
        let root = try WireField.object(jsonBytes, maxDepth: 5, "the collector's answer")
        guard let list = root["outcomes"] else { throw ContractDecodingError("outcomes is missing") }
        var outcomes: [CollectOutcome] = []
        for (index, element) in try WireField.array(list, "outcomes").enumerated() {
            guard element.isObject else { throw ContractDecodingError("outcomes[\(index)] is not an object") }
            if let error = element["error"] {
                guard let status = element["status"], let message = element["message"] else {
                    throw ContractDecodingError("outcomes[\(index)] needs status, error and message")
                }
                let code = try WireField.int(status, "outcomes[\(index)].status")
                guard (400...599).contains(code) else { throw ContractDecodingError("outcomes[\(index)].status is not an error status") }
                outcomes.append(
                    .refused(
                        status: Int(code), error: try WireField.requiredString(error, "outcomes[\(index)].error"),
                        message: try WireField.requiredString(message, "outcomes[\(index)].message")
                    ))
            } else {
                outcomes.append(.written(try CollectResult(wire: element, path: "outcomes[\(index)]")))
            }
        }
        self.init(outcomes: outcomes)
    }
}
