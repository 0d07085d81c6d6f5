/// Writes one JSON object member by member into a caller's buffer; absent optionals are left out.
/// The hand-written codecs of the contracts between services write with it (no `Codable` on the
/// hot paths: a field costs an append, not a container call).
package struct JSONObjectWriter {
    private var empty = true

    package init(_ out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
    }

    /// A member's name, given as its UTF-8 bytes (already valid JSON string content). The concrete
    /// forms are compiled here: from another module an unspecialized generic call costs metadata
    /// lookups and casts on every field (the collector wire codec ran at half speed so).
    package mutating func key(_ name: [UInt8], _ out: inout [UInt8]) { appendKey(name, &out) }
    package mutating func key(_ name: ArraySlice<UInt8>, _ out: inout [UInt8]) { appendKey(name, &out) }
    package mutating func key(_ name: UnsafeBufferPointer<UInt8>, _ out: inout [UInt8]) { appendKey(name, &out) }

    private mutating func appendKey(_ name: some Collection<UInt8>, _ out: inout [UInt8]) {
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

    /// An array member of `count` elements, each written by `write(position, &out)`. Not generic
    /// over the element, for the reason `key` is not.
    package mutating func array(_ name: StaticString, count: Int, _ out: inout [UInt8], _ write: (Int, inout [UInt8]) -> Void) {
        key(name, &out)
        out.append(UInt8(ascii: "["))
        for index in 0..<count {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            write(index, &out)
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
