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
    /// The record's properties as JSON object text, stored as `jsonb` without being parsed again.
    public var properties: String
    public var itemType: String?
    public var itemId: String?

    public init(
        project: String, type: String, event: String?, time: Int64, distinctId: String?, userId: Int64?,
        anonymousId: String? = nil, loginId: String? = nil, lib: String? = nil, libVersion: String? = nil,
        appVersion: String? = nil, hybridH5: Bool = false, properties: String, itemType: String? = nil,
        itemId: String? = nil
    ) {
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

/// What happened to a committed batch: `stored + duplicates` equals the batch's records.
public struct CollectResult: Codable, Sendable, Equatable {
    public var stored: Int
    public var duplicates: Int
    public var rejected: Int
    /// Positions in `CollectBatch.records` of the records that were already stored (or repeated
    /// earlier in the same batch), ascending.
    public var duplicateIndexes: [Int]

    public init(stored: Int, duplicates: Int, rejected: Int, duplicateIndexes: [Int] = []) {
        self.stored = stored
        self.duplicates = duplicates
        self.rejected = rejected
        self.duplicateIndexes = duplicateIndexes
    }
}
