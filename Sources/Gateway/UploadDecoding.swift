import DatongContracts
import DatongJSON
import DatongRuntime
import Foundation
import HTTPTypes
import NIOCore

/// The parameters of an upload: the query string merged with the body, which is parsed as
/// `application/x-www-form-urlencoded` whatever the Content-Type says (beacons send text/plain, iOS
/// sends none). A body parameter wins over a query parameter of the same name.
///
/// Only the parameters the gateway reads (`names`) are decoded and kept; any other is skipped
/// where it lies, with no allocation: a form of a million `a=1&` fields (5 MiB from 5 KB of gzip)
/// costs one scan, where a dictionary entry each would cost 1.6 s of CPU.
struct FormParameters: Sendable {
    private(set) var values: [String: String] = [:]

    /// What any upload or bridge URL carries (docs/PROTOCOL.md sections 1 and 3).
    static let names: [StaticString] = ["data_list", "data", "gzip", "crc", "project", "token", "ext", "event"]

    init(query: String?, body: [UInt8]) {
        if let query { Self.parse(Array(query.utf8), into: &values) }
        Self.parse(body, into: &values)
    }

    subscript(name: String) -> String? { values[name] }

    /// Scans the bytes once for `&` and `=` (the generic `split` was a tenth of an encrypted
    /// upload's time).
    private static func parse(_ bytes: [UInt8], into values: inout [String: String]) {
        bytes.withUnsafeBufferPointer { bytes in
            var start = 0
            while start < bytes.count {
                let end = bytes[start...].firstIndex(of: UInt8(ascii: "&")) ?? bytes.count
                defer { start = end + 1 }
                guard end > start else { continue }
                let equals = bytes[start..<end].firstIndex(of: UInt8(ascii: "=")) ?? end
                let rawName = UnsafeBufferPointer(rebasing: bytes[start..<equals])
                // A name the gateway reads is plain ASCII; an encoded one is decoded first.
                let name: String
                if let known = names.first(where: { rawName.elementsEqual(UnsafeBufferPointer(start: $0.utf8Start, count: $0.utf8CodeUnitCount)) }) {
                    name = known.description
                } else if rawName.contains(UInt8(ascii: "%")) || rawName.contains(UInt8(ascii: "+")), rawName.count <= 64 {
                    let decoded = formDecode(rawName)
                    guard names.contains(where: { $0.description == decoded }) else { continue }
                    name = decoded
                } else {
                    continue
                }
                values[name] = equals < end ? formDecode(UnsafeBufferPointer(rebasing: bytes[(equals + 1)..<end])) : ""
            }
        }
    }

    /// Form decoding: `+` is a space, `%XX` a byte; a malformed escape is kept as it is.
    static func formDecode(_ bytes: ArraySlice<UInt8>) -> String {
        bytes.withUnsafeBufferPointer { formDecode($0) }
    }

    /// The same over bytes, decoded straight into the string's storage.
    static func formDecode(_ bytes: UnsafeBufferPointer<UInt8>) -> String {
        String(unsafeUninitializedCapacity: bytes.count) { out in
            var written = 0
            var index = 0
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "+") {
                    out[written] = UInt8(ascii: " ")
                } else if byte == UInt8(ascii: "%"), index + 2 < bytes.count,
                    let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
                {
                    out[written] = high << 4 | low
                    written += 1
                    index += 3
                    continue
                } else {
                    out[written] = byte
                }
                written += 1
                index += 1
            }
            return written
        }
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}

/// What an upload's payload held: its records, and the encrypted envelopes that could not be
/// opened (kept as rejected with the envelope as received, so they can be replayed).
struct DecodedPayload {
    var records: [JSONRef] = []
    var undecryptable: [RejectedRecord] = []
}

/// Turns an upload's `data` / `data_list` parameter into JSON records (docs/PROTOCOL.md section 1):
/// checks the crc, decodes lenient base64, inflates gzip within the decompressed-size limit;
/// `gzip=9` / `gzip=13` payloads are opened with the project's keys (`EncryptedPayload`).
package enum UploadPayload {
    /// Whether the upload is encrypted (`gzip=9` record encryption, `gzip=13` transport encryption).
    static func isEncrypted(_ parameters: FormParameters) -> Bool { ["9", "13"].contains(parameters["gzip"] ?? "") }

    static func records(from parameters: FormParameters, limits: UploadLimits) throws -> [JSONRef] {
        try decode(parameters, limits: limits, project: "", keys: nil).records
    }

    static func decode(_ parameters: FormParameters, limits: UploadLimits, project: String, keys: ProjectKeys?) throws -> DecodedPayload {
        let compressed: Bool
        switch parameters["gzip"] ?? "0" {
        case "", "0": compressed = false
        case "1": compressed = true
        case "9", "13":
            guard let keys else {
                throw ServiceError.unavailable(.encryptionUnavailable, "this gateway cannot open encrypted payloads now; the SDK keeps the batch and retries")
            }
            return try EncryptedPayload.decode(parameters, limits: limits, project: project, keys: keys)
        case let other:
            throw ServiceError.badRequest(.invalidGzipFlag, "gzip must be 0, 1, 9 or 13, got '\(UntrustedText.quoted(other, limit: 16))'")
        }
        let isList = parameters["data_list"] != nil
        guard let encoded = parameters["data_list"] ?? parameters["data"], !encoded.isEmpty else {
            throw ServiceError.badRequest(.missingData, "the request has no data or data_list parameter")
        }
        // Form decoding turned a '+' sent unescaped into a space; base64 has no spaces, so both the
        // crc and the decoder read a space as '+'.
        let base64 = encoded
        try checkCRC(parameters, text: base64, spaceAs: 0x2B)
        guard var bytes = decodeBase64(base64) else {
            throw ServiceError.badRequest(.invalidBase64, "the \(isList ? "data_list" : "data") parameter is not valid base64")
        }
        if compressed {
            bytes = try inflate(bytes, limit: limits.maxDecompressedBytes)
        } else if bytes.count > limits.maxDecompressedBytes {
            throw tooLarge(limits.maxDecompressedBytes)
        }
        let value = try parseJSON(bytes, limits: limits, what: "the decoded payload")
        let records = value.kind == .array ? Array(value.elements) : [value]
        try checkCount(records.count, limits: limits)
        guard !records.isEmpty else {
            throw ServiceError.badRequest(.noRecords, "data_list is an empty array")
        }
        return DecodedPayload(records: records)
    }

    static func checkCount(_ count: Int, limits: UploadLimits) throws {
        guard count <= limits.maxRecordsPerRequest else {
            throw ServiceError(.contentTooLarge, .tooManyRecords, "\(count) records in one request; the limit is \(limits.maxRecordsPerRequest)")
        }
    }

    /// The request's crc, when it sends one, must be Java's hashCode of `text`.
    static func checkCRC(_ parameters: FormParameters, text: String, spaceAs space: UInt16) throws {
        if let expected = try crcParameter(parameters) {
            let actual = javaHashCode(text, spaceAs: space)
            guard actual == expected else {
                throw ServiceError.badRequest(.crcMismatch, "the crc \(expected) does not match the data (\(actual)): the request was corrupted")
            }
        }
    }

    /// Parses JSON the gateway received: malformed, invalid UTF-8 or too deep is a 400 naming the problem.
    package static func parseJSON(_ bytes: [UInt8], limits: UploadLimits, what: String) throws -> JSONRef {
        do {
            return try JSONParser.parse(bytes, maxDepth: limits.maxJSONDepth).root
        } catch let failure {
            switch failure.kind {
            case .tooDeep:
                throw ServiceError.badRequest(.jsonTooDeep, "\(what) is nested deeper than \(limits.maxJSONDepth) levels")
            case .invalidUTF8:
                throw ServiceError.badRequest(.invalidUtf8, "\(what) is \(failure.message)")
            case .syntax:
                throw ServiceError.badRequest(.invalidJson, "\(what) is \(failure.message)")
            }
        }
    }

    /// `crc=N` (iOS, Android) or `ext=crc=N` (JS); nil when the request sends none (an empty one
    /// counts as none). A crc that is not a 32-bit number is refused: the request was corrupted.
    static func crcParameter(_ parameters: FormParameters) throws -> Int32? {
        var text: Substring?
        if let crc = parameters["crc"], !crc.isEmpty {
            text = Substring(crc)
        } else if let ext = parameters["ext"] {
            text = ext.split(whereSeparator: { $0 == "&" || $0 == "," }).first { $0.hasPrefix("crc=") }?.dropFirst(4)
        }
        guard let text, !text.isEmpty else { return nil }
        guard let value = Int32(text) else {
            throw ServiceError.badRequest(.invalidCrc, "the crc '\(UntrustedText.quoted(text, limit: 32))' is not a 32-bit number: the request was corrupted")
        }
        return value
    }

    /// Java's `String.hashCode()`: 31·h + c over UTF-16 code units, wrapping at 32 bits; with
    /// `spaceAs`, a space counts as that unit.
    static func javaHashCode(_ text: String, spaceAs space: UInt16 = 0x20) -> Int32 {
        var text = text
        // The data is base64, so ASCII, whose UTF-16 units are its bytes: hashed from the bytes,
        // not through the UTF-16 view, which decodes each character again.
        let ascii: Int32? = text.withUTF8 { bytes in
            func unit(_ byte: UInt8) -> Int32 { Int32(byte == 0x20 ? space : UInt16(byte)) }
            var hash: Int32 = 0
            var index = 0
            // Four bytes a step (h·31⁴ + a·31³ + b·31² + c·31 + d), so the multiplications do not
            // wait on each other; the same sum, wrapping alike.
            while index + 4 <= bytes.count {
                let a = bytes[index]
                let b = bytes[index + 1]
                let c = bytes[index + 2]
                let d = bytes[index + 3]
                guard (a | b | c | d) < 0x80 else { return nil }
                hash = hash &* 923_521 &+ unit(a) &* 29_791 &+ unit(b) &* 961 &+ unit(c) &* 31 &+ unit(d)
                index += 4
            }
            while index < bytes.count {
                guard bytes[index] < 0x80 else { return nil }
                hash = hash &* 31 &+ unit(bytes[index])
                index += 1
            }
            return hash
        }
        if let ascii { return ascii }
        var hash: Int32 = 0
        for unit in text.utf16 { hash = hash &* 31 &+ Int32(unit == 0x20 ? space : unit) }
        return hash
    }

    /// What each byte means to the lenient base64 decoder: a 6-bit value, or one of the markers.
    private static let base64Table: [UInt8] = {
        var table = [UInt8](repeating: invalid, count: 256)
        for (index, byte) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8.enumerated() {
            table[Int(byte)] = UInt8(index)
        }
        table[Int(UInt8(ascii: " "))] = 62
        table[Int(UInt8(ascii: "\r"))] = skip
        table[Int(UInt8(ascii: "\n"))] = skip
        table[Int(UInt8(ascii: "="))] = pad
        return table
    }()
    private static let invalid: UInt8 = 0xFF
    private static let skip: UInt8 = 0xFE
    private static let pad: UInt8 = 0xFD

    /// Standard base64, leniently and in one pass over the bytes: a space is a '+' that form decoding
    /// turned into a space, line breaks are skipped, padding may be missing. nil for anything else.
    static func decodeBase64(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { decodeBase64(utf8: $0) }
    }

    /// The same over bytes, written into the result's storage directly rather than appended byte
    /// by byte (an encrypted upload decodes one payload per record).
    static func decodeBase64(utf8 input: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        var valid = true
        // Four sextets make three bytes, and a tail of two or three makes one or two.
        let out = [UInt8](unsafeUninitializedCapacity: input.count / 4 * 3 + 2) { buffer, count in
            var written = 0
            var accumulator: UInt32 = 0
            var sextets = 0
            var padding = 0
            base64Table.withUnsafeBufferPointer { table in
                for byte in input {
                    let value = table[Int(byte)]
                    if value < 64 {
                        guard padding == 0 else {
                            valid = false
                            return
                        }
                        accumulator = accumulator << 6 | UInt32(value)
                        sextets += 1
                        if sextets & 3 == 0 {
                            buffer[written] = UInt8(truncatingIfNeeded: accumulator >> 16)
                            buffer[written + 1] = UInt8(truncatingIfNeeded: accumulator >> 8)
                            buffer[written + 2] = UInt8(truncatingIfNeeded: accumulator)
                            written += 3
                            accumulator = 0
                        }
                    } else if value == skip {
                        continue
                    } else if value == pad, padding < 2 {
                        padding += 1
                    } else {
                        valid = false
                        return
                    }
                }
            }
            switch sextets & 3 {
            case 0: break
            case 2:
                buffer[written] = UInt8(truncatingIfNeeded: accumulator >> 4)
                written += 1
            case 3:
                buffer[written] = UInt8(truncatingIfNeeded: accumulator >> 10)
                buffer[written + 1] = UInt8(truncatingIfNeeded: accumulator >> 2)
                written += 2
            default: valid = false
            }
            count = valid ? written : 0
        }
        return valid ? out : nil
    }

    static func inflate(_ bytes: [UInt8], limit: Int) throws -> [UInt8] {
        try inflateGzip(
            ByteBuffer(bytes: bytes), limit: limit, tooLarge: tooLarge,
            invalid: ServiceError.badRequest(.invalidGzip, "gzip=1 but the data is not valid gzip"))
    }

    static func tooLarge(_ limit: Int) -> ServiceError {
        ServiceError(.contentTooLarge, .payloadTooLarge, "the decoded payload is larger than \(limit) bytes")
    }
}

/// Inflates gzip within `limit` and the ratio bound (`GzipInflater.limit`); throws `tooLarge` of the
/// limit that applied, or `invalid` for data that is not complete, intact gzip.
func inflateGzip(
    _ compressed: ByteBuffer, limit ceiling: Int, tooLarge: (Int) -> ServiceError, invalid: @autoclosure () -> ServiceError
) throws -> [UInt8] {
    let limit = GzipInflater.limit(compressedBytes: compressed.readableBytes, ceiling: ceiling)
    do {
        return try compressed.withUnsafeReadableBytes { bytes throws(GzipInflater.Failure) in try GzipInflater.inflate(bytes, limit: limit) }
    } catch .tooLarge {
        throw tooLarge(limit)
    } catch {
        throw invalid()
    }
}
