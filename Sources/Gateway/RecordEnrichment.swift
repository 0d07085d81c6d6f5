import DatongContracts
import DatongJSON
import Enrichment
import Foundation
import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// What the gateway adds to a request's events that their SDKs cannot know, as Sensors' server
/// does (docs/ANALYTICS.md, "What the server adds"): `$ip`, `$country`/`$province`/`$city` from it,
/// `$url_host` from `$url`, and for a browser's own records `$browser`, `$browser_version`, `$os`,
/// `$os_version`, `$model` and `$manufacturer` from its User-Agent. Each only where the record has
/// none of its own, and as the project's `EnrichmentPolicy` allows; made once per request.
package final class RequestEnrichment {
    let policy: EnrichmentPolicy
    /// The client's address (`TrustedProxies.client`): the device's, for the records a device sent.
    let client: IPAddress?
    let userAgent: String?
    private let sources: EnrichmentSources
    /// The region of `client`, looked up once a request.
    private var clientRegion: Region??

    init(policy: EnrichmentPolicy, client: IPAddress?, userAgent: String?, sources: EnrichmentSources) {
        self.policy = policy
        self.client = client
        self.userAgent = userAgent.flatMap { $0.isEmpty ? nil : $0 }
        self.sources = sources
    }

    /// The same request's enrichment under another project's settings.
    func with(policy: EnrichmentPolicy) -> RequestEnrichment {
        RequestEnrichment(policy: policy, client: client, userAgent: userAgent, sources: sources)
    }

    /// The `$lib` of the official server SDKs, read from their code (docs/SDKS.md): their requests
    /// come from the customer's servers, so the request's address is not the user's.
    static let serverLibs: Set<String> = ["java", "python", "golang", "php", "ruby", "cpp", "node", "csharp", "dotnet"]

    /// The presets for one event (sorted by key), and whether its User-Agent is a crawler's.
    /// - Parameters:
    ///   - lib: the record's `$lib`.
    ///   - relayed: an H5 record an app relayed (`_hybrid_h5`, or a bridge relay): the request's
    ///     User-Agent is the app's HTTP client, and the app says what the device is.
    ///   - ip: the record's own `$ip`, `url` its `$url`.
    func presets(lib: String?, relayed: Bool, ip: JSONRef?, url: JSONRef?) -> (presets: [PropertyPreset], isBot: Bool) {
        var presets: [PropertyPreset] = []
        let fromDevice = relayed || !Self.serverLibs.contains((lib ?? "").lowercased())
        let ownText = ip?.stringValue
        let own = ownText.flatMap { IPAddress($0) }
        let address = own ?? (fromDevice ? client : nil)

        if policy.region, let address, address.isGlobal {
            let region: Region?
            if own == nil {
                if clientRegion == nil { clientRegion = .some(sources.regions?.region(of: address)) }
                region = clientRegion ?? nil
            } else {
                region = sources.regions?.region(of: address)
            }
            if let region {
                if let country = region.country { presets.append(PropertyPreset(key: "$country", value: .string(country), pageWins: true)) }
                if let province = region.province { presets.append(PropertyPreset(key: "$province", value: .string(province), pageWins: true)) }
                if let city = region.city { presets.append(PropertyPreset(key: "$city", value: .string(city), pageWins: true)) }
            }
        }
        switch policy.ip {
        case .full:
            if ip == nil, let address { presets.append(PropertyPreset(key: "$ip", value: .string(address.description), pageWins: true)) }
        case .truncated:
            // The record's own address is truncated too; a `$ip` that is no address is not one to keep.
            if let address {
                presets.append(PropertyPreset(key: "$ip", value: .string(address.truncated.description)))
            } else if ip != nil {
                presets.append(PropertyPreset(key: "$ip", value: nil))
            }
        case .none:
            if ip != nil { presets.append(PropertyPreset(key: "$ip", value: nil)) }
        }
        if let host = url?.stringValue.flatMap(Self.host) {
            presets.append(PropertyPreset(key: "$url_host", value: .string(host), pageWins: true))
        }
        var isBot = false
        if !relayed, lib == "js", let userAgent, let parser = sources.userAgents, policy.userAgent || policy.bots != .keep {
            let parsed = parser.parse(userAgent)
            isBot = parsed.isBot
            if policy.userAgent {
                for (name, value) in parsed.properties { presets.append(PropertyPreset(key: name, value: .string(value), pageWins: true)) }
            }
            if isBot, policy.bots == .mark { presets.append(PropertyPreset(key: "$is_bot", value: .bool(true))) }
        }
        presets.sort { $0.key.lexicographicallyPrecedes($1.key) }
        return (presets, isBot)
    }

    /// The host of an absolute URL (`https://user@Shop.example.com:8443/a?b` → `Shop.example.com`),
    /// as Sensors' server fills `$url_host`; nil for a URL without one.
    static func host(_ url: String) -> String? {
        guard let scheme = url.range(of: "://") else { return nil }
        var rest = url[scheme.upperBound...]
        if let end = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) { rest = rest[..<end] }
        if let at = rest.lastIndex(of: "@") { rest = rest[rest.index(after: at)...] }
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return nil }
            rest = rest[...close]
        } else if let colon = rest.firstIndex(of: ":") {
            rest = rest[..<colon]
        }
        return rest.isEmpty ? nil : String(rest)
    }
}

extension IPAddress {
    /// A connection's peer address; nil for a Unix socket.
    init?(_ socket: SocketAddress?) {
        switch socket {
        case .v4(let address):
            self = .v4(UInt32(bigEndian: address.address.sin_addr.s_addr))
        case .v6(let address):
            var raw = address.address.sin6_addr
            self.init(v6Bytes: withUnsafeBytes(of: &raw) { Array($0) })
        default:
            return nil
        }
    }
}
