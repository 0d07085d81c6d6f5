import DatongContracts
import DatongTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOFoundationEssentialsCompat
import Testing

/// Uploads reach only projects config-service knows, with their ingestion token when one is set.
@Suite("bridge-gateway: projects and ingestion tokens")
struct ProjectAccessTests {
    static let admin: HTTPFields = [.authorization: "Bearer \(RunningServices.adminToken)"]
    static let record = #"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d"}"#

    private func upload(_ query: String, _ records: String, to services: RunningServices) async throws -> TestResponse {
        let data = Data(records.utf8).base64EncodedString().addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        return try await services.gateway.execute(uri: "/sa?\(query)", method: .post, body: ByteBuffer(string: "data_list=\(data)"))
    }

    @Test("an unknown project is 404 and a missing or wrong token 403 (both retried by the SDKs); the right token is accepted")
    func access() async throws {
        try await RunningServices.run { services in
            let unknown = try await upload("project=nowhere", "[\(Self.record)]", to: services)
            #expect(unknown.status == .notFound)
            #expect(try unknown.json()["error"] as? String == "unknown_project")

            let token = "shop-ingestion-token-0123456789"
            let created = try await services.config.execute(
                uri: "/v1/projects/shop", method: .put, headers: Self.admin,
                body: ByteBuffer(string: #"{"token":"\#(token)"}"#))
            #expect(created.status == .created)
            let stored = try await TestDatabase.rows(services.databaseURL, "SELECT token_sha256 <> $1 FROM config.projects WHERE name = 'shop'", [token])
            #expect(stored == [["t"]])

            let missing = try await upload("project=shop", "[\(Self.record)]", to: services)
            #expect(missing.status == .forbidden)
            #expect(try missing.json()["error"] as? String == "missing_token")
            let wrong = try await upload("project=shop&token=guess", "[\(Self.record)]", to: services)
            #expect(wrong.status == .forbidden)
            #expect(try wrong.json()["error"] as? String == "invalid_token")
            let right = try await upload("project=shop&token=\(token)", "[\(Self.record)]", to: services)
            #expect(right.status == .ok)
            #expect(try right.json()["stored"] as? Int == 1)

            // A record naming a project of its own needs that project (and its token); the rest is stored.
            let mixed = try await upload(
                "project=default",
                #"[\#(Self.record), {"type":"track","event":"F","time":1795273119736,"distinct_id":"d","project":"ghost"}]"#,
                to: services)
            #expect(mixed.status == .ok)
            #expect(try mixed.json()["stored"] as? Int == 1)
            #expect(try mixed.json()["rejected"] as? Int == 1)
            let rejected = try await TestDatabase.rows(services.databaseURL, "SELECT project, raw::jsonb->>'project' FROM analytics.rejected")
            #expect(rejected == [["default", "ghost"]])

            // A record for an existing project with a wrong token of its own (a server SDK's
            // `token` field) is kept under that project, whose operators are the ones to fix it.
            let wrongOwn = try await upload(
                "project=default",
                #"[{"type":"track","event":"G","time":1795273119736,"distinct_id":"d","project":"shop","token":"guess"}]"#,
                to: services)
            #expect(wrongOwn.status == .ok)
            #expect(try wrongOwn.json()["rejected"] as? Int == 1)
            let filed = try await TestDatabase.rows(
                services.databaseURL, "SELECT project, reason FROM analytics.rejected WHERE raw::jsonb->>'event' = 'G'")
            #expect(filed.first?[0] == "shop", "\(filed)")
            #expect(filed.first?[1]?.contains("ingestion token") == true, "\(filed)")

            // A relay for an unknown project is refused the same way.
            let relay = try Fixtures.bridgeMessages("android")
            let body = try JSONSerialization.data(withJSONObject: ["app": Fixtures.relayApp(anonymousID: "a-1", idfv: "I-1"), "messages": [relay[0]]])
            let refused = try await services.gateway.execute(uri: "/v1/bridge?project=nowhere", method: .post, body: ByteBuffer(data: body))
            #expect(refused.status == .notFound)
        }
    }

    @Test("a wrong token is refused before anything is decoded: garbage, encrypted and relayed payloads all get 403, not their decoding error")
    func tokenBeforeDecoding() async throws {
        try await RunningServices.run { services in
            let token = "shop-ingestion-token-0123456789"
            let created = try await services.config.execute(
                uri: "/v1/projects/shop", method: .put, headers: Self.admin, body: ByteBuffer(string: #"{"token":"\#(token)"}"#))
            #expect(created.status == .created)
            let refusals: [(String, String, String)] = [
                ("/sa?project=shop&token=guess", "data_list=%25%25not-base64", "invalid_token"),
                ("/sa?project=shop", "gzip=1&data_list=H4sInotgzip", "missing_token"),
                ("/sa?project=shop&token=guess", "gzip=9&data_list=%5B%7B%22pkv%22%3A99%7D%5D", "invalid_token"),
                ("/sa?project=shop&token=guess", "gzip=9", "invalid_token"),
                ("/v1/bridge?project=shop&token=guess", "{not json", "invalid_token"),
            ]
            for (uri, body, code) in refusals {
                let answer = try await services.gateway.execute(uri: uri, method: .post, body: ByteBuffer(string: body))
                #expect(answer.status == .forbidden, "\(uri) \(body): \(answer.status)")
                #expect(try answer.json()["error"] as? String == code, "\(uri) \(body)")
            }
            // The same bodies with the right token fail as they are: decoded, then refused for what they hold.
            let garbage = try await services.gateway.execute(
                uri: "/sa?project=shop&token=\(token)", method: .post, body: ByteBuffer(string: "data_list=%25%25not-base64"))
            #expect(garbage.status == .badRequest)
            let relay = try await services.gateway.execute(uri: "/v1/bridge?project=shop&token=\(token)", method: .post, body: ByteBuffer(string: "{not json"))
            #expect(relay.status == .badRequest)
            let stored = try await TestDatabase.rows(services.databaseURL, "SELECT count(*) FROM analytics.rejected")
            #expect(stored == [["0"]])
        }
    }
}
