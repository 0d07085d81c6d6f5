import AsyncHTTPClient
import DatongContracts
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// What config-service's `GET /v1/status` sees of a service: its `/ready` and `/metrics`, once
/// for each replica behind its URL. A compose service scaled to N (or a Kubernetes headless
/// service) answers its name with N addresses; each is asked on its own, so a replica that is
/// down shows as one row of its own instead of as a balancer that answers now and then.
package enum ServiceProbes {
    /// The most replicas of one service asked.
    static let maxReplicas = 32

    /// Every replica of the service at `baseURL`: one probe per address its host name has (IPv4
    /// ones when it has both, as compose networks give), or one probe of `baseURL` itself for an
    /// address, a name with one address, an `https` URL (its certificate names the host) or a name
    /// that does not resolve.
    static func replicas(name: String, baseURL: String?) async -> [ServiceProbe] {
        guard let baseURL else { return [] }
        let urls = await replicaURLs(baseURL)
        return await withTaskGroup(of: (Int, ServiceProbe).self) { group in
            for (index, url) in urls.enumerated() {
                group.addTask { (index, await probe(name: name, url: url)) }
            }
            var probes: [(Int, ServiceProbe)] = []
            for await probe in group { probes.append(probe) }
            return probes.sorted { $0.0 < $1.0 }.map(\.1)
        }
    }

    /// The service's `/ready` and `/metrics` (public operational endpoints, no token), each
    /// within 3 s.
    static func probe(name: String, url baseURL: String) async -> ServiceProbe {
        func get(_ path: String, limit: Int) async -> (status: UInt, text: String)? {
            var request = HTTPClientRequest(url: baseURL + path)
            request.method = .GET
            guard let response = try? await HTTPClient.shared.execute(request, timeout: .seconds(3)),
                let body = try? await response.body.collect(upTo: limit)
            else { return nil }
            return (response.status.code, String(buffer: body))
        }
        async let ready = get("/ready", limit: 64 << 10)
        async let metrics = get("/metrics", limit: ServiceProbe.maxMetricsBytes)
        let (readiness, text) = await (ready, metrics)
        return ServiceProbe(
            name: name, url: baseURL, ready: readiness?.status == 200, readiness: readiness?.text, metrics: text?.text,
            error: readiness == nil && text == nil ? "\(name) cannot be reached at \(baseURL)" : nil)
    }

    /// `baseURL` once per address of its host (see `replicas`), in the order resolved.
    package static func replicaURLs(_ baseURL: String) async -> [String] {
        guard let url = URL(string: baseURL), url.scheme == "http", let host = url.host, !host.isEmpty,
            Self.literal(host) == nil
        else { return [baseURL] }
        let port = url.port ?? 80
        // getaddrinfo blocks: on a thread of NIO's pool, never on an event loop.
        guard let addresses = try? await NIOThreadPool.singleton.runIfActive({ Self.resolve(host) }), addresses.count > 1 else {
            return [baseURL]
        }
        return addresses.prefix(maxReplicas).map { address in
            "http://\(address.contains(":") ? "[\(address)]" : address):\(port)\(url.path)"
        }
    }

    /// `text`'s address family when it is an IPv4 or IPv6 address.
    private static func literal(_ text: String) -> Int32? {
        var buffer = [UInt8](repeating: 0, count: 16)
        let bare = text.hasPrefix("[") && text.hasSuffix("]") ? String(text.dropFirst().dropLast()) : text
        if inet_pton(AF_INET, bare, &buffer) == 1 { return AF_INET }
        if inet_pton(AF_INET6, bare, &buffer) == 1 { return AF_INET6 }
        return nil
    }

    /// The distinct addresses of `host` (IPv4 ones when there are any), as text.
    package static func resolve(_ host: String) -> [String] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &list) == 0, let first = list else { return [] }
        defer { freeaddrinfo(first) }
        var (v4, v6): ([String], [String]) = ([], [])
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let current = entry {
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            switch current.pointee.ai_family {
            case AF_INET:
                current.pointee.ai_addr.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { address in
                    var raw = address.pointee.sin_addr
                    if inet_ntop(AF_INET, &raw, &text, socklen_t(text.count)) != nil { v4.append(Self.string(text)) }
                }
            case AF_INET6:
                current.pointee.ai_addr.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { address in
                    var raw = address.pointee.sin6_addr
                    if inet_ntop(AF_INET6, &raw, &text, socklen_t(text.count)) != nil { v6.append(Self.string(text)) }
                }
            default:
                break
            }
            entry = current.pointee.ai_next
        }
        var seen = Set<String>()
        return (v4.isEmpty ? v6 : v4).filter { seen.insert($0).inserted }
    }

    /// The text of a NUL-terminated C buffer.
    private static func string(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
