import DatongTestSupport
import Enrichment
import Foundation
import Logging
import Testing

@testable import Gateway

/// The test IP databases `scripts/test` writes before the tests run (`Tests/Fixtures/geo`): a
/// MaxMind DB by MaxMind's own Perl writer, xdb files by the format's description with the answers
/// ip2region's own Python searcher gives for them.
enum GeoFixtures {
    static let directory = ProcessInfo.processInfo.environment["DATONG_TEST_GEO"] ?? ""
    static var available: Bool { !directory.isEmpty && FileManager.default.fileExists(atPath: directory + "/city.mmdb") }
    static var mmdb: String { directory + "/city.mmdb" }
}

@Suite("What the server knows: client address, region, URL host")
struct EnrichmentTests {
    @Test("addresses are parsed, printed, truncated and classified as IANA's registries say")
    func addresses() throws {
        #expect(IPAddress("192.0.2.1")?.description == "192.0.2.1")
        #expect(IPAddress("::ffff:192.0.2.1") == IPAddress("192.0.2.1"))
        #expect(IPAddress("2001:DB8::1")?.description == "2001:db8::1")
        for bad in ["", "1.2.3", "1.2.3.4:80", " 1.2.3.4", "1.2.3.256", "::g", "[::1]", "unknown", String(repeating: "1", count: 100)] {
            #expect(IPAddress(bad) == nil, "\(bad)")
        }
        #expect(IPAddress("203.0.113.77")!.truncated.description == "203.0.113.0")
        #expect(IPAddress("2400:da00:1234:5678::9")!.truncated.description == "2400:da00:1234::")
        for local in [
            "10.1.2.3", "127.0.0.1", "172.16.5.4", "192.168.1.1", "100.64.0.1", "169.254.1.1", "::1", "fe80::1", "fd00::1", "2001:db8::1", "224.0.0.1",
        ] {
            #expect(IPAddress(local)!.isGlobal == false, "\(local)")
        }
        for global in ["1.2.3.4", "8.8.8.8", "2400:da00::1", "172.32.0.1"] { #expect(IPAddress(global)!.isGlobal, "\(global)") }
        #expect(CIDR("10.0.0.0/33") == nil)
        #expect(CIDR("10.0.0.0/x") == nil)
        #expect(CIDR("10.9.8.7/8")?.description == "10.0.0.0/8")
    }

    @Test("X-Forwarded-For is read from the right, and only from a trusted proxy")
    func forwardedFor() throws {
        let proxies = try TrustedProxies.parse("10.0.0.0/8, fd00::/8").get()
        let balancer = IPAddress("10.0.0.2")
        let device = IPAddress("1.2.3.4")
        // An untrusted peer's header is never read.
        #expect(proxies.client(peer: device, forwardedFor: ["6.6.6.6"]) == device)
        #expect(TrustedProxies().client(peer: balancer, forwardedFor: ["1.2.3.4"]) == balancer)
        // The balancer appended the device; what the device itself sent on the left is not believed.
        #expect(proxies.client(peer: balancer, forwardedFor: ["6.6.6.6, 1.2.3.4"]) == device)
        #expect(proxies.client(peer: balancer, forwardedFor: ["6.6.6.6", "1.2.3.4, 10.0.0.9"]) == device)
        #expect(proxies.client(peer: balancer, forwardedFor: ["[2400:da00::1]:443"]) == IPAddress("2400:da00::1"))
        #expect(proxies.client(peer: balancer, forwardedFor: ["1.2.3.4:5678"]) == device)
        // Garbage stops the walk at the last trusted hop.
        #expect(proxies.client(peer: balancer, forwardedFor: ["1.2.3.4, unknown, 10.0.0.7"]) == IPAddress("10.0.0.7"))
        #expect(proxies.client(peer: balancer, forwardedFor: []) == balancer)
        if case .failure(let invalid) = TrustedProxies.parse("10.0.0.0/8,nonsense") {
            #expect(invalid.text == "nonsense")
        } else {
            Issue.record("accepted nonsense")
        }
    }

    @Test("$url_host is the URL's host, without user, port or path")
    func urlHost() {
        #expect(RequestEnrichment.host("https://shop.example.com/a/b?c=1#d") == "shop.example.com")
        #expect(RequestEnrichment.host("http://user:pw@Shop.Example.com:8443") == "Shop.Example.com")
        #expect(RequestEnrichment.host("https://[2001:db8::1]:8080/x") == "[2001:db8::1]")
        #expect(RequestEnrichment.host("/relative/path") == nil)
        #expect(RequestEnrichment.host("https:///nohost") == nil)
        // Found by the fuzzer (Tests/Fixtures/fuzz/address): a combining mark right after `]` is
        // not part of the host, which ends at the bracket, byte for byte.
        #expect(RequestEnrichment.host("://[\u{FFFD}]\u{0487}\u{0487}").map { Array($0.utf8) } == Array("[\u{FFFD}]".utf8))
    }

    @Test("regions are stored in Sensors' short form, placeholders as nothing")
    func shortNames() {
        let region = Region(country: "中国", province: "广西壮族自治区", city: "南宁市")
        #expect(region == Region(country: "中国", province: "广西", city: "南宁"))
        #expect(Region(country: "中国", province: "湖南省", city: "长沙市").province == "湖南")
        #expect(Region(country: "中国", province: "香港特别行政区").province == "香港")
        #expect(Region(country: "0", province: "0", city: "0").isEmpty)
        #expect(Region(country: "Kenya", city: "Nairobi") == Region(country: "Kenya", province: nil, city: "Nairobi"))
    }

    @Test(
        "a MaxMind DB written by MaxMind's own writer is read as it was written", .enabled(if: GeoFixtures.available, "scripts/test writes the test databases"))
    func maxMind() throws {
        let database = try MaxMindDatabase(path: GeoFixtures.mmdb)
        #expect(database.databaseType == "Datong-Test-City")
        func region(_ ip: String) -> Region? { database.region(of: IPAddress(ip)!) }
        #expect(region("1.2.3.4") == Region(country: "中国", province: "湖南", city: "长沙"))
        #expect(region("1.2.4.200") == Region(country: "中国", province: "广西", city: "南宁"))
        #expect(region("8.8.8.8") == Region(country: "美国"))
        // English where the database has no Chinese name.
        #expect(region("41.0.9.9") == Region(country: "Kenya", city: "Nairobi"))
        #expect(region("2400:da00::1") == Region(country: "中国", province: "北京", city: "北京"))
        #expect(region("9.9.9.9") == nil)
        #expect(throws: RegionDatabase.Unreadable.self) { try MaxMindDatabase(path: GeoFixtures.directory + "/xdb-answers.json") }
    }

    @Test("xdb files give what ip2region's own searcher gives for them", .enabled(if: GeoFixtures.available, "scripts/test writes the test databases"))
    func ip2region() throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: GeoFixtures.directory + "/xdb-answers.json"))
        let answers = try #require(try JSONSerialization.jsonObject(with: data) as? [String: [String: String]])
        var compared = 0
        for (file, probes) in answers {
            let database = try XDBDatabase(path: GeoFixtures.directory + "/" + file)
            for (ip, expected) in probes {
                #expect(database.regionText(of: IPAddress(ip)!) ?? "" == expected, "\(file) \(ip)")
                compared += 1
            }
        }
        #expect(compared >= 20)
        let v4 = try XDBDatabase(path: GeoFixtures.directory + "/v4.xdb")
        #expect(v4.region(of: IPAddress("1.2.3.4")!) == Region(country: "中国", province: "湖南", city: "长沙"))
        #expect(v4.region(of: IPAddress("8.8.8.8")!) == Region(country: "美国"))
        #expect(v4.region(of: IPAddress("2400:da00::1")!) == nil)
        let v6 = try XDBDatabase(path: GeoFixtures.directory + "/v6.xdb")
        // The 3.0 data's layout: 国家|省份|城市|ISP|code.
        #expect(v6.region(of: IPAddress("2400:da00::1")!) == Region(country: "中国", province: "北京", city: "北京"))
        #expect(throws: RegionDatabase.Unreadable.self) { try XDBDatabase(bytes: [2, 0, 0, 0]) }
        #expect(throws: RegionDatabase.Unreadable.self) { try XDBDatabase(bytes: [UInt8](repeating: 9, count: 600_000)) }
    }

    @Test("a truncated or corrupt xdb file never crashes a lookup")
    func corruptXDB() throws {
        var bytes = [UInt8](repeating: 0, count: 256 + 256 * 256 * 8)
        bytes[0] = 2
        // The vector entry of 1.2.x.x points past the end of the file.
        let entry = 256 + (1 * 256 + 2) * 8
        for (index, byte) in [0xFF, 0xFF, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0x7F].enumerated() { bytes[entry + index] = UInt8(byte) }
        let database = try XDBDatabase(bytes: bytes)
        #expect(database.region(of: IPAddress("1.2.3.4")!) == nil)
        #expect(database.region(of: IPAddress("5.6.7.8")!) == nil)
    }
}

@Suite("User-Agents of Chinese apps' in-app browsers", .enabled(if: UAPCore.available, "uap-core is not installed (apt-get install uap-core)"))
struct InAppBrowserTests {
    struct Case: Decodable {
        let source: String
        let ua: String
        let browser: String
        let browserVersion: String
        let os: String?
        let osVersion: String?
        let model: String?
        let manufacturer: String?

        enum CodingKeys: String, CodingKey {
            case source, ua, browser, os, model, manufacturer
            case browserVersion = "browser_version"
            case osVersion = "os_version"
        }
    }

    @Test("each real in-app User-Agent gives the app, its version, and the OS and device")
    func inApp() throws {
        let parser = try #require(UAPCore.parser)
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/user-agents/in-app.json")
        struct File: Decodable { let cases: [Case] }
        let cases = try JSONDecoder().decode(File.self, from: Data(contentsOf: url)).cases
        #expect(cases.count >= 10)
        for item in cases {
            let found = Dictionary(parser.parse(item.ua).properties.map { ($0.name, $0.value) }, uniquingKeysWith: { a, _ in a })
            #expect(found["$browser"] == item.browser, "\(item.ua)")
            #expect(found["$browser_version"] == item.browserVersion, "\(item.ua)")
            if let os = item.os { #expect(found["$os"] == os, "\(item.ua)") }
            if let version = item.osVersion { #expect(found["$os_version"] == version, "\(item.ua)") }
            if let model = item.model { #expect(found["$model"] == model, "\(item.ua)") }
            if let manufacturer = item.manufacturer { #expect(found["$manufacturer"] == manufacturer, "\(item.ua)") }
        }
    }

    @Test("a crawler is marked as one, and gives no device")
    func crawler() throws {
        let parser = try #require(UAPCore.parser)
        let googlebot = parser.parse("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)")
        #expect(googlebot.isBot)
        #expect(!googlebot.properties.contains { $0.name == "$model" || $0.name == "$manufacturer" })
        #expect(
            !parser.parse(
                "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1"
            ).isBot)
    }
}

@Suite("The IP database file, replaced while the gateway runs", .enabled(if: GeoFixtures.available, "scripts/test writes the test databases"))
struct RegionFileTests {
    @Test("a replaced file is opened again; a bad one is refused and the one in use kept")
    func replaced() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("geo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("in-use.xdb").path
        func replace(with source: String) throws {
            // As geoipupdate does: written beside it, then moved over it.
            let next = directory.appendingPathComponent("next").path
            try FileManager.default.copyItem(atPath: source, toPath: next)
            _ = rename(next, path)
        }
        try replace(with: GeoFixtures.directory + "/v4.xdb")
        let file = RegionFile(path: path, logger: .init(label: "test"), metrics: nil)
        let beijing = IPAddress("2400:da00::1")!
        let changsha = IPAddress("1.2.3.4")!
        #expect(file.region(of: changsha)?.city == "长沙")
        #expect(file.region(of: beijing) == nil)

        try replace(with: GeoFixtures.directory + "/xdb-answers.json")
        file.reloadIfChanged()
        #expect(file.region(of: changsha)?.city == "长沙", "the bad file was refused, the one in use kept")

        try replace(with: GeoFixtures.directory + "/v6.xdb")
        file.reloadIfChanged()
        #expect(file.region(of: beijing)?.city == "北京")
        #expect(file.region(of: changsha) == nil)
    }
}
