import DatongContracts
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

/// With SERVICE_TOKEN set, the endpoints only Datong's services call refuse anyone else.
@Suite("Internal endpoints and the service token")
struct ServiceTokenTests {
    @Test("resolve, batches and project ingestion settings need the service token; uploads through the gateway carry it")
    func internalEndpoints() async throws {
        try await RunningServices.run { services in
            let resolve = ByteBuffer(string: #"{"records":[]}"#)
            let batch = ByteBuffer(string: #"{"receivedAt":1,"records":[],"rejected":[]}"#)
            let calls: [(any TestClientProtocol, String, HTTPRequest.Method, ByteBuffer?)] = [
                (services.identity, "/v1/resolve", .post, resolve),
                (services.collector, "/v1/batches", .post, batch),
                (services.config, "/v1/projects/default/ingestion", .get, nil),
            ]
            for (client, uri, method, body) in calls {
                let anonymous = try await client.execute(uri: uri, method: method, headers: [:], body: body)
                #expect(anonymous.status == .unauthorized, "\(uri)")
                #expect(try anonymous.json()["error"] as? String == "missing_service_token")
                let wrong = try await client.execute(uri: uri, method: method, headers: [.authorization: "Bearer guess"], body: body)
                #expect(wrong.status == .unauthorized, "\(uri)")
                let right = try await client.execute(uri: uri, method: method, headers: [.authorization: "Bearer \(RunningServices.serviceToken)"], body: body)
                #expect(right.status == .ok, "\(uri)")
            }
            // The gateway sends the token on every call: an upload is stored.
            let data = Data(#"[{"type":"track","event":"E","time":1795273119736,"distinct_id":"d"}]"#.utf8).base64EncodedString()
                .addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let upload = try await services.gateway.execute(uri: "/sa?project=default", method: .post, body: ByteBuffer(string: "data_list=\(data)"))
            #expect(try upload.json()["stored"] as? Int == 1)
        }
    }
}
