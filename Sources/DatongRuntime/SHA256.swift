import CCrypto

/// SHA-256 through OpenSSL's libcrypto.
package enum SHA256Digest {
    /// The algorithm fetched from OpenSSL's default provider once: passing `EVP_sha256()` makes
    /// every call fetch it again, under a lock, which cost more than hashing a record.
    nonisolated(unsafe) private static let algorithm: OpaquePointer? = EVP_MD_fetch(nil, "SHA256", nil)

    package static func hash(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = bytes.withUnsafeBytes { input in
            EVP_Digest(input.baseAddress, input.count, &digest, &length, algorithm ?? EVP_sha256(), nil)
        }
        precondition(ok == 1 && length == 32, "libcrypto failed to compute SHA-256")
        return digest
    }

    package static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(64)
        for byte in hash(bytes) {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Whether two digests (or their hex texts) are equal, taking the same time wherever they differ.
    package static func equalInConstantTime(_ a: some Collection<UInt8>, _ b: some Collection<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for (x, y) in zip(a, b) { difference |= x ^ y }
        return difference == 0
    }
}
