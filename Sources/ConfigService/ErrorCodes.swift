import DatongRuntime

/// The codes ConfigService answers with (`ErrorCode`), besides the shared ones.
extension ErrorCode {
    package static let documentTooLarge = ErrorCode("document_too_large")
    package static let invalidAppVersion = ErrorCode("invalid_app_version")
    package static let invalidEnrichment = ErrorCode("invalid_enrichment")
    package static let invalidKeyType = ErrorCode("invalid_key_type")
    package static let invalidPkv = ErrorCode("invalid_pkv")
    package static let invalidTokenName = ErrorCode("invalid_token_name")
    package static let invalidVersion = ErrorCode("invalid_version")
    package static let keyRetired = ErrorCode("key_retired")
    package static let noMasterKey = ErrorCode("no_master_key")
    package static let noVersion = ErrorCode("no_version")
    package static let tokenExists = ErrorCode("token_exists")
    package static let unknownKey = ErrorCode("unknown_key")
    package static let unknownKind = ErrorCode("unknown_kind")
    package static let unknownToken = ErrorCode("unknown_token")
    package static let unknownErasure = ErrorCode("unknown_erasure")
    package static let unknownSuppression = ErrorCode("unknown_suppression")
    package static let tooManySuppressed = ErrorCode("too_many_suppressed")
}
