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
    /// As the SDKs spell them, and in lower case (compared as written: no case folding per event).
    static let serverLibs: Set<String> = [
        "Java", "python", "Golang", "php", "Ruby", "cpp", "Node", "CSharp", "dotnet",
        "java", "golang", "ruby", "node", "csharp", "Python", "PHP", "CPP",
    ]

    /// The presets for one event (sorted by key), and whether its User-Agent is a crawler's.
    /// - Parameters:
    ///   - lib: the record's `$lib`.
    ///   - relayed: an H5 record an app relayed (`_hybrid_h5`, or a bridge relay): the request's
    ///     User-Agent is the app's HTTP client, and the app says what the device is.
    ///   - ip: the record's own `$ip`, `url` its `$url`.
    func presets(lib: String?, relayed: Bool, ip: JSONRef?, url: JSONRef?) -> (presets: [PropertyPreset], isBot: Bool) {
        // Records of one request that carry no `$ip` of their own get the same presets but for
        // `$url_host`, which sorts after every other: made once, the host appended.
        guard ip == nil else { return make(lib: lib, relayed: relayed, ip: ip, url: url) }
        let kind = kind(lib: lib, relayed: relayed)
        let shared: (presets: [PropertyPreset], isBot: Bool)
        if let made = made[kind] {
            shared = made
        } else {
            shared = make(lib: lib, relayed: relayed, ip: nil, url: nil)
            made[kind] = shared
        }
        guard let url, url.kind == .string, let host = Self.host(bytes: url.textBytes) else { return shared }
        // The pages of one upload are mostly on one host: its presets are made once.
        if let last = withHost[kind], last.host.elementsEqual(host) { return (last.presets, shared.isBot) }
        let presets = shared.presets + [PropertyPreset(key: Keys.urlHost, value: .string(String(decoding: host, as: UTF8.self)), pageWins: true)]
        withHost[kind] = (Array(host), presets)
        return (presets, shared.isBot)
    }

    /// 0 for a browser's own record, 1 for another device's, 2 for a server SDK's; the last `$lib`
    /// seen is kept with its kind (an upload's records come from one SDK).
    private func kind(lib: String?, relayed: Bool) -> Int {
        if relayed { return 1 }
        if let last = lastLib, last.lib == lib { return last.kind }
        let kind = lib == "js" ? 0 : lib.map { Self.serverLibs.contains($0) } == true ? 2 : 1
        lastLib = (lib, kind)
        return kind
    }

    private var lastLib: (lib: String?, kind: Int)?

    /// The shared presets by kind of record: a browser's own, another device's, a server SDK's;
    /// and those of the last `$url_host` seen for each kind.
    private var made: [(presets: [PropertyPreset], isBot: Bool)?] = [nil, nil, nil]
    private var withHost: [(host: [UInt8], presets: [PropertyPreset])?] = [nil, nil, nil]

    private func make(lib: String?, relayed: Bool, ip: JSONRef?, url: JSONRef?) -> (presets: [PropertyPreset], isBot: Bool) {
        var presets: [PropertyPreset] = []
        presets.reserveCapacity(8)
        let fromDevice = relayed || lib.map { !Self.serverLibs.contains($0) } ?? true
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
                if let country = region.country { presets.append(PropertyPreset(key: Keys.country, value: .string(country), pageWins: true)) }
                if let province = region.province { presets.append(PropertyPreset(key: Keys.province, value: .string(province), pageWins: true)) }
                if let city = region.city { presets.append(PropertyPreset(key: Keys.city, value: .string(city), pageWins: true)) }
            }
        }
        switch policy.ip {
        case .full:
            if ip == nil, let address { presets.append(PropertyPreset(key: Keys.ip, value: .string(text(of: address)), pageWins: true)) }
        case .truncated:
            // The record's own address is truncated too; a `$ip` that is no address is not one to keep.
            if let address {
                presets.append(PropertyPreset(key: Keys.ip, value: .string(address.truncated.description)))
            } else if ip != nil {
                presets.append(PropertyPreset(key: Keys.ip, value: nil))
            }
        case .none:
            if ip != nil { presets.append(PropertyPreset(key: Keys.ip, value: nil)) }
        }
        if let host = url?.stringValue.flatMap(Self.host) {
            presets.append(PropertyPreset(key: Keys.urlHost, value: .string(host), pageWins: true))
        }
        var isBot = false
        if !relayed, lib == "js", let userAgent, let parser = sources.userAgents, policy.userAgent || policy.bots != .keep {
            let parsed = parsedUserAgent ?? parser.parse(userAgent)
            parsedUserAgent = parsed
            isBot = parsed.isBot
            if policy.userAgent {
                for (name, value) in parsed.properties { presets.append(PropertyPreset(key: name, value: .string(value), pageWins: true)) }
            }
            if isBot, policy.bots == .mark { presets.append(PropertyPreset(key: Keys.isBot, value: .bool(true))) }
        }
        presets.sort { $0.key.lexicographicallyPrecedes($1.key) }
        return (presets, isBot)
    }

    /// The client's address as text, and its User-Agent read, made once a request.
    private var clientText: String?
    private var parsedUserAgent: ParsedUserAgent?

    private func text(of address: IPAddress) -> String {
        guard address == client else { return address.description }
        if let clientText { return clientText }
        let text = address.description
        clientText = text
        return text
    }

    /// The presets' names, as bytes made once.
    enum Keys {
        static let country = Array("$country".utf8)
        static let province = Array("$province".utf8)
        static let city = Array("$city".utf8)
        static let ip = Array("$ip".utf8)
        static let urlHost = Array("$url_host".utf8)
        static let isBot = Array("$is_bot".utf8)
    }

    /// The host of an absolute URL (`https://user@Shop.example.com:8443/a?b` → `Shop.example.com`),
    /// as Sensors' server fills `$url_host`: as written, of any scheme; nil for a URL without one.
    /// Not `WebURL`, the whitelists' reading, which is the browser's (http and https only, the host
    /// lowercased, tabs removed) and copies the URL: this one runs on every web event's `$url`.
    package static func host(_ url: String) -> String? {
        host(bytes: ArraySlice(url.utf8)).map { String(decoding: $0, as: UTF8.self) }
    }

    /// `host(_:)` on the URL's UTF-8 bytes, answering the slice of them that is the host.
    static func host(bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        let (colon, slash) = (UInt8(ascii: ":"), UInt8(ascii: "/"))
        let (question, hash) = (UInt8(ascii: "?"), UInt8(ascii: "#"))
        var start = bytes.startIndex
        let last = bytes.endIndex
        while start + 2 < last, !(bytes[start] == colon && bytes[start + 1] == slash && bytes[start + 2] == slash) {
            // The scheme comes first: a path, query or fragment before any `://` means none.
            guard bytes[start] != slash, bytes[start] != question, bytes[start] != hash else { return nil }
            start += 1
        }
        guard start + 2 < last else { return nil }
        start += 3
        var end = start
        while end < last, bytes[end] != slash, bytes[end] != question, bytes[end] != hash { end += 1 }
        // user:password@ before the host.
        if let at = bytes[start..<end].lastIndex(of: UInt8(ascii: "@")) { start = at + 1 }
        if start < end, bytes[start] == UInt8(ascii: "[") {
            guard let close = bytes[start..<end].firstIndex(of: UInt8(ascii: "]")) else { return nil }
            end = close + 1
        } else if let port = bytes[start..<end].firstIndex(of: colon) {
            end = port
        }
        return start < end ? bytes[start..<end] : nil
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
