import ArgumentParser
import DatongContracts
import Foundation
import NIOHTTP1

/// `datongctl enrichment [show] | set`: what the gateways add to a project's records, and how they
/// store the client's address (docs/PRIVACY.md).
struct Enrichment: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show or change what the gateways add to a project's events: $ip, region, browser, crawlers.",
        subcommands: [ShowEnrichment.self, SetEnrichment.self], defaultSubcommand: ShowEnrichment.self
    )

    static func describe(_ project: String, _ policy: EnrichmentPolicy) -> String {
        let address: String
        switch policy.ip {
        case .full: address = "$ip stored in full"
        case .truncated: address = "$ip stored truncated (IPv4 /24, IPv6 /48)"
        case .none: address = "no $ip stored"
        }
        let bots: String
        switch policy.bots {
        case .keep: bots = "crawlers' events kept"
        case .mark: bots = "crawlers' events marked $is_bot"
        case .drop: bots = "crawlers' events dropped"
        }
        return "\(project): \(address); region \(policy.region ? "on" : "off"); browser from the User-Agent "
            + "\(policy.userAgent ? "on" : "off"); \(bots)"
    }
}

struct ShowEnrichment: CtlCommand {
    static let configuration = CommandConfiguration(commandName: "show", abstract: "Show a project's enrichment settings.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String

    func execute(_ admin: Admin) async throws -> String {
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        let policy = try admin.decode(EnrichmentPolicy.self, try await admin.send(.GET, "/v1/projects/\(project)/enrichment"))
        return Enrichment.describe(project, policy)
    }
}

struct SetEnrichment: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "set", abstract: "Change some of a project's enrichment settings (audited; the gateways apply it within seconds)."
    )
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String
    @Option(help: "How $ip is stored: full, truncated (IPv4 /24, IPv6 /48) or none.")
    var ip: String?
    @Option(help: "$country, $province and $city from the gateway's IP database: on or off.")
    var region: String?
    @Option(name: .customLong("user-agent"), help: "$browser, $os and the device from a browser's User-Agent: on or off.")
    var userAgent: String?
    @Option(help: "Crawlers' events: keep, mark ($is_bot) or drop.")
    var bots: String?

    func execute(_ admin: Admin) async throws -> String {
        guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
        var change: [String: Any] = [:]
        if let ip {
            guard EnrichmentPolicy.AddressStorage(rawValue: ip) != nil else { throw CtlFailure.usage("datongctl: --ip is full, truncated or none") }
            change["ip"] = ip
        }
        for (name, value) in [("region", region), ("userAgent", userAgent)] {
            guard let value else { continue }
            guard value == "on" || value == "off" else {
                throw CtlFailure.usage("datongctl: --\(name == "userAgent" ? "user-agent" : name) is on or off")
            }
            change[name] = value == "on"
        }
        if let bots {
            guard EnrichmentPolicy.Bots(rawValue: bots) != nil else { throw CtlFailure.usage("datongctl: --bots is keep, mark or drop") }
            change["bots"] = bots
        }
        guard !change.isEmpty else { throw CtlFailure.usage("datongctl: name a setting to change: --ip, --region, --user-agent or --bots") }
        let body = Array(try JSONSerialization.data(withJSONObject: change, options: [.sortedKeys]))
        let policy = try admin.decode(EnrichmentPolicy.self, try await admin.send(.PUT, "/v1/projects/\(project)/enrichment", body: body))
        return Enrichment.describe(project, policy)
    }
}
