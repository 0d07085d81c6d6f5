import DatongJSON

// identity-service's contract on the wire (`POST /v1/resolve`): the ids of an upload's records in,
// one user per record out.

extension ResolveRequest: WireCodable {
    package var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(16 + records.count * 256)
        var request = JSONObjectWriter(&out)
        request.array("records", count: records.count, &out) { records[$0].write(to: &$1) }
        request.finish(&out)
        return out
    }

    package init(jsonBytes: [UInt8]) throws(ContractDecodingError) {
        let root = try WireField.object(jsonBytes, maxDepth: 8, "the resolve request")
        var records: [IdentityRecord]?
        for (key, value) in root.members where key.textEquals("records") {
            var list: [IdentityRecord] = []
            list.reserveCapacity(Int(value.entry.count))
            for (index, element) in try WireField.array(value, "records").enumerated() {
                list.append(try IdentityRecord(element, path: "records[\(index)]"))
            }
            records = list
        }
        guard let records else { throw ContractDecodingError("records is missing") }
        self.init(records: records)
    }
}

extension IdentityRecord {
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
            object.finish(&out)
        }
        response.finish(&out)
        return out
    }

    package init(jsonBytes: [UInt8]) throws(ContractDecodingError) {
        let root = try WireField.object(jsonBytes, maxDepth: 4, "the resolve answer")
        var users: [ResolvedUser]?
        for (key, value) in root.members where key.textEquals("users") {
            var list: [ResolvedUser] = []
            list.reserveCapacity(Int(value.entry.count))
            for (index, element) in try WireField.array(value, "users").enumerated() {
                guard element.isObject else { throw ContractDecodingError("users[\(index)] is not an object") }
                var userId: Int64?
                var created: Bool?
                for (name, field) in element.members {
                    if name.textEquals("userId") {
                        userId = try WireField.optionalInt(field, "users[\(index)].userId")
                    } else if name.textEquals("created") {
                        created = try WireField.bool(field, "users[\(index)].created")
                    }
                }
                guard let created else { throw ContractDecodingError("users[\(index)].created is missing") }
                list.append(ResolvedUser(userId: userId, created: created))
            }
            users = list
        }
        guard let users else { throw ContractDecodingError("users is missing") }
        self.init(users: users)
    }
}
