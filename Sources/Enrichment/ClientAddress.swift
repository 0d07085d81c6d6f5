/// The proxies whose `X-Forwarded-For` is believed (`TRUSTED_PROXIES`, docs/SETTINGS.md): the
/// deployment's own load balancers, none by default.
public struct TrustedProxies: Sendable, Equatable {
    public let blocks: [CIDR]

    public init(_ blocks: [CIDR] = []) { self.blocks = blocks }

    /// Parses a comma- or space-separated list of blocks (`10.0.0.0/8, 172.16.0.5`); nil names the
    /// first entry that is not one.
    public static func parse(_ text: String) -> Result<TrustedProxies, InvalidEntry> {
        var blocks: [CIDR] = []
        for entry in text.split(whereSeparator: { $0 == "," || $0 == " " || $0 == "\t" }) {
            guard let block = CIDR(entry) else { return .failure(InvalidEntry(text: String(entry.prefix(64)))) }
            blocks.append(block)
        }
        return .success(TrustedProxies(blocks))
    }

    public struct InvalidEntry: Error, Equatable {
        public let text: String
    }

    public func trusts(_ address: IPAddress) -> Bool {
        blocks.contains { $0.contains(address) }
    }

    /// The most `X-Forwarded-For` entries read, from the right: a longer chain cannot be ours.
    static let maxHops = 32

    /// The client's address: the connecting peer, unless the peer is a trusted proxy; then the
    /// `X-Forwarded-For` chain (every header line, in order) is read from the right and the first
    /// address that is not a trusted proxy is the client. A chain that ends in something that is
    /// not an address stops there (nothing beyond it can be believed): the last trusted hop is
    /// the answer then. A header from a peer that is not trusted is never read.
    public func client(peer: IPAddress?, forwardedFor headers: [Substring]) -> IPAddress? {
        guard let peer else { return nil }
        guard !blocks.isEmpty, trusts(peer), !headers.isEmpty else { return peer }
        var current = peer
        var hops = 0
        for header in headers.reversed() {
            // Entries from the right, without splitting the header into a list.
            var end = header.utf8.endIndex
            while true {
                let start = header.utf8[..<end].lastIndex(of: UInt8(ascii: ",")).map { header.utf8.index(after: $0) } ?? header.utf8.startIndex
                hops += 1
                guard hops <= Self.maxHops, let address = Self.address(header.utf8[start..<end]) else { return current }
                if !trusts(address) { return address }
                current = address
                guard start > header.utf8.startIndex else { break }
                end = header.utf8.index(before: start)
            }
        }
        return current
    }

    /// An address as proxies write it: trimmed, an IPv6 one maybe in brackets, maybe with a port.
    static func address(_ entry: Substring.UTF8View.SubSequence) -> IPAddress? {
        var text = entry
        while let first = text.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") { text = text.dropFirst() }
        while let last = text.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") { text = text.dropLast() }
        if text.first == UInt8(ascii: "[") {
            guard let close = text.firstIndex(of: UInt8(ascii: "]")) else { return nil }
            text = text[text.index(after: text.startIndex)..<close]
        } else if let colon = text.firstIndex(of: UInt8(ascii: ":")), text[text.index(after: colon)...].firstIndex(of: UInt8(ascii: ":")) == nil {
            // `192.0.2.1:4711`: an IPv4 address with a port (one colon; IPv6 has more).
            text = text[..<colon]
        }
        return IPAddress(Substring(text))
    }
}
