import DatongRuntime

/// The collector's settings (docs/SETTINGS.md).
package struct CollectorSettings: Sendable {
    package var server: ServerSettings
    package var database: DatabaseSettings
    /// Largest batch body accepted from the gateway, in bytes (`COLLECTOR_MAX_BATCH_BYTES`).
    package var maxBatchBytes: Int
    /// Most records one shared transaction takes (`COLLECTOR_MAX_RECORDS_PER_TRANSACTION`).
    package var maxRecordsPerTransaction: Int
    /// Records that may wait for a transaction before batches get 503 (`COLLECTOR_MAX_WAITING_RECORDS`).
    package var maxWaitingRecords: Int
    /// Days of events kept; older monthly partitions are dropped whole (`RETENTION_DAYS`, 0 = keep all).
    package var retentionDays: Int
    /// Milliseconds between two looks of the report rollups (`REPORT_ROLLUP_INTERVAL_MS`, 0 = none).
    package var reportRollupIntervalMs: Int

    package static let defaultPort = 8109

    package init(
        server: ServerSettings, database: DatabaseSettings, maxBatchBytes: Int = 64 << 20,
        maxRecordsPerTransaction: Int = 10_000, maxWaitingRecords: Int = 200_000, retentionDays: Int = 0,
        reportRollupIntervalMs: Int = 2000
    ) {
        self.server = server
        self.database = database
        self.maxBatchBytes = maxBatchBytes
        self.maxRecordsPerTransaction = maxRecordsPerTransaction
        self.maxWaitingRecords = maxWaitingRecords
        self.retentionDays = retentionDays
        self.reportRollupIntervalMs = reportRollupIntervalMs
    }

    /// The defaults are the memberwise initializer's, and nowhere else.
    package init(_ reader: SettingsReader) throws {
        let defaults = CollectorSettings(server: ServerSettings(port: Self.defaultPort), database: DatabaseSettings())
        self.init(
            server: try ServerSettings(reader, defaultPort: Self.defaultPort),
            database: try DatabaseSettings(reader, defaultPoolSize: defaults.database.poolSize),
            maxBatchBytes: try reader.int("COLLECTOR_MAX_BATCH_BYTES", default: defaults.maxBatchBytes, range: 1024...(1 << 30)),
            maxRecordsPerTransaction: try reader.int(
                "COLLECTOR_MAX_RECORDS_PER_TRANSACTION", default: defaults.maxRecordsPerTransaction, range: 1...1_000_000
            ),
            maxWaitingRecords: try reader.int("COLLECTOR_MAX_WAITING_RECORDS", default: defaults.maxWaitingRecords, range: 1...100_000_000),
            retentionDays: try reader.int("RETENTION_DAYS", default: defaults.retentionDays, range: 0...36_500),
            reportRollupIntervalMs: try reader.int(
                "REPORT_ROLLUP_INTERVAL_MS", default: defaults.reportRollupIntervalMs, range: 0...3_600_000)
        )
    }
}
