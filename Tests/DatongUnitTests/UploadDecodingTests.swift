import CompressNIO
import DatongJSON
import DatongRuntime
import DatongTestSupport
import Foundation
import HTTPTypes
import NIOCore
import Testing

@testable import Gateway

@Suite("Upload decoding (docs/PROTOCOL.md section 1)")
struct UploadDecodingTests {
    let limits = UploadLimits()

    private func parameters(_ request: Fixtures.CapturedRequest) -> FormParameters {
        FormParameters(query: request.query, body: Array((request.body ?? "").utf8))
    }

    private func code(of error: any Error) -> String? { (error as? ServiceError)?.code.rawValue }

    @Test("Java String.hashCode matches known values")
    func javaHashCode() {
        #expect(UploadPayload.javaHashCode("") == 0)
        #expect(UploadPayload.javaHashCode("hello") == 99_162_322)
        #expect(UploadPayload.javaHashCode("The quick brown fox jumps over the lazy dog") == -609_428_141)
        // Beyond ASCII Java hashes UTF-16 units, a surrogate pair as two (values from jshell).
        #expect(UploadPayload.javaHashCode("中文") == 646_394)
        #expect(UploadPayload.javaHashCode("😀") == 1_772_899)
        #expect(UploadPayload.javaHashCode("abc中 d") == -1_405_251_697)
        #expect(UploadPayload.javaHashCode("Hello, 世界! 😀 ok") == -261_761_186)
    }

    @Test("every Python SDK request decodes to its records")
    func pythonRequests() throws {
        let requests = try Fixtures.python()
        #expect(requests.count == 8)
        let counts = try requests.map { try UploadPayload.records(from: parameters($0), limits: limits).count }
        #expect(counts == [1, 1, 1, 3, 1, 1, 1, 1])
        let first = try UploadPayload.records(from: parameters(requests[0]), limits: limits)[0]
        #expect(first["event"]?.stringValue == "ViewProduct")
        #expect(first["time"]?.int64Value == 1_795_273_119_736)
    }

    @Test("JS SDK beacons, ajax and batches decode and pass their crc")
    func javascriptRequests() throws {
        var decoded = 0
        for emission in try Fixtures.javascript() {
            let parameters: FormParameters
            switch (emission.kind, emission.payload) {
            case ("img.src", .text(let url)):
                parameters = FormParameters(query: URLComponents(string: url)?.percentEncodedQuery, body: [])
            case ("xhr", .request(let request)), ("sendBeacon", .request(let request)):
                let query = URLComponents(string: request["url"] ?? "")?.percentEncodedQuery
                parameters = FormParameters(query: query, body: Array((request["body"] ?? "").utf8))
            default:
                continue
            }
            let records = try UploadPayload.records(from: parameters, limits: limits)
            #expect(!records.isEmpty)
            #expect(records.allSatisfy { $0["type"] != nil })
            decoded += 1
        }
        #expect(decoded >= 10)
    }

    @Test("form decoding: + and %XX, a malformed escape kept, invalid UTF-8 repaired, a body parameter over the query's; only the names read are kept")
    func formParameters() {
        let parameters = FormParameters(
            query: "gzip=0&project=q&crc=1&other=1",
            body: Array("data_list=a%2Bb%2F%3D+c&&=lost&project=p%E4%B8%AD&ext=%FF%zz%4&token&gzip=9&unknown=x&%74oken=encoded".utf8))
        #expect(parameters["data_list"] == "a+b/= c")
        #expect(parameters["project"] == "p中")
        #expect(parameters["ext"] == "\u{FFFD}%zz%4")
        // A name written with an escape is the name it spells.
        #expect(parameters["token"] == "encoded")
        #expect(parameters["gzip"] == "9")
        #expect(parameters["crc"] == "1")
        #expect(parameters[""] == nil)
        #expect(parameters["other"] == nil && parameters["unknown"] == nil)
        #expect(parameters.values.count == 6)
        #expect(FormParameters(query: nil, body: Array("token".utf8))["token"] == "")
    }

    @Test("the base64 decoder agrees with Foundation, with or without padding, and refuses what is not base64")
    func base64() {
        for length in 0..<70 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255) }
            let encoded = Data(bytes).base64EncodedString()
            #expect(UploadPayload.decodeBase64(encoded) == bytes)
            #expect(UploadPayload.decodeBase64(encoded.replacingOccurrences(of: "=", with: "")) == bytes)
            #expect(UploadPayload.decodeBase64(encoded.replacingOccurrences(of: "+", with: " ")) == bytes)
            // Android's Base64.DEFAULT breaks lines, as MIME does.
            #expect(UploadPayload.decodeBase64(Data(bytes).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])) == bytes)
        }
        for invalid in ["A", "AB*D", "AB=C", "ABC===", "éABC"] { #expect(UploadPayload.decodeBase64(invalid) == nil, "\(invalid)") }
    }

    @Test("a crc that does not match the data is refused")
    func crcMismatch() throws {
        let data = Data(#"{"type":"track"}"#.utf8).base64EncodedString()
        let good = UploadPayload.javaHashCode(data)
        let ok = FormParameters(query: "crc=\(good)", body: Array("data=\(data)".utf8))
        #expect(try UploadPayload.records(from: ok, limits: limits).count == 1)
        let bad = FormParameters(query: "ext=crc%3D\(good &+ 1)", body: Array("data=\(data)".utf8))
        #expect { try UploadPayload.records(from: bad, limits: limits) } throws: { code(of: $0) == "crc_mismatch" }
    }

    @Test("base64 is read leniently: line breaks, spaces for '+', missing padding")
    func lenientBase64() throws {
        let json = #"{"type":"track","properties":{"k":"?>?>?>"}}"#
        let strict = Data(json.utf8).base64EncodedString()
        #expect(strict.contains("+"))
        var mangled = strict.replacingOccurrences(of: "+", with: " ")
        mangled.insert(contentsOf: "\r\n", at: mangled.index(mangled.startIndex, offsetBy: 8))
        while mangled.hasSuffix("=") { mangled.removeLast() }
        let encoded = mangled.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let records = try UploadPayload.records(from: FormParameters(query: nil, body: Array("data=\(encoded)".utf8)), limits: limits)
        #expect(records[0]["properties"]?["k"]?.stringValue == "?>?>?>")
    }

    @Test(
        "refused formats name the problem",
        arguments: [
            // Without the project's keys an encrypted payload cannot be read: 503, the SDK keeps it.
            ("data=abc", "gzip=9", "encryption_unavailable"),
            ("data=abc", "gzip=13", "encryption_unavailable"),
            ("data=abc", "gzip=2", "invalid_gzip_flag"),
            ("", "project=p", "missing_data"),
            ("data=%%%%", "", "invalid_base64"),
            ("data=bm90IGpzb24", "", "invalid_json"),
            ("data=bm90IGd6aXA", "gzip=1", "invalid_gzip"),
        ])
    func refusedFormats(body: String, query: String, expected: String) {
        let parameters = FormParameters(query: query, body: Array(body.utf8))
        #expect { try UploadPayload.records(from: parameters, limits: limits) } throws: { code(of: $0) == expected }
    }

    @Test("a gzip bomb is stopped at the decompressed-size limit")
    func gzipBomb() throws {
        var zeros = ByteBuffer(repeating: 0x20, count: 32 << 20)
        let compressed = try zeros.compress(with: .gzip())
        #expect(compressed.readableBytes < 100_000)
        let data = Data(compressed.readableBytesView).base64EncodedString()
            .addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let parameters = FormParameters(query: "gzip=1", body: Array("data=\(data)".utf8))
        let small = UploadLimits(maxDecompressedBytes: 1 << 20)
        #expect { try UploadPayload.records(from: parameters, limits: small) } throws: {
            ($0 as? ServiceError)?.status == .contentTooLarge && code(of: $0) == "payload_too_large"
        }
    }

    @Test("more records than the limit is 413")
    func tooManyRecords() {
        let list = "[" + Array(repeating: #"{"type":"track"}"#, count: 11).joined(separator: ",") + "]"
        let data = Data(list.utf8).base64EncodedString().addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let parameters = FormParameters(query: nil, body: Array("data_list=\(data)".utf8))
        #expect { try UploadPayload.records(from: parameters, limits: UploadLimits(maxRecordsPerRequest: 10)) } throws: {
            code(of: $0) == "too_many_records"
        }
    }

    @Test("query and body parameters merge; the body wins")
    func parameterMerge() {
        let parameters = FormParameters(query: "project=a&gzip=0", body: Array("project=b&ext=%41+%42".utf8))
        #expect(parameters["project"] == "b")
        #expect(parameters["gzip"] == "0")
        #expect(parameters["ext"] == "A B")
    }
}
