import DatongRuntime
import Foundation
import FoundationEssentials
import Hummingbird

/// SDKs replace only the last path segment of the server URL they are given (docs/PROTOCOL.md section 1),
/// so `https://host/any/prefix/sa` uploads to `/any/prefix/sa.gif` or `/any/prefix/debug`. This
/// router routes those paths as if they had no prefix, before the route lookup.
struct SDKPathRouter<Inner: HTTPResponderBuilder>: HTTPResponderBuilder where Inner.Responder.Context == DatongRequestContext {
    let inner: Inner

    func buildResponder() -> SDKPathResponder<Inner.Responder> {
        SDKPathResponder(inner: inner.buildResponder())
    }
}

struct SDKPathResponder<Inner: HTTPResponder>: HTTPResponder where Inner.Context == DatongRequestContext {
    let inner: Inner

    func respond(to request: Request, context: DatongRequestContext) async throws -> Response {
        guard let path = request.head.path, let rewritten = SDKPaths.unprefixed(path) else {
            return try await inner.respond(to: request, context: context)
        }
        var head = request.head
        head.path = rewritten
        return try await inner.respond(to: Request(head: head, body: request.body), context: context)
    }
}

/// The upload and config paths SDKs build from a server URL.
enum SDKPaths {
    /// The last segments the SDKs use.
    static let endpoints: Set<Substring> = ["sa", "sa.gif", "debug"]

    /// `/prefix/sa.gif?q` → `/sa.gif?q`, `/prefix/config/iOS.conf?q` → `/config/iOS.conf?q`
    /// (`tracking-table.json` and the other app downloads alike); nil when
    /// the path needs no change.
    static func unprefixed(_ path: String) -> String? {
        let end = path.firstIndex(of: "?") ?? path.endIndex
        let route = path[..<end]
        guard let slash = route.lastIndex(of: "/"), slash != route.startIndex else { return nil }
        let last = route[route.index(after: slash)...]
        if endpoints.contains(last) { return String(path[slash...]) }
        // Config downloads: …/config/X.conf, …/config/visualized/X.conf and …/config/X.json.
        guard last.hasSuffix(".conf") || last.hasSuffix(".json"), let config = route.range(of: "/config/", options: .backwards),
            config.lowerBound != route.startIndex
        else { return nil }
        let rest = route[config.upperBound...]
        guard !rest.contains("/") || (rest.hasPrefix("visualized/") && rest.dropFirst("visualized/".count).contains("/") == false) else {
            return nil
        }
        return String(path[config.lowerBound...])
    }
}
