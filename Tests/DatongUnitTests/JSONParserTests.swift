import DatongContracts
import DatongJSON
import DatongTestSupport
import Foundation
import Testing

@testable import Gateway

@Suite("The gateway's JSON parser")
struct JSONParserTests {
    private func parse(_ text: String, maxDepth: Int = 16) throws -> JSONValue {
        try JSONParser.parseValue(Array(text.utf8), maxDepth: maxDepth)
    }

    private func failure(_ bytes: [UInt8], maxDepth: Int = 16) -> JSONParser.Failure.Kind? {
        do {
            _ = try JSONParser.parse(bytes, maxDepth: maxDepth)
            return nil
        } catch {
            return error.kind
        }
    }

    @Test("values keep their type; numbers stay exact beyond 2^53 and beyond 64 bits")
    func values() throws {
        let value = try parse(#" {"a": [true, false, null, -0, 9007199254740993, 9.9, 1e3, "x"], "b": {}} "#)
        #expect(
            value
                == .object([
                    "a": .array([.bool(true), .bool(false), .null, .int(0), .int(9_007_199_254_740_993), .number("9.9"), .number("1e3"), .string("x")]),
                    "b": .object([:]),
                ]))
        #expect(try parse("-9223372036854775808") == .int(Int64.min))
        #expect(try parse("9223372036854775808") == .number("9223372036854775808"))
        // Written back as sent: a Double would give 12345678901234567000 and 1.8446744073709552e19.
        let big = try parse("[12345678901234567890,18446744073709551615,123456789012345678901234567890,-0.10]")
        #expect(big.canonicalText == "[12345678901234567890,18446744073709551615,123456789012345678901234567890,-0.10]")
        #expect(try parse("1e400").isFinite == false)
        #expect(try parse("[1e308]").isFinite)
    }

    @Test("a known text is read as the shared literal, escaped or not; any other text as itself")
    func sharedTexts() throws {
        let known = IdentityRecord.commonKeys
        let document = try JSONParser.parse(Array(#"["$identity_login_id", "$identity_login\u005fid", "$identity_login_ix", 7]"#.utf8), maxDepth: 2)
        let read = document.root.elements.map { $0.stringValue(sharing: known) }
        #expect(read == ["$identity_login_id", "$identity_login_id", "$identity_login_ix", nil])
        func storage(_ text: String?) -> UnsafePointer<UInt8>? { text?.utf8.withContiguousStorageIfAvailable { $0.baseAddress } ?? nil }
        // The same bytes as the literal's, not a copy of them.
        #expect(storage(read[0]) != nil)
        #expect(storage(read[0]) == storage(known[1]))
        #expect(storage(read[1]) == storage(known[1]))
        #expect(storage(read[2]) != storage(known[1]))
    }

    @Test("escapes, surrogate pairs and raw UTF-8 decode to the same text")
    func strings() throws {
        #expect(try parse(#""a\"b\\c\/d\b\f\n\r\t""#) == .string("a\"b\\c/d\u{8}\u{C}\n\r\t"))
        #expect(try parse(#""\u5f15\u8350 \ud83d\ude00 引荐""#) == .string("引荐 😀 引荐"))
        // A lone surrogate cannot be stored by PostgreSQL; browsers can produce one.
        #expect(try parse(#""x\ud800y""#) == .string("x\u{FFFD}y"))
    }

    /// The parser skips plain string bytes eight at a time and unescapes into a buffer sized by
    /// the escaped text, so a special byte or escape must be found wherever it falls in a word:
    /// each is put at every position of strings 0–19 bytes long, after ASCII or after a byte
    /// beyond it, and the answer must be Foundation's.
    @Test("special bytes and escapes are read at every position of a string, as Foundation reads them")
    func everyPosition() throws {
        let pieces: [[UInt8]] = [
            [0x22], Array(#"\""#.utf8), Array(#"\\"#.utf8), Array(#"\n"#.utf8), Array(#"\u00e9"#.utf8), Array(#"\ud83d\ude00"#.utf8),
            [0x01], [0x1F], [0x20], [0x7F], [0xC3, 0xA9], [0xE5, 0xBC, 0x95], [0xFF], [0xC3, 0x61], [0x5C, 0x78],
        ]
        for lead in [[UInt8](), [0xC3, 0xA9]] {
            for length in 0..<20 {
                for position in 0...length {
                    for piece in pieces {
                        var text = lead + [UInt8](repeating: UInt8(ascii: "a"), count: length)
                        text.insert(contentsOf: piece, at: lead.count + position)
                        let document = [0x22] + text + [0x22]
                        let expected = try? JSONSerialization.jsonObject(with: Data(document), options: .fragmentsAllowed) as? String
                        let ours = try? JSONParser.parse(document, maxDepth: 4).root.stringValue
                        #expect(ours == expected, "\(document)")
                    }
                }
            }
        }
    }

    @Test(
        "malformed documents are refused",
        arguments: [
            "", "{", "[1,]", "{\"a\" 1}", "{\"a\":1,}", "01", "1.", "-", "tru", "\"a", "[1] x", "{'a':1}", "\"a\u{1}b\"", "1e", "1e+", "\"\\x\"",
        ])
    func malformed(text: String) {
        #expect(failure(Array(text.utf8)) == .syntax)
    }

    @Test("a number beyond a double is valid JSON: the record holding it is refused, not the document")
    func hugeNumbers() throws {
        let document = try JSONParser.parse(Array(#"[1e999,2]"#.utf8), maxDepth: 4)
        #expect(document.root.elements.map(\.rawText) == ["1e999", "2"])
    }

    @Test(
        "stored numbers are a double's size: PostgreSQL's numeric would hold or print far more",
        arguments: [
            ("0", true), ("-12.5", true), ("1.7976931348623157e308", true), ("5e-324", true), ("1.5e-300", true), ("123456789012345678901234567890", true),
            ("1e309", false), ("1e-16383", false), ("1e-16384", false), ("0e-400", false), ("1e400000", false),
            ("0." + String(repeating: "1", count: 70), false),
        ])
    func numberRule(text: String, storable: Bool) {
        let problem = Array(text.utf8).withUnsafeBufferPointer { JSONNumberRule.problem($0) }
        #expect((problem == nil) == storable, "\(text): \(problem ?? "storable")")
    }

    @Test("invalid UTF-8 is refused, not replaced")
    func invalidUTF8() {
        #expect(failure([0x22, 0xC3, 0x28, 0x22]) == .invalidUTF8)
        #expect(failure([0x22, 0x5C, 0x6E, 0xFF, 0x22]) == .invalidUTF8)
    }

    @Test("nesting deeper than the limit is refused before it is built")
    func depth() throws {
        let deep = String(repeating: "[", count: 5) + String(repeating: "]", count: 5)
        #expect(try parse(deep, maxDepth: 5) != .null)
        #expect(failure(Array(deep.utf8), maxDepth: 4) == .tooDeep)
        let bomb = String(repeating: "[", count: 100_000)
        #expect(failure(Array(bomb.utf8), maxDepth: 16) == .tooDeep)
    }

    @Test("every record the JS SDK sent reads the same as with JSONSerialization")
    func agreesWithFoundation() throws {
        var compared = 0
        for emission in try Fixtures.javascript() {
            guard case .text(let message) = emission.payload, emission.kind == "android.sensorsdata_track" else { continue }
            let ours = try parse(message)
            let foundation = try JSONSerialization.jsonObject(with: Data(message.utf8))
            let sorted = try JSONSerialization.data(withJSONObject: foundation, options: [.sortedKeys])
            let reparsed = try JSONParser.parseValue(Array(sorted), maxDepth: 16)
            #expect(ours == reparsed)
            compared += 1
        }
        #expect(compared == 3)
    }
}
