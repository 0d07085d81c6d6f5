import DatongContracts
import DatongJSON
import DatongRuntime
import Foundation
import Hummingbird

/// What apps download from the host they upload to, beside the Sensors config files: the codeless
/// tracking table, the H5 domain whitelist and the app-links route table (`…/config/NAME.json`,
/// under any path prefix, revalidated with ETag / If-None-Match), and the files Apple and Google
/// fetch to verify Universal Links and App Links (`/.well-known/…`), built from the app-links
/// document of `linksProject`. The documents come from config-service: the most specific one
/// published for the app (platform + app id, then platform, then all apps) wins.
struct AppDownloadsHandler: Sendable {
    let config: ServiceClient
    /// The project whose app-links document the `/.well-known/` files are built from (`APP_LINKS_PROJECT`).
    let linksProject: String

    /// The documents apps download, by file name.
    static let files: [String: DocumentKind] = [
        "tracking-table.json": .trackingTable, "h5-domain-whitelist.json": .h5DomainWhitelist, "app-links.json": .appLinks,
    ]
    static let platforms: Set<String> = ["ios", "android", "web"]

    /// `GET …/config/{tracking-table,h5-domain-whitelist,app-links}.json?project=&platform=&app_id=&app_version=`.
    func document(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let file = context.parameters.get("file") ?? ""
        guard let kind = Self.files[file] else {
            throw ServiceError(
                .notFound, .unknownConfig,
                "there is no file '\(UntrustedText.quoted(file, limit: 64))'; use \(Self.files.keys.sorted().joined(separator: ", "))")
        }
        let query = request.uri.queryParameters
        let project = try requestProject(query["project"].map(String.init))
        var platform: String?
        if let value = query["platform"].map({ String($0).lowercased() }), !value.isEmpty {
            guard Self.platforms.contains(value) else { throw ServiceError.badRequest(.invalidPlatform, "platform must be ios, android or web") }
            platform = value
        }
        let appID = query["app_id"].map(String.init).flatMap { $0.isEmpty ? nil : $0 }
        if let appID, appID.utf8.count > SDKConfigHandler.maxAppIDBytes {
            throw ServiceError.badRequest(.invalidAppId, "app_id is \(appID.utf8.count) bytes long; the limit is \(SDKConfigHandler.maxAppIDBytes)")
        }
        var scopes: [[(String, String)]] = [[]]
        if let platform {
            scopes.insert([("platform", platform)], at: 0)
            if let appID { scopes.insert([("platform", platform), ("app_id", appID)], at: 0) }
        }
        let appVersion = query["app_version"].map(String.init).flatMap { $0.isEmpty ? nil : $0 }
        let held = request.headers[.ifNoneMatch]
        for scope in scopes {
            var components = URLComponents()
            components.path = "/v1/projects/\(project)/\(kind.rawValue)"
            let items = (scope + (appVersion.map { [("app_version", $0)] } ?? [])).map { URLQueryItem(name: $0.0, value: $0.1) }
            components.queryItems = items.isEmpty ? nil : items
            switch try await config.fetchDocument(
                components.string ?? components.path, etag: held, maxBytes: DocumentKind.largestDocumentBytes, logger: context.logger)
            {
            case .document(let etag, let body):
                var headers: HTTPFields = [.cacheControl: "no-cache", .contentType: "application/json; charset=utf-8"]
                if let etag { headers[.eTag] = etag }
                return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
            case .notModified:
                var headers: HTTPFields = [.cacheControl: "no-cache"]
                if let held { headers[.eTag] = held }
                return Response(status: .notModified, headers: headers)
            case .absent:
                continue
            }
        }
        throw ServiceError(.notFound, .noDocument, "no \(kind.rawValue) is published for project '\(project)' and this platform/app")
    }

    /// `GET /.well-known/apple-app-site-association`: the `applinks` of every app in the document's
    /// `apple` section, in both the current form (`appIDs` + `components`, iOS 13+) and the older one
    /// (`appID` + `paths`), as Apple documents them. Served as JSON at that exact path, never redirected.
    func appleAppSiteAssociation(_ request: Request, context: DatongRequestContext) async throws -> Response {
        try await wellKnown(request, context: context, name: "apple-app-site-association") { document in
            guard let apps = document["apple"]?.arrayValue, !apps.isEmpty else { return nil }
            let details: [JSONValue] = apps.compactMap { app in
                guard let team = app["teamID"]?.stringValue, let bundle = app["bundleID"]?.stringValue, let paths = Self.strings(app["paths"])
                else { return nil }
                let appID = JSONValue.string("\(team).\(bundle)")
                let components: [JSONValue] = paths.map { path in
                    path.hasPrefix("NOT ") ? .object(["/": .string(String(path.dropFirst(4))), "exclude": .bool(true)]) : .object(["/": .string(path)])
                }
                return .object(["appID": appID, "paths": .array(paths.map(JSONValue.string)), "appIDs": .array([appID]), "components": .array(components)])
            }
            return .object(["applinks": .object(["apps": .array([]), "details": .array(details)])])
        }
    }

    /// `GET /.well-known/assetlinks.json`: one Digital Asset Links statement per app of the document's
    /// `android` section, letting it handle all URLs of this host.
    func assetLinks(_ request: Request, context: DatongRequestContext) async throws -> Response {
        try await wellKnown(request, context: context, name: "assetlinks.json") { document in
            guard let apps = document["android"]?.arrayValue, !apps.isEmpty else { return nil }
            return .array(
                apps.compactMap { app -> JSONValue? in
                    guard let package = app["packageName"], package.stringValue != nil, let prints = Self.strings(app["sha256CertFingerprints"]) else {
                        return nil
                    }
                    return .object([
                        "relation": .array([.string("delegate_permission/common.handle_all_urls")]),
                        "target": .object([
                            "namespace": .string("android_app"), "package_name": package, "sha256_cert_fingerprints": .array(prints.map(JSONValue.string)),
                        ]),
                    ])
                })
        }
    }

    /// A file built from the links project's app-links document: 404 when nothing is published for
    /// it, 304 when the caller holds the current one (its ETag follows the document's).
    private func wellKnown(
        _ request: Request, context: DatongRequestContext, name: String, build: ([String: JSONValue]) -> JSONValue?
    ) async throws -> Response {
        let path = "/v1/projects/\(linksProject)/\(DocumentKind.appLinks.rawValue)"
        guard
            case .document(let documentTag, let body) = try await config.fetchDocument(
                path, etag: nil, maxBytes: DocumentKind.largestDocumentBytes, logger: context.logger),
            let document = (try? JSONValue(parsing: body))?.objectValue,
            let file = build(document)
        else {
            throw ServiceError(.notFound, .noAppLinks, "project '\(linksProject)' publishes no app-links with what \(name) needs")
        }
        let etag = "\"\(name)-\((documentTag ?? "").filter(\.isHexDigit).prefix(32))\""
        let headers: HTTPFields = [.eTag: etag, .cacheControl: "public, max-age=300, must-revalidate", .contentType: "application/json"]
        let held = (request.headers[.ifNoneMatch] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        if held.contains(etag) { return Response(status: .notModified, headers: headers) }
        var data: [UInt8] = []
        file.write(to: &data)
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// A JSON array of strings, or nil.
    private static func strings(_ value: JSONValue?) -> [String]? {
        guard let elements = value?.arrayValue else { return nil }
        let strings = elements.compactMap(\.stringValue)
        return strings.count == elements.count ? strings : nil
    }
}
