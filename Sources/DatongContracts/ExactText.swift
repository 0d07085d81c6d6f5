#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Ids compared as their UTF-8 bytes, never as Swift compares strings.
///
/// Swift's `==` and hashing treat canonically equivalent strings as equal (`"é"` as U+00E9 and as
/// `e` + U+0301), while PostgreSQL, the Java and JavaScript SDKs and Sensors compare code units:
/// for them those are two ids. Every identity the gateway caches, identity-service resolves and the
/// database stores is compared with these, so the three always agree on which ids are the same
/// (docs/RELIABILITY.md, "one meaning per JSON text").
package enum ExactText {
    @inlinable
    package static func equal(_ a: String, _ b: String) -> Bool {
        guard a.utf8.count == b.utf8.count else { return false }
        // Native strings: one memcmp; others (bridged, never here) byte by byte.
        let same = a.utf8.withContiguousStorageIfAvailable { left in
            b.utf8.withContiguousStorageIfAvailable { right in left.isEmpty || memcmp(left.baseAddress!, right.baseAddress!, left.count) == 0 }
        }
        return (same ?? nil) ?? a.utf8.elementsEqual(b.utf8)
    }

    @inlinable
    package static func equal(_ a: String?, _ b: String?) -> Bool {
        switch (a, b) {
        case (nil, nil): return true
        case (let a?, let b?): return equal(a, b)
        default: return false
        }
    }

    /// Byte order, as PostgreSQL's `C` collation sorts.
    @inlinable
    package static func less(_ a: String, _ b: String) -> Bool {
        a.utf8.lexicographicallyPrecedes(b.utf8)
    }

    @inlinable
    package static func hash(_ text: String, into hasher: inout Hasher) {
        hasher.combine(text.utf8.count)
        // A native string's bytes are contiguous: hashed at once, not byte by byte.
        if text.utf8.withContiguousStorageIfAvailable({ hasher.combine(bytes: UnsafeRawBufferPointer($0)) }) == nil {
            for byte in text.utf8 { hasher.combine(byte) }
        }
    }

    /// The same pairs under the same key bytes: a dictionary's own `==` compares canonically.
    package static func equal(_ a: [String: String]?, _ b: [String: String]?) -> Bool {
        guard let a, let b else { return a == nil && b == nil }
        guard a.count == b.count else { return false }
        for (key, value) in a {
            guard let index = b.index(forKey: key), equal(b[index].key, key), equal(b[index].value, value) else { return false }
        }
        return true
    }

    /// A hash of a dictionary's pairs by their bytes, whatever their order.
    package static func hash(_ pairs: [String: String]?, into hasher: inout Hasher) {
        guard let pairs else { return hasher.combine(-1) }
        var sum = 0
        for (key, value) in pairs {
            var pair = Hasher()
            hash(key, into: &pair)
            hash(value, into: &pair)
            sum &+= pair.finalize()
        }
        hasher.combine(pairs.count)
        hasher.combine(sum)
    }
}
