/// Writes one JSON object member by member into a caller's buffer; absent optionals are left out.
/// The hand-written codecs of the contracts between services write with it (no `Codable` on the
/// hot paths: a field costs an append, not a container call).
package struct JSONObjectWriter {
    private var empty = true

    package init(_ out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
    }

    /// A member's name, given as its UTF-8 bytes (already valid JSON string content).
    package mutating func key(_ name: some Collection<UInt8>, _ out: inout [UInt8]) {
        if !empty { out.append(UInt8(ascii: ",")) }
        empty = false
        out.append(UInt8(ascii: "\""))
        out.append(contentsOf: name)
        out.append(contentsOf: "\":".utf8)
    }

    package mutating func key(_ name: StaticString, _ out: inout [UInt8]) {
        key(UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount), &out)
    }

    /// A member whose name is not known at compile time (escaped as needed).
    package mutating func string(dynamic name: String, _ value: String, _ out: inout [UInt8]) {
        if !empty { out.append(UInt8(ascii: ",")) }
        empty = false
        JSONValue.writeString(utf8: name.utf8, to: &out)
        out.append(UInt8(ascii: ":"))
        JSONValue.writeString(utf8: value.utf8, to: &out)
    }

    package mutating func string(_ name: StaticString, _ value: String?, _ out: inout [UInt8]) {
        guard let value else { return }
        key(name, &out)
        JSONValue.writeString(utf8: value.utf8, to: &out)
    }

    package mutating func int(_ name: StaticString, _ value: Int64?, _ out: inout [UInt8]) {
        guard let value else { return }
        key(name, &out)
        out.append(contentsOf: String(value).utf8)
    }

    package mutating func bool(_ name: StaticString, _ value: Bool, _ out: inout [UInt8]) {
        key(name, &out)
        out.append(contentsOf: (value ? "true" : "false").utf8)
    }

    package mutating func array<Element>(
        _ name: StaticString, _ values: [Element], _ out: inout [UInt8], _ write: (Element, inout [UInt8]) -> Void
    ) {
        key(name, &out)
        out.append(UInt8(ascii: "["))
        for (index, value) in values.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            write(value, &out)
        }
        out.append(UInt8(ascii: "]"))
    }

    package func finish(_ out: inout [UInt8]) {
        out.append(UInt8(ascii: "}"))
    }

    /// A JSON object of string members, keys sorted (the one order both sides agree on).
    package static func sortedStrings(_ members: [String: String], to out: inout [UInt8]) {
        var object = JSONObjectWriter(&out)
        for (key, value) in members.sorted(by: { $0.key < $1.key }) { object.string(dynamic: key, value, &out) }
        object.finish(&out)
    }
}
