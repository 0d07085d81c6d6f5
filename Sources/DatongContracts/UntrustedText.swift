import DatongJSON

/// Rules for text and numbers that came from a client, shared by the gateway (which refuses a bad
/// record alone, with a reason) and the collector (which must never let one value fail a COPY).
package enum UntrustedText {
    /// `text` as it may appear inside a reason or a log line: at most `limit` characters, control
    /// characters written as `\u{…}` (a NUL inside a reason would make the rejected row itself
    /// unstorable), and `…` where it was cut.
    package static func quoted(_ text: some StringProtocol, limit: Int = 100) -> String {
        var out = ""
        var count = 0
        for scalar in text.unicodeScalars {
            if count == limit {
                out += "…"
                break
            }
            if scalar.value < 0x20 || scalar.value == 0x7F {
                out += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                out.unicodeScalars.append(scalar)
            }
            count += 1
        }
        return out
    }

    /// Why PostgreSQL would refuse `text` as a `jsonb` object, or nil: it must be a JSON object whose
    /// strings hold no NUL and no lone surrogate escape, and whose numbers follow `JSONNumberRule`.
    /// The rule the gateway's record checks keep; the fuzz targets hold them to it.
    package static func storageProblem(ofJSONObject text: [UInt8]) -> String? {
        guard let document = try? JSONParser.parse(text, maxDepth: 512) else { return "not JSON" }
        guard document.root.isObject else { return "not a JSON object" }
        return document.bytes.withUnsafeBufferPointer { bytes in
            for entry in document.entries {
                let raw = UnsafeBufferPointer(rebasing: bytes[Int(entry.start)..<Int(entry.end)])
                switch entry.kind {
                case .string where entry.flag:
                    if JSONParser.unescape(raw).contains(0) { return "a string holds NUL" }
                    if hasLoneSurrogateEscape(raw) { return "a string holds a lone surrogate escape" }
                case .number:
                    if let problem = JSONNumberRule.problem(raw) { return problem }
                default: break
                }
            }
            return nil
        }
    }

    /// Whether an escaped JSON string holds `\uD800`–`\uDFFF` other than as a high-low pair.
    private static func hasLoneSurrogateEscape(_ raw: UnsafeBufferPointer<UInt8>) -> Bool {
        func unit(at index: Int) -> UInt32? {
            guard index + 5 < raw.count, raw[index] == UInt8(ascii: "\\"), raw[index + 1] == UInt8(ascii: "u") else { return nil }
            var value: UInt32 = 0
            for offset in 2...5 { value = value << 4 | (JSONParser.hexValue(raw[index + offset]) ?? 0) }
            return value
        }
        var index = 0
        while index < raw.count {
            guard raw[index] == UInt8(ascii: "\\") else {
                index += 1
                continue
            }
            if let first = unit(at: index) {
                if (0xD800...0xDBFF).contains(first) {
                    guard let second = unit(at: index + 6), (0xDC00...0xDFFF).contains(second) else { return true }
                    index += 12
                    continue
                }
                if (0xDC00...0xDFFF).contains(first) { return true }
                index += 6
            } else {
                index += 2
            }
        }
        return false
    }

    /// `text` with every NUL replaced by U+FFFD: PostgreSQL's `text` cannot hold NUL, and a row that
    /// records why something was refused must always be storable.
    package static func storable(_ text: String) -> String {
        guard text.utf8.contains(0) else { return text }
        return String(text.unicodeScalars.map { $0.value == 0 ? "\u{FFFD}" : Character($0) })
    }
}

/// The times a stored record may have: milliseconds from 1970 to the end of 9999, what the
/// collector's `timestamptz` columns hold as this schema uses them.
package enum StoredTime {
    package static let latestMillis: Int64 = 253_402_300_799_999
}

/// How the SDKs count a string's length: in UTF-16 code units, Java's `String.length()` (the Java
/// and Android SDKs) and JavaScript's `length` (the JS and mini-program SDKs). A character outside
/// the Basic Multilingual Plane (most emoji) counts 2, every other 1, so a string of N such units
/// is at most 3N bytes of UTF-8.
package enum TextLength {
    /// The UTF-16 length of valid UTF-8 `bytes`: each byte that starts a character counts 1, and
    /// one that starts a 4-byte character 2.
    package static func utf16Count(utf8 bytes: UnsafeBufferPointer<UInt8>) -> Int {
        var count = 0
        for byte in bytes where byte & 0xC0 != 0x80 { count += byte >= 0xF0 ? 2 : 1 }
        return count
    }

    /// Why a string of `bytes` (valid UTF-8) is over `maxLength` characters, or nil. Most strings
    /// are decided by their byte count alone: no more bytes than `maxLength` is within it, more
    /// than three times as many is not.
    package static func problem(utf8 bytes: UnsafeBufferPointer<UInt8>, maxLength: Int) -> String? {
        if bytes.count <= maxLength { return nil }
        let length = bytes.count > 3 * maxLength ? nil : Optional(utf16Count(utf8: bytes))
        if let length, length <= maxLength { return nil }
        return "\(length.map { "\($0) characters" } ?? "over \(3 * maxLength) bytes") long; the limit is \(maxLength) characters"
    }
}

/// How long an id may be: the SDKs refuse or cut ids over 255 characters (Java
/// `SensorsAnalyticsUtil.assertValue`, the JS SDK's id check), identity-service links nothing
/// longer, and the gateway refuses a longer one, so a stored event never carries an id that has no
/// user. Counted as `TextLength` counts, so an id is at most 765 bytes.
package enum IDRule {
    package static let maxLength = 255

    /// True when `text` is within `maxLength` characters.
    package static func fits(_ text: String) -> Bool {
        var text = text
        return text.withUTF8 { TextLength.problem(utf8: $0, maxLength: maxLength) == nil }
    }
}

/// What a stored number may be. PostgreSQL stores `jsonb` numbers as `numeric`, which refuses more
/// than 16,383 digits after the point (`1e-16384`) and prints `1e-16383` as 16,385 characters; the
/// SDKs send doubles. So a number is stored when it is a double's size: its decimal exponent within
/// ±`maxExponent`, and its text at most `maxBytes`.
package enum JSONNumberRule {
    package static let maxBytes = 64
    package static let maxExponent = 308

    /// Why the JSON number `text` (already checked against JSON's grammar) cannot be stored, or nil.
    package static func problem(_ text: UnsafeBufferPointer<UInt8>) -> String? {
        guard text.count <= maxBytes else { return "a number of \(text.count) characters; the limit is \(maxBytes)" }
        var index = 0
        if index < text.count, text[index] == UInt8(ascii: "-") { index += 1 }
        // Digits before the point (leading zeros aside), digits after it, and the exponent.
        var integerDigits = 0
        var leadingZero = true
        while index < text.count, isDigit(text[index]) {
            if text[index] != UInt8(ascii: "0") || !leadingZero {
                leadingZero = false
                integerDigits += 1
            }
            index += 1
        }
        var fractionDigits = 0
        if index < text.count, text[index] == UInt8(ascii: ".") {
            index += 1
            while index < text.count, isDigit(text[index]) {
                fractionDigits += 1
                index += 1
            }
        }
        var exponent = 0
        if index < text.count, text[index] | 0x20 == UInt8(ascii: "e") {
            index += 1
            var negative = false
            if index < text.count, text[index] == UInt8(ascii: "-") || text[index] == UInt8(ascii: "+") {
                negative = text[index] == UInt8(ascii: "-")
                index += 1
            }
            // The text is at most 64 bytes, so this cannot overflow; clamp anyway.
            while index < text.count, isDigit(text[index]) {
                exponent = min(exponent * 10 + Int(text[index] - UInt8(ascii: "0")), 1_000_000)
                index += 1
            }
            if negative { exponent = -exponent }
        }
        // Where the most significant digit sits, and how many digits follow the point when stored
        // (what PostgreSQL prints): both bounded, so a stored number reads back in a few hundred
        // characters at most.
        let weight = integerDigits + exponent
        let scale = fractionDigits - exponent
        guard weight <= maxExponent + 1, scale <= maxExponent + 24 else {
            return "the number \(String(decoding: text, as: UTF8.self)) is outside what a double holds (about 1e±\(maxExponent))"
        }
        return nil
    }

    private static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
}
