import DatongContracts
import DatongRuntime
import Enrichment
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Prometheus
import ServiceLifecycle
import Synchronization

/// What the gateway reads enrichment from, shared by every request: the trusted proxies, the
/// User-Agent rules and the IP database (`GEOIP_DATABASE`), which it reopens when the file is
/// replaced.
package final class EnrichmentSources: Sendable {
    let trustedProxies: TrustedProxies
    let userAgents: UserAgentParser?
    let regions: RegionFile?

    /// The sources as a gateway with these settings reads them (for gateway-bench: no metrics).
    package convenience init(trustedProxies: TrustedProxies, geoIPDatabase: String?, userAgentRules: String?, logger: Logger) {
        let settings = GatewaySettings(trustedProxies: trustedProxies, geoIPDatabase: geoIPDatabase, userAgentRules: userAgentRules)
        let loaded = Self.load(settings, logger: logger, metrics: nil)
        self.init(trustedProxies: loaded.trustedProxies, userAgents: loaded.userAgents, regions: loaded.regions)
    }

    init(trustedProxies: TrustedProxies = TrustedProxies(), userAgents: UserAgentParser? = nil, regions: RegionFile? = nil) {
        self.trustedProxies = trustedProxies
        self.userAgents = userAgents
        self.regions = regions
    }

    /// Reads the settings' files; what cannot be read is logged and left out (the gateway then
    /// adds what it can: a missing User-Agent rules file costs `$browser`, never an upload).
    static func load(_ settings: GatewaySettings, logger: Logger, metrics: PrometheusCollectorRegistry?) -> EnrichmentSources {
        var userAgents: UserAgentParser?
        if let path = settings.userAgentRules {
            do {
                let parser = try UserAgentParser(contentsOf: path)
                userAgents = parser
                logger.info("enrichment.user_agent_rules", metadata: ["path": "\(path)", "rules": "\(parser.ruleCount)", "skipped": "\(parser.skippedRules)"])
            } catch {
                logger.error("enrichment.user_agent_rules_unreadable", metadata: ["path": "\(path)", "error": "\(error)"])
            }
        }
        let regions = settings.geoIPDatabase.map { RegionFile(path: $0, logger: logger, metrics: metrics) }
        return EnrichmentSources(trustedProxies: settings.trustedProxies, userAgents: userAgents, regions: regions)
    }
}

/// The IP database file, opened at start and again whenever it changes on disk (checked every
/// `interval`): a file that cannot be read leaves the one in use in place, with a log line and
/// `datong_gateway_geoip_reloads_total{result="refused"}`.
final class RegionFile: Service, Sendable {
    let path: String
    private let interval: Duration
    private let logger: Logger
    private let state: Mutex<(lookup: (any RegionLookup)?, signature: Signature?)>
    /// Regions by address: a device sends from one address for a while, and its events then cost a
    /// hash lookup instead of the database's. Emptied when full and when the file is replaced.
    private let cache = Mutex<[IPAddress: Region?]>([:])
    static let cacheEntries = 100_000
    private let loaded: Counter?
    private let refused: Counter?

    /// What tells a replaced file: its inode, size and modification time.
    struct Signature: Equatable {
        var inode: UInt64
        var size: UInt64
        var modified: Date
    }

    init(path: String, interval: Duration = .seconds(5), logger: Logger, metrics: PrometheusCollectorRegistry?) {
        self.path = path
        self.interval = interval
        self.logger = logger
        state = Mutex((nil, nil))
        // datong_gateway_geoip_reloads_total{result="loaded"|"refused"}
        let descriptor = MetricNameDescriptor(
            namespace: "datong", subsystem: "gateway", metricName: "geoip_reloads", unitName: "total",
            helpText: "IP database files opened (result=loaded) or refused, the one in use kept (result=refused)")
        loaded = metrics?.makeCounter(descriptor: descriptor, labels: [("result", "loaded")])
        refused = metrics?.makeCounter(descriptor: descriptor, labels: [("result", "refused")])
        reloadIfChanged()
    }

    func region(of address: IPAddress) -> Region? {
        if let known = cache.withLock({ $0[address] }) { return known }
        let found = state.withLock { $0.lookup }?.region(of: address)
        cache.withLock { cache in
            if cache.count >= Self.cacheEntries { cache.removeAll(keepingCapacity: true) }
            cache[address] = .some(found)
        }
        return found
    }

    var isLoaded: Bool { state.withLock { $0.lookup != nil } }

    private func signature() -> Signature? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else { return nil }
        return Signature(
            inode: (attributes[.systemFileNumber] as? NSNumber)?.uint64Value ?? 0, size: (attributes[.size] as? NSNumber)?.uint64Value ?? 0,
            modified: attributes[.modificationDate] as? Date ?? .distantPast)
    }

    /// Opens the file again when its signature changed since the last attempt.
    func reloadIfChanged() {
        let current = signature()
        guard current != state.withLock({ $0.signature }) else { return }
        do {
            let lookup = try RegionDatabase.open(path)
            state.withLock { $0 = (lookup, current) }
            cache.withLock { $0.removeAll() }
            loaded?.increment()
            logger.info("enrichment.geoip_loaded", metadata: ["path": "\(path)"])
        } catch {
            state.withLock { $0.signature = current }
            refused?.increment()
            logger.error(
                "enrichment.geoip_refused",
                metadata: ["path": "\(path)", "error": "\(error)", "in_use": "\(isLoaded ? "the previous file" : "none: no region is added")"])
        }
    }

    func run() async throws {
        while !Task.isShuttingDownGracefully {
            try? await Task.sleep(for: interval)
            reloadIfChanged()
        }
    }
}

extension EnrichmentSources {
    /// The enrichment of one request's records: its client behind the trusted proxies, its
    /// User-Agent, the project's policy.
    func request(_ request: Request, context: DatongRequestContext, policy: EnrichmentPolicy) -> RequestEnrichment {
        let forwarded = trustedProxies.blocks.isEmpty ? [] : request.headers[values: .xForwardedFor].map { Substring($0) }
        return self.request(peer: IPAddress(context.peer), forwardedFor: forwarded, userAgent: request.headers[.userAgent], policy: policy)
    }

    /// The same from the request's parts (gateway-bench enters here).
    package func request(peer: IPAddress?, forwardedFor: [Substring], userAgent: String?, policy: EnrichmentPolicy) -> RequestEnrichment {
        RequestEnrichment(policy: policy, client: trustedProxies.client(peer: peer, forwardedFor: forwardedFor), userAgent: userAgent, sources: self)
    }
}

extension HTTPField.Name {
    static let xForwardedFor = Self("X-Forwarded-For")!
}
