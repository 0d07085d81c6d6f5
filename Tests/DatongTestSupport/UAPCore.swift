import Enrichment
import Foundation
import Yams

/// uap-core's rules and its own test vectors, as Debian's `uap-core` package installs them
/// (`scripts/test` installs it; `DATONG_UAP_CORE` names another copy).
package enum UAPCore {
    package static let directory = ProcessInfo.processInfo.environment["DATONG_UAP_CORE"] ?? "/usr/share/uap-core"
    package static var regexes: String { directory + "/regexes.yaml" }
    package static var available: Bool { FileManager.default.fileExists(atPath: regexes) }

    package static let parser: UserAgentParser? = try? UserAgentParser(contentsOf: regexes, cacheEntries: 0)

    package static func cases(_ file: String) throws -> [[String: Any]] {
        let text = try String(contentsOfFile: directory + "/tests/" + file, encoding: .utf8)
        guard let root = try Yams.load(yaml: text) as? [String: Any], let cases = root["test_cases"] as? [[String: Any]] else {
            throw CocoaError(.fileReadCorruptFile, userInfo: [NSFilePathErrorKey: directory + "/tests/" + file])
        }
        return cases
    }

    /// A vector's field: YAML's null and the empty string are both "none".
    package static func field(_ entry: [String: Any], _ name: String) -> String? {
        switch entry[name] {
        case let text as String: return text.isEmpty ? nil : text
        case let number as Int: return String(number)
        default: return nil
        }
    }
}
