import CZlib

/// Inflates gzip as RFC 1952 defines it, within a limit: every member of a multi-member stream
/// (what `cat a.gz b.gz` makes, and what some clients send), each member's CRC-32 and ISIZE trailer
/// checked by zlib, and a stream that ends before its trailer refused. Output stops growing as soon
/// as it passes `limit`, so a gzip bomb costs no more memory than the limit.
package enum GzipInflater {
    package enum Failure: Error, Equatable {
        /// Not gzip, corrupted, cut short, or followed by bytes that are not another member.
        case invalid
        /// The data inflates to more than the limit.
        case tooLarge
    }

    /// The most gzip may inflate to beyond `ratioFloor`, as a multiple of its compressed size.
    /// Deflate reaches 1032:1; SDK batches compress 2–35 times, 1,000 identical records 193 times.
    /// 5,320 bytes that inflated to a 5 MiB form cost 1.6 s of CPU: what a byte received may cost
    /// is bounded here, before it is all inflated.
    package static let maxRatio = 256
    /// What any gzip may inflate to whatever its ratio: small repetitive batches pass.
    package static let ratioFloor = 1 << 20

    /// The limit `inflate` applies to `compressedBytes` of input under a ceiling of `limit`.
    package static func limit(compressedBytes: Int, ceiling: Int) -> Int {
        let (scaled, overflow) = compressedBytes.multipliedReportingOverflow(by: maxRatio)
        return min(ceiling, max(ratioFloor, overflow ? Int.max : scaled))
    }

    /// Inflates `input` within `limit` and within `limit(compressedBytes:ceiling:)` (the ratio).
    package static func inflate(_ input: UnsafeRawBufferPointer, limit ceiling: Int) throws(Failure) -> [UInt8] {
        let limit = Self.limit(compressedBytes: input.count, ceiling: ceiling)
        // zlib counts input in 32 bits; request bodies are far smaller.
        guard let base = input.baseAddress, input.count < Int(UInt32.max) else { throw .invalid }
        var stream = z_stream()
        // 16 + 15: a gzip wrapper (header and trailer checked) around a 32 KiB window.
        guard inflateInit2_(&stream, 16 + MAX_WBITS, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else { throw .invalid }
        defer { inflateEnd(&stream) }
        stream.next_in = UnsafeMutablePointer(mutating: base.assumingMemoryBound(to: Bytef.self))
        stream.avail_in = uInt(input.count)
        // Inflate straight into the output's spare capacity, doubling it as needed (within the
        // limit): no intermediate chunk to allocate and copy, which mattered for small payloads.
        var output = [UInt8](repeating: 0, count: min(limit, max(1024, input.count * 4)))
        var produced = 0
        while true {
            // One member, to its end: Z_STREAM_END comes only after zlib checked its CRC-32 and ISIZE.
            var status: Int32
            repeat {
                if produced == output.count {
                    guard output.count < limit else {
                        // At the limit: the member must end without one more byte of output.
                        var probe: UInt8 = 0
                        status = withUnsafeMutablePointer(to: &probe) { pointer in
                            stream.next_out = pointer
                            stream.avail_out = 1
                            return CZlib.inflate(&stream, Z_NO_FLUSH)
                        }
                        if stream.avail_out == 0 { throw .tooLarge }
                        guard status == Z_STREAM_END else { throw .invalid }
                        continue
                    }
                    output.append(contentsOf: repeatElement(0, count: min(output.count, limit - output.count)))
                }
                status = output.withUnsafeMutableBufferPointer { buffer in
                    stream.next_out = buffer.baseAddress! + produced
                    stream.avail_out = uInt(buffer.count - produced)
                    let status = CZlib.inflate(&stream, Z_NO_FLUSH)
                    produced = buffer.count - Int(stream.avail_out)
                    return status
                }
                // Z_BUF_ERROR with room left: no progress possible, the input ended inside the member.
                guard status == Z_OK || status == Z_STREAM_END else { throw .invalid }
            } while status != Z_STREAM_END
            // Another member may follow; anything else after a member is refused.
            guard stream.avail_in > 0 else {
                output.removeLast(output.count - produced)
                return output
            }
            guard inflateReset(&stream) == Z_OK else { throw .invalid }
        }
    }
}
