import DatongRuntime

/// The codes Identity answers with (`ErrorCode`), besides the shared ones.
extension ErrorCode {
    package static let missingIdentity = ErrorCode("missing_identity")
    package static let unknownIdentity = ErrorCode("unknown_identity")
    package static let unknownMerge = ErrorCode("unknown_merge")
    package static let alreadyMerged = ErrorCode("already_merged")
    package static let alreadyUndone = ErrorCode("already_undone")
    package static let cannotUnbind = ErrorCode("cannot_unbind")
    package static let illegalIdentity = ErrorCode("illegal_identity")
    package static let invalidIdentity = ErrorCode("invalid_identity")
    package static let loginConflict = ErrorCode("login_conflict")
    package static let noIdentities = ErrorCode("no_identities")
    package static let sameUser = ErrorCode("same_user")
    package static let invalidMerge = ErrorCode("invalid_merge")
    package static let mergedSince = ErrorCode("merged_since")
    package static let invalidHorizon = ErrorCode("invalid_horizon")
}
