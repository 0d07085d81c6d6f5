import DatongContracts
import DatongJSON

/// One raw message an app received from an H5 page through its JS bridge (docs/PROTOCOL.md section 3),
/// read into the record it carries. Pure.
package enum BridgeMessage: Sendable {
    /// An event or profile record, with the page SDK's `server_url` still in it.
    case record(JSONRef)
    /// A bridge message that is not a record (`getAppInfo`, `visualized_track`, `page_info`, …):
    /// acknowledged, never stored.
    case ignored(String)

    /// The legacy iOS (UIWebView) bridge scheme.
    static let legacyScheme = "sensorsanalytics://"
    private static let legacySchemeBytes = Array(legacyScheme.utf8)

    /// Reads one message in any of the three forms: an iOS `postMessage` string
    /// (`{"callType":"app_h5_track","data":{…}}`), an Android `sensorsdata_track` string (the record
    /// itself), or a legacy `sensorsanalytics://trackEvent?event=<urlencoded JSON>` URL.
    /// A message that can never become a record fails with the reason. `message` is the text's
    /// UTF-8 bytes (as `JSONRef.textArray` reads them from the relay), parsed as they are.
    package static func read(_ message: [UInt8], limits: UploadLimits) -> Result<BridgeMessage, RecordRefusal> {
        if message.starts(with: legacySchemeBytes) { return readLegacyURL(String(decoding: message, as: UTF8.self), limits: limits) }
        let object: JSONRef
        do {
            object = try JSONParser.parse(message, maxDepth: limits.maxJSONDepth).root
        } catch {
            return .failure(.init("the message is \(error.message)"))
        }
        guard object.isObject else { return .failure(.init("the message is not a JSON object")) }
        guard let callType = object["callType"] else { return .success(.record(object)) }
        guard let name = callType.stringValue else { return .failure(.init("callType is not a string")) }
        guard name == "app_h5_track" else { return .success(.ignored("callType '\(UntrustedText.quoted(name, limit: 64))' is not an event")) }
        guard let data = object["data"] else { return .failure(.init("an app_h5_track message has no data object")) }
        if data.isObject { return .success(.record(data)) }
        // Some app wrappers pass `data` as JSON text rather than an object.
        guard data.kind == .string, let record = try? JSONParser.parse(data.textArray, maxDepth: limits.maxJSONDepth).root, record.isObject
        else {
            return .failure(.init(data.kind == .string ? "data is text that is not a JSON object" : "an app_h5_track message has no data object"))
        }
        return .success(.record(record))
    }

    private static func readLegacyURL(_ message: String, limits: UploadLimits) -> Result<BridgeMessage, RecordRefusal> {
        let rest = message.dropFirst(legacyScheme.count)
        let command = rest.prefix { $0 != "?" && $0 != "/" }
        guard command == "trackEvent" else { return .success(.ignored("'\(UntrustedText.quoted(command, limit: 64))' is not an event")) }
        guard let query = rest.firstIndex(of: "?").map({ rest[rest.index(after: $0)...] }) else {
            return .failure(.init("a trackEvent URL has no query"))
        }
        let parameters = FormParameters(query: String(query), body: [])
        guard let event = parameters["event"] else { return .failure(.init("a trackEvent URL has no event parameter")) }
        do {
            let record = try JSONParser.parse(Array(event.utf8), maxDepth: limits.maxJSONDepth).root
            guard record.isObject else { return .failure(.init("the event parameter is not a JSON object")) }
            return .success(.record(record))
        } catch {
            return .failure(.init("the event parameter is \(error.message)"))
        }
    }
}

/// Why a record, or a relayed message meant to hold one, is refused: the reason the SDK is told
/// and `analytics.rejected` keeps beside the record as received. The gateway's one name for it,
/// from the first byte read to the answer.
package struct RecordRefusal: Error, Sendable, Equatable {
    let reason: String
    /// The project the refused record is kept under, once known (its own, when it names one).
    var project: String?

    init(_ reason: String) { self.reason = reason }
    init(project: String, reason: String) {
        self.project = project
        self.reason = reason
    }
}
