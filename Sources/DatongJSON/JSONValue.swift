/// A JSON value built as a tree, for the few small objects the gateway reads whole (a relay's `app`
/// context and its presets, config documents); records are read straight from their
/// `JSONDocument`. Numbers are kept exactly as sent, never passed through a Double: a 64-bit
/// integer as `int`, any other number as its JSON text (`12345678901234567890`, `9.90`, `1e3`).
package enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    /// A number that is not a 64-bit integer, as its JSON text (checked JSON number grammar).
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    package var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// JSON text with object keys sorted, so equal values give equal text.
    package func write(to out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let value): out.append(contentsOf: (value ? "true" : "false").utf8)
        case .int(let value): out.append(contentsOf: String(value).utf8)
        case .number(let text): out.append(contentsOf: text.utf8)
        case .string(let value): Self.writeString(utf8: value.utf8, to: &out)
        case .array(let values):
            out.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                value.write(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (index, member) in members.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                Self.writeString(utf8: member.key.utf8, to: &out)
                out.append(UInt8(ascii: ":"))
                member.value.write(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// The letter of a byte's two-character escape (`\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`), or nil.
    private static func shortEscape(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): byte
        case 0x0A: UInt8(ascii: "n")
        case 0x0D: UInt8(ascii: "r")
        case 0x09: UInt8(ascii: "t")
        case 0x08: UInt8(ascii: "b")
        case 0x0C: UInt8(ascii: "f")
        default: nil
        }
    }

    /// `writeString` for the kinds of text callers have, compiled here so that a caller in another
    /// module does not run the unspecialized generic (metadata lookups and casts per string).
    /// A native string's bytes are contiguous and are scanned through a pointer, several times
    /// faster than through the view's iterator.
    package static func writeString(utf8: String.UTF8View, to out: inout [UInt8]) {
        if utf8.withContiguousStorageIfAvailable({ writeString(generic: $0, to: &out) }) == nil { writeString(generic: utf8, to: &out) }
    }
    package static func writeString(utf8: Substring.UTF8View, to out: inout [UInt8]) {
        if utf8.withContiguousStorageIfAvailable({ writeString(generic: $0, to: &out) }) == nil { writeString(generic: utf8, to: &out) }
    }
    package static func writeString(utf8: ArraySlice<UInt8>, to out: inout [UInt8]) { writeString(generic: utf8, to: &out) }
    package static func writeString(utf8: [UInt8], to out: inout [UInt8]) { writeString(generic: utf8, to: &out) }
    package static func writeString(utf8: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) { writeString(generic: utf8, to: &out) }

    /// A JSON string: UTF-8 copied as it is, only quotes, backslashes and control characters escaped,
    /// each as briefly as JSON allows, so the text is never longer than any JSON text of the string.
    private static func writeString(generic utf8: some Collection<UInt8>, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Most strings need no escape: copy them whole.
        if !utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            out.append(contentsOf: utf8)
            out.append(UInt8(ascii: "\""))
            return
        }
        for byte in utf8 {
            if let short = shortEscape(byte) {
                out.append(UInt8(ascii: "\\"))
                out.append(short)
            } else if byte < 0x20 {
                out.append(contentsOf: "\\u00".utf8)
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0x0F)])
            } else {
                out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}

// MARK: Reading a tree

extension JSONValue {
    /// Parses one JSON document (any value at the top) into a tree.
    package init(parsing bytes: [UInt8], maxDepth: Int = 64) throws(JSONParser.Failure) {
        self = try JSONParser.parseValue(bytes, maxDepth: maxDepth)
    }

    package var objectValue: [String: JSONValue]? {
        if case .object(let members) = self { return members }
        return nil
    }

    package var arrayValue: [JSONValue]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    package var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// A number without a fraction (`2` and `2.0`; never `true`).
    package var integerValue: Int64? {
        switch self {
        case .int(let value): return value
        case .number(let text):
            guard let value = Double(text) else { return nil }
            return value.rounded() == value && abs(value) < 9.0e18 ? Int64(value) : nil
        default: return nil
        }
    }

    /// A member of an object (nil for a missing member and for anything but an object).
    package subscript(member: String) -> JSONValue? { objectValue?[member] }

    /// The number as a Double (rounded to the nearest one), or nil for other kinds.
    package var doubleValue: Double? {
        switch self {
        case .int(let value): return Double(value)
        case .number(let text): return Double(text)
        default: return nil
        }
    }

    /// True when every number in the tree is within what a Double holds (`1e400` is not): what
    /// an SDK parsing it as a double can read.
    package var isFinite: Bool {
        switch self {
        case .number(let text): return Double(text)?.isFinite ?? false
        case .array(let elements): return elements.allSatisfy(\.isFinite)
        case .object(let members): return members.values.allSatisfy(\.isFinite)
        default: return true
        }
    }

    /// JSON text with object keys sorted: equal values give equal text.
    package var canonicalText: String {
        var out: [UInt8] = []
        write(to: &out)
        return String(decoding: out, as: UTF8.self)
    }
}

/// A tree inside a Codable answer (a document, a diff's old and new values) is written as the
/// JSON it is.
extension JSONValue: Encodable {
    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .number(let text):
            // A Codable encoder has no way to write a number's text: the nearest Double (only a
            // diff's display goes this way; documents are served as their text).
            try container.encode(Double(text) ?? .nan)
        case .string(let value): try container.encode(value)
        case .array(let elements): try container.encode(elements)
        case .object(let members): try container.encode(members)
        }
    }
}
