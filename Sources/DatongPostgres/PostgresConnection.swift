import CLibPQ

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// One libpq connection. Every method blocks the calling thread, so a connection is only ever used
/// from inside `PostgresPool.withConnection`, which runs it on the pool's own threads and lends it to
/// one caller at a time: that exclusive loan is what makes the unchecked `Sendable` sound.
package final class PostgresConnection: @unchecked Sendable {
    private var handle: OpaquePointer?
    private var preparedNames: Set<String> = []
    private var sessionSetUps: Set<String> = []
    /// Inside `transaction`, before its first statement: BEGIN is not sent yet. Plain SQL (and a
    /// COPY) carries it in the same round trip; a statement with parameters sends it first.
    private var beginPending = false
    /// Inside `transaction`, after `commit(after:)` ended it.
    private var committed = false
    /// Inside `transaction`: the session set-ups it ran, which its rollback undoes.
    private var setUpsInTransaction: [String]?
    /// Set while the session holds temporary tables (`setUpTemporaryTables`): the level of
    /// `synchronous_commit` every commit made for a caller asks for, while the session's own is
    /// `local`. PostgreSQL drops a session's temporary tables in a transaction of its own when the
    /// session ends, and that commit waits for the synchronous standby like any other: on a
    /// primary cut off from its standby, a session told to end (the fast shutdown with which
    /// pg_auto_failover fences an isolated primary) then never ends, so the primary never shuts
    /// down, never rejoins as a standby, and holds its clients' connections for ever. The drop
    /// writes nothing anyone waits for; every caller's commit still waits as the server says.
    private var commitLevel: String?
    /// `commitLevel` was set by the current transaction (a rollback undoes it).
    private var commitLevelSetInTransaction = false

    /// What a connection does on a bad network unless `DATABASE_URL` says otherwise (libpq's own
    /// defaults wait for the operating system: a host that drops packets holds a connect or a
    /// statement for minutes). A connect gives up after 5 s per host (and tries the next host of a
    /// multi-host URL); data the server has not acknowledged for 15 s, or an idle connection whose
    /// keepalives go unanswered for 10 + 3 × 3 s, breaks the connection, which the pool then
    /// re-establishes (docs/RELIABILITY.md, "A network that fails").
    static let networkDefaults: [(String, String)] = [
        ("connect_timeout", "5"), ("tcp_user_timeout", "15000"), ("keepalives", "1"), ("keepalives_idle", "10"),
        ("keepalives_interval", "3"), ("keepalives_count", "3"),
    ]

    init(conninfo: String) throws {
        // The defaults come before the connection string in the list, so that the settings the
        // string names override them (libpq: later entries win over what `dbname` expands to,
        // earlier ones lose).
        let keywords = Self.networkDefaults.map(\.0) + ["dbname"]
        let values = Self.networkDefaults.map(\.1) + [conninfo]
        let connected = withCStrings(keywords) { keywordPointers in
            withCStrings(values) { valuePointers in PQconnectdbParams(keywordPointers, valuePointers, 1) }
        }
        guard let handle = connected else {
            throw PostgresError.connectionFailed("libpq could not allocate a connection")
        }
        self.handle = handle
        // Server notices (NOTICE/WARNING) are not errors; libpq would print them to stderr.
        PQsetNoticeProcessor(handle, { _, _ in }, nil)
        guard PQstatus(handle) == CONNECTION_OK else {
            let message = Self.errorText(handle)
            PQfinish(handle)
            self.handle = nil
            throw PostgresError.connectionFailed(message)
        }
    }

    deinit { close() }

    func close() {
        if let handle { PQfinish(handle) }
        handle = nil
    }

    /// True while libpq believes the connection is usable.
    var isHealthy: Bool {
        guard let handle else { return false }
        return PQstatus(handle) == CONNECTION_OK
    }

    /// Re-establishes a broken connection with the original settings (all hosts of a multi-host
    /// DATABASE_URL are tried again, as libpq does at connect time).
    func reset() throws {
        guard let handle else { throw PostgresError.poolClosed }
        preparedNames.removeAll()
        sessionSetUps.removeAll()
        commitLevel = nil
        PQreset(handle)
        guard PQstatus(handle) == CONNECTION_OK else {
            throw PostgresError.connectionFailed(Self.errorText(handle))
        }
    }

    // MARK: Statements

    /// Runs one or more SQL statements without parameters (migrations, DDL, BEGIN/COMMIT).
    @discardableResult
    package func execute(_ sql: String) throws -> PostgresResult {
        if commitsAlone { return try transaction { try $0.execute(sql) } }
        let handle = try liveHandle()
        return try consume(PQexec(handle, takingPendingBegin(sql)), handle)
    }

    /// True when a statement outside a transaction must run in one: its commit would otherwise
    /// take the session's `local` (`commitLevel`).
    private var commitsAlone: Bool { commitLevel != nil && setUpsInTransaction == nil }

    /// BEGIN, and the commit level of a session with temporary tables.
    private var begin: String { commitLevel.map { "BEGIN;\nSET LOCAL synchronous_commit TO \($0)" } ?? "BEGIN" }

    /// `sql` preceded by the transaction's BEGIN when it is not sent yet: PostgreSQL runs both from
    /// one message, and PQexec's answer is the last statement's.
    private func takingPendingBegin(_ sql: String) -> String {
        guard beginPending else { return sql }
        beginPending = false
        return begin + ";\n" + sql
    }

    /// Sends the transaction's BEGIN alone, before a statement that cannot carry it.
    private func sendPendingBegin() throws {
        guard beginPending else { return }
        beginPending = false
        try execute(begin)
    }

    /// Takes a transaction-scoped advisory lock per name (its 64-bit text hash), all in one
    /// statement and in one global order, so transactions locking overlapping sets wait for each
    /// other instead of deadlocking. The locks end with the transaction.
    package func lockInOrder(_ names: [String]) throws {
        guard !names.isEmpty else { return }
        try query(
            "SELECT count(pg_advisory_xact_lock(k)) FROM (SELECT DISTINCT hashtextextended(x, 0) AS k FROM unnest($1::text[]) x ORDER BY 1) s",
            [postgresTextArray(names)]
        )
    }

    /// Runs one statement with parameters sent separately from the SQL text (never interpolated).
    /// Parameters are in PostgreSQL's text format; `nil` is SQL NULL.
    @discardableResult
    package func query(_ sql: String, _ parameters: [String?] = []) throws -> PostgresResult {
        if commitsAlone { return try transaction { try $0.query(sql, parameters) } }
        let handle = try liveHandle()
        try sendPendingBegin()
        return try withCStrings(parameters) { values in
            try consume(
                PQexecParams(handle, sql, Int32(parameters.count), nil, values, nil, nil, 0),
                handle
            )
        }
    }

    /// Like `query`, but prepares the statement once per connection under `name` and reuses it.
    @discardableResult
    package func queryPrepared(_ name: String, _ sql: String, _ parameters: [String?]) throws -> PostgresResult {
        if commitsAlone { return try transaction { try $0.queryPrepared(name, sql, parameters) } }
        let handle = try liveHandle()
        try sendPendingBegin()
        if !preparedNames.contains(name) {
            _ = try consume(PQprepare(handle, name, sql, Int32(parameters.count), nil), handle)
            preparedNames.insert(name)
        }
        return try withCStrings(parameters) { values in
            try consume(
                PQexecPrepared(handle, name, Int32(parameters.count), values, nil, nil, 0),
                handle
            )
        }
    }

    /// Runs `sql` once per database session (e.g. to create temporary tables); again after a
    /// reconnect, and again after the transaction that ran it rolled back (which undid it).
    package func setUpSession(_ key: String, _ sql: String) throws {
        guard !sessionSetUps.contains(key) else { return }
        try execute(sql)
        sessionSetUps.insert(key)
        setUpsInTransaction?.append(key)
    }

    /// `setUpSession` for SQL that creates temporary tables, inside a transaction: the session's own
    /// commits stop waiting for a synchronous standby, every commit made for a caller still waits
    /// (`commitLevel`). One more round trip, once a session.
    package func setUpTemporaryTables(_ key: String, _ sql: String) throws {
        guard !sessionSetUps.contains(key) else { return }
        precondition(setUpsInTransaction != nil, "temporary tables are set up inside a transaction")
        let level = try query("SELECT current_setting('synchronous_commit')").scalar ?? ""
        // The levels that wait for a standby; `local` and `off` do not.
        guard ["on", "remote_write", "remote_apply"].contains(level) else { return try setUpSession(key, sql) }
        // SET LOCAL keeps this transaction's own commit at the caller's level.
        try setUpSession(key, sql + ";\nSET synchronous_commit TO local;\nSET LOCAL synchronous_commit TO \(level)")
        commitLevel = level
        commitLevelSetInTransaction = true
    }

    /// Runs `body` inside BEGIN … COMMIT; rolls back when it throws.
    ///
    /// BEGIN goes with the body's first statement when that is plain SQL or a COPY, and the body
    /// may end the transaction with its last statement (`commit(after:)`): a transaction that
    /// COPYs and then updates a counter costs three round trips instead of five. A body that sent
    /// nothing sends nothing.
    package func transaction<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        precondition(setUpsInTransaction == nil, "transactions do not nest")
        beginPending = true
        committed = false
        setUpsInTransaction = []
        defer {
            beginPending = false
            committed = false
            setUpsInTransaction = nil
            commitLevelSetInTransaction = false
        }
        do {
            let value = try body(self)
            if !beginPending, !committed { try execute("COMMIT") }
            return value
        } catch {
            guard !committed else { throw error }
            if !beginPending, isHealthy { _ = try? execute("ROLLBACK") }
            // Undone with the transaction (a failed COMMIT rolls back too).
            for key in setUpsInTransaction ?? [] { sessionSetUps.remove(key) }
            if commitLevelSetInTransaction { commitLevel = nil }
            throw error
        }
    }

    /// Runs `sql` (plain SQL, no parameters) and COMMIT in one round trip, as the last statement
    /// of a `transaction` body: if `sql` fails, PostgreSQL skips the COMMIT and the transaction
    /// rolls back as for any error.
    package func commit(after sql: String) throws {
        try execute(sql + ";\nCOMMIT")
        committed = true
    }

    /// `text` as an SQL string literal, quoted by libpq for this connection's encoding and
    /// settings: for values in SQL text that cannot travel as parameters (`commit(after:)`).
    package func literal(_ text: String) throws -> String {
        let handle = try liveHandle()
        guard let quoted = PQescapeLiteral(handle, text, text.utf8.count) else { throw lostOrFailed(handle) }
        defer { PQfreemem(quoted) }
        return String(cString: quoted)
    }

    /// Writes every protocol message of this connection to `file` (libpq's `PQtrace`, without
    /// timestamps) until called with nil: for tests that count round trips.
    package func traceMessages(to file: UnsafeMutablePointer<FILE>?) {
        guard let handle else { return }
        guard let file else { return PQuntrace(handle) }
        PQtrace(handle, file)
        PQsetTraceFlags(handle, PQTRACE_SUPPRESS_TIMESTAMPS)
    }

    // MARK: COPY

    /// Streams `data` to a `COPY … FROM STDIN` statement and returns the number of rows copied.
    package func copyIn(_ copyStatement: String, data: [UInt8]) throws -> Int {
        if commitsAlone { return try transaction { try $0.copyIn(copyStatement, data: data) } }
        let handle = try startCopy(copyStatement, expecting: PGRES_COPY_IN)
        let chunk = 1 << 20
        var offset = 0
        var sendFailure: String?
        data.withUnsafeBufferPointer { buffer in
            while offset < buffer.count {
                let length = min(chunk, buffer.count - offset)
                let sent = buffer.baseAddress!.advanced(by: offset).withMemoryRebound(to: CChar.self, capacity: length) {
                    PQputCopyData(handle, $0, Int32(length))
                }
                if sent != 1 {
                    sendFailure = Self.errorText(handle)
                    return
                }
                offset += length
            }
        }
        if PQputCopyEnd(handle, sendFailure) != 1 {
            throw lostOrFailed(handle)
        }
        var copied = 0
        var failure: PostgresError?
        while let result = PQgetResult(handle) {
            if PQresultStatus(result) == PGRES_COMMAND_OK {
                copied = Int(String(cString: PQcmdTuples(result))) ?? 0
            } else if failure == nil {
                failure = Self.resultError(result, handle)
            }
            PQclear(result)
        }
        if let failure { throw failure }
        if let sendFailure { throw PostgresError.copyFailed(sendFailure) }
        return copied
    }

    /// Runs a `COPY … TO STDOUT` statement and returns everything it wrote, at most `maxBytes`
    /// (more is an error: the data is held in memory).
    package func copyOut(_ copyStatement: String, maxBytes: Int) throws -> [UInt8] {
        let handle = try startCopy(copyStatement, expecting: PGRES_COPY_OUT)
        var data: [UInt8] = []
        var tooLarge = false
        while true {
            var row: UnsafeMutablePointer<CChar>?
            let length = PQgetCopyData(handle, &row, 0)
            guard length > 0, let row else { break }
            if !tooLarge {
                if data.count + Int(length) > maxBytes {
                    tooLarge = true
                    data = []
                } else {
                    row.withMemoryRebound(to: UInt8.self, capacity: Int(length)) {
                        data.append(contentsOf: UnsafeBufferPointer(start: $0, count: Int(length)))
                    }
                }
            }
            PQfreemem(row)
        }
        var failure: PostgresError?
        while let result = PQgetResult(handle) {
            if PQresultStatus(result) != PGRES_COMMAND_OK, failure == nil {
                failure = Self.resultError(result, handle)
            }
            PQclear(result)
        }
        if let failure { throw failure }
        if tooLarge { throw PostgresError.copyFailed("COPY TO STDOUT wrote more than \(maxBytes) bytes") }
        return data
    }

    /// Sends a COPY statement and checks that the server entered the COPY state `expected`.
    private func startCopy(_ copyStatement: String, expecting expected: ExecStatusType) throws -> OpaquePointer {
        let handle = try liveHandle()
        // With a pending BEGIN, PQexec stops at the COPY's own answer (PGRES_COPY_IN/OUT).
        guard let start = PQexec(handle, takingPendingBegin(copyStatement)) else {
            throw lostOrFailed(handle)
        }
        defer { PQclear(start) }
        guard PQresultStatus(start) == expected else { throw Self.resultError(start, handle) }
        return handle
    }

    // MARK: Helpers

    private func liveHandle() throws -> OpaquePointer {
        guard let handle else { throw PostgresError.poolClosed }
        return handle
    }

    private func consume(_ result: OpaquePointer?, _ handle: OpaquePointer) throws -> PostgresResult {
        guard let result else { throw lostOrFailed(handle) }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return PostgresResult(result)
        default:
            throw Self.resultError(result, handle)
        }
    }

    private func lostOrFailed(_ handle: OpaquePointer) -> PostgresError {
        let message = Self.errorText(handle)
        return PQstatus(handle) == CONNECTION_OK
            ? PostgresError.unexpectedResult(message)
            : PostgresError.connectionLost(message)
    }

    private static func resultError(_ result: OpaquePointer, _ handle: OpaquePointer) -> PostgresError {
        if PQstatus(handle) != CONNECTION_OK {
            return .connectionLost(errorText(handle))
        }
        let message = String(cString: PQresultErrorMessage(result)).trimmingWhitespace()
        let sqlState = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
        let primary = PQresultErrorField(result, Int32(UInt8(ascii: "M"))).map { String(cString: $0) }
        return .server(message, sqlState: sqlState, primaryMessage: primary)
    }

    private static func errorText(_ handle: OpaquePointer) -> String {
        String(cString: PQerrorMessage(handle)).trimmingWhitespace()
    }
}

/// Calls `body` with a C array of NUL-terminated copies of `strings` (NULL for nil), freed afterwards.
private func withCStrings<T>(_ strings: [String?], _ body: ([UnsafePointer<CChar>?]) throws -> T) rethrows -> T {
    var pointers: [UnsafeMutablePointer<CChar>?] = []
    pointers.reserveCapacity(strings.count)
    for string in strings { pointers.append(string.map { strdup($0) }) }
    defer { for pointer in pointers { free(pointer) } }
    return try body(pointers.map { $0.map { UnsafePointer($0) } })
}

extension String {
    func trimmingWhitespace() -> String {
        var scalars = Substring(self)
        while let last = scalars.last, last.isWhitespace { scalars.removeLast() }
        while let first = scalars.first, first.isWhitespace { scalars.removeFirst() }
        return String(scalars)
    }
}

/// Calls `body` with a NULL-terminated array of C strings for `strings`, valid during the call.
private func withCStrings<T>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> T) -> T {
    let copies = strings.map { strdup($0) }
    defer { for copy in copies { free(copy) } }
    let pointers = copies.map { UnsafePointer($0) } + [nil]
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}
