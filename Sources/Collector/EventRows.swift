import DatongContracts
import DatongJSON
import DatongPostgres

/// `collector.events` rows in PostgreSQL's binary COPY format (`IncomingBatch` writes them). The
/// columns follow `CollectRecord.Field`: the collector's own two first, then every field that is an
/// event column, in the field list's order, named in the COPY statement (so the table's column
/// order does not matter, and a field without a column fails the COPY in the schema test, not in
/// production).
package enum EventRows {
    /// The columns a row holds, in order.
    package static let columns: [String] = ["event_id", "received_at"] + eventFields.map(\.column)

    /// The columns PostgreSQL fills itself: the storing transaction's id (`stored_xid`, which the
    /// report rollups read by; ReportSchema).
    package static let filledByTable: [String] = ["stored_xid"]

    /// The statement that COPYs rows into `collector.events`.
    package static let copyIntoEvents = copyStatement(into: "collector.events")
    /// The same into the transaction's staging table (`LIKE collector.events`).
    static let copyIntoStaging = copyStatement(into: "pg_temp.incoming_events")

    /// Moves the staged rows into `collector.events`, naming the columns so that the table's own
    /// (`stored_xid`) take their defaults.
    static let insertFromStaging =
        "INSERT INTO collector.events (\(columns.joined(separator: ", "))) SELECT \(columns.joined(separator: ", ")) FROM pg_temp.incoming_events "
        + "ON CONFLICT DO NOTHING RETURNING event_id::text"

    private static func copyStatement(into table: String) -> String {
        "COPY \(table) (\(columns.joined(separator: ", "))) FROM STDIN (FORMAT binary)"
    }

    static let eventFields = CollectRecord.Field.allCases.filter(\.isEventColumn)
}
