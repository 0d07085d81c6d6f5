import DatongRuntime
import Foundation

/// The gateway's decode + validate + rewrite path without HTTP or storage, for `gateway-bench`:
/// the same code the handlers run, entered from outside the module.
package enum GatewayHotPath {
    /// Decodes one SDK upload (query and form body as sent) and validates its records; returns how
    /// many were accepted.
    package static func upload(query: String?, body: [UInt8], limits: UploadLimits, now: Int64) throws -> Int {
        try PreparedUpload(query: query, body: body, limits: limits, now: now).accepted.count
    }

    /// Parses decoded JSON payload bytes and validates the records, as `upload` does after base64
    /// and gzip; returns how many were accepted.
    package static func validate(json: [UInt8], project: String, limits: UploadLimits, now: Int64) throws -> Int {
        let value = try UploadPayload.parseJSON(json, limits: limits, what: "the payload")
        let records = value.kind == .array ? Array(value.elements) : [value]
        let normalizer = RecordNormalizer(limits: limits)
        var accepted = 0
        for record in records {
            if case .success = normalizer.normalize(record, defaultProject: project, now: now) { accepted += 1 }
        }
        return accepted
    }

    /// Reads one bridge relay body, verifies, rewrites and validates every message for `project`
    /// (no whitelists published); returns how many records were accepted.
    package static func relay(body: [UInt8], project: String, limits: UploadLimits, now: Int64) throws -> Int {
        let (app, messages) = try BridgeHandler.parseRelay(body, limits: limits)
        let readings = messages.map { BridgeMessage.read($0, limits: limits) }
        return PreparedRelay(
            messages: messages, readings: readings, app: app, project: project, whitelists: ProjectWhitelists(),
            limits: limits, now: now
        ).accepted.count
    }
}
