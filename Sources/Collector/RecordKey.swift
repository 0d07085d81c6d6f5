import DatongContracts
import DatongJSON
import DatongPostgres
import DatongRuntime

/// A record's deduplication key: the 16 bytes of its uuid, held as two integers so that sets and
/// dictionaries of keys hash and compare them without allocating.
package struct RecordKey: Hashable, Sendable {
    let high: UInt64
    let low: UInt64

    /// The first 16 of `bytes`, big-endian.
    init(_ bytes: [UInt8]) {
        precondition(bytes.count >= 16, "a key has 16 bytes")
        var high: UInt64 = 0
        var low: UInt64 = 0
        for index in 0..<8 {
            high = high << 8 | UInt64(bytes[index])
            low = low << 8 | UInt64(bytes[index + 8])
        }
        self.high = high
        self.low = low
    }

    /// A uuid as PostgreSQL prints it; nil when `text` is not one.
    init?(uuidText text: String) {
        var digits: [UInt8] = []
        digits.reserveCapacity(32)
        for byte in text.utf8 where byte != UInt8(ascii: "-") {
            guard let value = JSONParser.hexValue(byte) else { return nil }
            digits.append(UInt8(value))
        }
        guard digits.count == 32 else { return nil }
        var bytes: [UInt8] = []
        for index in stride(from: 0, to: 32, by: 2) { bytes.append(digits[index] << 4 | digits[index + 1]) }
        self.init(bytes)
    }

    /// The key as PostgreSQL prints a uuid: `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    var uuidText: String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(36)
        for index in 0..<16 {
            let byte = UInt8(truncatingIfNeeded: (index < 8 ? high >> (56 - 8 * index) : low >> (56 - 8 * (index - 8))))
            if index == 4 || index == 6 || index == 8 || index == 10 { out.append(UInt8(ascii: "-")) }
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

extension BinaryCopyWriter {
    /// A `uuid` field holding `key`.
    package mutating func uuid(_ key: RecordKey) {
        withUnsafeBytes(of: (key.high.bigEndian, key.low.bigEndian)) { uuid(bytes: $0) }
    }
}

/// The deduplication key of `record`.
///
/// SDKs change `_flush_time` on every retry and apps regenerate `_track_id` when they relay a record,
/// so neither is part of the key. The key is SHA-256 over what a retry keeps: project, type, event,
/// time (ms), distinct id, item type and id, and the properties text (the gateway writes it with
/// sorted keys, so equal properties give equal text). Two records equal in all of these are the same
/// record: one of them is stored, the other counted as a duplicate.
extension RecordKey {
    package init(of record: CollectRecord) {
        var input: [UInt8] = []
        input.reserveCapacity(record.properties.utf8.count + 128)
        func field(_ value: String?) {
            guard var value else { return Self.appendField(nil, to: &input) }
            value.withUTF8 { Self.appendField($0, to: &input) }
        }
        field(record.project)
        field(record.type)
        field(record.event)
        field(String(record.time))
        field(record.distinctId)
        field(record.itemType)
        field(record.itemId)
        field(record.properties)
        self.init(hashing: input)
    }

    /// Appends one field of a key's input: 0 for none, else 1, the length (4 bytes, big-endian)
    /// and the bytes. `IncomingBatch` builds the same input from a batch's bytes.
    static func appendField(_ value: UnsafeBufferPointer<UInt8>?, to input: inout [UInt8]) {
        guard let value else {
            input.append(0)
            return
        }
        input.append(1)
        withUnsafeBytes(of: UInt32(value.count).bigEndian) { input.append(contentsOf: $0) }
        input.append(contentsOf: value)
    }

    /// The key of a finished input: its SHA-256, marked as an RFC 9562 version-8 (custom) UUID.
    init(hashing input: [UInt8]) {
        var digest = SHA256Digest.hash(input)
        digest[6] = (digest[6] & 0x0F) | 0x80
        digest[8] = (digest[8] & 0x3F) | 0x80
        self.init(digest)
    }
}
