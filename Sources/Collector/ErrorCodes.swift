import DatongRuntime

/// The codes Collector answers with (`ErrorCode`), besides the shared ones.
extension ErrorCode {
    package static let collectorBusy = ErrorCode("collector_busy")
    package static let invalidBatch = ErrorCode("invalid_batch")
    package static let reportsBusy = ErrorCode("reports_busy")
}
