import DatongContracts
import DatongRuntime
import Hummingbird

/// Builds the collector: `POST /v1/batches` writes a batch and answers after commit.
public func buildCollectorApplication(
    settings: CollectorSettings, runtime: ServiceRuntime
) -> some ApplicationProtocol {
    let database = ServiceDatabase(settings: settings.database, logger: runtime.logger)
    let partitions = EventPartitions(pool: database.pool)
    let store = PostgresEventStore(
        pool: database.pool, partitions: partitions, writers: settings.database.poolSize,
        maxRecordsPerTransaction: settings.maxRecordsPerTransaction, maxWaitingRecords: settings.maxWaitingRecords
    )
    let router = makeServiceRouter(runtime: runtime, readiness: [database.readiness])
    let limit = settings.maxBatchBytes
    let serviceToken = ServiceToken(settings.server.serviceToken)
    router.post("/v1/batches") { request, context in
        try serviceToken.check(request)
        let body = try await collectBody(request, limit: limit)
        let batch: CollectBatch
        do {
            batch = try CollectBatch(jsonBytes: Array(body.readableBytesView))
        } catch let problem as ContractDecodingError {
            throw ServiceError.badRequest("invalid_body", "the batch does not match the contract: \(problem.message)")
        }
        if let problem = batch.problem {
            throw ServiceError.badRequest("invalid_batch", problem)
        }
        let result = try await store.write(batch)
        context.logger.debug("batch.committed", metadata: [
            "batch.stored": "\(result.stored)", "batch.duplicates": "\(result.duplicates)", "batch.rejected": "\(result.rejected)",
        ])
        return try jsonResponse(.ok, encoding: result)
    }
    let maintenance = PartitionMaintenance(partitions: partitions, retentionDays: settings.retentionDays, logger: runtime.logger)
    var app = makeServiceApplication(
        name: "collector", router: router, server: settings.server, runtime: runtime, services: [maintenance]
    )
    database.attach(to: &app, schema: CollectorSchema.name, migrations: CollectorSchema.migrations, logger: runtime.logger)
    return app
}

extension CollectBatch {
    /// The latest time PostgreSQL's `timestamptz` stores as this schema uses it (9999-12-31).
    static let latestMillis: Int64 = 253_402_300_799_999

    /// Why this batch breaks what the collector stores, or nil. The gateway only sends batches that
    /// pass; the check keeps any other caller from crashing or corrupting the write path.
    var problem: String? {
        guard (0...Self.latestMillis).contains(receivedAt) else { return "receivedAt \(receivedAt) is not a time from 1970 to 9999 in milliseconds" }
        for (index, record) in records.enumerated() {
            guard ProjectName.isValid(record.project) else { return "records[\(index)].project is not a valid project name" }
            guard (0...Self.latestMillis).contains(record.time) else {
                return "records[\(index)].time \(record.time) is not a time from 1970 to 9999 in milliseconds"
            }
            guard !record.type.isEmpty, record.type.utf8.count <= 64 else { return "records[\(index)].type must be 1 to 64 bytes" }
        }
        for (index, rejection) in rejected.enumerated() where !ProjectName.isValid(rejection.project) {
            return "rejected[\(index)].project is not a valid project name"
        }
        return nil
    }
}
