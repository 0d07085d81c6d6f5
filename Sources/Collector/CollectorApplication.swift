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
