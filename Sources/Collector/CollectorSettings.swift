import DatongRuntime

/// The collector's settings (see the README's settings table).
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

    package static let defaultPort = 8109

    package init(
        server: ServerSettings, database: DatabaseSettings, maxBatchBytes: Int = 64 << 20,
        maxRecordsPerTransaction: Int = 10_000, maxWaitingRecords: Int = 200_000, retentionDays: Int = 0
    ) {
        self.server = server
        self.database = database
        self.maxBatchBytes = maxBatchBytes
        self.maxRecordsPerTransaction = maxRecordsPerTransaction
        self.maxWaitingRecords = maxWaitingRecords
        self.retentionDays = retentionDays
    }

    package init(_ reader: SettingsReader) throws {
        self.init(
            server: try ServerSettings(reader, defaultPort: Self.defaultPort),
            database: try DatabaseSettings(reader, defaultPoolSize: 4),
            maxBatchBytes: try reader.int("COLLECTOR_MAX_BATCH_BYTES", default: 64 << 20, range: 1024...(1 << 30)),
            maxRecordsPerTransaction: try reader.int("COLLECTOR_MAX_RECORDS_PER_TRANSACTION", default: 10_000, range: 1...1_000_000),
            maxWaitingRecords: try reader.int("COLLECTOR_MAX_WAITING_RECORDS", default: 200_000, range: 1...100_000_000),
            retentionDays: try reader.int("RETENTION_DAYS", default: 0, range: 0...36_500)
        )
    }
}
