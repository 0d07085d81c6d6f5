/// A strict, single-pass JSON parser over UTF-8 bytes, for the gateway's hot path.
///
/// Foundation's `JSONDecoder` into an enum costs about 20 µs per SDK record (ARCHITECTURE.md's
/// performance model); this reads each byte once, keeps integers exact, validates UTF-8 and bounds
/// nesting depth while it parses, so hostile input is refused before it costs memory.
struct JSONParser {
    /// Why bytes are not an acceptable JSON document; `offset` is where the parser stopped.
    struct Failure: Error, Equatable {
        enum Kind: Equatable {
            case syntax
            case invalidUTF8
            case tooDeep
        }

        let kind: Kind
        let offset: Int

        var message: String {
            switch kind {
            case .syntax: return "not valid JSON (at byte \(offset))"
            case .invalidUTF8: return "not valid UTF-8 (at byte \(offset))"
            case .tooDeep: return "nested too deeply (at byte \(offset))"
            }
        }
    }

    /// Parses one complete JSON document; nothing but whitespace may follow it.
    static func parse(_ bytes: [UInt8], maxDepth: Int) throws -> JSONValue {
        try bytes.withUnsafeBufferPointer { buffer in
            var parser = JSONParser(bytes: buffer, maxDepth: maxDepth)
            parser.skipWhitespace()
            let value = try parser.parseValue(depth: 0)
            parser.skipWhitespace()
            guard parser.index == buffer.count else { throw parser.failure(.syntax) }
            return value
        }
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    private let maxDepth: Int
    private var index = 0
    /// Members of the objects being parsed, innermost last: each object is built once, at its exact
    /// size, instead of growing (and rehashing) a dictionary member by member.
    private var members: [(String, JSONValue)] = []

    private init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    private func failure(_ kind: Failure.Kind) -> Failure { Failure(kind: kind, offset: index) }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    private mutating func parseValue(depth: Int) throws(Failure) -> JSONValue {
        guard index < bytes.count else { throw failure(.syntax) }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        default: return try parseNumber()
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(Failure) {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw failure(.syntax) }
        let expected = UnsafeBufferPointer(start: literal.utf8Start, count: count)
        for offset in 0..<count where bytes[index + offset] != expected[offset] { throw failure(.syntax) }
        index += count
    }

    private mutating func parseObject(depth: Int) throws(Failure) -> JSONValue {
        guard depth <= maxDepth else { throw failure(.tooDeep) }
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object([:])
        }
        let base = members.count
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw failure(.syntax) }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw failure(.syntax) }
            index += 1
            skipWhitespace()
            let value = try parseValue(depth: depth)
            members.append((key, value))
            skipWhitespace()
            guard index < bytes.count else { throw failure(.syntax) }
            switch bytes[index] {
            case UInt8(ascii: ","):
                index += 1
            case UInt8(ascii: "}"):
                index += 1
                // A repeated key keeps its last value, as JavaScript does.
                var object = [String: JSONValue](minimumCapacity: members.count - base)
                for position in base..<members.count { object[members[position].0] = members[position].1 }
                members.removeSubrange(base...)
                return .object(object)
            default:
                throw failure(.syntax)
            }
        }
    }

    private mutating func parseArray(depth: Int) throws(Failure) -> JSONValue {
        guard depth <= maxDepth else { throw failure(.tooDeep) }
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue(depth: depth))
            skipWhitespace()
            guard index < bytes.count else { throw failure(.syntax) }
            switch bytes[index] {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"): index += 1; return .array(elements)
            default: throw failure(.syntax)
            }
        }
    }

    /// A string from the opening quote; the common case (no escapes) is validated and copied in one go.
    private mutating func parseString() throws(Failure) -> String {
        index += 1
        let start = index
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let text = try makeString(UnsafeBufferPointer(rebasing: bytes[start..<index]), at: start)
                index += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw failure(.syntax) }
            index += 1
        }
        guard index < bytes.count else { throw failure(.syntax) }
        var scalars = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            // Copy the run up to the next quote, backslash or control byte in one go.
            let runStart = index
            while index < bytes.count, bytes[index] >= 0x20, bytes[index] != UInt8(ascii: "\""), bytes[index] != UInt8(ascii: "\\") {
                index += 1
            }
            if index > runStart { scalars.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index])) }
            guard index < bytes.count else { break }
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                guard let text = String(validating: scalars, as: UTF8.self) else {
                    throw Failure(kind: .invalidUTF8, offset: start)
                }
                index += 1
                return text
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw failure(.syntax) }
                let escaped = bytes[index]
                index += 1
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scalars.append(escaped)
                case UInt8(ascii: "b"): scalars.append(0x08)
                case UInt8(ascii: "f"): scalars.append(0x0C)
                case UInt8(ascii: "n"): scalars.append(0x0A)
                case UInt8(ascii: "r"): scalars.append(0x0D)
                case UInt8(ascii: "t"): scalars.append(0x09)
                case UInt8(ascii: "u"): appendUTF8(try parseUnicodeEscape(), to: &scalars)
                default: throw failure(.syntax)
                }
            default:
                if byte < 0x20 { throw failure(.syntax) }
                scalars.append(byte)
                index += 1
            }
        }
        throw failure(.syntax)
    }

    private func makeString(_ utf8: UnsafeBufferPointer<UInt8>, at offset: Int) throws(Failure) -> String {
        // ASCII needs no validation; anything else must be well-formed UTF-8.
        var ascii = true
        for byte in utf8 where byte >= 0x80 {
            ascii = false
            break
        }
        if ascii { return String(decoding: utf8, as: UTF8.self) }
        guard let text = String(validating: utf8, as: UTF8.self) else {
            throw Failure(kind: .invalidUTF8, offset: offset)
        }
        return text
    }

    /// The scalar after `\u`, joining a surrogate pair; a lone surrogate becomes U+FFFD, as browsers
    /// produce them and PostgreSQL cannot store them.
    private mutating func parseUnicodeEscape() throws(Failure) -> Unicode.Scalar {
        let first = try parseHex4()
        if (0xD800...0xDBFF).contains(first) {
            if index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") {
                let saved = index
                index += 2
                let second = try parseHex4()
                if (0xDC00...0xDFFF).contains(second) {
                    return Unicode.Scalar(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))!
                }
                index = saved
            }
            return "\u{FFFD}"
        }
        return Unicode.Scalar(first) ?? "\u{FFFD}"
    }

    private mutating func parseHex4() throws(Failure) -> UInt32 {
        guard index + 4 <= bytes.count else { throw failure(.syntax) }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw failure(.syntax)
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    private func appendUTF8(_ scalar: Unicode.Scalar, to out: inout [UInt8]) {
        UTF8.encode(scalar) { out.append($0) }
    }

    /// A number: exact `int` when it is an integer that fits 64 bits, otherwise `double`.
    private mutating func parseNumber() throws(Failure) -> JSONValue {
        let start = index
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw failure(.syntax) }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw failure(.syntax) }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw failure(.syntax) }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isInteger, let value = Int64(text) { return .int(value) }
        guard let value = Double(text), value.isFinite else { throw Failure(kind: .syntax, offset: start) }
        return .double(value)
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
}
