import CLibPQ

/// The rows of one statement, copied out of libpq in text format.
package struct PostgresResult: Sendable {
    package let columns: [String]
    package let rows: [[String?]]
    /// Rows affected by INSERT/UPDATE/DELETE/COPY (libpq's `PQcmdTuples`), 0 otherwise.
    package let affectedRows: Int

    init(_ result: OpaquePointer) {
        let rowCount = Int(PQntuples(result))
        let columnCount = Int(PQnfields(result))
        columns = (0..<columnCount).map { String(cString: PQfname(result, Int32($0))) }
        var rows: [[String?]] = []
        rows.reserveCapacity(rowCount)
        for row in 0..<rowCount {
            var values: [String?] = []
            values.reserveCapacity(columnCount)
            for column in 0..<columnCount {
                if PQgetisnull(result, Int32(row), Int32(column)) == 1 {
                    values.append(nil)
                } else {
                    values.append(String(cString: PQgetvalue(result, Int32(row), Int32(column))))
                }
            }
            rows.append(values)
        }
        self.rows = rows
        affectedRows = Int(String(cString: PQcmdTuples(result))) ?? 0
    }

    /// The first column of the first row, if any.
    package var scalar: String? { rows.first?.first ?? nil }
}
