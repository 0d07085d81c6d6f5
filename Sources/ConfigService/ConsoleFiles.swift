import DatongRuntime
import Foundation
import Hummingbird

/// The console's static files (`Sources/ConfigService/Console`, bundled as package resources), read
/// once at start and served under `/console/` with an ETag, so a browser revalidates and gets a 304.
/// The page talks only to this service's admin API, same origin: the policy below allows nothing
/// else, and the admin API sends no CORS headers, so other origins cannot call it from a browser.
struct ConsoleFiles: ServiceAPI {
    struct File: Sendable {
        let bytes: ByteBuffer
        let contentType: String
        let etag: String
    }

    let files: [String: File]

    static let headers: HTTPFields = [
        .cacheControl: "no-cache",
        .contentSecurityPolicy:
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        .xContentTypeOptions: "nosniff",
        .referrerPolicy: "no-referrer",
        .xFrameOptions: "DENY",
    ]

    /// The files under `directory`, by their path relative to it; at most 2 MiB in all.
    init(directory: URL?) {
        var files: [String: File] = [:]
        if let directory, let walker = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: [.isRegularFileKey]) {
            var total = 0
            for case let url as URL in walker {
                guard (try? url.resourceValues(forKeys: [.isRegularFileKey]))?.isRegularFile == true,
                    let data = try? Data(contentsOf: url), total + data.count <= 2 << 20
                else { continue }
                total += data.count
                let relative = String(url.standardizedFileURL.path.dropFirst(directory.standardizedFileURL.path.count + 1))
                let digest = SHA256Digest.hex(Array(data))
                files[relative] = File(bytes: ByteBuffer(bytes: data), contentType: Self.contentType(of: relative), etag: "\"\(digest.prefix(32))\"")
            }
        }
        self.files = files
    }

    /// The bundled console.
    static func bundled() -> ConsoleFiles {
        ConsoleFiles(directory: Bundle.module.url(forResource: "Console", withExtension: nil))
    }

    static func contentType(of path: String) -> String {
        switch path.split(separator: ".").last {
        case "html": return "text/html; charset=utf-8"
        case "css": return "text/css; charset=utf-8"
        case "js": return "text/javascript; charset=utf-8"
        case "svg": return "image/svg+xml"
        case "png": return "image/png"
        default: return "application/octet-stream"
        }
    }

    func register(on router: Router<DatongRequestContext>) {
        // The router takes /console and /console/ as one path; the page's relative links need the slash.
        router.get("/console") { request, _ in
            request.uri.path.hasSuffix("/") ? serve("index.html", request) : Response(status: .movedPermanently, headers: [.location: "/console/"])
        }
        router.get("/console/**") { request, context in
            serve(context.parameters.getCatchAll().joined(separator: "/"), request)
        }
    }

    private func serve(_ path: String, _ request: Request) -> Response {
        guard let file = files[path] else {
            return jsonResponse(
                .notFound,
                files.isEmpty
                    ? #"{"error":"no_console","message":"this build of config-service has no console files (datong_ConfigService.resources beside the binary)"}"#
                    : #"{"error":"not_found","message":"the console has no such file"}"#)
        }
        var headers = Self.headers
        headers[.eTag] = file.etag
        if request.headers[.ifNoneMatch] == file.etag {
            return Response(status: .notModified, headers: headers)
        }
        headers[.contentType] = file.contentType
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: file.bytes))
    }
}
