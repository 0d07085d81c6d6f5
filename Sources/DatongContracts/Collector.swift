/// `POST /v1/batches` on the collector: the normalized records of one upload. The collector answers
/// only after the batch is committed.
package struct CollectBatch: Sendable, Equatable {
    /// When the gateway received the upload, in milliseconds since the Unix epoch.
    package var receivedAt: Int64
    package var records: [CollectRecord]
    /// Records the gateway refused, kept with their reason (`analytics.rejected`).
    package var rejected: [RejectedRecord]

    package init(receivedAt: Int64, records: [CollectRecord], rejected: [RejectedRecord] = []) {
        self.receivedAt = receivedAt
        self.records = records
        self.rejected = rejected
    }
}

/// One validated record, ready to store.
public struct CollectRecord: Sendable, Equatable {
    package var project: String
    package var type: String
    /// The event name, for `track*` types.
    package var event: String?
    /// Milliseconds since the Unix epoch (`$time` already applied).
    package var time: Int64
    package var distinctId: String?
    /// The user identity-service resolved for this record.
    package var userId: Int64?
    package var anonymousId: String?
    package var loginId: String?
    package var lib: String?
    package var libVersion: String?
    package var appVersion: String?
    package var hybridH5: Bool
    /// The record's properties as JSON object text (the gateway writes it canonical: keys sorted),
    /// stored as `jsonb` without being parsed again. On the wire it is the object itself, not a
    /// string holding it, so neither side escapes or unescapes it.
    package var properties: PropertiesText
    package var itemType: String?
    package var itemId: String?
    /// `lib.$lib_method`: how the event was made: `code`, `autoTrack`, or codeless (`visual`).
    package var libMethod: String?
    /// `lib.$lib_detail`: where in the app's code (or which element) the event came from.
    package var libDetail: String?
    /// The record's `original_id` (a `$SignUp`'s previous anonymous id).
    package var originalId: String?
    /// The record's `identities` (for a relayed record, as the app rewrote them).
    package var identities: [String: String]?
    /// The record's `_track_id`: the number its SDK gave it when the record was made, which a
    /// retry resends unchanged. With the time, ids and type it is what identifies the record for
    /// deduplication (docs/PROTOCOL.md section 2, "What identifies a record").
    package var trackId: Int64?
    /// For an event on an item (a multi-entity `track` record of an item schema), the item schema;
    /// nil for a user's event. Detail and item records carry their schema as `itemType`.
    package var schema: String?

    package init(
        project: String, type: String, event: String?, time: Int64, distinctId: String?, userId: Int64?,
        anonymousId: String? = nil, loginId: String? = nil, lib: String? = nil, libVersion: String? = nil,
        appVersion: String? = nil, hybridH5: Bool = false, properties: PropertiesText, itemType: String? = nil,
        itemId: String? = nil, libMethod: String? = nil, libDetail: String? = nil, originalId: String? = nil,
        identities: [String: String]? = nil, trackId: Int64? = nil, schema: String? = nil
    ) {
        self.trackId = trackId
        self.schema = schema
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

/// A record's properties as the UTF-8 text of a JSON object. Bytes rather than a `String`: the
/// gateway writes them from an upload its parser has already checked (valid UTF-8, strings and
/// numbers PostgreSQL takes) and the collector copies them into `jsonb` as they are; a `String`
/// made on the way would check every byte once more (about 5k instructions an event at 50 records,
/// docs/BENCHMARKS.md) for a text nothing reads as one.
package struct PropertiesText: Sendable, Hashable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// The text's bytes, which must be well-formed UTF-8 (every maker here writes them so).
    package var utf8: [UInt8]

    /// Text already checked: JSON written by the gateway or read by `JSONParser`.
    package init(utf8: [UInt8]) { self.utf8 = utf8 }
    package init(_ text: String) { utf8 = Array(text.utf8) }
    package init(stringLiteral text: String) { self.init(text) }

    /// The text as a `String` (for tests and messages; checks the bytes again).
    package var text: String { String(decoding: utf8, as: UTF8.self) }
    package var description: String { text }
}

extension CollectRecord {
    /// Every field of a record, declared once, in the order the batch codec writes them. A field's
    /// name in a batch is the case's name; its column in `collector.events` (and `analytics.events`)
    /// is that name in snake_case. Its `kind` is what the one reader checks its value against. The
    /// record's writer and reader (`CollectRecordWire.swift`) and the collector's COPY row switch
    /// over this list, so a case added here and not there does not compile; the schema test fails
    /// until migrations give a new event field its column and its place in the view.
    /// docs/CONTRIBUTING.md has the recipe.
    ///
    /// Public, unlike the rest of the package, so that its raw value (a field's position, read
    /// for every field of every record) is inlined into the gateway and the collector.
    public enum Field: Int, CaseIterable, Sendable {
        case project, type, event, time, distinctId, userId, anonymousId, loginId, lib, libVersion, appVersion, hybridH5
        case properties, itemType, itemId, libMethod, libDetail, originalId, identities, trackId, schema

        /// A batch without one of these is not a batch.
        package var isRequired: Bool {
            switch self {
            case .project, .type, .time, .hybridH5, .properties: true
            default: false
            }
        }

        /// Whether `collector.events` has a column for it: item fields belong to item records only.
        package var isEventColumn: Bool { self != .itemType && self != .itemId }

        /// What the field's value is in a batch; the reader checks every value against it.
        package enum Kind: Sendable {
            /// A string, never null.
            case requiredText
            /// A string or null.
            case text
            /// An integer.
            case integer
            /// An integer or null.
            case optionalInteger
            case flag
            /// A JSON object, kept as its text.
            case object
            /// An object of strings, or null.
            case texts
        }

        package var kind: Kind {
            switch self {
            case .project, .type: .requiredText
            case .time: .integer
            case .userId, .trackId: .optionalInteger
            case .hybridH5: .flag
            case .properties: .object
            case .identities: .texts
            case .event, .distinctId, .anonymousId, .loginId, .lib, .libVersion, .appVersion, .itemType, .itemId, .libMethod, .libDetail,
                .originalId, .schema:
                .text
            }
        }

        /// The name in a batch: the case's name.
        package var name: String { Self.names[rawValue] }

        /// The column: the name in snake_case (`distinctId` → `distinct_id`, `hybridH5` → `hybrid_h5`).
        package var column: String { Self.columns[rawValue] }

        /// The name's UTF-8 bytes, to match without making a string.
        package var nameBytes: [UInt8] { Self.nameBytes[rawValue] }

        /// The name as a static string, to write without touching a heap object (a test holds it
        /// to the case's name).
        package var staticName: StaticString {
            switch self {
            case .project: "project"
            case .type: "type"
            case .event: "event"
            case .time: "time"
            case .distinctId: "distinctId"
            case .userId: "userId"
            case .anonymousId: "anonymousId"
            case .loginId: "loginId"
            case .lib: "lib"
            case .libVersion: "libVersion"
            case .appVersion: "appVersion"
            case .hybridH5: "hybridH5"
            case .properties: "properties"
            case .itemType: "itemType"
            case .itemId: "itemId"
            case .libMethod: "libMethod"
            case .libDetail: "libDetail"
            case .originalId: "originalId"
            case .identities: "identities"
            case .trackId: "trackId"
            case .schema: "schema"
            }
        }

        private static let names = allCases.map { String(describing: $0) }
        private static let nameBytes = names.map { Array($0.utf8) }
        private static let columns = names.map { name in
            var column = ""
            for character in name {
                if character.isUppercase {
                    column += "_" + character.lowercased()
                } else {
                    column.append(character)
                }
            }
            return column
        }

        /// Every case, made once: the synthesized `allCases` builds a new array on each call, and
        /// the codec walks the list for every record.
        package static let all = allCases

        /// The field named `bytes` in a batch, or nil. `expected` is tried first: the batch writer
        /// writes the fields in order, so a reader that passes the one after the last it found
        /// matches most names at the first try.
        package static func named(_ bytes: ArraySlice<UInt8>, expected: Int = 0) -> Field? {
            if expected < all.count, nameBytes[expected].elementsEqual(bytes) { return all[expected] }
            for field in all {
                let name = nameBytes[field.rawValue]
                if name.count == bytes.count, name.elementsEqual(bytes) { return field }
            }
            return nil
        }
    }
}

/// A record (or request) that can never be stored, with the reason, kept for operators.
package struct RejectedRecord: Sendable, Equatable {
    package var project: String
    package var reason: String
    /// The record as received (JSON text when it was readable).
    package var raw: String

    package init(project: String, reason: String, raw: String) {
        self.project = project
        self.reason = reason
        self.raw = raw
    }
}

/// What became of one record of a batch the collector committed.
package enum RecordOutcome: Sendable, Equatable {
    case stored
    /// Already stored (a retried upload), or repeated earlier in the same batch.
    case duplicate
    /// Not stored: kept in `analytics.rejected` with `reason` (`PROPERTY_WITH_WRONG_TYPE: …`; ""
    /// from a collector of 0.4, which did not say).
    case refused(reason: String)
}

/// What happened to a committed batch: one outcome per record of `CollectBatch.records`, in their
/// order (`records`), and the counts; `rejected` counts the refused records and the batch's own
/// `rejected` entries.
package struct CollectResult: Sendable, Equatable {
    package var stored: Int
    package var duplicates: Int
    package var rejected: Int
    /// One outcome per record of the batch, in the order sent.
    package var records: [RecordOutcome]

    package init(stored: Int, duplicates: Int, rejected: Int, records: [RecordOutcome]) {
        self.stored = stored
        self.duplicates = duplicates
        self.rejected = rejected
        self.records = records
    }

    /// The result from positions, as collectors of 0.4 answered it (and tests write it): every
    /// record not named a duplicate or refused was stored; there are `stored + duplicates +
    /// rejectedIndexes.count` records.
    package init(
        stored: Int, duplicates: Int, rejected: Int, duplicateIndexes: [Int] = [], rejectedIndexes: [Int] = [], rejectedReasons: [String] = []
    ) {
        let named = (duplicateIndexes + rejectedIndexes).max().map { $0 + 1 } ?? 0
        var records = [RecordOutcome](repeating: .stored, count: max(stored + duplicates + rejectedIndexes.count, named))
        for index in duplicateIndexes { records[index] = .duplicate }
        for (order, index) in rejectedIndexes.enumerated() {
            records[index] = .refused(reason: order < rejectedReasons.count ? rejectedReasons[order] : "")
        }
        self.init(stored: stored, duplicates: duplicates, rejected: rejected, records: records)
    }

    /// The outcome of the batch's record at `position` (stored beyond what an answer names).
    package func outcome(at position: Int) -> RecordOutcome { position < records.count ? records[position] : .stored }

    /// Adds the result of another part of the same batch (the collector isolating a record
    /// PostgreSQL refuses): its counts, and its outcomes other than stored, by position.
    package mutating func merge(_ part: CollectResult) {
        stored += part.stored
        duplicates += part.duplicates
        rejected += part.rejected
        if part.records.count > records.count { records += Array(repeating: .stored, count: part.records.count - records.count) }
        for (position, outcome) in part.records.enumerated() where outcome != .stored { records[position] = outcome }
    }

    /// The positions of the duplicates, ascending (the answer's 0.4 form).
    package var duplicateIndexes: [Int] { records.indices.filter { records[$0] == .duplicate } }

    /// The positions of the refused records with their reasons, ascending (the answer's 0.4 form).
    package var rejections: [(index: Int, reason: String)] {
        records.enumerated().compactMap { position, outcome in
            if case .refused(let reason) = outcome { (position, reason) } else { nil }
        }
    }

    /// The positions of the refused records, ascending.
    package var rejectedIndexes: [Int] { rejections.map(\.index) }
}

/// `POST /v1/batch-groups` on the collector: the batches of several uploads in one call. The
/// gateway folds the uploads that wait while its calls to the collector are busy, so a busy
/// gateway makes fewer, larger calls. Each batch is answered on its own (`CollectOutcome`), in
/// order: one batch refused never costs the others.
package struct CollectBatchGroup: Sendable, Equatable {
    package var batches: [CollectBatch]

    package init(batches: [CollectBatch]) { self.batches = batches }
}

/// What became of one batch of a group: its result after the commit, or why it was not written
/// (the answer it would have had alone: a 400 for a batch that is not one, a 503 to retry).
package enum CollectOutcome: Sendable, Equatable {
    case written(CollectResult)
    case refused(status: Int, error: String, message: String)
}

/// The answer to a `CollectBatchGroup`: one outcome per batch, in the order sent.
package struct CollectGroupResult: Sendable, Equatable {
    package var outcomes: [CollectOutcome]

    package init(outcomes: [CollectOutcome]) { self.outcomes = outcomes }
}
