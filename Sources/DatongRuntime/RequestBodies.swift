import DatongContracts
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOFoundationEssentialsCompat
import Prometheus
import ServiceLifecycle

/// A JSON response from already-encoded text.
package func jsonResponse(_ status: HTTPResponse.Status, _ json: String, headers: HTTPFields = [:]) -> Response {
    var headers = headers
    headers[.contentType] = "application/json; charset=utf-8"
    return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: json)))
}

/// A JSON response from already-encoded UTF-8 bytes.
package func jsonResponse(_ status: HTTPResponse.Status, bytes: [UInt8], headers: HTTPFields = [:]) -> Response {
    var headers = headers
    headers[.contentType] = "application/json; charset=utf-8"
    return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
}

/// Answers have their keys sorted (the same value is the same text) and slashes unescaped.
private let answerEncoder: JSONEncoder = {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return encoder
}()

/// A JSON response from an `Encodable` value.
package func jsonResponse(_ status: HTTPResponse.Status, encoding value: some Encodable, headers: HTTPFields = [:]) throws -> Response {
    var headers = headers
    headers[.contentType] = "application/json; charset=utf-8"
    let data = try answerEncoder.encode(value)
    return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
}

/// Reads a request body of at most `limit` bytes, stopping as soon as more arrives: 413 with the
/// error `code` when it is larger. A body that has not fully arrived within `timeout` (a client
/// trickling it in to hold a connection and a task) is a 408 `body_timeout`, and the connection
/// is closed.
package func collectBody(
    _ request: Request, limit: Int, code: ErrorCode = .bodyTooLarge, timeout: Duration = .seconds(30)
) async throws -> ByteBuffer {
    let tooLarge = ServiceError(.contentTooLarge, code, "the request body is larger than \(limit) bytes")
    // A client that sent `Expect: 100-continue` waits for a go-ahead before it sends the body: one
    // whose declared length is over the limit is refused at once, and the connection closed, as
    // the body it announced will never be read. (Other clients are already sending: their body is
    // read up to the limit, which keeps the connection usable for their next request.)
    if request.headers[.expect]?.lowercased() == "100-continue", let declared = request.headers[.contentLength],
        (Int(declared) ?? .max) > limit
    {
        throw ServiceError(.contentTooLarge, code, "the request body would be larger than \(limit) bytes", closesConnection: true)
    }
    let body = request.body
    // The deadline is watched by the process's one `BodyDeadlines` task, not a timer of its own.
    let collected = try await BodyDeadlines.shared.run(within: timeout) {
        do {
            return try await body.collect(upTo: limit)
        } catch is NIOTooManyBytesError {
            throw tooLarge
        } catch let error as CancellationError {
            throw error
        } catch {
            // The body stream fails only when the client's framing is broken (a chunk size
            // that is not hex, negative, overflowing or not followed by its data) or the
            // client went away: the request is at fault, and the connection is unusable.
            throw ServiceError(
                .badRequest, .malformedBody, "the request body is not valid HTTP/1.1 framing (chunked encoding or length)",
                closesConnection: true
            )
        }
    }
    guard let collected else {
        throw ServiceError(.requestTimeout, .bodyTimeout, "the request body did not arrive within \(timeout.components.seconds) seconds")
    }
    return collected
}

/// Decodes a JSON request body of at most `limit` bytes; too large is 413, malformed is 400.
package func decodeJSONBody<T: Decodable>(_ type: T.Type, from request: Request, limit: Int) async throws -> T {
    let body = try await collectBody(request, limit: limit)
    return try JSONDecoder().decode(T.self, from: Data(buffer: body))
}

/// Reads an internal call's body, of at most `limit` bytes, as the contract type `T`; a body that
/// does not match is a 400 `invalid_body` naming `what` and the field at fault.
package func readContractBody<T: WireDecodable>(_ type: T.Type, from request: Request, limit: Int, what: String) async throws -> T {
    let body = try await collectBody(request, limit: limit)
    do {
        return try T(jsonBytes: Array(body.readableBytesView))
    } catch {
        throw ServiceError.badRequest(.invalidBody, "\(what) does not match the contract: \(error.message)")
    }
}
