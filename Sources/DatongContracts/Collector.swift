/// `POST /v1/batches` on the collector: the normalized records of one upload. The collector answers
/// only after the batch is committed.
public struct CollectBatch: Codable, Sendable, Equatable {
    /// When the gateway received the upload, in milliseconds since the Unix epoch.
    public var receivedAt: Int64
    public var records: [CollectRecord]
    /// Records the gateway refused, kept with their reason (`analytics.rejected`).
    public var rejected: [RejectedRecord]

    public init(receivedAt: Int64, records: [CollectRecord], rejected: [RejectedRecord] = []) {
        self.receivedAt = receivedAt
        self.records = records
        self.rejected = rejected
    }
}

/// One validated record, ready to store.
public struct CollectRecord: Codable, Sendable, Equatable {
    public var project: String
    public var type: String
    /// The event name, for `track*` types.
    public var event: String?
    /// Milliseconds since the Unix epoch (`$time` already applied).
    public var time: Int64
    public var distinctId: String?
    /// The user identity-service resolved for this record.
    public var userId: Int64?
    public var anonymousId: String?
    public var loginId: String?
    public var lib: String?
    public var libVersion: String?
    public var appVersion: String?
    public var hybridH5: Bool
    /// The record's properties as JSON object text (the gateway writes it canonical: keys sorted),
    /// stored as `jsonb` without being parsed again. On the wire it is the object itself, not a
    /// string holding it, so neither side escapes or unescapes it.
    public var properties: String
    public var itemType: String?
    public var itemId: String?
    /// `lib.$lib_method`: how the event was made: `code`, `autoTrack`, or codeless (`visual`).
    public var libMethod: String?
    /// `lib.$lib_detail`: where in the app's code (or which element) the event came from.
    public var libDetail: String?
    /// The record's `original_id` (a `$SignUp`'s previous anonymous id).
    public var originalId: String?
    /// The record's `identities` (for a relayed record, as the app rewrote them).
    public var identities: [String: String]?

    public init(
        project: String, type: String, event: String?, time: Int64, distinctId: String?, userId: Int64?,
        anonymousId: String? = nil, loginId: String? = nil, lib: String? = nil, libVersion: String? = nil,
        appVersion: String? = nil, hybridH5: Bool = false, properties: String, itemType: String? = nil,
        itemId: String? = nil, libMethod: String? = nil, libDetail: String? = nil, originalId: String? = nil,
        identities: [String: String]? = nil
    ) {
        self.libMethod = libMethod
        self.libDetail = libDetail
        self.originalId = originalId
        self.identities = identities
        self.project = project
        self.type = type
        self.event = event
        self.time = time
        self.distinctId = distinctId
        self.userId = userId
        self.anonymousId = anonymousId
        self.loginId = loginId
        self.lib = lib
        self.libVersion = libVersion
        self.appVersion = appVersion
        self.hybridH5 = hybridH5
        self.properties = properties
        self.itemType = itemType
        self.itemId = itemId
    }
}

/// A record (or request) that can never be stored, with the reason, kept for operators.
public struct RejectedRecord: Codable, Sendable, Equatable {
    public var project: String
    public var reason: String
    /// The record as received (JSON text when it was readable).
    public var raw: String

    public init(project: String, reason: String, raw: String) {
        self.project = project
        self.reason = reason
        self.raw = raw
    }
}

/// What happened to a committed batch: every record of `CollectBatch.records` is stored, a
/// duplicate, or refused by the collector (`rejectedIndexes`); `rejected` counts those and the
/// batch's own `rejected` entries.
public struct CollectResult: Codable, Sendable, Equatable {
    public var stored: Int
    public var duplicates: Int
    public var rejected: Int
    /// Positions in `CollectBatch.records` of the records that were already stored (or repeated
    /// earlier in the same batch), ascending.
    public var duplicateIndexes: [Int]
    /// Positions in `CollectBatch.records` of the records the collector could not store (kept in
    /// `analytics.rejected` with the reason), ascending. Absent from answers of older collectors.
    public var rejectedIndexes: [Int]

    public init(stored: Int, duplicates: Int, rejected: Int, duplicateIndexes: [Int] = [], rejectedIndexes: [Int] = []) {
        self.stored = stored
        self.duplicates = duplicates
        self.rejected = rejected
        self.duplicateIndexes = duplicateIndexes
        self.rejectedIndexes = rejectedIndexes
    }

    private enum CodingKeys: String, CodingKey {
        case stored, duplicates, rejected, duplicateIndexes, rejectedIndexes
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            stored: try container.decode(Int.self, forKey: .stored), duplicates: try container.decode(Int.self, forKey: .duplicates),
            rejected: try container.decode(Int.self, forKey: .rejected),
            duplicateIndexes: try container.decodeIfPresent([Int].self, forKey: .duplicateIndexes) ?? [],
            rejectedIndexes: try container.decodeIfPresent([Int].self, forKey: .rejectedIndexes) ?? []
        )
    }
}

extension CollectRecord {
    private enum CodingKeys: String, CodingKey {
        case project, type, event, time, distinctId, userId, anonymousId, loginId, lib, libVersion, appVersion, hybridH5
        case properties, itemType, itemId, libMethod, libDetail, originalId, identities
    }

    /// Codable reads `properties` as a JSON object and keeps its canonical text (keys sorted), the
    /// text the gateway sends; the services themselves read batches with `init(jsonBytes:)`, which
    /// keeps the text as sent.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let properties = try container.decode(JSONValue.self, forKey: .properties)
        guard case .object = properties else {
            throw DecodingError.dataCorruptedError(forKey: .properties, in: container, debugDescription: "properties is not an object")
        }
        var text: [UInt8] = []
        properties.write(to: &text)
        self.init(
            project: try container.decode(String.self, forKey: .project), type: try container.decode(String.self, forKey: .type),
            event: try container.decodeIfPresent(String.self, forKey: .event), time: try container.decode(Int64.self, forKey: .time),
            distinctId: try container.decodeIfPresent(String.self, forKey: .distinctId),
            userId: try container.decodeIfPresent(Int64.self, forKey: .userId),
            anonymousId: try container.decodeIfPresent(String.self, forKey: .anonymousId),
            loginId: try container.decodeIfPresent(String.self, forKey: .loginId), lib: try container.decodeIfPresent(String.self, forKey: .lib),
            libVersion: try container.decodeIfPresent(String.self, forKey: .libVersion),
            appVersion: try container.decodeIfPresent(String.self, forKey: .appVersion),
            hybridH5: try container.decode(Bool.self, forKey: .hybridH5), properties: String(decoding: text, as: UTF8.self),
            itemType: try container.decodeIfPresent(String.self, forKey: .itemType),
            itemId: try container.decodeIfPresent(String.self, forKey: .itemId),
            libMethod: try container.decodeIfPresent(String.self, forKey: .libMethod),
            libDetail: try container.decodeIfPresent(String.self, forKey: .libDetail),
            originalId: try container.decodeIfPresent(String.self, forKey: .originalId),
            identities: try container.decodeIfPresent([String: String].self, forKey: .identities)
        )
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(project, forKey: .project)
        try container.encode(type, forKey: .type)
        try container.encodeIfPresent(event, forKey: .event)
        try container.encode(time, forKey: .time)
        try container.encodeIfPresent(distinctId, forKey: .distinctId)
        try container.encodeIfPresent(userId, forKey: .userId)
        try container.encodeIfPresent(anonymousId, forKey: .anonymousId)
        try container.encodeIfPresent(loginId, forKey: .loginId)
        try container.encodeIfPresent(lib, forKey: .lib)
        try container.encodeIfPresent(libVersion, forKey: .libVersion)
        try container.encodeIfPresent(appVersion, forKey: .appVersion)
        try container.encode(hybridH5, forKey: .hybridH5)
        guard let value = try? JSONParser.parseValue(Array(properties.utf8), maxDepth: CollectBatch.maxDepth) else {
            throw EncodingError.invalidValue(properties, .init(codingPath: encoder.codingPath, debugDescription: "properties is not JSON"))
        }
        try container.encode(value, forKey: .properties)
        try container.encodeIfPresent(itemType, forKey: .itemType)
        try container.encodeIfPresent(itemId, forKey: .itemId)
        try container.encodeIfPresent(libMethod, forKey: .libMethod)
        try container.encodeIfPresent(libDetail, forKey: .libDetail)
        try container.encodeIfPresent(originalId, forKey: .originalId)
        try container.encodeIfPresent(identities, forKey: .identities)
    }
}
