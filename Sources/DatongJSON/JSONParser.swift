/// A parsed JSON document kept as a flat list of entries over its bytes (a "tape"), for the hot
/// paths: SDK uploads in the gateway, batches between the services.
///
/// Parsing checks everything once: syntax, UTF-8, nesting depth. It allocates no string, number,
/// array or dictionary per value: an entry records a value's kind and where it is in the bytes, and a
/// reader decodes only what it asks for. The properties of a record, most of its bytes, are checked
/// and copied to their stored text straight from here (the gateway's `RecordNormalizer`), never
/// built into a tree.
public final class JSONDocument: Sendable {
    public enum Kind: UInt8, Sendable {
        case null, bool, number, string, array, object
    }

    public struct Entry: Sendable {
        public var kind: Kind
        /// bool: its value; string: it holds a backslash escape; number: it has no fraction or exponent.
        public var flag: Bool
        /// string: the first byte after the opening quote; others: the value's first byte.
        public var start: Int32
        /// string: the closing quote; others: one past the value's last byte.
        public var end: Int32
        /// The index of the entry after this value and everything inside it.
        public var next: Int32
        /// array: elements; object: members (each is a key entry, then the value's entries).
        public var count: Int32
    }

    public let bytes: [UInt8]
    public let entries: [Entry]

    package init(bytes: [UInt8], entries: [Entry]) {
        self.bytes = bytes
        self.entries = entries
    }

    /// The document's top-level value.
    package var root: JSONRef { JSONRef(document: self, index: 0) }
}

/// One value inside a `JSONDocument`.
///
/// The type and its smallest accessors are `public` and `@inlinable`, unlike the rest of the
/// package: the gateway and the collector call them dozens of times a record, and Swift inlines a
/// function into another module only when it is public (a `package` one never is).
public struct JSONRef: Sendable {
    public let document: JSONDocument
    public let index: Int

    @inlinable
    public init(document: JSONDocument, index: Int) {
        self.document = document
        self.index = index
    }

    @inlinable public var entry: JSONDocument.Entry { document.entries[index] }
    @inlinable public var kind: JSONDocument.Kind { entry.kind }

    @inlinable public var isNumber: Bool { kind == .number }
    @inlinable public var isObject: Bool { kind == .object }
    @inlinable public var isTrue: Bool { kind == .bool && entry.flag }

    /// A string value decoded (escapes resolved), or nil for other kinds.
    package var stringValue: String? {
        guard kind == .string else { return nil }
        return String(decoding: textBytes, as: UTF8.self)
    }

    /// `stringValue`, but one of `known` when the text is one of them: names every record repeats
    /// (identity keys longer than 15 bytes, which a `String` keeps on the heap) are then shared
    /// literals, never allocated, reference-counted or freed per record.
    package func stringValue(sharing known: [String]) -> String? {
        guard kind == .string else { return nil }
        let bytes = textBytes  // an escaped text is unescaped once, not once per known text
        for text in known where text.utf8.count == bytes.count {
            if text.utf8.withContiguousStorageIfAvailable({ $0.elementsEqual(bytes) }) == true { return text }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The UTF-8 bytes of a string value, escapes resolved: a slice of the document's bytes when
    /// the string has no escapes, so nothing is copied.
    package var textBytes: ArraySlice<UInt8> {
        let entry = entry
        guard entry.flag else { return document.bytes[Int(entry.start)..<Int(entry.end)] }
        return ArraySlice(textArray)
    }

    /// The UTF-8 bytes of a string value, escapes resolved, in an array of their own: one
    /// allocation, where `Array(textBytes)` of an escaped string makes two. Always valid UTF-8 (a
    /// lone surrogate escape becomes U+FFFD).
    package var textArray: [UInt8] {
        let entry = entry
        return document.bytes.withUnsafeBufferPointer { bytes in
            let text = UnsafeBufferPointer(rebasing: bytes[Int(entry.start)..<Int(entry.end)])
            return entry.flag ? JSONParser.unescape(text) : Array(text)
        }
    }

    /// A number that is an integer fitting 64 bits, read without allocating.
    package var int64Value: Int64? {
        let entry = entry
        guard entry.kind == .number, entry.flag else { return nil }
        var index = Int(entry.start)
        let negative = document.bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        var value: Int64 = 0
        while index < Int(entry.end) {
            let digit = Int64(document.bytes[index] &- UInt8(ascii: "0"))
            let (shifted, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (added, overflow2) = negative ? shifted.subtractingReportingOverflow(digit) : shifted.addingReportingOverflow(digit)
            if overflow1 || overflow2 { return nil }
            value = added
            index += 1
        }
        return value
    }

    package var doubleValue: Double? {
        guard kind == .number else { return nil }
        return Double(String(decoding: rawBytes, as: UTF8.self))
    }

    /// The value exactly as it was sent (a string with its quotes).
    package var rawBytes: ArraySlice<UInt8> {
        let entry = entry
        switch entry.kind {
        case .string: return document.bytes[Int(entry.start - 1)...Int(entry.end)]
        default: return document.bytes[Int(entry.start)..<Int(entry.end)]
        }
    }

    package var rawText: String { String(decoding: rawBytes, as: UTF8.self) }

    /// The members of an object in the order sent, each as (key, value); empty for other kinds.
    package var members: Members { Members(document: document, parent: index) }

    /// The elements of an array in order; empty for other kinds.
    package var elements: Elements { Elements(document: document, parent: index) }

    /// An object's member named `key`; of repeated keys the last, as JavaScript reads them.
    package subscript(key: String) -> JSONRef? {
        var key = key
        return key.withUTF8 { member(named: $0) }
    }

    /// An object's member named `name` (of repeated keys the last); nil for other kinds. One pass
    /// over the tape that makes no `JSONRef` (and so retains nothing) until it has the answer.
    package func member(named name: UnsafeBufferPointer<UInt8>) -> JSONRef? {
        let found: Int? = document.entries.withUnsafeBufferPointer { entries in
            let parent = entries[index]
            guard parent.kind == .object else { return nil }
            return document.bytes.withUnsafeBufferPointer { bytes in
                var position = index + 1
                var result: Int?
                for _ in 0..<Int(parent.count) {
                    if Self.keyEquals(entries[position], name, in: bytes) { result = position + 1 }
                    position = Int(entries[position + 1].next)
                }
                return result
            }
        }
        return found.map { JSONRef(document: document, index: $0) }
    }

    private static func keyEquals(_ key: JSONDocument.Entry, _ name: UnsafeBufferPointer<UInt8>, in bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard key.kind == .string else { return false }
        let text = UnsafeBufferPointer(rebasing: bytes[Int(key.start)..<Int(key.end)])
        if key.flag { return JSONParser.unescape(text).elementsEqual(name) }
        return text.count == name.count && text.elementsEqual(name)
    }

    /// Whether a string value's text is exactly `name`.
    package func textEquals(_ name: StaticString) -> Bool {
        textEquals(UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
    }

    /// Whether a string value's text is exactly `name`.
    package func textEquals(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
        let entry = entry
        guard entry.kind == .string else { return false }
        if entry.flag { return textBytes.elementsEqual(name) }
        guard Int(entry.end - entry.start) == name.count else { return false }
        return document.bytes.withUnsafeBufferPointer { bytes in
            UnsafeBufferPointer(rebasing: bytes[Int(entry.start)..<Int(entry.end)]).elementsEqual(name)
        }
    }

    /// The value built as a `JSONValue` tree, for the few small objects read whole (the relay's
    /// `app` context) and for tests; numbers keep the parser's reading (exact integers).
    package var value: JSONValue {
        switch kind {
        case .null: return .null
        case .bool: return .bool(entry.flag)
        case .number:
            if let int = int64Value { return .int(int) }
            return .number(rawText)
        case .string: return .string(stringValue ?? "")
        case .array: return .array(elements.map(\.value))
        case .object:
            var object: [String: JSONValue] = [:]
            for (key, value) in members { object[key.stringValue ?? ""] = value.value }
            return .object(object)
        }
    }

    package struct Members: Sequence {
        let document: JSONDocument
        let parent: Int

        package struct Iterator: IteratorProtocol {
            let document: JSONDocument
            var position: Int
            var remaining: Int

            package mutating func next() -> (key: JSONRef, value: JSONRef)? {
                guard remaining > 0 else { return nil }
                remaining -= 1
                let key = JSONRef(document: document, index: position)
                let value = JSONRef(document: document, index: position + 1)
                position = Int(document.entries[position + 1].next)
                return (key, value)
            }
        }

        package func makeIterator() -> Iterator {
            let entry = document.entries[parent]
            return Iterator(document: document, position: parent + 1, remaining: entry.kind == .object ? Int(entry.count) : 0)
        }
    }

    package struct Elements: Sequence {
        let document: JSONDocument
        let parent: Int

        package struct Iterator: IteratorProtocol {
            let document: JSONDocument
            var position: Int
            var remaining: Int

            package mutating func next() -> JSONRef? {
                guard remaining > 0 else { return nil }
                remaining -= 1
                let element = JSONRef(document: document, index: position)
                position = Int(document.entries[position].next)
                return element
            }
        }

        package func makeIterator() -> Iterator {
            let entry = document.entries[parent]
            return Iterator(document: document, position: parent + 1, remaining: entry.kind == .array ? Int(entry.count) : 0)
        }
    }
}

/// A strict, single-pass JSON parser over UTF-8 bytes into a `JSONDocument`.
///
/// Foundation's `JSONDecoder` into an enum costs about 20 µs per SDK record (docs/ARCHITECTURE.md's
/// performance model); this reads each byte once, keeps integers exact, validates UTF-8 and bounds
/// nesting depth while it parses, so hostile input is refused before it costs memory.
package struct JSONParser {
    /// Why bytes are not an acceptable JSON document; `offset` is where the parser stopped.
    package struct Failure: Error, Equatable {
        package enum Kind: Equatable {
            case syntax
            case invalidUTF8
            case tooDeep
        }

        package let kind: Kind
        package let offset: Int

        package var message: String {
            switch kind {
            case .syntax: return "not valid JSON (at byte \(offset))"
            case .invalidUTF8: return "not valid UTF-8 (at byte \(offset))"
            case .tooDeep: return "nested too deeply (at byte \(offset))"
            }
        }
    }

    /// Parses one complete JSON document; nothing but whitespace may follow it.
    package static func parse(_ bytes: [UInt8], maxDepth: Int) throws(Failure) -> JSONDocument {
        // Offsets are kept in 32 bits; the gateway's size limits are far below this.
        guard bytes.count < Int(Int32.max) else { throw Failure(kind: .syntax, offset: 0) }
        let entries = try bytes.withUnsafeBufferPointer { (buffer) throws(Failure) in
            var parser = JSONParser(bytes: buffer, maxDepth: maxDepth)
            parser.skipWhitespace()
            try parser.parseValue(depth: 0)
            parser.skipWhitespace()
            guard parser.index == buffer.count else { throw parser.failure(.syntax) }
            return parser.entries
        }
        return JSONDocument(bytes: bytes, entries: entries)
    }

    /// Parses a document and builds it as a `JSONValue` tree.
    package static func parseValue(_ bytes: [UInt8], maxDepth: Int) throws(Failure) -> JSONValue {
        try parse(bytes, maxDepth: maxDepth).root.value
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    private let maxDepth: Int
    private var index = 0
    private var entries: [JSONDocument.Entry]

    private init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
        // About one value per 12 bytes in SDK records: reserve once rather than grow.
        entries = []
        entries.reserveCapacity(bytes.count / 12 + 4)
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

    private mutating func append(_ kind: JSONDocument.Kind, flag: Bool, start: Int, end: Int) {
        entries.append(.init(kind: kind, flag: flag, start: Int32(start), end: Int32(end), next: Int32(entries.count + 1), count: 0))
    }

    private mutating func parseValue(depth: Int) throws(Failure) {
        guard index < bytes.count else { throw failure(.syntax) }
        switch bytes[index] {
        case UInt8(ascii: "{"): try parseContainer(.object, depth: depth + 1)
        case UInt8(ascii: "["): try parseContainer(.array, depth: depth + 1)
        case UInt8(ascii: "\""): try parseString()
        case UInt8(ascii: "t"): try parseLiteral("true", .bool, flag: true)
        case UInt8(ascii: "f"): try parseLiteral("false", .bool, flag: false)
        case UInt8(ascii: "n"): try parseLiteral("null", .null, flag: false)
        default: try parseNumber()
        }
    }

    private mutating func parseLiteral(_ literal: StaticString, _ kind: JSONDocument.Kind, flag: Bool) throws(Failure) {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw failure(.syntax) }
        let expected = UnsafeBufferPointer(start: literal.utf8Start, count: count)
        for offset in 0..<count where bytes[index + offset] != expected[offset] { throw failure(.syntax) }
        append(kind, flag: flag, start: index, end: index + count)
        index += count
    }

    /// An object or array: its entry first, then its members' or elements' entries; the count and
    /// the end are filled in when it closes.
    private mutating func parseContainer(_ kind: JSONDocument.Kind, depth: Int) throws(Failure) {
        guard depth <= maxDepth else { throw failure(.tooDeep) }
        let position = entries.count
        append(kind, flag: false, start: index, end: index)
        let closing = kind == .object ? UInt8(ascii: "}") : UInt8(ascii: "]")
        index += 1
        skipWhitespace()
        var count: Int32 = 0
        if index < bytes.count, bytes[index] == closing {
            index += 1
        } else {
            while true {
                skipWhitespace()
                if kind == .object {
                    guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw failure(.syntax) }
                    try parseString()
                    skipWhitespace()
                    guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw failure(.syntax) }
                    index += 1
                    skipWhitespace()
                }
                try parseValue(depth: depth)
                count += 1
                skipWhitespace()
                guard index < bytes.count else { throw failure(.syntax) }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                } else if bytes[index] == closing {
                    index += 1
                    break
                } else {
                    throw failure(.syntax)
                }
            }
        }
        entries[position].end = Int32(index)
        entries[position].count = count
        entries[position].next = Int32(entries.count)
    }

    /// A string from the opening quote: checked (escapes, control characters, UTF-8), not copied.
    private mutating func parseString() throws(Failure) {
        index += 1
        let start = index
        var escaped = false
        var ascii = true
        while true {
            // Nearly every byte of an SDK string is plain: skip eight at a time, then byte by byte
            // to the end of the run. After a first byte beyond ASCII, those are plain too (the
            // whole string is checked as UTF-8 at its end).
            index = JSONParser.plainRunEnd(bytes, from: index, beyondASCIIIsPlain: !ascii)
            guard index < bytes.count else { throw failure(.syntax) }
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") { break }
            if byte >= 0x80 {
                ascii = false
                index += 1
                continue
            }
            if byte < 0x20 { throw failure(.syntax) }
            // A backslash: the escape must be one JSON knows.
            escaped = true
            index += 1
            guard index < bytes.count else { throw failure(.syntax) }
            switch bytes[index] {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                break
            case UInt8(ascii: "u"):
                guard index + 4 < bytes.count else { throw failure(.syntax) }
                for offset in 1...4 where JSONParser.hexValue(bytes[index + offset]) == nil { throw failure(.syntax) }
                index += 4
            default:
                throw failure(.syntax)
            }
            index += 1
        }
        if !ascii, !JSONParser.isValidUTF8(UnsafeBufferPointer(rebasing: bytes[start..<index])) {
            throw Failure(kind: .invalidUTF8, offset: start)
        }
        append(.string, flag: escaped, start: start, end: index)
        index += 1
    }

    /// A number, checked against JSON's grammar; an integer is flagged so readers can take it exactly.
    private mutating func parseNumber() throws(Failure) {
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
        // Only the grammar is checked here: a number too large for a double (`1e400`) is valid JSON,
        // and refusing the document for it would cost every other record in it. Readers that
        // store or compute with a number check it (`JSONNumberRule`, `Double.isFinite`).
        append(.number, flag: isInteger, start: start, end: index)
    }

    /// Where the run of plain string bytes starting at `start` ends: the first `"`, `\`, control
    /// byte, or (unless `beyondASCIIIsPlain`) byte ≥ 0x80, or the end of `bytes`. Eight bytes are
    /// tested at once: a byte is flagged where it equals `"` or `\`, is below 0x20, or has its high
    /// bit set. The zero-byte test `(v - 0x01…) & ~v & 0x80…` can flag a byte above a true one (a
    /// borrow carries upward), never one below it, so the lowest flag is exact.
    @inline(__always)
    static func plainRunEnd(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int, beyondASCIIIsPlain: Bool) -> Int {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        let highMask: UInt64 = beyondASCIIIsPlain ? 0 : highs
        var index = start
        if let base = bytes.baseAddress {
            let raw = UnsafeRawPointer(base)
            while index + 8 <= bytes.count {
                let word = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: index, as: UInt64.self))
                let quote = word ^ (ones &* 0x22)
                let backslash = word ^ (ones &* 0x5C)
                let flags =
                    ((quote &- ones) & ~quote | (backslash &- ones) & ~backslash | (word &- ones &* 0x20) & ~word) & highs
                    | word & highMask
                if flags != 0 { return index + flags.trailingZeroBitCount / 8 }
                index += 8
            }
        }
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 || (byte >= 0x80 && !beyondASCIIIsPlain) {
                return index
            }
            index += 1
        }
        return index
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    package static func hexValue(_ byte: UInt8) -> UInt32? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return UInt32(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return UInt32(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return UInt32(byte - UInt8(ascii: "A") + 10)
        default: return nil
        }
    }

    /// Well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
    package static func isValidUTF8(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var index = 0
        let count = bytes.count
        let raw = UnsafeRawPointer(bytes.baseAddress)
        while index < count {
            // ASCII eight bytes at a time.
            if let raw, index + 8 <= count, raw.loadUnaligned(fromByteOffset: index, as: UInt64.self) & 0x8080_8080_8080_8080 == 0 {
                index += 8
                continue
            }
            let lead = bytes[index]
            if lead < 0x80 {
                index += 1
                continue
            }
            func continuation(_ offset: Int, _ range: ClosedRange<UInt8> = 0x80...0xBF) -> Bool {
                index + offset < count && range.contains(bytes[index + offset])
            }
            switch lead {
            case 0xC2...0xDF:
                guard continuation(1) else { return false }
                index += 2
            case 0xE0:
                guard continuation(1, 0xA0...0xBF), continuation(2) else { return false }
                index += 3
            case 0xE1...0xEC, 0xEE...0xEF:
                guard continuation(1), continuation(2) else { return false }
                index += 3
            case 0xED:
                guard continuation(1, 0x80...0x9F), continuation(2) else { return false }
                index += 3
            case 0xF0:
                guard continuation(1, 0x90...0xBF), continuation(2), continuation(3) else { return false }
                index += 4
            case 0xF1...0xF3:
                guard continuation(1), continuation(2), continuation(3) else { return false }
                index += 4
            case 0xF4:
                guard continuation(1, 0x80...0x8F), continuation(2), continuation(3) else { return false }
                index += 4
            default:
                return false
            }
        }
        return true
    }

    /// The UTF-8 text of a string the parser checked, escapes resolved. A lone surrogate becomes
    /// U+FFFD: browsers produce them and PostgreSQL cannot store them.
    package static func unescape(_ raw: UnsafeBufferPointer<UInt8>) -> [UInt8] {
        // Never longer than the escaped text: `\X` is 2 bytes for 1, `\uXXXX` 6 for at most 3,
        // a surrogate pair 12 for 4.
        [UInt8](unsafeUninitializedCapacity: raw.count) { out, written in
            guard let source = raw.baseAddress, let target = out.baseAddress else { return }
            var index = 0
            var count = 0
            func hex4(at position: Int) -> UInt32 {
                var value: UInt32 = 0
                for offset in 0..<4 { value = value << 4 | (hexValue(raw[position + offset]) ?? 0) }
                return value
            }
            while index < raw.count {
                // Copy the run up to the next backslash at once: most of an escaped string is plain.
                // A checked string holds no raw quote or control byte, so the parser's scan stops
                // only at a backslash.
                let end = plainRunEnd(raw, from: index, beyondASCIIIsPlain: true)
                if end > index {
                    (target + count).initialize(from: source + index, count: end - index)
                    count += end - index
                    index = end
                    continue
                }
                let escaped = raw[index + 1]
                index += 2
                switch escaped {
                case UInt8(ascii: "b"): (target + count).initialize(to: 0x08)
                case UInt8(ascii: "f"): (target + count).initialize(to: 0x0C)
                case UInt8(ascii: "n"): (target + count).initialize(to: 0x0A)
                case UInt8(ascii: "r"): (target + count).initialize(to: 0x0D)
                case UInt8(ascii: "t"): (target + count).initialize(to: 0x09)
                case UInt8(ascii: "u"):
                    let first = hex4(at: index)
                    index += 4
                    var scalar = Unicode.Scalar(first) ?? "\u{FFFD}"
                    if (0xD800...0xDBFF).contains(first) {
                        scalar = "\u{FFFD}"
                        if index + 5 < raw.count, raw[index] == UInt8(ascii: "\\"), raw[index + 1] == UInt8(ascii: "u") {
                            let second = hex4(at: index + 2)
                            if (0xDC00...0xDFFF).contains(second) {
                                scalar = Unicode.Scalar(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))!
                                index += 6
                            }
                        }
                    }
                    for byte in UTF8.encode(scalar)! {
                        (target + count).initialize(to: byte)
                        count += 1
                    }
                    continue
                default: (target + count).initialize(to: escaped)
                }
                count += 1
            }
            written = count
        }
    }
}
