import DatongContracts
import DatongCrypto
import DatongJSON
import DatongRuntime
import Foundation

/// `gzip=9` (each record encrypted) and `gzip=13` (the whole batch encrypted) uploads of the Sensors
/// SDKs (docs/PROTOCOL-ENCRYPTION.md): `data_list` is the JSON text of a list of envelopes
/// `{"ekey", "pkv", "payloads": […] | "…", "flush_time"}`, not base64; the crc is over that text.
/// Each envelope's AES key is unwrapped with the project's private key of its pkv, each payload
/// decrypted and inflated within the limits, and what comes out is records like any other upload's.
/// An envelope that cannot be opened never yields a record and is never lost: it is kept, as
/// received, among the rejected records with the reason (`encrypted: …`).
enum EncryptedPayload {
    /// Reads `data_list` and opens every envelope with `keys`.
    static func decode(_ parameters: FormParameters, limits: UploadLimits, project: String, keys: ProjectKeys) throws -> DecodedPayload {
        try Envelopes(parameters, limits: limits).open(with: keys, project: project, limits: limits)
    }

    /// An upload's envelopes, read once: the handler learns from `pkvs` whether the keys it holds
    /// can open them (or a key made a moment ago must be read first) before any is opened.
    struct Envelopes {
        let list: [JSONRef]

        /// Checks the crc and parses `data_list`; a request that can never succeed throws.
        init(_ parameters: FormParameters, limits: UploadLimits) throws {
            guard let text = parameters["data_list"] ?? parameters["data"], !text.isEmpty else {
                throw ServiceError.badRequest(.missingData, "the request has no data_list parameter")
            }
            try UploadPayload.checkCRC(parameters, text: text, spaceAs: 0x20)
            let bytes = Array(text.utf8)
            guard bytes.count <= limits.maxDecompressedBytes else { throw UploadPayload.tooLarge(limits.maxDecompressedBytes) }
            let root = try UploadPayload.parseJSON(bytes, limits: limits, what: "the envelope list")
            list = root.kind == .array ? Array(root.elements) : [root]
            try UploadPayload.checkCount(list.count, limits: limits)
        }

        /// The key versions the envelopes name.
        var pkvs: Set<Int> { Set(list.compactMap(EncryptedPayload.pkv)) }

        /// Opens each envelope with `keys`: its records, in order, or the envelope kept with the reason.
        func open(with keys: ProjectKeys, project: String, limits: UploadLimits) throws -> DecodedPayload {
            var decoded = DecodedPayload()
            var budget = limits.maxDecompressedBytes
            for envelope in list {
                switch EncryptedPayload.open(envelope, limits: limits, keys: keys, budget: &budget) {
                case .success(let records):
                    decoded.records += records
                case .failure(let problem):
                    decoded.undecryptable.append(
                        RejectedRecord(project: project, reason: "encrypted: \(problem.reason(project: project))", raw: envelope.rawText))
                }
                if budget < 0 { throw UploadPayload.tooLarge(limits.maxDecompressedBytes) }
            }
            try UploadPayload.checkCount(decoded.records.count, limits: limits)
            return decoded
        }
    }

    /// An envelope's key version: a JSON number (Android, iOS) or a numeric string, above 0.
    static func pkv(_ envelope: JSONRef) -> Int? {
        guard envelope.isObject,
            let pkv = envelope["pkv"].flatMap({ $0.int64Value ?? $0.stringValue.flatMap { Int64($0) } }).flatMap({ Int(exactly: $0) }), pkv > 0
        else { return nil }
        return pkv
    }

    enum Problem: Error {
        case malformed(String)
        case unknownKey(Int)
        case unusableKey(Int, String)
        case undecryptable(Int, String)

        func reason(project: String) -> String {
            switch self {
            case .malformed(let why): return "the envelope is malformed: \(why)"
            case .unknownKey(let pkv):
                return
                    "project \(project) has no active key pkv \(pkv); the envelope is kept as received, to be replayed once the key is back (scripts/replay-encrypted)"
            case .unusableKey(let pkv, let why): return "key pkv \(pkv) cannot be opened (\(why)); the envelope is kept for replay (scripts/replay-encrypted)"
            case .undecryptable(let pkv, let why): return "the envelope does not decrypt with key pkv \(pkv): \(why)"
            }
        }
    }

    /// The bytes of a base64 JSON string, decoded from the document's bytes (unescaped first only
    /// when it holds an escape, as JSON encoders write `/` as `\/`); nil when it is not a string
    /// or not base64.
    private static func base64(_ value: JSONRef) -> [UInt8]? {
        guard value.kind == .string else { return nil }
        return value.textBytes.withUnsafeBufferPointer { UploadPayload.decodeBase64(utf8: $0) }
    }

    private static func open(
        _ envelope: JSONRef, limits: UploadLimits, keys: ProjectKeys, budget: inout Int
    ) -> Result<[JSONRef], Problem> {
        guard envelope.isObject else { return .failure(.malformed("not a JSON object")) }
        guard let pkv = pkv(envelope) else { return .failure(.malformed("no pkv")) }
        guard let ekey = envelope["ekey"].flatMap(Self.base64), !ekey.isEmpty else {
            return .failure(.malformed("no ekey in base64"))
        }
        // `payloads`: a list (gzip=9), a string (gzip=13); iOS rows before a flush say `payload`.
        var payloads: [JSONRef] = []
        if let list = envelope["payloads"] ?? envelope["payload"] {
            switch list.kind {
            case .string: payloads = [list]
            case .array:
                for item in list.elements {
                    guard item.kind == .string else { return .failure(.malformed("a payload is not a string")) }
                    payloads.append(item)
                }
            default: return .failure(.malformed("payloads is neither a list nor a string"))
            }
        }
        guard !payloads.isEmpty, payloads.count <= limits.maxRecordsPerRequest else {
            return .failure(.malformed("no payloads, or more than a request may hold"))
        }
        guard let key = keys.privateKeys[pkv] else {
            if let why = keys.unusable[pkv] { return .failure(.unusableKey(pkv, why)) }
            return .failure(.unknownKey(pkv))
        }
        let aesKey: [UInt8]
        do {
            aesKey = try key.unwrap(ekey)
        } catch {
            return .failure(.undecryptable(pkv, error.description))
        }
        var records: [JSONRef] = []
        for payload in payloads {
            guard let sealed = Self.base64(payload) else { return .failure(.malformed("a payload is not base64")) }
            let json: [UInt8]
            do {
                let gzipped = try EnvelopePayload.decrypt(sealed, key: aesKey)
                json = try gzipped.withUnsafeBytes { raw throws(GzipInflater.Failure) in try GzipInflater.inflate(raw, limit: max(0, budget)) }
            } catch let failure as CryptoFailure {
                return .failure(.undecryptable(pkv, failure.description))
            } catch GzipInflater.Failure.tooLarge {
                budget = -1
                return .failure(.undecryptable(pkv, "the payload inflates past the limit"))
            } catch {
                return .failure(.undecryptable(pkv, "the decrypted payload is not gzip"))
            }
            budget -= json.count
            guard let value = try? JSONParser.parse(json, maxDepth: limits.maxJSONDepth).root else {
                return .failure(.undecryptable(pkv, "the decrypted payload is not JSON"))
            }
            records += value.kind == .array ? Array(value.elements) : [value]
        }
        return .success(records)
    }
}
