import DatongJSON

/// A contract between services with its one codec: JSON written and read by hand over the tape
/// parser (camelCase keys, absent optionals left out). There is no second (`Codable`) form to keep
/// in step: `ServiceClient` and the services' handlers use this one.
package protocol WireCodable: WireDecodable {
    /// The value as JSON text.
    var jsonBytes: [UInt8] { get }
}

/// What a service reads from a request body: a contract, or a service's own reading of one (the
/// collector reads a batch straight into its COPY rows).
package protocol WireDecodable: Sendable {
    /// Reads the value from JSON text; a problem names the field.
    init(jsonBytes: [UInt8]) throws(ContractDecodingError)
}

/// Why a request body is not the contract's document: which field, and what is wrong with it.
package struct ContractDecodingError: Error, Sendable, Equatable {
    package let message: String

    package init(_ message: String) { self.message = message }
}

/// Reading one field; `null` is an absent optional. The path that names the field in a problem
/// is only built when there is one: records are read by the thousand.
package enum WireField {
    /// The document's root, which must be an object; `what` names the document in problems.
    package static func object(_ bytes: [UInt8], maxDepth: Int, _ what: String) throws(ContractDecodingError) -> JSONRef {
        let root: JSONRef
        do {
            root = try JSONParser.parse(bytes, maxDepth: maxDepth).root
        } catch {
            throw ContractDecodingError("\(what) is \(error.message)")
        }
        guard root.isObject else { throw ContractDecodingError("\(what) is not a JSON object") }
        return root
    }

    package static func array(_ value: JSONRef, _ path: @autoclosure () -> String) throws(ContractDecodingError) -> JSONRef.Elements {
        guard value.kind == .array else { throw ContractDecodingError("\(path()) is not an array") }
        return value.elements
    }

    package static func string(_ value: JSONRef, _ path: @autoclosure () -> String) throws(ContractDecodingError) -> String? {
        switch value.kind {
        case .null: return nil
        case .string: return value.stringValue
        default: throw ContractDecodingError("\(path()) is not a string")
        }
    }

    package static func requiredString(_ value: JSONRef, _ path: @autoclosure () -> String) throws(ContractDecodingError) -> String {
        guard let text = try string(value, path()) else { throw ContractDecodingError("\(path()) is null") }
        return text
    }

    package static func bool(_ value: JSONRef, _ path: @autoclosure () -> String) throws(ContractDecodingError) -> Bool {
        guard value.kind == .bool else { throw ContractDecodingError("\(path()) is not a boolean") }
        return value.isTrue
    }

    package static func int(_ value: JSONRef, _ path: @autoclosure () -> String) throws(ContractDecodingError) -> Int64 {
        guard let int = value.int64Value else { throw ContractDecodingError("\(path()) is not an integer") }
        return int
    }

    package static func optionalInt(_ value: JSONRef, _ path: @autoclosure () -> String) throws(ContractDecodingError) -> Int64? {
        value.kind == .null ? nil : try int(value, path())
    }

    /// A list of non-negative positions (`CollectResult`'s indexes).
    package static func positions(_ value: JSONRef, _ path: @autoclosure () -> String) throws(ContractDecodingError) -> [Int] {
        var list: [Int] = []
        for (index, element) in try array(value, path()).enumerated() {
            guard let position = element.int64Value, position >= 0, position <= Int64(Int32.max) else {
                throw ContractDecodingError("\(path())[\(index)] is not a position")
            }
            list.append(Int(position))
        }
        return list
    }

    /// An `identities` object of string values; nil for null.
    package static func identities(_ value: JSONRef, _ path: @autoclosure () -> String) throws(ContractDecodingError) -> [String: String]? {
        if value.kind == .null { return nil }
        guard value.isObject else { throw ContractDecodingError("\(path()) is not an object") }
        var found: [String: String] = [:]
        for (name, text) in value.members {
            guard let name = name.stringValue(sharing: IdentityRecord.commonKeys), let text = try string(text, path()) else {
                throw ContractDecodingError("\(path()) holds a value that is not a string")
            }
            found[name] = text
        }
        return found
    }
}
