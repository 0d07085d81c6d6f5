/// One raw message an app received from an H5 page through its JS bridge (PROTOCOL.md section 3),
/// read into the record it carries. Pure.
enum BridgeMessage: Sendable, Equatable {
    /// An event or profile record, with the page SDK's `server_url` still in it.
    case record([String: JSONValue])
    /// A bridge message that is not a record (`getAppInfo`, `visualized_track`, `page_info`, …):
    /// acknowledged, never stored.
    case ignored(String)

    /// The legacy iOS (UIWebView) bridge scheme.
    static let legacyScheme = "sensorsanalytics://"

    /// Reads one message in any of the three forms: an iOS `postMessage` string
    /// (`{"callType":"app_h5_track","data":{…}}`), an Android `sensorsdata_track` string (the record
    /// itself), or a legacy `sensorsanalytics://trackEvent?event=<urlencoded JSON>` URL.
    /// A message that can never become a record fails with the reason.
    static func read(_ message: String, limits: UploadLimits) -> Result<BridgeMessage, BridgeMessageProblem> {
        if message.hasPrefix(legacyScheme) { return readLegacyURL(message, limits: limits) }
        let value: JSONValue
        do {
            value = try JSONParser.parse(Array(message.utf8), maxDepth: limits.maxJSONDepth)
        } catch let failure as JSONParser.Failure {
            return .failure(.init("the message is \(failure.message)"))
        } catch {
            return .failure(.init("the message is not valid JSON"))
        }
        guard case .object(let object) = value else {
            return .failure(.init("the message is not a JSON object"))
        }
        guard let callType = object["callType"] else { return .success(.record(object)) }
        guard case .string(let name) = callType else { return .failure(.init("callType is not a string")) }
        guard name == "app_h5_track" else { return .success(.ignored("callType '\(name.prefix(64))' is not an event")) }
        switch object["data"] {
        case .object(let record)?:
            return .success(.record(record))
        case .string(let text)?:
            // Some app wrappers pass `data` as JSON text rather than an object.
            guard case .object(let record)? = try? JSONParser.parse(Array(text.utf8), maxDepth: limits.maxJSONDepth) else {
                return .failure(.init("data is text that is not a JSON object"))
            }
            return .success(.record(record))
        default:
            return .failure(.init("an app_h5_track message has no data object"))
        }
    }

    private static func readLegacyURL(_ message: String, limits: UploadLimits) -> Result<BridgeMessage, BridgeMessageProblem> {
        let rest = message.dropFirst(legacyScheme.count)
        let command = rest.prefix { $0 != "?" && $0 != "/" }
        guard command == "trackEvent" else { return .success(.ignored("'\(command.prefix(64))' is not an event")) }
        guard let query = rest.firstIndex(of: "?").map({ rest[rest.index(after: $0)...] }) else {
            return .failure(.init("a trackEvent URL has no query"))
        }
        let parameters = FormParameters(query: String(query), body: [])
        guard let event = parameters["event"] else { return .failure(.init("a trackEvent URL has no event parameter")) }
        do {
            guard case .object(let record) = try JSONParser.parse(Array(event.utf8), maxDepth: limits.maxJSONDepth) else {
                return .failure(.init("the event parameter is not a JSON object"))
            }
            return .success(.record(record))
        } catch let failure as JSONParser.Failure {
            return .failure(.init("the event parameter is \(failure.message)"))
        } catch {
            return .failure(.init("the event parameter is not valid JSON"))
        }
    }
}

/// Why a bridge message cannot be read.
struct BridgeMessageProblem: Error, Sendable, Equatable {
    let reason: String

    init(_ reason: String) { self.reason = reason }
}
