import DatongContracts
import DatongCrypto
import DatongJSON
import DatongRuntime
import Enrichment
import Foundation
import Gateway

/// The gateway's decode + validate + rewrite path without HTTP or storage, for `gateway-bench` and
/// the fuzz targets (`datong-fuzz`): the same code the handlers run, entered from outside the module.
package enum GatewayHarness {
    /// What an upload or relay would send the collector.
    package struct Outcome {
        package var accepted: [CollectRecord]
        package var rejected: [RejectedRecord]
    }

    /// A project's keys as the gateway holds them, from private keys in PKCS#8 DER.
    package static func projectKeys(_ keys: [(pkv: Int, type: KeyType, pkcs8DER: [UInt8])]) throws -> ProjectKeys {
        var privateKeys: [Int: EnvelopePrivateKey] = [:]
        for key in keys { privateKeys[key.pkv] = try EnvelopePrivateKey(pkcs8DER: key.pkcs8DER, type: key.type, pkv: key.pkv) }
        return ProjectKeys(transportEncryption: true, published: [], privateKeys: privateKeys, unusable: [:])
    }

    /// A project's keys for `prepareUpload`, built once.
    package struct ProjectKeysHandle: Sendable {
        package let keys: ProjectKeys

        package init(_ keys: [(pkv: Int, type: KeyType, pkcs8DER: [UInt8])]) throws {
            self.keys = try GatewayHarness.projectKeys(keys)
        }
    }

    /// Decodes one SDK upload as `upload` does and returns the records it would store and refuse.
    package static func prepareUpload(query: String?, body: [UInt8], limits: UploadLimits, now: Int64, keys: ProjectKeys? = nil) throws -> Outcome {
        let upload = try PreparedUpload(query: query, body: body, limits: limits, now: now, keys: keys)
        return Outcome(accepted: upload.accepted.map(\.collect), rejected: upload.rejected)
    }

    /// Reads one relay as `relay` does and returns the records it would store and refuse.
    package static func prepareRelay(body: [UInt8], project: String, whitelistedPages: [String]? = nil, limits: UploadLimits, now: Int64) throws -> Outcome {
        let (app, messages) = try BridgeHandler.parseRelay(body, limits: limits)
        let readings = messages.map { BridgeMessage.read($0, limits: limits) }
        let relay = PreparedRelay(
            messages: messages, readings: readings, app: app, project: project, whitelists: ProjectWhitelists(h5Domains: whitelistedPages),
            limits: limits, now: now
        )
        return Outcome(accepted: relay.accepted.map(\.collect), rejected: relay.rejected)
    }

    /// Inflates gzip as uploads are inflated (`GzipInflater`).
    package static func inflate(_ bytes: UnsafeRawBufferPointer, limit: Int) throws -> [UInt8] {
        try GzipInflater.inflate(bytes, limit: limit)
    }

    /// `$url_host` as the gateway adds it for `url`, or nil (`RequestEnrichment.host`).
    package static func urlHost(_ url: String) -> String? { RequestEnrichment.host(url) }

    /// The host a browser would connect to for `url`, or nil (`WebURL`).
    package static func host(ofURL url: String) -> String? { WebURL(url)?.host }

    /// Decodes one SDK upload (query and form body as sent) and validates its records; returns how
    /// many were accepted.
    package static func upload(query: String?, body: [UInt8], limits: UploadLimits, now: Int64) throws -> Int {
        try PreparedUpload(query: query, body: body, limits: limits, now: now).accepted.count
    }

    /// `upload`, enriched as a gateway behind a trusted balancer enriches it (`RequestEnrichment`):
    /// the request's parts are read for each upload, as the handler reads them.
    package static func enrichedUpload(
        query: String?, body: [UInt8], limits: UploadLimits, now: Int64, sources: EnrichmentSources, peer: IPAddress,
        forwardedFor: String, userAgent: String
    ) throws -> Int {
        let enrichment = sources.request(peer: peer, forwardedFor: [Substring(forwardedFor)], userAgent: userAgent, policy: .defaults)
        return try PreparedUpload(query: query, body: body, limits: limits, now: now, enrichment: enrichment).accepted.count
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
