import DatongContracts
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// The request context of every Datong service: Hummingbird's core context plus the request id that
/// travels from the gateway to the services it calls.
package struct DatongRequestContext: RequestContext {
    package var coreContext: CoreRequestContextStorage
    /// The `X-Request-Id` this request came with, or one made up on arrival.
    package var requestID: String = ""
    /// The connection's peer: the client, or the proxy in front of it.
    package let peer: SocketAddress?

    package init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        peer = source.channel.remoteAddress
    }
}

/// Takes the caller's `X-Request-Id` (when it is a sane token) or makes one, puts it in the logger's
/// metadata as `request.id`, and echoes it on the response.
package struct RequestIDMiddleware: RouterMiddleware {
    package typealias Context = DatongRequestContext

    package init() {}

    package func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        var context = context
        let incoming = request.headers[.requestID]
        let id = incoming.flatMap(Self.accept) ?? Self.makeID()
        context.requestID = id
        context.logger[metadataKey: "request.id"] = .string(id)
        do {
            var response = try await next(request, context)
            response.headers[.requestID] = id
            return response
        } catch let error as any HTTPResponseError {
            var response = try error.response(from: request, context: context)
            response.headers[.requestID] = id
            return response
        }
    }

    static func accept(_ value: String) -> String? {
        guard (1...128).contains(value.utf8.count),
            value.utf8.allSatisfy({
                $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".")
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
                    || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0)
                    || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0)
            })
        else { return nil }
        return value
    }

    static func makeID() -> String {
        var generator = SystemRandomNumberGenerator()
        let high = generator.next() as UInt64
        let low = generator.next() as UInt64
        return hex(high) + hex(low)
    }

    private static func hex(_ value: UInt64) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}

extension HTTPField.Name {
    /// `X-Request-Id`, carried from the gateway to every service a request reaches.
    package static let requestID = HTTPField.Name(DatongHeader.requestID)!
    /// `X-Datong-Version`, the version number of a served config document.
    package static let documentVersion = HTTPField.Name(DatongHeader.documentVersion)!
    /// `Dry-Run`, the SDKs' debug-mode switch: `true` validates without writing.
    package static let dryRun = HTTPField.Name("Dry-Run")!
    /// Headers of the console's pages (HTTPTypes names the others).
    package static let referrerPolicy = HTTPField.Name("Referrer-Policy")!
    package static let xFrameOptions = HTTPField.Name("X-Frame-Options")!
}

extension DatongRequestContext {
    /// The route's `:project`, checked against `ProjectName` (400 `invalid_project` otherwise).
    package func project() throws -> String {
        guard let project = parameters.get("project"), ProjectName.isValid(project) else { throw ServiceError.invalidProject }
        return project
    }
}

extension Request {
    /// An optional integer query parameter: absent or empty is `default`; otherwise it must lie in
    /// `range` (400 `invalid_limit` naming the parameter).
    package func integerParameter(_ name: String, in range: ClosedRange<Int>, default value: Int) throws -> Int {
        guard let raw = uri.queryParameters[Substring(name)], !raw.isEmpty else { return value }
        guard let number = Int(raw), range.contains(number) else {
            throw ServiceError.badRequest(.invalidLimit, "\(name) must be \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }
}

/// RFC 9112 §3.2: a request must carry exactly one `Host`, a valid `uri-host [":" port]` (empty is
/// allowed, for a target without an authority); anything else is a 400 before any route runs.
/// SwiftNIO gives the first `Host` as the request's authority and leaves a second among the fields.
package struct HostHeaderMiddleware: RouterMiddleware {
    package typealias Context = DatongRequestContext

    package init() {}

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let host = request.head.authority else {
            throw ServiceError(.badRequest, .invalidHost, "the request has no Host header", closesConnection: true)
        }
        guard !request.headers.contains(where: { $0.name.canonicalName == "host" }) else {
            throw ServiceError(.badRequest, .invalidHost, "the request has more than one Host header", closesConnection: true)
        }
        guard Self.isValid(host) else {
            throw ServiceError(.badRequest, .invalidHost, "the Host header is not a host[:port]", closesConnection: true)
        }
        return try await next(request, context)
    }

    /// `uri-host [":" port]` (RFC 3986): a bracketed IP literal, or a reg-name or IPv4 address of
    /// unreserved, sub-delim and percent-encoded characters; the port digits only.
    static func isValid(_ host: String) -> Bool {
        var bytes = Substring(host).utf8[...]
        guard bytes.count <= 1024 else { return false }
        if bytes.first == UInt8(ascii: "[") {
            guard let close = bytes.firstIndex(of: UInt8(ascii: "]")) else { return false }
            let literal = bytes[bytes.index(after: bytes.startIndex)..<close]
            guard !literal.isEmpty, literal.allSatisfy({ isHexDigit($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") }) else {
                return false
            }
            bytes = bytes[bytes.index(after: close)...]
        } else {
            let end = bytes.firstIndex(of: UInt8(ascii: ":")) ?? bytes.endIndex
            guard bytes[..<end].allSatisfy(isRegNameByte) else { return false }
            bytes = bytes[end...]
        }
        guard let colon = bytes.first else { return true }
        return colon == UInt8(ascii: ":") && bytes.dropFirst().count <= 5 && bytes.dropFirst().allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte | 0x20 >= UInt8(ascii: "a") && byte | 0x20 <= UInt8(ascii: "f"))
    }

    private static func isRegNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "%"): true
        case UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "("), UInt8(ascii: ")"),
            UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ","), UInt8(ascii: ";"), UInt8(ascii: "="):
            true
        default: false
        }
    }
}
