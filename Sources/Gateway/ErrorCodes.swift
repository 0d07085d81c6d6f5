import DatongRuntime

/// The codes Gateway answers with (`ErrorCode`), besides the shared ones.
extension ErrorCode {
    package static let answerTooLarge = ErrorCode("answer_too_large")
    package static let crcMismatch = ErrorCode("crc_mismatch")
    package static let encryptionUnavailable = ErrorCode("encryption_unavailable")
    package static let invalidAppContext = ErrorCode("invalid_app_context")
    package static let invalidBase64 = ErrorCode("invalid_base64")
    package static let invalidCallback = ErrorCode("invalid_callback")
    package static let invalidCrc = ErrorCode("invalid_crc")
    package static let invalidGzip = ErrorCode("invalid_gzip")
    package static let invalidGzipFlag = ErrorCode("invalid_gzip_flag")
    package static let invalidJson = ErrorCode("invalid_json")
    package static let invalidMessages = ErrorCode("invalid_messages")
    package static let invalidUtf8 = ErrorCode("invalid_utf8")
    package static let jsonTooDeep = ErrorCode("json_too_deep")
    package static let missingData = ErrorCode("missing_data")
    package static let noAppLinks = ErrorCode("no_app_links")
    package static let noRecords = ErrorCode("no_records")
    package static let overloaded = ErrorCode("overloaded")
    package static let payloadTooLarge = ErrorCode("payload_too_large")
    package static let tooManyMessages = ErrorCode("too_many_messages")
    package static let tooManyRecords = ErrorCode("too_many_records")
    package static let unknownConfig = ErrorCode("unknown_config")
    package static let unsupportedContentEncoding = ErrorCode("unsupported_content_encoding")
    package static let refused = ErrorCode("refused")
}
