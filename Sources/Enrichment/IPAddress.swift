#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An IPv4 or IPv6 address, parsed from text that is not trusted. An IPv4-mapped IPv6 address
/// (`::ffff:192.0.2.1`, what a dual-stack socket reports for an IPv4 peer) is the IPv4 address.
public enum IPAddress: Hashable, Sendable, CustomStringConvertible {
    case v4(UInt32)
    /// The address as two big-endian halves: `high` holds the first 8 bytes.
    case v6(high: UInt64, low: UInt64)

    /// The longest text of an address worth reading (an IPv6 address with an embedded IPv4 one is 45).
    static let maxTextLength = 64

    /// Parses `text` as an IPv4 or IPv6 address (no port, no brackets, no zone); nil when it is none.
    public init?(_ text: some StringProtocol) {
        guard !text.isEmpty, text.utf8.count <= Self.maxTextLength else { return nil }
        if let value = Self.dottedQuad(text.utf8) {
            self = .v4(value)
            return
        }
        let string = String(text)
        if string.utf8.contains(UInt8(ascii: ":")) {
            var raw = in6_addr()
            guard inet_pton(AF_INET6, string, &raw) == 1 else { return nil }
            let bytes = withUnsafeBytes(of: &raw) { Array($0) }
            self.init(v6Bytes: bytes)
        } else {
            var raw = in_addr()
            guard inet_pton(AF_INET, string, &raw) == 1 else { return nil }
            self = .v4(UInt32(bigEndian: raw.s_addr))
        }
    }

    /// `a.b.c.d` read from its bytes, the common case (no String, no C call); nil for anything
    /// else, which `inet_pton` then reads or refuses. Leading zeros are left to `inet_pton` too.
    private static func dottedQuad(_ bytes: some Collection<UInt8>) -> UInt32? {
        var value: UInt32 = 0
        var part: UInt32 = 0
        var digits = 0
        var parts = 0
        for byte in bytes {
            if byte == UInt8(ascii: ".") {
                guard digits > 0, parts < 3 else { return nil }
                value = value << 8 | part
                parts += 1
                (part, digits) = (0, 0)
            } else if (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) {
                if digits > 0, part == 0 { return nil }
                part = part * 10 + UInt32(byte - UInt8(ascii: "0"))
                digits += 1
                guard digits <= 3, part <= 255 else { return nil }
            } else {
                return nil
            }
        }
        guard digits > 0, parts == 3 else { return nil }
        return value << 8 | part
    }

    /// The address of 16 network-order bytes; an IPv4-mapped one is IPv4.
    public init(v6Bytes bytes: [UInt8]) {
        var high: UInt64 = 0
        var low: UInt64 = 0
        for index in 0..<8 { high = high << 8 | UInt64(bytes[index]) }
        for index in 8..<16 { low = low << 8 | UInt64(bytes[index]) }
        if high == 0, low >> 32 == 0xFFFF {
            self = .v4(UInt32(truncatingIfNeeded: low))
        } else {
            self = .v6(high: high, low: low)
        }
    }

    /// The address's network-order bytes: 4 or 16.
    public var bytes: [UInt8] {
        switch self {
        case .v4(let value):
            return [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
        case .v6(let high, let low):
            return (0..<16).map { index in
                let half = index < 8 ? high : low
                return UInt8(truncatingIfNeeded: half >> UInt64(8 * (7 - index % 8)))
            }
        }
    }

    /// The address in its usual text form (`192.0.2.1`, `2001:db8::1`).
    public var description: String {
        switch self {
        case .v4(let value):
            // Written as bytes: one is made for every event from a device.
            var text: [UInt8] = []
            text.reserveCapacity(15)
            for shift in stride(from: 24, through: 0, by: -8) {
                let octet = UInt8(truncatingIfNeeded: value >> UInt32(shift))
                if shift != 24 { text.append(UInt8(ascii: ".")) }
                if octet >= 100 { text.append(UInt8(ascii: "0") + octet / 100) }
                if octet >= 10 { text.append(UInt8(ascii: "0") + octet / 10 % 10) }
                text.append(UInt8(ascii: "0") + octet % 10)
            }
            return String(decoding: text, as: UTF8.self)
        case .v6:
            var raw = in6_addr()
            withUnsafeMutableBytes(of: &raw) { $0.copyBytes(from: bytes) }
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            guard inet_ntop(AF_INET6, &raw, &text, socklen_t(text.count)) != nil else { return "::" }
            return String(decoding: text.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }

    /// The first `bits` bits of the address, the rest zero: an IPv4 address's /24 is its network.
    public func prefix(_ bits: Int) -> IPAddress {
        switch self {
        case .v4(let value):
            let kept = max(0, min(32, bits))
            return .v4(kept == 0 ? 0 : value & ~UInt32(0) << UInt32(32 - kept))
        case .v6(let high, let low):
            let kept = max(0, min(128, bits))
            let highMask: UInt64 = kept >= 64 ? ~0 : kept == 0 ? 0 : ~UInt64(0) << UInt64(64 - kept)
            let lowMask: UInt64 = kept <= 64 ? 0 : kept == 128 ? ~0 : ~UInt64(0) << UInt64(128 - kept)
            return .v6(high: high & highMask, low: low & lowMask)
        }
    }

    /// The address with what identifies a household removed, as Datong stores it when a project
    /// asks (docs/PRIVACY.md): an IPv4 address's /24, an IPv6 address's /48.
    public var truncated: IPAddress {
        switch self {
        case .v4: return prefix(24)
        case .v6: return prefix(48)
        }
    }

    /// True for an address that names a place: not private, loopback, link-local, shared (CGNAT),
    /// multicast, documentation, benchmarking or otherwise reserved (IANA's special-purpose
    /// registries). A region is looked up for these only.
    public var isGlobal: Bool {
        if case .v4(let value) = self {
            // Most IPv4 addresses are in none of the special blocks' first octets: decided at once.
            let first = value >> 24
            guard [0, 10, 100, 127, 169, 172, 192, 198, 203].contains(first) || first >= 224 else { return true }
        }
        return !Self.special.contains { $0.contains(self) }
    }

    /// IANA's IPv4 and IPv6 special-purpose address blocks that are not globally reachable, plus
    /// multicast and the IPv4 "this network" and future-use blocks.
    private static let special: [CIDR] = [
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24",
        "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4",
        "240.0.0.0/4", "::/128", "::1/128", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "2002::/16", "3fff::/20",
        "5f00::/16", "fc00::/7", "fe80::/10", "ff00::/8",
    ].map { CIDR($0)! }
}

/// A block of addresses, `192.0.2.0/24` or `2001:db8::/32`; a bare address is a block of one.
public struct CIDR: Hashable, Sendable, CustomStringConvertible {
    public let network: IPAddress
    public let bits: Int

    public init?(_ text: some StringProtocol) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = IPAddress(parts[0]) else { return nil }
        let width: Int
        if case .v4 = address { width = 32 } else { width = 128 }
        var bits = width
        if parts.count == 2 {
            guard parts[1].utf8.count <= 3, parts[1].utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
                let value = Int(parts[1]), value <= width
            else { return nil }
            bits = value
        }
        self.network = address.prefix(bits)
        self.bits = bits
    }

    public func contains(_ address: IPAddress) -> Bool {
        switch (network, address) {
        case (.v4, .v4), (.v6, .v6): return address.prefix(bits) == network
        default: return false
        }
    }

    public var description: String { "\(network)/\(bits)" }
}
