import DatongContracts
import DatongJSON
import Foundation

/// The relaying app's side of a bridge relay: who is using the app, where the app uploads, and the
/// device and app presets it adds to every H5 event (the `app` object of `POST /v1/bridge`).
package struct AppContext: Sendable, Equatable {
    /// Where the app's own SDK uploads (`server_url`), by hostname and project.
    var server: ServerTarget
    var anonymousID: String
    /// Only when the app is logged in; an H5 `$SignUp` in the relay logs it in for later messages.
    var loginID: String?
    /// The app's `$identity_*` pairs.
    var identities: [String: String]
    /// The app's device and app presets (`$os`, `$model`, `$app_version`, …).
    let properties: [String: JSONValue]
    var appVersion: String?
    /// The URL the WebView shows, for records that carry no `$url` of their own.
    var pageURL: String?
    /// The presets of `properties` that replace the page's on bridged events, sorted by key.
    let presets: [PropertyPreset]
    /// The `server_url` of the relay's last record and the server it names: a page's messages all
    /// name the same one, so the URL is read once, not once a message.
    fileprivate var lastServer: KnownServerURL?

    /// Reads and checks the `app` object; a problem is a 400 for the whole relay. What the app sends
    /// ends up on every relayed event, so it meets the same rules as a record's own fields.
    init(_ value: JSONValue?, limits: UploadLimits) throws(RecordRefusal) {
        guard case .object(let app)? = value else { throw .init("the body needs an 'app' object") }
        guard let url = app["server_url"]?.stringValue, let server = ServerTarget(url: url) else {
            throw .init("app.server_url must be the URL the app uploads to, e.g. https://sa.example.com/sa?project=production")
        }
        guard let anonymousID = app["anonymous_id"]?.stringValue, !anonymousID.isEmpty, RecordNormalizer.idProblem(anonymousID) == nil else {
            throw .init("app.anonymous_id must be the app's anonymous id (1 to \(IDRule.maxLength) characters, no NUL)")
        }
        var loginID: String?
        switch app["login_id"] {
        case nil, .null?: loginID = nil
        case .string(let value)? where value.isEmpty: loginID = nil
        case .string(let value)? where RecordNormalizer.idProblem(value) == nil: loginID = value
        default: throw .init("app.login_id must be a string of at most \(IDRule.maxLength) characters (omit it when logged out)")
        }
        var identities: [String: String] = [:]
        switch app["identities"] {
        case nil, .null?: break
        case .object(let pairs)?:
            for (key, value) in pairs {
                if let problem = RecordNormalizer.nameProblem(key) { throw .init("app.identities key '\(UntrustedText.quoted(key))': \(problem)") }
                guard let text = value.stringValue else { throw .init("app.identities.\(UntrustedText.quoted(key)) is not a string") }
                if let problem = RecordNormalizer.idProblem(text) { throw .init("app.identities.\(UntrustedText.quoted(key)) \(problem)") }
                identities[key] = text
            }
        default: throw .init("app.identities must be an object of $identity_* keys and string values")
        }
        var properties: [String: JSONValue] = [:]
        switch app["properties"] {
        case nil, .null?: break
        case .object(let object)?:
            guard object.count <= limits.maxPropertiesPerRecord else {
                throw .init("app.properties has \(object.count) properties; the limit is \(limits.maxPropertiesPerRecord)")
            }
            for (key, value) in object {
                if let problem = RecordNormalizer.nameProblem(key) { throw .init("app.properties key '\(UntrustedText.quoted(key))': \(problem)") }
                if let problem = Self.presetProblem(value, limits: limits) { throw .init("app.properties.\(UntrustedText.quoted(key)) \(problem)") }
            }
            // They go on every message of the relay: bounded, so that a relay's records are never
            // more than its body plus maxBridgeMessages × this (the collector call stays bounded).
            let size = JSONValue.object(object).canonicalText.utf8.count
            guard size <= Self.maxAppPropertiesBytes else {
                throw .init("app.properties is \(size) bytes of JSON; the limit is \(Self.maxAppPropertiesBytes)")
            }
            properties = object
        default: throw .init("app.properties must be an object")
        }
        var appVersion: String?
        switch app["app_version"] {
        case nil, .null?: appVersion = properties["$app_version"]?.stringValue
        case .string(let value)? where RecordNormalizer.idProblem(value) == nil: appVersion = value
        default: throw .init("app.app_version must be a string of at most \(IDRule.maxLength) characters")
        }
        var pageURL: String?
        switch app["page_url"] {
        case nil, .null?: pageURL = nil
        case .string(let value)? where limits.stringProblem(value) == nil: pageURL = value
        default: throw .init("app.page_url must be a string of at most \(limits.maxStringLength) characters, no NUL")
        }
        self.init(
            server: server, anonymousID: anonymousID, loginID: loginID, identities: identities,
            properties: properties, appVersion: appVersion, pageURL: pageURL)
    }

    /// The most app.properties may hold, as JSON text (an app's presets and super properties are a
    /// few hundred bytes; they are copied onto each of up to `MAX_BRIDGE_MESSAGES` records).
    static let maxAppPropertiesBytes = 16 << 10

    /// Why an app property cannot be put on events, or nil: presets are strings, numbers or
    /// booleans, within the string limit.
    private static func presetProblem(_ value: JSONValue, limits: UploadLimits) -> String? {
        switch value {
        case .null, .bool, .int: return nil
        case .number: return value.isFinite ? nil : "is a number outside what a double holds"
        case .string(let text):
            return limits.stringProblem(text)
        case .array, .object: return "must be a string, number or boolean"
        }
    }

    init(
        server: ServerTarget, anonymousID: String, loginID: String? = nil, identities: [String: String] = [:],
        properties: [String: JSONValue] = [:], appVersion: String? = nil, pageURL: String? = nil
    ) {
        self.server = server
        self.anonymousID = anonymousID
        self.loginID = loginID
        self.identities = identities
        self.properties = properties
        self.appVersion = appVersion
        self.pageURL = pageURL
        // Every property the app sends goes over the page's, as the Android SDK's H5TrackAssemble
        // merges its preset, super-property and real-time plugins over an H5 event's properties
        // (PropertyPluginManager.propertiesHandler); the page keeps what its own SDK says of itself
        // (SAPresetPropertyPlugin removes $lib, $lib_version and $app_version when the event has them).
        presets = properties.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }).map { key in
            PropertyPreset(key: key, value: properties[key]!, pageWins: BridgeRewriter.pageOwnedProperties.contains(key))
        }
    }
}

/// Verifies a record an H5 page handed to its app and rewrites it exactly as the app's SDK would
/// before uploading it (docs/PROTOCOL.md section 3). The page's `_track_id` is kept: the app SDK
/// gives the record a fresh one once, when it relays it, and a relay's retry resends the page's.
enum BridgeRewriter {
    /// Identity keys that name the app's device: the app's own values replace the page's.
    static let appDeviceKeys: Set<String> = [
        "$identity_idfv", "$identity_ios_uuid", "$identity_android_id", "$identity_android_uuid", "$identity_anonymous_id",
    ]

    /// App properties that do not replace the page's own on a bridged event: what the page's SDK says
    /// of itself (as the Android SDK keeps them), and what describes the page, which only the page knows.
    static let pageOwnedProperties: Set<String> = ["$lib", "$lib_version", "$app_version", "$url", "$url_path", "$title", "$referrer"]

    /// Checks where the record was meant to go and which page sent it, and says what the app puts in
    /// place of the record's own fields for `project`. An H5 `$SignUp` logs `app` in, so later
    /// messages of the same relay carry the login id.
    /// - Parameter fields: `record`'s fields when the caller already read them (the normalizer reads
    ///   the same ones next).
    static func rewrite(
        _ record: JSONRef, fields: RecordFields? = nil, app: inout AppContext, project: String, whitelists: ProjectWhitelists
    ) -> Result<BridgeOverrides, RecordRefusal> {
        let fields = fields ?? RecordFields(record)
        guard let url = fields.serverURL?.stringValue else {
            return .failure(.init("the record has no server_url, so where the page meant to send it cannot be checked"))
        }
        let known: KnownServerURL
        if let last = app.lastServer, last.url == url {
            known = last
        } else {
            known = KnownServerURL(url: url, target: ServerTarget(url: url))
            app.lastServer = known
        }
        guard let target = known.target else {
            return .failure(.init("the record's server_url '\(UntrustedText.quoted(url, limit: 200))' is not a URL with a host"))
        }
        let matchesApp = target == app.server && target.project == project
        guard matchesApp || whitelists.allowsServer(target) else {
            return .failure(
                .init(
                    "server_url \(target) matches neither the app's server \(app.server) for project \(project) "
                        + "nor project \(project)'s server-URL whitelist"
                ))
        }
        if let problem = whitelists.pageProblem(pageURL: fields.properties?["$url"]?.stringValue ?? app.pageURL, project: project) {
            return .failure(.init(problem))
        }

        var user: BridgeOverrides.User?
        let type = fields.type?.stringValue ?? ""
        if !RecordTypes.isItem(type) {
            var originalID: String?
            if type == "track_signup" {
                // The page logged in: so does the app, and the signup names the app's anonymous id.
                if let login = fields.distinctID?.stringValue, !login.isEmpty { app.loginID = login }
                originalID = app.anonymousID
            }
            if type == "track_id_unbind" {
                // The app SDK leaves a page's unbind as the page wrote it: the one pair it detaches,
                // under the app's distinct_id, no anonymous id (H5TrackAssemble.updateIdentities and
                // checkIDConsistent, sa-sdk-android).
                var identities: [String: String] = [:]
                if let sent = fields.identities {
                    for (keyRef, value) in sent.members {
                        guard let text = value.stringValue else {
                            return .failure(.init("identity '\(UntrustedText.quoted(keyRef.stringValue ?? "", limit: 100))' is not a string"))
                        }
                        identities[keyRef.stringValue(sharing: IdentityRecord.commonKeys) ?? ""] = text
                    }
                }
                user = BridgeOverrides.User(
                    distinctID: app.loginID ?? app.anonymousID, anonymousID: nil, loginID: app.loginID, originalID: nil, identities: identities
                )
                return .success(BridgeOverrides(user: user, appVersion: app.appVersion, presets: app.presets))
            }
            // The page's identities minus its device ids, plus the app's: the cookie id is kept.
            var identities: [String: String] = [:]
            if let sent = fields.identities {
                for (keyRef, value) in sent.members {
                    let key = keyRef.stringValue(sharing: IdentityRecord.commonKeys) ?? ""
                    if appDeviceKeys.contains(key) { continue }
                    guard let text = value.stringValue else {
                        return .failure(.init("identity '\(UntrustedText.quoted(key, limit: 100))' is not a string"))
                    }
                    identities[key] = text
                }
            }
            for (key, value) in app.identities { identities[key] = value }
            identities["$identity_anonymous_id"] = app.anonymousID
            if let login = app.loginID { identities["$identity_login_id"] = login }
            user = BridgeOverrides.User(
                distinctID: app.loginID ?? app.anonymousID, anonymousID: app.anonymousID, loginID: app.loginID,
                originalID: originalID, identities: identities
            )
        }
        return .success(BridgeOverrides(user: user, appVersion: app.appVersion, presets: app.presets))
    }
}

/// A `server_url` as sent and the server it names (nil: not a URL with a host).
private struct KnownServerURL: Sendable, Equatable {
    let url: String
    let target: ServerTarget?
}
