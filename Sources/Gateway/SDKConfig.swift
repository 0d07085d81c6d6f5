import DatongContracts
import DatongCrypto
import DatongJSON
import DatongRuntime
import Foundation
import Hummingbird
import Logging

/// The Sensors-compatible config downloads (docs/PROTOCOL.md section 5), served on the same host and
/// port as `/sa` because SDKs derive the config URL from the upload URL. The documents come from
/// config-service: the most specific one published for the app (platform + app id, then platform,
/// then all apps) wins.
struct SDKConfigHandler: Sendable {
    let config: ServiceClient
    /// The project's encryption keys, whose public halves the remote config hands to SDKs.
    let keyring: EncryptionKeyring

    /// The switches an SDK gets when nothing is published: everything on, the app's own settings.
    static let defaultSwitches: [String: JSONValue] = [
        "disableSDK": .bool(false), "disableDebugMode": .bool(false), "autoTrackMode": .int(-1), "event_blacklist": .array([]), "effect_mode": .int(0),
    ]

    /// The remote-config platforms by the file the SDK asks for.
    static let remotePlatforms = ["iOS.conf": "ios", "Android.conf": "android"]
    /// The visual-config platforms by file.
    static let visualPlatforms = ["iOS.conf": "ios", "Android.conf": "android", "Web.conf": "web"]

    /// `GET …/config/{iOS,Android}.conf?v=&nv=&app_id=&project=`: 200 with `{"v", "configs"}`, or 304
    /// when `v` is the current version. With nothing published the answer is the defaults, version "0".
    func remote(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let file = context.parameters.get("file") ?? ""
        guard let platform = Self.remotePlatforms[file] else {
            throw ServiceError(.notFound, .unknownConfig, "there is no config file '\(UntrustedText.quoted(file, limit: 64))'; use iOS.conf or Android.conf")
        }
        let query = request.uri.queryParameters
        let project = try requestProject(query["project"].map(String.init))
        let document = try await newest(.remoteConfig, project: project, platform: platform, appID: query["app_id"].map(String.init), context: context)
        let keys = try await keyring.keys(for: project, logger: context.logger)
        var version = document.map { Self.version(ofETag: $0.etag) } ?? "0"
        if !keys.published.isEmpty || keys.transportEncryption {
            // A new key, a retired one or the transport switch changes `v`, so an SDK holding an
            // older config fetches the new one instead of getting a 304 (PROTOCOL-ENCRYPTION.md 6.3).
            let keySet = keys.published.map { "\($0.pkv):\($0.type)" }.joined(separator: ",")
            version = String(SHA256Digest.hex(Array("\(version)|\(keySet)|\(keys.transportEncryption)".utf8)).prefix(16))
        }
        if query["v"].map(String.init) == version {
            return Response(status: .notModified, headers: [.cacheControl: "no-cache"])
        }
        var configs = Self.defaultSwitches
        for (name, value) in Self.keyConfigs(keys) { configs[name] = value }
        var answer: [String: JSONValue] = ["v": .string(version)]
        if let document, let published = Self.parse(document.body)?.objectValue {
            // A published remote config is the SDK's answer without `v`: `{"configs": {…}, "nv": …}`.
            for (key, value) in published where key != "v" && key != "configs" { answer[key] = value }
            for (key, value) in published["configs"]?.objectValue ?? [:] { configs[key] = value }
        }
        answer["configs"] = .object(configs)
        return jsonResponse(.ok, JSONValue.object(answer).canonicalText, headers: [.cacheControl: "no-cache"])
    }

    /// The public keys in the form the SDKs parse (docs/PROTOCOL-ENCRYPTION.md section 6.1): `key` the
    /// newest RSA key (no `type`: Android's RSA path breaks on one) with the newest EC key as the
    /// JSON text `key_ec`; `key_v2` the preferred key (EC when there is one); and
    /// `supportTransportEncrypt` when the project allows `gzip=13`.
    static func keyConfigs(_ keys: ProjectKeys) -> [String: JSONValue] {
        var configs: [String: JSONValue] = [:]
        let rsa = keys.newest(.rsa)
        let ec = keys.newest(.ec)
        var key: [String: JSONValue] = [:]
        if let rsa { key = ["pkv": .int(Int64(rsa.pkv)), "public_key": .string(rsa.publicKey)] }
        if let ec {
            let text = JSONValue.object(["pkv": .int(Int64(ec.pkv)), "type": .string("EC"), "public_key": .string(ec.publicKey)]).canonicalText
            key["key_ec"] = .string(text)
        }
        if !key.isEmpty { configs["key"] = .object(key) }
        if let preferred = ec ?? rsa {
            configs["key_v2"] = .object([
                "pkv": .int(Int64(preferred.pkv)),
                "type": .string(preferred.type == KeyType.ec.rawValue ? KeyType.ec.sdkType : KeyType.rsa.sdkType),
                "public_key": .string(preferred.publicKey),
            ])
        }
        if keys.transportEncryption { configs["supportTransportEncrypt"] = .bool(true) }
        return configs
    }

    /// A document config-service published (valid, canonical JSON); nil if it is not one.
    static func parse(_ body: [UInt8]) -> JSONValue? { try? JSONValue(parsing: body) }

    /// `GET …/config/visualized/{iOS,Android,Web}.conf?app_id=&project=&v=`: 200 with the events,
    /// 304 when `v` is current, 205 when nothing is published (the SDK clears its cache). Web may ask
    /// for JSONP with `callbackName`, answered as `NAME(status, config)`.
    func visual(_ request: Request, context: DatongRequestContext) async throws -> Response {
        let file = context.parameters.get("file") ?? ""
        guard let platform = Self.visualPlatforms[file] else {
            throw ServiceError(
                .notFound, .unknownConfig, "there is no visual config file '\(UntrustedText.quoted(file, limit: 64))'; use iOS.conf, Android.conf or Web.conf"
            )
        }
        let query = request.uri.queryParameters
        var callback: String?
        if let name = query["callbackName"].map(String.init) {
            guard platform == "web", Self.isCallbackName(name) else {
                throw ServiceError.badRequest(
                    .invalidCallback,
                    "callbackName must be a JavaScript identifier path (letters, digits, _, $ and dots, at most 64 characters), for Web.conf only")
            }
            callback = name
        }
        let project = try requestProject(query["project"].map(String.init))
        let appID = query["app_id"].map(String.init)
        let document = try await newest(.visualConfig, project: project, platform: platform, appID: appID, context: context)
        guard let document else { return Self.answer(.resetContent, nil, callback: callback) }
        let version = Self.version(ofETag: document.etag)
        if query["v"].map(String.init) == version { return Self.answer(.notModified, nil, callback: callback) }
        var answer = Self.parse(document.body)?.objectValue ?? [:]
        answer["version"] = .string(version)
        answer["os"] = .string(file.replacingOccurrences(of: ".conf", with: ""))
        answer["project"] = .string(project)
        if let appID { answer["app_id"] = .string(appID) }
        if answer["events"] == nil { answer["events"] = .array([]) }
        return Self.answer(.ok, JSONValue.object(answer).canonicalText, callback: callback)
    }

    /// A visual-config answer, plain or as JSONP (always HTTP 200 then: a script tag sees no status).
    private static func answer(_ status: HTTPResponse.Status, _ body: String?, callback: String?) -> Response {
        guard let callback else {
            guard let body else { return Response(status: status, headers: [.cacheControl: "no-cache"]) }
            return jsonResponse(status, body, headers: [.cacheControl: "no-cache"])
        }
        let script = "\(callback)(\(status.code), \(body ?? "null"))"
        return Response(
            status: .ok,
            headers: [.contentType: "application/javascript; charset=utf-8", .cacheControl: "no-cache", .xContentTypeOptions: "nosniff"],
            body: .init(byteBuffer: ByteBuffer(string: script))
        )
    }

    /// The longest `app_id` a document can be published for (config-service's rule).
    static let maxAppIDBytes = 128

    /// The most specific published document: for the app on this platform, for the platform, for all.
    private func newest(
        _ kind: DocumentKind, project: String, platform: String, appID: String?, context: DatongRequestContext
    ) async throws -> (etag: String, body: [UInt8])? {
        if let appID, appID.utf8.count > Self.maxAppIDBytes {
            throw ServiceError.badRequest(.invalidAppId, "app_id is \(appID.utf8.count) bytes long; the limit is \(Self.maxAppIDBytes)")
        }
        var scopes: [[(String, String)]] = [[("platform", platform)], []]
        if let appID, !appID.isEmpty { scopes.insert([("platform", platform), ("app_id", appID)], at: 0) }
        for scope in scopes {
            var components = URLComponents()
            components.path = "/v1/projects/\(project)/\(kind.rawValue)"
            components.queryItems = scope.isEmpty ? nil : scope.map { URLQueryItem(name: $0.0, value: $0.1) }
            switch try await config.fetchDocument(
                components.string ?? components.path, etag: nil, maxBytes: DocumentKind.largestDocumentBytes, logger: context.logger)
            {
            case .document(let etag, let body): return (etag ?? "", body)
            case .absent, .notModified: continue
            }
        }
        return nil
    }

    /// The version string SDKs cache: the start of the document's ETag (its SHA-256), the same on
    /// every replica and unchanged by a rollback to the same content.
    static func version(ofETag etag: String) -> String {
        String(etag.filter { $0.isHexDigit }.prefix(16))
    }

    /// `sa_jsonp_1`, `window.sensors.cb`: what may be written before `(` in a script.
    static func isCallbackName(_ name: String) -> Bool {
        guard (1...64).contains(name.utf8.count), !name.hasPrefix("."), !name.hasSuffix("."), !name.contains("..") else { return false }
        return name.utf8.allSatisfy { byte in
            (byte | 0x20) >= UInt8(ascii: "a") && (byte | 0x20) <= UInt8(ascii: "z") || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "$") || byte == UInt8(ascii: ".")
        } && !(name.first?.isNumber ?? true)
    }
}
