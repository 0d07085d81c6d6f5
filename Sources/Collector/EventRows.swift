import DatongContracts
import DatongJSON
import DatongPostgres

/// `collector.events` rows in PostgreSQL's binary COPY format. The columns follow
/// `CollectRecord.Field`: the collector's own two first, then every field that is an event column,
/// in the field list's order, named in the COPY statement (so the table's column order does not
/// matter, and a field without a column fails the COPY in the schema test, not in production).
package enum EventRows {
    /// The columns a row holds, in order.
    package static let columns: [String] = ["event_id", "received_at"] + eventFields.map(\.column)

    /// The statement that COPYs rows into `collector.events`.
    package static let copyIntoEvents = copyStatement(into: "collector.events")
    /// The same into the transaction's staging table (`LIKE collector.events`).
    static let copyIntoStaging = copyStatement(into: "pg_temp.incoming_events")

    private static func copyStatement(into table: String) -> String {
        "COPY \(table) (\(columns.joined(separator: ", "))) FROM STDIN (FORMAT binary)"
    }

    private static let eventFields = CollectRecord.Field.allCases.filter(\.isEventColumn)

    /// Appends `record`'s row.
    package static func append(_ record: CollectRecord, key: RecordKey, receivedAt: Int64, to writer: inout BinaryCopyWriter) {
        writer.beginRow(fieldCount: columns.count)
        writer.uuid(key)
        writer.timestamp(unixMillis: receivedAt)
        for field in eventFields {
            switch field {
            case .project: writer.text(record.project)
            case .type: writer.text(record.type)
            case .event: writer.text(record.event ?? "")  // NOT NULL: "" for a record without one
            case .time: writer.timestamp(unixMillis: record.time)
            case .distinctId: writer.text(record.distinctId ?? "")  // NOT NULL, as `event`
            case .userId: writer.bigint(record.userId)
            case .anonymousId: writer.text(record.anonymousId)
            case .loginId: writer.text(record.loginId)
            case .lib: writer.text(record.lib)
            case .libVersion: writer.text(record.libVersion)
            case .appVersion: writer.text(record.appVersion)
            case .hybridH5: writer.boolean(record.hybridH5)
            case .properties: writer.jsonb(record.properties)
            case .libMethod: writer.text(record.libMethod)
            case .libDetail: writer.text(record.libDetail)
            case .originalId: writer.text(record.originalId)
            case .identities:
                // jsonb keeps no key order: the object is written as it is, straight into the row.
                if let identities = record.identities {
                    writer.jsonb { out in
                        var object = JSONObjectWriter(&out)
                        for (key, value) in identities { object.string(dynamic: key, value, &out) }
                        object.finish(&out)
                    }
                } else {
                    writer.null()
                }
            case .itemType, .itemId: preconditionFailure("\(field) is not an event column")
            }
        }
    }
}
