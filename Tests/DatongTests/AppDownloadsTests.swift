import DatongCtl
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import NIOFoundationEssentialsCompat
import Testing

/// What an app downloads from the host it uploads to (the tracking table, the H5 domain whitelist,
/// its route table) and the files Apple and Google fetch to verify Universal Links and App Links.
@Suite("app downloads and app links")
struct AppDownloadsTests {
    static let admin: HTTPFields = [.authorization: "Bearer \(RunningServices.adminToken)", .contentType: "application/json"]
    static let fingerprint = (0..<32).map { String(format: "%02X", $0 * 7 % 256) }.joined(separator: ":")
    static let links = """
        {"routes": [{"scheme": "shop", "module": "product", "port": 8080, "method": "detail", "parameters": ["id"], "optionalParameters": ["from"]},
                    {"scheme": "shop", "module": "cart", "method": "show"}],
         "apple": [{"teamID": "ABCDE12345", "bundleID": "com.example.shop", "paths": ["NOT /product/internal/*", "/product/*"]}],
         "android": [{"packageName": "com.example.shop", "sha256CertFingerprints": ["\(fingerprint)"]}]}
        """

    static func publish(_ services: RunningServices, _ kind: String, _ body: String, query: String = "") async throws -> TestResponse {
        try await services.config.execute(
            uri: "/v1/projects/default/\(kind)\(query)", method: .put, headers: admin, body: ByteBuffer(string: body)
        )
    }

    @Test("an app-links document is checked field by field before it is published")
    func validation() async throws {
        try await RunningServices.run { services in
            let invalid = """
                {"routes": [{"scheme": "https", "module": "pro duct", "port": 70000, "method": "detail", "parameters": ["id", "id"]},
                            {"scheme": "shop", "module": "cart", "method": "show"}, {"scheme": "SHOP", "module": "Cart", "method": "show"}],
                 "apple": [{"teamID": "abc", "bundleID": "shop", "paths": ["product/*"]}],
                 "android": [{"packageName": "shop", "sha256CertFingerprints": ["ab:cd"]}], "web": {}}
                """
            let refused = try await Self.publish(services, "app-links", invalid)
            #expect(refused.status == .unprocessableContent)
            let problems = try #require(try refused.json()["problems"] as? [[String: String]])
            let paths = Set(problems.compactMap { $0["path"] })
            for expected in [
                "/routes/0/scheme", "/routes/0/module", "/routes/0/port", "/routes/0/parameters/1", "/routes/2", "/apple/0/teamID",
                "/apple/0/bundleID", "/apple/0/paths/0", "/android/0/packageName", "/android/0/sha256CertFingerprints/0", "/web",
            ] {
                #expect(paths.contains(expected), "no problem at \(expected): \(problems)")
            }
            #expect(paths.count == 11, "\(problems)")
            #expect(try await Self.publish(services, "app-links", Self.links).status == .created)
        }
    }

    @Test("the well-known files follow Apple's and Google's documented formats, with revalidation and no redirect")
    func wellKnownFiles() async throws {
        try await RunningServices.run { services in
            let missing = try await services.gateway.execute(uri: "/.well-known/apple-app-site-association", method: .get)
            #expect(missing.status == .notFound)
            #expect(try await Self.publish(services, "app-links", Self.links).status == .created)

            // Apple: served at exactly this path (no extension, no redirect) as JSON; `applinks.details`
            // holds per app `appIDs` ("<team ID>.<bundle ID>") with `components` ({"/": pattern},
            // "exclude": true for an excluded path), and for iOS 12 and older `appID` with `paths`.
            let aasa = try await services.gateway.execute(uri: "/.well-known/apple-app-site-association", method: .get)
            #expect(aasa.status == .ok)
            #expect(aasa.headers[.contentType] == "application/json")
            #expect(aasa.headers[.location] == nil)
            let association = try #require(try JSONSerialization.jsonObject(with: Data(buffer: aasa.body)) as? [String: Any])
            let applinks = try #require(association["applinks"] as? [String: Any])
            #expect((applinks["apps"] as? [Any])?.isEmpty == true)
            let details = try #require(applinks["details"] as? [[String: Any]])
            #expect(details.count == 1)
            #expect(details[0]["appIDs"] as? [String] == ["ABCDE12345.com.example.shop"])
            #expect(details[0]["appID"] as? String == "ABCDE12345.com.example.shop")
            #expect(details[0]["paths"] as? [String] == ["NOT /product/internal/*", "/product/*"])
            let components = try #require(details[0]["components"] as? [[String: Any]])
            #expect(components.count == 2)
            #expect(components[0]["/"] as? String == "/product/internal/*")
            #expect(components[0]["exclude"] as? Bool == true)
            #expect(components[1]["/"] as? String == "/product/*")
            #expect(components[1]["exclude"] == nil)
            for component in components { #expect(Set(component.keys).isSubset(of: ["/", "?", "#", "exclude", "comment"])) }
            let etag = try #require(aasa.headers[.eTag])
            let again = try await services.gateway.execute(
                uri: "/.well-known/apple-app-site-association", method: .get, headers: [.ifNoneMatch: etag]
            )
            #expect(again.status == .notModified)

            // Google: a list of statements, each with relation
            // delegate_permission/common.handle_all_urls and an android_app target naming the package
            // and its signing certificates' SHA-256 fingerprints (uppercase hex pairs, colons).
            let assetLinks = try await services.gateway.execute(uri: "/.well-known/assetlinks.json", method: .get)
            #expect(assetLinks.status == .ok)
            #expect(assetLinks.headers[.contentType] == "application/json")
            let statements = try #require(try JSONSerialization.jsonObject(with: Data(buffer: assetLinks.body)) as? [[String: Any]])
            #expect(statements.count == 1)
            #expect(statements[0]["relation"] as? [String] == ["delegate_permission/common.handle_all_urls"])
            let target = try #require(statements[0]["target"] as? [String: Any])
            #expect(target["namespace"] as? String == "android_app")
            #expect(target["package_name"] as? String == "com.example.shop")
            let prints = try #require(target["sha256_cert_fingerprints"] as? [String])
            #expect(prints == [Self.fingerprint])
            #expect(prints.allSatisfy { $0.range(of: "^([0-9A-F]{2}:){31}[0-9A-F]{2}$", options: .regularExpression) != nil })

            // A new version of the document gives a new ETag: a cached file is refreshed.
            let changed = Self.links.replacingOccurrences(of: "\"/product/*\"", with: "\"/product/*\", \"/deals/*\"")
            #expect(try await Self.publish(services, "app-links", changed).status == .created)
            let refreshed = try await services.gateway.execute(
                uri: "/.well-known/apple-app-site-association", method: .get, headers: [.ifNoneMatch: etag]
            )
            #expect(refreshed.status == .ok)
            #expect(refreshed.text.contains("/deals/*"))
        }
    }

    @Test("apps download the tracking table, the H5 domain whitelist and the route table under any prefix, targeted and revalidated")
    func downloads() async throws {
        try await RunningServices.run { services in
            let generic = #"{"PAGEPV":{"Home":{"userDefined":{"pageid":"1"},"pagePara":{}}}}"#
            let forApp = #"{"PAGEPV":{"Home":{"userDefined":{"pageid":"app"},"pagePara":{}}}}"#
            let newer = #"{"PAGEPV":{"Home":{"userDefined":{"pageid":"v3"},"pagePara":{}}}}"#
            #expect(try await Self.publish(services, "tracking-table", generic, query: "?platform=ios").status == .created)
            #expect(try await Self.publish(services, "tracking-table", forApp, query: "?platform=ios&app_id=com.example.shop").status == .created)
            #expect(
                try await Self.publish(
                    services, "tracking-table", newer, query: "?platform=ios&app_id=com.example.shop&min_app_version=3.0"
                ).status == .created)
            #expect(try await Self.publish(services, "h5-domain-whitelist", #"["h5.example.com","*.example.org"]"#).status == .created)
            #expect(try await Self.publish(services, "app-links", Self.links).status == .created)

            let base = "/api/v2/config/tracking-table.json?project=default&platform=ios"
            func pageID(_ response: TestResponse) throws -> String? {
                let table = try response.json()
                return ((table["PAGEPV"] as? [String: Any])?["Home"] as? [String: Any]).flatMap { ($0["userDefined"] as? [String: String])?["pageid"] }
            }
            let platformOnly = try await services.gateway.execute(uri: base, method: .get)
            #expect(platformOnly.status == .ok)
            #expect(try pageID(platformOnly) == "1")
            let app = try await services.gateway.execute(uri: base + "&app_id=com.example.shop&app_version=2.9", method: .get)
            #expect(try pageID(app) == "app")
            let version3 = try await services.gateway.execute(uri: base + "&app_id=com.example.shop&app_version=3.1", method: .get)
            #expect(try pageID(version3) == "v3")
            let etag = try #require(app.headers[.eTag])
            let revalidated = try await services.gateway.execute(
                uri: base + "&app_id=com.example.shop&app_version=2.9", method: .get, headers: [.ifNoneMatch: etag]
            )
            #expect(revalidated.status == .notModified)
            let android = try await services.gateway.execute(uri: "/config/tracking-table.json?project=default&platform=android", method: .get)
            #expect(android.status == .notFound)

            let domains = try await services.gateway.execute(uri: "/collect/config/h5-domain-whitelist.json?project=default", method: .get)
            #expect(domains.status == .ok)
            #expect(try JSONSerialization.jsonObject(with: Data(buffer: domains.body)) as? [String] == ["h5.example.com", "*.example.org"])

            let routes = try await services.gateway.execute(uri: "/sa/config/app-links.json?project=default", method: .get)
            #expect(routes.status == .ok)
            #expect(((try routes.json()["routes"]) as? [Any])?.count == 2)

            let badPlatform = try await services.gateway.execute(uri: "/config/tracking-table.json?project=default&platform=tv", method: .get)
            #expect(badPlatform.status == .badRequest)
            let badVersion = try await services.gateway.execute(uri: base + "&app_version=x.y", method: .get)
            #expect(badVersion.status == .badRequest)
        }
    }

    @Test("datongctl publishes and shows app links like every other document")
    func datongctl() async throws {
        try await RunningServices.run { services in
            let environment = ["DATONG_CONFIG_URL": "http://127.0.0.1:\(services.config.port!)", "DATONG_ADMIN_TOKEN": RunningServices.adminToken]
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("links-\(UUID().uuidString).json").path
            try Data(Self.links.utf8).write(to: URL(fileURLWithPath: path))
            let published = await Datongctl.run(["publish", "default", "app-links", path], environment: environment)
            #expect(published.exitCode == 0, "\(published.output)")
            #expect(published.output.hasPrefix("published default/app-links version 1"))
            let shown = await Datongctl.run(["show", "default", "app-links", "1"], environment: environment)
            #expect(shown.output.contains("com.example.shop"))
        }
    }
}
