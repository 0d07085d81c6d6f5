import DatongContracts
import DatongJSON
import DatongPostgres
import DatongRuntime
import Synchronization

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

/// Which deduplication key a record gets (docs/PROTOCOL.md section 2, "What identifies a record").
///
/// Every Sensors SDK gives a record its own `_track_id` when it makes it and resends the record
/// unchanged on a retry (only `_flush_time` changes), so a record with one is identified by it with
/// its project, type, event, time (ms), distinct id and item: two records an SDK made separately are
/// two, even when they are equal in everything else (five `profileIncrement` calls in one
/// millisecond), and a retry is one. A record without a `_track_id` (hand-written clients) is
/// identified by its content: those fields and the properties text (which the gateway writes with
/// sorted keys, so equal properties give equal text).
///
/// Databases that stored records before track ids counted (collector migration 5) keep the content
/// key for records whose time is before that upgrade, so that the retries of what was stored
/// before it are still found; a new database has no such time.
package struct KeyRule: Sendable, Equatable {
    /// Records whose time (ms since the Unix epoch) is before this keep the content key.
    package var contentKeysBefore: Int64

    package init(contentKeysBefore: Int64) { self.contentKeysBefore = contentKeysBefore }

    /// Track ids count for every record: a database that never stored a record before them.
    package static let trackIDs = KeyRule(contentKeysBefore: .min)

    func usesTrackID(time: Int64, trackId: Int64?) -> Bool { trackId != nil && time >= contentKeysBefore }
}

extension RecordKey {
    /// The key of `record` under `rule`.
    package init(of record: CollectRecord, rule: KeyRule = .trackIDs) {
        var input: [UInt8] = []
        input.reserveCapacity(record.properties.utf8.count + 128)
        func field(_ value: String?) {
            guard var value else { return Self.appendField(nil, to: &input) }
            value.withUTF8 { Self.appendField($0, to: &input) }
        }
        let trackId = rule.usesTrackID(time: record.time, trackId: record.trackId) ? record.trackId : nil
        if trackId != nil { input.append(Self.trackIDMark) }
        field(record.project)
        field(record.type)
        field(record.event)
        field(String(record.time))
        field(record.distinctId)
        field(record.itemType)
        field(record.itemId)
        if let trackId { field(String(trackId)) } else { record.properties.utf8.withUnsafeBufferPointer { Self.appendField($0, to: &input) } }
        self.init(hashing: input)
    }

    /// The first byte of a track-id key's input. A content key's input starts with a field's
    /// marker (0 or 1), so the two kinds of input never coincide.
    static let trackIDMark: UInt8 = 2

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

/// The database's `KeyRule` (`collector.record_keys`, made by migration 5), read once: it never
/// changes after the migration.
final class StoredKeyRule: Sendable {
    private let pool: PostgresPool
    private let rule = Mutex<KeyRule?>(nil)

    init(pool: PostgresPool) { self.pool = pool }

    func current() async throws -> KeyRule {
        if let known = rule.withLock({ $0 }) { return known }
        let before = try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT CASE WHEN content_keys_before = '-infinity' THEN NULL
                            ELSE floor(extract(epoch FROM content_keys_before) * 1000)::bigint END
                FROM collector.record_keys
                """
            ).rows.first?[0].flatMap(Int64.init)
        }
        let read = KeyRule(contentKeysBefore: before ?? .min)
        rule.withLock { $0 = read }
        return read
    }
}
