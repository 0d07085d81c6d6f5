/// Builds the payload of `COPY … FROM STDIN (FORMAT binary)`: no text escaping on the client and
/// no parsing on the server, the fastest bulk path libpq offers (docs/BENCHMARKS.md, building blocks).
package struct BinaryCopyWriter: Sendable {
    package private(set) var bytes: [UInt8]
    private var finished = false

    /// Microseconds between the Unix epoch and PostgreSQL's epoch (2000-01-01 UTC).
    static let postgresEpochOffsetMicros: Int64 = 946_684_800_000_000

    package init(reservingCapacity capacity: Int = 1 << 16) {
        bytes = []
        bytes.reserveCapacity(capacity)
        bytes.append(contentsOf: Array("PGCOPY\n".utf8))
        bytes.append(contentsOf: [0xFF, 0x0D, 0x0A, 0x00])
        appendInteger(Int32(0))  // flags
        appendInteger(Int32(0))  // header extension length
    }

    package mutating func beginRow(fieldCount: Int) {
        appendInteger(Int16(fieldCount))
    }

    /// Appends a row another writer encoded (a range of its `bytes` from `beginRow` to the row's end).
    package mutating func appendEncodedRow(_ row: ArraySlice<UInt8>) {
        bytes.append(contentsOf: row)
    }

    package mutating func null() { appendInteger(Int32(-1)) }

    package mutating func text(_ value: String?) {
        guard var value else { return null() }
        value.withUTF8 { utf8 in
            appendInteger(Int32(utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }

    /// A `text` field from UTF-8 bytes; nil is NULL.
    package mutating func text(utf8: UnsafeBufferPointer<UInt8>?) {
        guard let utf8 else { return null() }
        appendInteger(Int32(utf8.count))
        bytes.append(contentsOf: utf8)
    }

    package mutating func bigint(_ value: Int64?) {
        guard let value else { return null() }
        appendInteger(Int32(8))
        appendInteger(value)
    }

    package mutating func boolean(_ value: Bool?) {
        guard let value else { return null() }
        appendInteger(Int32(1))
        bytes.append(value ? 1 : 0)
    }

    /// A `timestamptz` from milliseconds since the Unix epoch.
    package mutating func timestamp(unixMillis: Int64?) {
        guard let unixMillis else { return null() }
        appendInteger(Int32(8))
        appendInteger(unixMillis * 1000 - Self.postgresEpochOffsetMicros)
    }

    /// A `jsonb` field whose text `write` appends (the field's length is filled in afterwards;
    /// binary jsonb is a version byte followed by the text).
    package mutating func jsonb(writing write: (inout [UInt8]) -> Void) {
        let start = bytes.count
        appendInteger(Int32(0))
        bytes.append(1)
        write(&bytes)
        let length = Int32(bytes.count - start - 4).bigEndian
        withUnsafeBytes(of: length) { raw in
            for offset in 0..<4 { bytes[start + offset] = raw[offset] }
        }
    }

    /// A `jsonb` field from JSON text's UTF-8 bytes.
    package mutating func jsonb(utf8: UnsafeBufferPointer<UInt8>) {
        appendInteger(Int32(utf8.count + 1))
        bytes.append(1)
        bytes.append(contentsOf: utf8)
    }

    /// A `uuid` from its 16 bytes.
    package mutating func uuid(_ value: [UInt8]) {
        value.withUnsafeBytes { uuid(bytes: $0) }
    }

    /// A `uuid` field from its 16 bytes in network order.
    package mutating func uuid(bytes value: UnsafeRawBufferPointer) {
        precondition(value.count == 16, "a uuid has 16 bytes")
        appendInteger(Int32(16))
        bytes.append(contentsOf: value)
    }

    /// The finished payload, with the trailer.
    package mutating func finish() -> [UInt8] {
        if !finished {
            appendInteger(Int16(-1))
            finished = true
        }
        return bytes
    }

    private mutating func appendInteger<I: FixedWidthInteger>(_ value: I) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }
}
