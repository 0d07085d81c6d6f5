import DatongContracts
import DatongRuntime

/// The deduplication key of a record.
///
/// SDKs change `_flush_time` on every retry and apps regenerate `_track_id` when they relay a record,
/// so neither is part of the key. The key is SHA-256 over what a retry keeps: project, type, event,
/// time (ms), distinct id, item type and id, and the properties text (the gateway writes it with
/// sorted keys, so equal properties give equal text). Two records equal in all of these are the same
/// record: one of them is stored, the other counted as a duplicate.
enum RecordIdentity {
    static func key(of record: CollectRecord) -> [UInt8] {
        var input: [UInt8] = []
        input.reserveCapacity(record.properties.utf8.count + 128)
        func field(_ value: String?) {
            guard let value else {
                input.append(0)
                return
            }
            input.append(1)
            var length = UInt32(value.utf8.count).bigEndian
            withUnsafeBytes(of: &length) { input.append(contentsOf: $0) }
            input.append(contentsOf: value.utf8)
        }
        field(record.project)
        field(record.type)
        field(record.event)
        field(String(record.time))
        field(record.distinctId)
        field(record.itemType)
        field(record.itemId)
        field(record.properties)
        var digest = Array(SHA256Digest.hash(input).prefix(16))
        // Mark it as an RFC 9562 version-8 (custom) UUID.
        digest[6] = (digest[6] & 0x0F) | 0x80
        digest[8] = (digest[8] & 0x3F) | 0x80
        return digest
    }

    /// The key as PostgreSQL prints a uuid: `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    static func uuidText(_ key: [UInt8]) -> String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(36)
        for (index, byte) in key.enumerated() {
            if index == 4 || index == 6 || index == 8 || index == 10 { out.append(UInt8(ascii: "-")) }
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
