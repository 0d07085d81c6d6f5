import Foundation

/// Where an SDK sends its data, as the bridge compares it: hostname and project only (PROTOCOL.md
/// section 3 ignores scheme, port and path).
struct ServerTarget: Sendable, Hashable, CustomStringConvertible {
    let host: String
    let project: String

    /// Reads `https://sa.example.com:8106/sa?project=production`; no `project` means `default`.
    init?(url: String) {
        guard let components = URLComponents(string: url.trimmingCharacters(in: .whitespaces)),
              let host = components.host, !host.isEmpty
        else { return nil }
        self.host = host.lowercased()
        let project = components.queryItems?.first { $0.name == "project" }?.value ?? ""
        self.project = project.isEmpty ? "default" : project
    }

    init(host: String, project: String) {
        self.host = host.lowercased()
        self.project = project
    }

    var description: String { "\(host) (project \(project))" }
}

/// A project's two bridge whitelists as config-service last published them (ARCHITECTURE.md,
/// Whitelists). Pure matching; `nil` lists mean nothing is published.
struct ProjectWhitelists: Sendable, Equatable {
    /// Other server URLs whose H5 pages may bridge into the project.
    var serverURLs: [String]?
    /// Page domains allowed to use the app's JS bridge: exact hosts or `*.suffix`.
    var h5Domains: [String]?

    /// True when a page that sends to `target` may bridge into this project through the whitelist.
    func allowsServer(_ target: ServerTarget) -> Bool {
        (serverURLs ?? []).contains { ServerTarget(url: $0) == target }
    }

    /// Whether an H5 page on `host` may bridge: always when no domain whitelist is published (or it
    /// is empty), otherwise when an entry names the host or `*.` a domain it is under.
    func allowsPage(host: String) -> Bool {
        guard let domains = h5Domains, !domains.isEmpty else { return true }
        let host = host.lowercased()
        return domains.contains { entry in
            let pattern = Self.domainPattern(entry)
            if pattern.hasPrefix("*.") {
                let suffix = pattern.dropFirst(1)
                return host.hasSuffix(suffix) && host.count > suffix.count
            }
            return host == pattern
        }
    }

    /// True when bridged records need the H5 domain whitelist checked.
    var restrictsPages: Bool { !(h5Domains ?? []).isEmpty }

    /// An entry as a bare lowercased host pattern; operators also paste whole URLs.
    static func domainPattern(_ entry: String) -> String {
        var text = Substring(entry.trimmingCharacters(in: .whitespaces).lowercased())
        if let scheme = text.range(of: "://") { text = text[scheme.upperBound...] }
        if let end = text.firstIndex(where: { $0 == "/" || $0 == ":" || $0 == "?" }) { text = text[..<end] }
        return String(text)
    }
}
