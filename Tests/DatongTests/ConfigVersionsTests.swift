import DatongContracts
import DatongPostgres
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOFoundationEssentialsCompat
import Testing

@testable import ConfigService

/// Version history, diff and rollback of config-service documents, over HTTP against a real database.
@Suite("config-service: versions, diff and rollback")
struct ConfigVersionsTests {
    static let admin: HTTPFields = [.authorization: "Bearer \(RunningServices.adminToken)"]

    @Test("a table's versions are listed, read, compared and rolled back; a rollback serves the old ETag again")
    func history() async throws {
        try await RunningServices.run { services in
            let config = services.config
            let path = "/v1/projects/default/tracking-table?platform=ios"
            func publish(_ body: String, note: String) async throws -> PublishResult {
                let answer = try await config.execute(uri: path + "&note=\(note)", method: .put, headers: Self.admin, body: ByteBuffer(string: body))
                #expect(answer.status == .created)
                return try JSONDecoder().decode(PublishResult.self, from: Data(buffer: answer.body))
            }
            let first = try await publish(#"{"PAGEPV":{"Home":{"userDefined":{"pageid":"1"},"pagePara":{}}}}"#, note: "first")
            let second = try await publish(
                #"{"PAGEPV":{"Home":{"userDefined":{"pageid":"2"},"pagePara":{}}},"GESTURE":{"Home/tap:":{"userDefined":{},"pagePara":{}}}}"#,
                note: "second"
            )

            let listed = try await config.execute(uri: "/v1/projects/default/tracking-table/versions?platform=ios", method: .get, headers: Self.admin)
            let versions = try JSONDecoder().decode([DocumentVersion].self, from: Data(buffer: listed.body))
            #expect(versions.map(\.version) == [2, 1])
            #expect(versions.map(\.note) == ["second", "first"])
            #expect(versions.map(\.etag) == [second.etag, first.etag])

            let old = try await config.execute(uri: "/v1/projects/default/tracking-table/versions/1?platform=ios", method: .get, headers: Self.admin)
            #expect(old.status == .ok)
            #expect(old.headers[.eTag] == first.etag)
            #expect(try old.json()["PAGEPV"] != nil)

            let diff = try await config.execute(uri: "/v1/projects/default/tracking-table/diff?platform=ios&from=1&to=2", method: .get, headers: Self.admin)
            let changes = try #require(try diff.json()["changes"] as? [[String: Any]])
            #expect(
                changes.map { "\($0["op"] ?? "") \($0["path"] ?? "")" } == [
                    "add /GESTURE", "replace /PAGEPV/Home/userDefined/pageid",
                ])
            #expect(changes.last?["from"] as? String == "1")
            #expect(changes.last?["to"] as? String == "2")

            let rolled = try await config.execute(uri: "/v1/projects/default/tracking-table/rollback?platform=ios&to=1", method: .post, headers: Self.admin)
            #expect(rolled.status == .created)
            let third = try JSONDecoder().decode(PublishResult.self, from: Data(buffer: rolled.body))
            #expect(third.version == 3)
            #expect(third.etag == first.etag)
            // An app that still holds version 1 revalidates with 304; the newest is version 3.
            let revalidated = try await config.execute(uri: path, method: .get, headers: [.ifNoneMatch: first.etag])
            #expect(revalidated.status == .notModified)
            #expect(revalidated.headers[HTTPField.Name("X-Datong-Version")!] == "3")
        }
    }

    @Test("a version published for a range of app versions is served to those apps only")
    func appVersionTargeting() async throws {
        try await RunningServices.run { services in
            let config = services.config
            let base = "/v1/projects/default/remote-config?platform=android"
            func publish(_ body: String, _ range: String) async throws -> HTTPResponse.Status {
                try await config.execute(uri: base + range, method: .put, headers: Self.admin, body: ByteBuffer(string: body)).status
            }
            #expect(try await publish(#"{"configs":{},"nv":"all"}"#, "") == .created)
            #expect(try await publish(#"{"configs":{},"nv":"new"}"#, "&min_app_version=2.10") == .created)
            #expect(try await publish(#"{"configs":{},"nv":"old"}"#, "&max_app_version=2.9.9") == .created)
            #expect(try await publish(#"{"configs":{},"nv":"x"}"#, "&min_app_version=3&max_app_version=2") == .badRequest)
            #expect(try await publish(#"{"configs":{},"nv":"x"}"#, "&min_app_version=2.x") == .badRequest)
            func served(_ appVersion: String?) async throws -> String? {
                let uri = base + (appVersion.map { "&app_version=\($0)" } ?? "")
                return try await config.execute(uri: uri, method: .get).json()["nv"] as? String
            }
            #expect(try await served("2.10.0") == "new")  // 2.10 sorts after 2.9
            #expect(try await served("2.9") == "old")
            #expect(try await served(nil) == "all")  // no app version: the untargeted version
            let listed = try await config.execute(uri: "/v1/projects/default/remote-config/versions?platform=android", method: .get, headers: Self.admin)
            let versions = try JSONDecoder().decode([DocumentVersion].self, from: Data(buffer: listed.body))
            #expect(versions.map(\.minAppVersion) == [nil, "2.10.0", nil])
            #expect(versions.map(\.maxAppVersion) == ["2.9.9", nil, nil])
            let invalid = try await config.execute(uri: base + "&app_version=latest", method: .get)
            #expect(invalid.status == .badRequest)
        }
    }

    @Test("admin tokens are made, used, listed and revoked; only their digests are stored; every change is in the audit trail")
    func tokensAndAudit() async throws {
        try await RunningServices.run { services in
            let config = services.config
            let made = try await config.execute(uri: "/v1/admin-tokens", method: .post, headers: Self.admin, body: ByteBuffer(string: #"{"name":"ci-deploy"}"#))
            #expect(made.status == .created)
            let token = try JSONDecoder().decode(NewAdminToken.self, from: Data(buffer: made.body)).token
            #expect(token.count == 64)
            let deploy: HTTPFields = [.authorization: "Bearer \(token)"]

            let shop = try await config.execute(uri: "/v1/projects/shop", method: .put, headers: deploy)
            #expect(shop.status == .created)
            let published = try await config.execute(
                uri: "/v1/projects/shop/remote-config?note=launch", method: .put, headers: deploy,
                body: ByteBuffer(string: #"{"configs":{}}"#))
            #expect(published.status == .created)

            let again = try await config.execute(uri: "/v1/admin-tokens", method: .post, headers: deploy, body: ByteBuffer(string: #"{"name":"ci-deploy"}"#))
            #expect(again.status == .conflict)
            let badName = try await config.execute(uri: "/v1/admin-tokens", method: .post, headers: deploy, body: ByteBuffer(string: #"{"name":"a b"}"#))
            #expect(badName.status == .badRequest)

            let listed = try await config.execute(uri: "/v1/admin-tokens", method: .get, headers: Self.admin)
            #expect(
                try JSONDecoder().decode([AdminTokenInfo].self, from: Data(buffer: listed.body)).map { [$0.name, $0.createdBy] } == [
                    ["ci-deploy", "bootstrap"]
                ])
            #expect(!listed.text.contains(token))
            let stored = try await TestDatabase.rows(
                services.databaseURL, "SELECT sha256 = encode(sha256(convert_to($1, 'UTF8')), 'hex') FROM config.admin_tokens", [token])
            #expect(stored == [["t"]])

            let revoked = try await config.execute(uri: "/v1/admin-tokens/ci-deploy", method: .delete, headers: Self.admin)
            #expect(revoked.status == .noContent)
            let refused = try await config.execute(uri: "/v1/projects", method: .get, headers: deploy)
            #expect(refused.status == .unauthorized)

            let trail = try await config.execute(uri: "/v1/audit?limit=10", method: .get, headers: Self.admin)
            let records = try JSONDecoder().decode([AuditRecord].self, from: Data(buffer: trail.body))
            #expect(
                records.prefix(4).map { "\($0.actor) \($0.action) \($0.project ?? "-")" } == [
                    "bootstrap token.revoked -", "ci-deploy document.published shop", "ci-deploy project.created shop", "bootstrap token.created -",
                ])
            #expect(records[1].version == 1)
            #expect(records[1].detail == "launch")
            let shopOnly = try await config.execute(uri: "/v1/audit?project=shop", method: .get, headers: Self.admin)
            #expect(try JSONDecoder().decode([AuditRecord].self, from: Data(buffer: shopOnly.body)).count == 2)
        }
    }

    @Test("a publish through one replica is served by another within a second; its own reads see it at once")
    func replicaFreshness() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: ConfigSchema.name, migrations: ConfigSchema.migrations, pool: pool, logger: TestDatabase.logger)
            let replicaA = PostgresConfigStore(pool: pool)
            let replicaB = PostgresConfigStore(pool: pool)
            let scope = try DocumentScope(platform: "ios", appID: nil)
            func publish(_ store: PostgresConfigStore, _ body: String) async throws -> Int {
                try await store.publish(
                    project: "default", kind: .remoteConfig, scope: scope, canonical: body, etag: "\"\(body.count)\"", note: nil, actor: "test")
            }
            func served(_ store: PostgresConfigStore) async throws -> Int? {
                let document = try await store.cachedLatest(project: "default", kind: .remoteConfig, scope: scope, appVersion: nil)
                return document?.version
            }
            _ = try await publish(replicaA, #"{"v":1}"#)
            #expect(try await served(replicaB) == 1)
            _ = try await publish(replicaA, #"{"v":22}"#)
            #expect(try await served(replicaA) == 2)
            let clock = ContinuousClock()
            let start = clock.now
            while try await served(replicaB) != 2 {
                // The cache keeps an answer for 1 s; the rest is slack for a loaded 2-core machine.
                guard clock.now - start < .seconds(8) else {
                    Issue.record("replica B still serves version 1 after 8 s")
                    break
                }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    /// Two valid versions of each kind, and a document of that kind with a mistake and where it is.
    static let kinds: [(kind: String, first: String, second: String, bad: String, badPath: String)] = [
        (
            "tracking-table", #"{"PAGEPV":{"Home":{"userDefined":{},"pagePara":{}}}}"#,
            #"{"PAGEPV":{"Cart":{"userDefined":{},"pagePara":{}}}}"#, #"{"PAGEPV":{"a/b":{"userDefined":{},"pagePara":{}}}}"#, "/PAGEPV/a~1b"
        ),
        (
            "remote-config", #"{"configs":{"disableSDK":false}}"#, #"{"configs":{"disableSDK":true,"autoTrackMode":3}}"#,
            #"{"configs":{"autoTrackMode":16}}"#, "/configs/autoTrackMode"
        ),
        (
            "visual-config", #"{"events":[]}"#, #"{"events":[{"event_name":"Buy","event_type":"appclick","event":{"element_path":"A/B"}}]}"#,
            #"{"events":[{"event_name":"","event_type":"appclick","event":{}}]}"#, "/events/0/event_name"
        ),
        ("server-url-whitelist", #"["https://a.example.com/sa?project=p"]"#, #"["https://b.example.com/sa?project=p"]"#, #"["no host"]"#, "/0"),
        ("h5-domain-whitelist", #"["h5.example.com"]"#, #"["*.example.com"]"#, #"["ok.example.com", ""]"#, "/1"),
    ]

    @Test(
        "every kind is published, read, revalidated, compared, rolled back, targeted (or not), and refused precisely when wrong",
        arguments: kinds.map(\.kind))
    func everyKind(kind: String) async throws {
        let sample = try #require(Self.kinds.first { $0.kind == kind })
        try await RunningServices.run { services in
            let config = services.config
            let path = "/v1/projects/default/\(kind)"
            func publish(_ body: String, _ query: String = "") async throws -> TestResponse {
                try await config.execute(uri: path + "?platform=android" + query, method: .put, headers: Self.admin, body: ByteBuffer(string: body))
            }
            let first = try JSONDecoder().decode(PublishResult.self, from: Data(buffer: try await publish(sample.first).body))
            let second = try JSONDecoder().decode(PublishResult.self, from: Data(buffer: try await publish(sample.second).body))
            #expect(first.version == 1)
            #expect(second.version == 2)

            let read = try await config.execute(uri: path + "?platform=android", method: .get)
            #expect(read.status == .ok)
            #expect(read.headers[.eTag] == second.etag)
            #expect(try await config.execute(uri: path + "?platform=android", method: .get, headers: [.ifNoneMatch: second.etag]).status == .notModified)

            let diff = try await config.execute(uri: path + "/diff?platform=android&from=1&to=2", method: .get, headers: Self.admin)
            #expect(try #require(try diff.json()["changes"] as? [Any]).isEmpty == false)
            let rolled = try await config.execute(uri: path + "/rollback?platform=android&to=1", method: .post, headers: Self.admin)
            #expect(try JSONDecoder().decode(PublishResult.self, from: Data(buffer: rolled.body)).etag == first.etag)

            let targeted = try await publish(sample.second, "&min_app_version=9")
            if kind.hasSuffix("whitelist") {
                #expect(targeted.status == .badRequest)
            } else {
                #expect(targeted.status == .created)
                let newApp = try await config.execute(uri: path + "?platform=android&app_version=9.1", method: .get)
                #expect(newApp.headers[.eTag] == second.etag)
                let allApps = try await config.execute(uri: path + "?platform=android", method: .get)
                #expect(allApps.headers[.eTag] == first.etag)
            }

            let refused = try await publish(sample.bad)
            #expect(refused.status == .unprocessableContent)
            let paths = try #require(try refused.json()["problems"] as? [[String: Any]]).compactMap { $0["path"] as? String }
            #expect(paths == [sample.badPath], "\(refused.text)")
        }
    }

    @Test(
        "history requests that cannot be answered say why",
        arguments: [
            ("/v1/projects/default/remote-config/versions", HTTPRequest.Method.get, true, HTTPResponse.Status.notFound),
            ("/v1/projects/default/remote-config/versions/7", .get, true, .notFound),
            ("/v1/projects/default/remote-config/versions/zero", .get, true, .badRequest),
            ("/v1/projects/default/remote-config/diff?from=1", .get, true, .badRequest),
            ("/v1/projects/default/remote-config/rollback?to=1", .post, true, .notFound),
            ("/v1/projects/default/remote-config/versions", .get, false, .unauthorized),
            ("/v1/projects/default/remote-config/rollback?to=1", .post, false, .unauthorized),
        ])
    func refusals(uri: String, method: HTTPRequest.Method, authorized: Bool, status: HTTPResponse.Status) async throws {
        try await RunningServices.run { services in
            let answer = try await services.config.execute(uri: uri, method: method, headers: authorized ? Self.admin : [:])
            #expect(answer.status == status)
            #expect(try answer.json()["error"] is String)
        }
    }
}
