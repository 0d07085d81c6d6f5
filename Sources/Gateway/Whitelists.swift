import Foundation

/// Where an SDK sends its data, as the bridge compares it: hostname and project only (PROTOCOL.md
/// section 3 ignores scheme, port and path).
struct ServerTarget: Sendable, Hashable, CustomStringConvertible {
    let host: String
    let project: String

    /// Reads `https://sa.example.com:8106/sa?project=production`; no `project` means `default`.
    /// A hand-written reader over the bytes: every bridged record carries a `server_url`, and
    /// Foundation's URL parsing would cost more than all the record's other checks.
    init?(url: String) {
        let bytes = Array(url.utf8)
        var start = 0
        var end = bytes.count
        while start < end, bytes[start] == 0x20 { start += 1 }
        while end > start, bytes[end - 1] == 0x20 { end -= 1 }
        // scheme "://"
        var cursor = start
        while cursor + 2 < end, !(bytes[cursor] == UInt8(ascii: ":") && bytes[cursor + 1] == UInt8(ascii: "/") && bytes[cursor + 2] == UInt8(ascii: "/")) {
            guard bytes[cursor] != UInt8(ascii: "/"), bytes[cursor] != UInt8(ascii: "?") else { return nil }
            cursor += 1
        }
        guard cursor > start, cursor + 2 < end else { return nil }
        let authorityStart = cursor + 3
        var authorityEnd = authorityStart
        while authorityEnd < end, bytes[authorityEnd] != UInt8(ascii: "/"), bytes[authorityEnd] != UInt8(ascii: "?"),
              bytes[authorityEnd] != UInt8(ascii: "#") {
            authorityEnd += 1
        }
        var hostStart = authorityStart
        for position in authorityStart..<authorityEnd where bytes[position] == UInt8(ascii: "@") { hostStart = position + 1 }
        var hostEnd = hostStart
        if hostStart < authorityEnd, bytes[hostStart] == UInt8(ascii: "[") {
            while hostEnd < authorityEnd, bytes[hostEnd] != UInt8(ascii: "]") { hostEnd += 1 }
            guard hostEnd < authorityEnd else { return nil }
            hostEnd += 1
        } else {
            while hostEnd < authorityEnd, bytes[hostEnd] != UInt8(ascii: ":") { hostEnd += 1 }
        }
        guard hostEnd > hostStart,
              !bytes[hostStart..<hostEnd].contains(where: { $0 <= 0x20 || $0 == UInt8(ascii: "%") || $0 >= 0x80 })
        else { return nil }
        var project = ""
        if let queryStart = bytes[authorityEnd..<end].firstIndex(of: UInt8(ascii: "?")) {
            let queryEnd = bytes[queryStart..<end].firstIndex(of: UInt8(ascii: "#")) ?? end
            for pair in bytes[(queryStart + 1)..<queryEnd].split(separator: UInt8(ascii: "&"))
            where pair.starts(with: "project=".utf8) {
                project = FormParameters.formDecode(pair.dropFirst(8))
                break
            }
        }
        self.host = String(decoding: bytes[hostStart..<hostEnd], as: UTF8.self).lowercased()
        self.project = project.isEmpty ? "default" : project
    }

    init(host: String, project: String) {
        self.host = host.lowercased()
        self.project = project
    }

    var description: String { "\(host) (project \(project))" }
}

/// A project's two bridge whitelists as config-service last published them (ARCHITECTURE.md,
/// Whitelists), read once when fetched so that checking a record is a lookup. Pure.
struct ProjectWhitelists: Sendable, Equatable {
    /// Other servers whose H5 pages may bridge into the project.
    let servers: Set<ServerTarget>
    /// Page hosts allowed to use the app's JS bridge, and `*.suffix` patterns as `.suffix`.
    private let hosts: Set<String>
    private let suffixes: [String]

    /// - Parameters:
    ///   - serverURLs: the published server-URL whitelist (entries that are not URLs never match).
    ///   - h5Domains: the published H5 domain whitelist: hosts, `*.suffix`, or whole URLs.
    init(serverURLs: [String]? = nil, h5Domains: [String]? = nil) {
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
