import DatongContracts
import DatongJSON

// A debug build compiles every module for testing: the support target reads the collector's
// batch as its tests do.
@testable import Collector

/// Tests build batches as values; the store reads them from the bytes the gateway would send,
/// as the collector reads a request.
extension IncomingBatch {
    package init(_ batch: CollectBatch) throws { try self.init(jsonBytes: batch.jsonBytes) }

    /// The records, read again from their JSON as `CollectRecord`s.
    package func collectRecords() throws -> [CollectRecord] {
        try records.map { record in
            let document = try JSONParser.parse(Array(body[record.raw]), maxDepth: CollectBatch.maxDepth)
            return try CollectRecord(wire: document.root, path: "record")
        }
    }
}
