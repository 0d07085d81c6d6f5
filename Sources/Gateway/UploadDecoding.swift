import DatongContracts
import DatongJSON
import DatongRuntime
import Foundation
import HTTPTypes
import NIOCore

/// The parameters of an upload: the query string merged with the body, which is parsed as
/// `application/x-www-form-urlencoded` whatever the Content-Type says (beacons send text/plain, iOS
/// sends none). A body parameter wins over a query parameter of the same name.
struct FormParameters: Sendable {
    private(set) var values: [String: String] = [:]

    init(query: String?, body: [UInt8]) {
        if let query { Self.parse(Array(query.utf8), into: &values) }
        Self.parse(body, into: &values)
    }

    subscript(name: String) -> String? { values[name] }

    private static func parse(_ bytes: [UInt8], into values: inout [String: String]) {
        for pair in bytes.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            let name = formDecode(parts[0])
            guard !name.isEmpty else { continue }
            values[name] = parts.count > 1 ? formDecode(parts[1]) : ""
        }
    }

    /// Form decoding: `+` is a space, `%XX` a byte; a malformed escape is kept as it is.
    static func formDecode(_ bytes: ArraySlice<UInt8>) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "+") {
                out.append(UInt8(ascii: " "))
            } else if byte == UInt8(ascii: "%"), index + 2 < bytes.endIndex,
                let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
            {
                out.append(high << 4 | low)
                index += 3
                continue
            } else {
                out.append(byte)
            }
            index += 1
        }
        return String(decoding: out, as: UTF8.self)
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
    /// pkvs named by envelopes for which the project has no key (a reason to read the keys again).
    var unknownPKVs: Set<Int> = []
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
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count / 4 * 3 + 3)
        var accumulator: UInt32 = 0
        var sextets = 0
        var padding = 0
        let table = base64Table
        for byte in text.utf8 {
            let value = table[Int(byte)]
            if value < 64 {
                guard padding == 0 else { return nil }
                accumulator = accumulator << 6 | UInt32(value)
                sextets += 1
                if sextets & 3 == 0 {
                    out.append(UInt8(truncatingIfNeeded: accumulator >> 16))
                    out.append(UInt8(truncatingIfNeeded: accumulator >> 8))
                    out.append(UInt8(truncatingIfNeeded: accumulator))
                    accumulator = 0
                }
            } else if value == skip {
                continue
            } else if value == pad {
                padding += 1
                guard padding <= 2 else { return nil }
            } else {
                return nil
            }
        }
        switch sextets & 3 {
        case 0: break
        case 2: out.append(UInt8(truncatingIfNeeded: accumulator >> 4))
        case 3:
            out.append(UInt8(truncatingIfNeeded: accumulator >> 10))
            out.append(UInt8(truncatingIfNeeded: accumulator >> 2))
        default: return nil
        }
        return out
    }

    static func inflate(_ bytes: [UInt8], limit: Int) throws -> [UInt8] {
        try inflateGzip(
            ByteBuffer(bytes: bytes), limit: limit, tooLarge: tooLarge(limit),
            invalid: ServiceError.badRequest(.invalidGzip, "gzip=1 but the data is not valid gzip"))
    }

    static func tooLarge(_ limit: Int) -> ServiceError {
        ServiceError(.contentTooLarge, .payloadTooLarge, "the decoded payload is larger than \(limit) bytes")
    }
}

/// Inflates gzip within `limit` (`GzipInflater`); throws `tooLarge` past the limit, or `invalid`
/// for data that is not complete, intact gzip.
func inflateGzip(_ compressed: ByteBuffer, limit: Int, tooLarge: ServiceError, invalid: ServiceError) throws -> [UInt8] {
    do {
        return try compressed.withUnsafeReadableBytes { bytes throws(GzipInflater.Failure) in try GzipInflater.inflate(bytes, limit: limit) }
    } catch .tooLarge {
        throw tooLarge
    } catch {
        throw invalid
    }
}
