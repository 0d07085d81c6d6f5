import DatongJSON

// identity-service's contract on the wire (`POST /v1/resolve`): the ids of an upload's records in,
// one user per record out.

extension ResolveRequest: WireCodable {
    package var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(16 + records.count * 256)
        var request = JSONObjectWriter(&out)
        request.array("records", count: records.count, &out) { records[$0].write(to: &$1) }
        if forCache { request.bool("forCache", true, &out) }
        request.finish(&out)
        return out
    }

    package init(jsonBytes: [UInt8]) throws(ContractDecodingError) {
        let root = try WireField.object(jsonBytes, maxDepth: 8, "the resolve request")
        var records: [IdentityRecord]?
        var forCache = false
        for (key, value) in root.members {
            if key.textEquals("records") {
                var list: [IdentityRecord] = []
                list.reserveCapacity(Int(value.entry.count))
                for (index, element) in try WireField.array(value, "records").enumerated() {
                    list.append(try IdentityRecord(element, path: "records[\(index)]"))
                }
                records = list
            } else if key.textEquals("forCache") {
                forCache = try WireField.bool(value, "forCache")
            }
        }
        guard let records else { throw ContractDecodingError("records is missing") }
        self.init(records: records, forCache: forCache)
    }
}

extension ResolveRequest {
    /// The most one resolve call carries: the gateway splits an upload's records into calls of
    /// at most this (`calls(of:)`), and identity-service accepts at least twice it
    /// (`IDENTITY_MAX_REQUEST_BYTES`), so whatever the gateway accepted, identity-service reads.
    package static let maxCallBytes = 4 << 20

    /// `records` split into runs, in order, whose calls each hold at most `maxBytes` (by each
    /// record's `maxWireBytes`); a record larger than that alone goes alone.
    package static func calls(of records: [IdentityRecord], maxBytes: Int = maxCallBytes) -> [Range<Int>] {
        var runs: [Range<Int>] = []
        var start = 0
        var bytes = 32
        for (index, record) in records.enumerated() {
            let size = record.maxWireBytes
            if index > start, bytes + size > maxBytes {
                runs.append(start..<index)
                (start, bytes) = (index, 32)
            }
            bytes += size
        }
        if start < records.count { runs.append(start..<records.count) }
        return runs
    }
}

extension IdentityRecord {
    /// At most the bytes of this record's JSON text: every byte of its strings as if escaped to
    /// six (`\u00XX`), plus the names and punctuation.
    package var maxWireBytes: Int {
        var text = project.utf8.count + type.utf8.count + distinctId.utf8.count + (originalId?.utf8.count ?? 0) + (lib?.utf8.count ?? 0)
        var pairs = 0
        for (key, value) in identities ?? [:] {
            text += key.utf8.count + value.utf8.count
            pairs += 1
        }
        return 6 * text + 8 * pairs + 128
    }

    fileprivate func write(to out: inout [UInt8]) {
        var record = JSONObjectWriter(&out)
        record.string("project", project, &out)
        record.string("type", type, &out)
        record.string("distinctId", distinctId, &out)
        record.string("originalId", originalId, &out)
        if let identities {
            record.key("identities", &out)
            JSONObjectWriter.sortedStrings(identities, to: &out)
        }
        record.bool("isLoginId", isLoginId, &out)
        record.string("lib", lib, &out)
        record.finish(&out)
    }

    fileprivate init(_ value: JSONRef, path: String) throws(ContractDecodingError) {
        guard value.isObject else { throw ContractDecodingError("\(path) is not an object") }
        var project: String?
        var type: String?
        var distinctId: String?
        var originalId: String?
        var lib: String?
        var identities: [String: String]?
        var isLoginId = false
        for (key, field) in value.members {
            if key.textEquals("project") {
                project = try WireField.string(field, "\(path).project")
            } else if key.textEquals("type") {
                type = try WireField.string(field, "\(path).type")
            } else if key.textEquals("distinctId") {
                distinctId = try WireField.string(field, "\(path).distinctId")
            } else if key.textEquals("originalId") {
                originalId = try WireField.string(field, "\(path).originalId")
            } else if key.textEquals("lib") {
                lib = try WireField.string(field, "\(path).lib")
            } else if key.textEquals("isLoginId") {
                isLoginId = try WireField.bool(field, "\(path).isLoginId")
            } else if key.textEquals("identities") {
                identities = try WireField.identities(field, "\(path).identities")
            }
        }
        guard let project else { throw ContractDecodingError("\(path).project is missing") }
        guard let type else { throw ContractDecodingError("\(path).type is missing") }
        guard let distinctId else { throw ContractDecodingError("\(path).distinctId is missing") }
        self.init(
            project: project, type: type, distinctId: distinctId, originalId: originalId,
            identities: identities, isLoginId: isLoginId, lib: lib
        )
    }
}

extension ResolveResponse: WireCodable {
    package var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(16 + users.count * 40)
        var response = JSONObjectWriter(&out)
        response.array("users", count: users.count, &out) { position, out in
            let user = users[position]
            var object = JSONObjectWriter(&out)
            object.int("userId", user.userId, &out)
            object.bool("created", user.created, &out)
            if user.owned { object.bool("owned", true, &out) }
            object.finish(&out)
        }
        if !invalidated.isEmpty { response.array("invalidated", count: invalidated.count, &out) { invalidated[$0].write(to: &$1) } }
        response.finish(&out)
        return out
    }

    package init(jsonBytes: [UInt8]) throws(ContractDecodingError) {
        let root = try WireField.object(jsonBytes, maxDepth: 4, "the resolve answer")
        var users: [ResolvedUser]?
        var invalidated: [IdentityName] = []
        for (key, value) in root.members {
            if key.textEquals("users") {
                var list: [ResolvedUser] = []
                list.reserveCapacity(Int(value.entry.count))
                for (index, element) in try WireField.array(value, "users").enumerated() {
                    guard element.isObject else { throw ContractDecodingError("users[\(index)] is not an object") }
                    var userId: Int64?
                    var created: Bool?
                    var owned = false
                    for (name, field) in element.members {
                        if name.textEquals("userId") {
                            userId = try WireField.optionalInt(field, "users[\(index)].userId")
                        } else if name.textEquals("created") {
                            created = try WireField.bool(field, "users[\(index)].created")
                        } else if name.textEquals("owned") {
                            owned = try WireField.bool(field, "users[\(index)].owned")
                        }
                    }
                    guard let created else { throw ContractDecodingError("users[\(index)].created is missing") }
                    list.append(ResolvedUser(userId: userId, created: created, owned: owned))
                }
                users = list
            } else if key.textEquals("invalidated") {
                invalidated = try IdentityName.list(value, "invalidated")
            }
        }
        guard let users else { throw ContractDecodingError("users is missing") }
        self.init(users: users, invalidated: invalidated)
    }
}

extension IdentityName {
    fileprivate func write(to out: inout [UInt8]) {
        var object = JSONObjectWriter(&out)
        object.string("project", project, &out)
        object.string("key", key, &out)
        object.string("value", value, &out)
        object.finish(&out)
    }

    fileprivate static func list(_ value: JSONRef, _ path: String) throws(ContractDecodingError) -> [IdentityName] {
        var list: [IdentityName] = []
        list.reserveCapacity(Int(value.entry.count))
        for (index, element) in try WireField.array(value, path).enumerated() {
            guard element.isObject else { throw ContractDecodingError("\(path)[\(index)] is not an object") }
            var project: String?
            var key: String?
            var text: String?
            for (name, field) in element.members {
                if name.textEquals("project") {
                    project = try WireField.string(field, "\(path)[\(index)].project")
                } else if name.textEquals("key") {
                    key = try WireField.string(field, "\(path)[\(index)].key")
                } else if name.textEquals("value") {
                    text = try WireField.string(field, "\(path)[\(index)].value")
                }
            }
            guard let project, let key, let text else { throw ContractDecodingError("\(path)[\(index)] needs project, key and value") }
            list.append(IdentityName(project: project, key: key, value: text))
        }
        return list
    }
}

extension InvalidationLog: WireCodable {
    package var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(96 + identities.count * 80)
        var log = JSONObjectWriter(&out)
        log.string("server", server, &out)
        log.string("horizon", horizon, &out)
        log.array("identities", count: identities.count, &out) { identities[$0].write(to: &$1) }
        log.bool("complete", complete, &out)
        log.finish(&out)
        return out
    }

    package init(jsonBytes: [UInt8]) throws(ContractDecodingError) {
        let root = try WireField.object(jsonBytes, maxDepth: 4, "the invalidation log")
        var server: String?
        var horizon: String?
        var identities: [IdentityName]?
        var complete: Bool?
        for (key, value) in root.members {
            if key.textEquals("server") {
                server = try WireField.string(value, "server")
            } else if key.textEquals("horizon") {
                horizon = try WireField.string(value, "horizon")
            } else if key.textEquals("identities") {
                identities = try IdentityName.list(value, "identities")
            } else if key.textEquals("complete") {
                complete = try WireField.bool(value, "complete")
            }
        }
        guard let server, let horizon, let identities, let complete else {
            throw ContractDecodingError("the invalidation log needs server, horizon, identities and complete")
        }
        self.init(server: server, horizon: horizon, identities: identities, complete: complete)
    }
}
