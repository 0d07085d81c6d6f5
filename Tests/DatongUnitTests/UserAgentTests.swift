import DatongTestSupport
import Enrichment
import Foundation
import Testing

@Suite(
    "User-Agent parsing: uap-core's rules against uap-core's test vectors",
    .enabled(if: UAPCore.available, "uap-core is not installed (apt-get install uap-core)"))
struct UserAgentTests {
    /// Runs every vector of `file`, prints the share that match and returns the ones that did not.
    /// It yields every hundred vectors: a file is seconds of work, and without yielding it holds one
    /// of the (two, here) threads every concurrently running test shares, and their timers fire late.
    private func run(_ file: String, _ compare: (ParsedUserAgent, [String: Any]) -> Bool) async throws -> (total: Int, failed: [String]) {
        let parser = try #require(UAPCore.parser)
        let cases = try UAPCore.cases(file)
        var failed: [String] = []
        for (index, entry) in cases.enumerated() {
            if index.isMultiple(of: 100) { await Task.yield() }
            guard let ua = entry["user_agent_string"] as? String else { continue }
            if !compare(parser.parse(ua), entry) { failed.append(ua) }
        }
        let matched = cases.count - failed.count
        print("uap-core \(file): \(matched) of \(cases.count) match (\(String(format: "%.2f", 100 * Double(matched) / Double(cases.count)))%)")
        return (cases.count, failed)
    }

    @Test("Every rule of regexes.yaml compiles in ICU")
    func rulesCompile() throws {
        let parser = try #require(UAPCore.parser)
        #expect(parser.skippedRules == 0)
        #expect(parser.ruleCount > 1000)
    }

    @Test("test_ua.yaml: browser family and version")
    func browsers() async throws {
        let (total, failed) = try await run("test_ua.yaml") { parsed, entry in
            parsed.agent.family == UAPCore.field(entry, "family") && parsed.agent.major == UAPCore.field(entry, "major")
                && parsed.agent.minor == UAPCore.field(entry, "minor") && parsed.agent.patch == UAPCore.field(entry, "patch")
        }
        #expect(total > 1000)
        #expect(failed.isEmpty, "\(failed.count) differ, first: \(failed.prefix(5))")
    }

    @Test("test_os.yaml: OS family and version")
    func systems() async throws {
        let (total, failed) = try await run("test_os.yaml") { parsed, entry in
            parsed.os.family == UAPCore.field(entry, "family") && parsed.os.major == UAPCore.field(entry, "major")
                && parsed.os.minor == UAPCore.field(entry, "minor") && parsed.os.patch == UAPCore.field(entry, "patch")
                && parsed.os.patchMinor == UAPCore.field(entry, "patch_minor")
        }
        #expect(total > 400)
        #expect(failed.isEmpty, "\(failed.count) differ, first: \(failed.prefix(5))")
    }

    @Test("test_device.yaml: device family, brand and model")
    func devices() async throws {
        let (total, failed) = try await run("test_device.yaml") { parsed, entry in
            parsed.device.family == UAPCore.field(entry, "family") && parsed.device.brand == UAPCore.field(entry, "brand")
                && parsed.device.model == UAPCore.field(entry, "model")
        }
        #expect(total > 10000)
        #expect(failed.isEmpty, "\(failed.count) differ, first: \(failed.prefix(5))")
    }
}
