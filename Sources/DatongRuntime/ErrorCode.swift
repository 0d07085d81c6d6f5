/// The short, stable code of a refusal: the `error` of a `ProblemBody` that clients match on, and
/// the `code` label of the `datong_refusals_total` metric. Each module declares the codes it answers
/// with once, as static members (`ErrorCodes.swift`); a code shared by several services lives here.
package struct ErrorCode: Hashable, Sendable, CustomStringConvertible {
    package let rawValue: String

    /// For the declarations only; a call site names a static member.
    package init(_ rawValue: String) { self.rawValue = rawValue }

    /// A code another service answered with, passed on as it is (never a label: it comes from outside).
    package init(passedOn rawValue: String) { self.rawValue = rawValue }

    package var description: String { rawValue }
}

/// Codes several services answer with.
extension ErrorCode {
    package static let invalidProject = ErrorCode("invalid_project")
    package static let bodyTooLarge = ErrorCode("body_too_large")
    package static let bodyTimeout = ErrorCode("body_timeout")
    package static let databaseUnavailable = ErrorCode("database_unavailable")
    package static let internalError = ErrorCode("internal_error")
    package static let invalidAppId = ErrorCode("invalid_app_id")
    package static let invalidBody = ErrorCode("invalid_body")
    package static let invalidCursor = ErrorCode("invalid_cursor")
    package static let invalidHost = ErrorCode("invalid_host")
    package static let invalidLimit = ErrorCode("invalid_limit")
    package static let invalidPlatform = ErrorCode("invalid_platform")
    package static let invalidServiceToken = ErrorCode("invalid_service_token")
    package static let invalidToken = ErrorCode("invalid_token")
    package static let invalidValue = ErrorCode("invalid_value")
    package static let malformedBody = ErrorCode("malformed_body")
    package static let missingServiceToken = ErrorCode("missing_service_token")
    package static let missingToken = ErrorCode("missing_token")
    package static let noDocument = ErrorCode("no_document")
    package static let queryTimeout = ErrorCode("query_timeout")
    package static let serviceTokenNotConfigured = ErrorCode("service_token_not_configured")
    package static let unknownProject = ErrorCode("unknown_project")
    package static let unknownReport = ErrorCode("unknown_report")
    /// identity-service and config-service (erasures, exports) name users the same way.
    package static let unknownUser = ErrorCode("unknown_user")
    package static let invalidUser = ErrorCode("invalid_user")
    /// A `distinct_id` that is an id of more than one user (identity-service, passed on by config-service).
    package static let ambiguousId = ErrorCode("ambiguous_id")

    /// `<service>_unavailable`: another service cannot be reached or answered 5xx (503 to the caller).
    package static func unavailable(_ service: Upstream) -> ErrorCode { ErrorCode("\(service.rawValue)_unavailable") }
    /// `<service>_bad_answer`: another service answered with what the caller cannot read.
    package static func badAnswer(from service: Upstream) -> ErrorCode { ErrorCode("\(service.rawValue)_bad_answer") }
    /// A service answered 404 to one of its own routes: an older version, during an upgrade.
    package static func lacksRoute(_ service: Upstream) -> ErrorCode { ErrorCode("\(service.rawValue)_lacks_route") }
}

/// A service another one calls, as error codes name it (`identity_unavailable`).
package enum Upstream: String, Sendable {
    case identity
    case collector
    case config

    /// Its name in messages and logs: the executable's.
    package var serviceName: String {
        switch self {
        case .identity: "identity-service"
        case .collector: "collector"
        case .config: "config-service"
        }
    }
}
