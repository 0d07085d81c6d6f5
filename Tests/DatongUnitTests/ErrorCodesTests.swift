import DatongRuntime
import Foundation
import Testing

/// One name per failure: every code a service answers with is declared once in the source and
/// listed in docs/ERRORS.md.
@Suite("error codes: declared once, listed in docs/ERRORS.md")
struct ErrorCodesTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Every `ErrorCode("…")` literal in Sources, with the file that declares it.
    static func declarations() throws -> [(code: String, file: String)] {
        var found: [(String, String)] = []
        let sources = root.appendingPathComponent("Sources")
        let files = try #require(FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil))
        let pattern = try Regex(#"ErrorCode\("([a-z0-9_]+)"\)"#)
        for case let url as URL in files where url.pathExtension == "swift" {
            let text = try String(contentsOf: url, encoding: .utf8)
            for match in text.matches(of: pattern) {
                found.append((String(text[match.output[1].range!]), url.lastPathComponent))
            }
        }
        return found
    }

    @Test("no code is declared twice, and every one, the upstream ones included, is in docs/ERRORS.md")
    func listed() throws {
        let declared = try Self.declarations()
        #expect(declared.count > 60, "the declarations were not found")
        var seen: [String: String] = [:]
        for (code, file) in declared {
            if let earlier = seen[code] { Issue.record("\(code) is declared in \(earlier) and again in \(file)") }
            seen[code] = file
        }
        let upstream = [Upstream.identity, .collector, .config].flatMap {
            [ErrorCode.unavailable($0), .badAnswer(from: $0), .lacksRoute($0)].map(\.rawValue)
        }
        let page = try String(contentsOf: Self.root.appendingPathComponent("docs/ERRORS.md"), encoding: .utf8)
        for code in Array(seen.keys) + upstream {
            #expect(page.contains("`\(code)`"), "docs/ERRORS.md does not list \(code)")
        }
    }
}
