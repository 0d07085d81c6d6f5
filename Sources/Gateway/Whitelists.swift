import DatongContracts
import DatongJSON
import Foundation

/// An http(s) URL's host and query as the WHATWG URL standard reads them, which is how browsers and
/// the page SDKs read them: tabs and newlines inside are dropped, `\\` counts as `/`, any number of
/// slashes may follow the scheme, the user info ends at the authority's last `@`, and a port must
/// be digits. Hosts with characters the standard forbids, percent-escapes or non-ASCII (IDNA is
/// not done here) are refused rather than guessed at. A hand-written reader over the bytes: every
/// bridged record carries a `server_url`, and Foundation's URL parsing (RFC 3986, which reads
/// `https://a\\@b/` as host `b` where a browser goes to `a`) would also cost more.
package struct WebURL: Sendable, Equatable {
    /// Lowercased.
    package let host: String
    /// The bytes after `?` up to `#`, when there is a query.
    let query: ArraySlice<UInt8>?

    package init?(_ string: String) {
        var bytes = Array(string.utf8)
        // Leading and trailing C0 controls and spaces go; tabs and newlines go everywhere.
        while let first = bytes.first, first <= 0x20 { bytes.removeFirst() }
        while let last = bytes.last, last <= 0x20 { bytes.removeLast() }
        bytes.removeAll { $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")) else { return nil }
        let scheme = String(decoding: bytes[..<colon], as: UTF8.self).lowercased()
        guard scheme == "http" || scheme == "https" else { return nil }
        var cursor = colon + 1
        while cursor < bytes.count, bytes[cursor] == UInt8(ascii: "/") || bytes[cursor] == UInt8(ascii: "\\") { cursor += 1 }
        var authorityEnd = cursor
        while authorityEnd < bytes.count, !Self.endsAuthority(bytes[authorityEnd]) { authorityEnd += 1 }
        var hostStart = cursor
        for position in cursor..<authorityEnd where bytes[position] == UInt8(ascii: "@") { hostStart = position + 1 }
        var hostEnd = hostStart
        if hostStart < authorityEnd, bytes[hostStart] == UInt8(ascii: "[") {
            // An IPv6 literal: hex digits, colons and (for an embedded IPv4 address) dots.
            hostEnd += 1
            while hostEnd < authorityEnd, bytes[hostEnd] != UInt8(ascii: "]") {
                guard Self.isIPv6Literal(bytes[hostEnd]) else { return nil }
                hostEnd += 1
            }
            guard hostEnd < authorityEnd, hostEnd > hostStart + 1 else { return nil }
            hostEnd += 1
        } else {
            while hostEnd < authorityEnd, bytes[hostEnd] != UInt8(ascii: ":") { hostEnd += 1 }
            guard !bytes[hostStart..<hostEnd].contains(where: Self.isForbiddenInHost) else { return nil }
        }
        guard hostEnd > hostStart else { return nil }
        if hostEnd < authorityEnd {
            // `:` and a port of digits (possibly none).
            guard bytes[hostEnd] == UInt8(ascii: ":"),
                bytes[(hostEnd + 1)..<authorityEnd].allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
            else { return nil }
        }
        host = String(decoding: bytes[hostStart..<hostEnd], as: UTF8.self).lowercased()
        if let queryStart = bytes[authorityEnd...].firstIndex(of: UInt8(ascii: "?")) {
            let queryEnd = bytes[queryStart...].firstIndex(of: UInt8(ascii: "#")) ?? bytes.count
            // A `#` before the `?` means the `?` is in the fragment.
            if bytes[authorityEnd..<queryStart].contains(UInt8(ascii: "#")) { query = nil } else { query = bytes[(queryStart + 1)..<queryEnd] }
        } else {
            query = nil
        }
    }

    private static func endsAuthority(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "/") || byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "#")
    }

    private static func isIPv6Literal(_ byte: UInt8) -> Bool {
        JSONParser.hexValue(byte) != nil || byte == UInt8(ascii: ":") || byte == UInt8(ascii: ".")
    }

    /// The standard's forbidden host code points, plus `%` and non-ASCII (not decoded here).
    private static func isForbiddenInHost(_ byte: UInt8) -> Bool {
        byte <= 0x20 || byte >= 0x7F || "#/:<>?@[\\]^|%".utf8.contains(byte)
    }
}

/// Where an SDK sends its data, as the bridge compares it: hostname and project only (docs/PROTOCOL.md
/// section 3 ignores scheme, port and path).
struct ServerTarget: Sendable, Hashable, CustomStringConvertible {
    let host: String
    let project: String

    /// Reads `https://sa.example.com:8106/sa?project=production`; no `project` means `default`.
    /// The host is the one a browser would connect to (`WebURL`), so a URL cannot name one host to
    /// this check and another to the page's SDK.
    init?(url: String) {
        guard let parsed = WebURL(url) else { return nil }
        var project = ""
        if let query = parsed.query {
            for pair in query.split(separator: UInt8(ascii: "&")) where pair.starts(with: "project=".utf8) {
                project = FormParameters.formDecode(pair.dropFirst(8))
                break
            }
        }
        self.host = parsed.host
        self.project = project.isEmpty ? "default" : project
    }

    init(host: String, project: String) {
        self.host = host.lowercased()
        self.project = project
    }

    var description: String { "\(UntrustedText.quoted(host, limit: 255)) (project \(UntrustedText.quoted(project)))" }
}

/// A project's two bridge whitelists as config-service last published them (docs/ARCHITECTURE.md,
/// Whitelists), read once when fetched so that checking a record is a lookup. Pure.
package struct ProjectWhitelists: Sendable, Equatable {
    /// Other servers whose H5 pages may bridge into the project.
    let servers: Set<ServerTarget>
    /// Page hosts allowed to use the app's JS bridge, and `*.suffix` patterns as `.suffix`.
    private let hosts: Set<String>
    private let suffixes: [String]

    /// - Parameters:
    ///   - serverURLs: the published server-URL whitelist (entries that are not URLs never match).
    ///   - h5Domains: the published H5 domain whitelist: hosts, `*.suffix`, or whole URLs.
    package init(serverURLs: [String]? = nil, h5Domains: [String]? = nil) {
        servers = Set((serverURLs ?? []).compactMap(ServerTarget.init(url:)))
        var hosts = Set<String>()
        var suffixes: [String] = []
        for entry in h5Domains ?? [] {
            let pattern = Self.domainPattern(entry)
            if pattern.hasPrefix("*.") { suffixes.append(String(pattern.dropFirst())) } else if !pattern.isEmpty { hosts.insert(pattern) }
        }
        self.hosts = hosts
        self.suffixes = suffixes
    }

    /// True when a page that sends to `target` may bridge into this project through the whitelist.
    func allowsServer(_ target: ServerTarget) -> Bool { servers.contains(target) }

    /// Whether an H5 page on `host` may bridge: always when no domain whitelist is published (or it
    /// is empty), otherwise when an entry names the host or `*.` a domain it is under.
    func allowsPage(host: String) -> Bool {
        guard restrictsPages else { return true }
        let host = host.lowercased()
        return hosts.contains(host) || suffixes.contains { host.hasSuffix($0) && host.count > $0.count }
    }

    /// Why a bridged record from the page at `pageURL` may not enter `project`, or nil: the reason
    /// kept in `analytics.rejected`, the same for a relay and for an app's upload of relayed records.
    func pageProblem(pageURL: String?, project: String) -> String? {
        guard restrictsPages else { return nil }
        guard let page = pageURL, let host = WebURL(page)?.host else {
            return "the record has no $url (and the app sent no page_url), so its page cannot be checked against project \(project)'s H5 domain whitelist"
        }
        guard allowsPage(host: host) else {
            return "the page's host \(UntrustedText.quoted(host, limit: 255)) is not on project \(project)'s H5 domain whitelist"
        }
        return nil
    }

    /// True when bridged records need the H5 domain whitelist checked.
    var restrictsPages: Bool { !hosts.isEmpty || !suffixes.isEmpty }

    /// An entry as a bare lowercased host pattern; operators also paste whole URLs.
    static func domainPattern(_ entry: String) -> String {
        var text = Substring(entry.trimmingCharacters(in: .whitespaces).lowercased())
        if let scheme = text.range(of: "://") { text = text[scheme.upperBound...] }
        if let end = text.firstIndex(where: { $0 == "/" || $0 == ":" || $0 == "?" }) { text = text[..<end] }
        return String(text)
    }
}
