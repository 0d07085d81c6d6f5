import DatongContracts
import DatongJSON
import DatongRuntime
import Foundation

/// Which app a document is for: a platform (`ios`, `android`, `web`, or all) and an app id (or all).
struct DocumentScope: Sendable, Hashable {
    let platform: String
    let appID: String

    static let platforms: Set<String> = ["", "ios", "android", "web"]

    init(platform: String?, appID: String?) throws {
        let platform = (platform ?? "").lowercased()
        guard Self.platforms.contains(platform) else {
            throw ServiceError.badRequest(.invalidPlatform, "platform must be ios, android or web")
        }
        let appID = appID ?? ""
        guard appID.utf8.count <= 128 else {
            throw ServiceError.badRequest(.invalidAppId, "app_id is longer than 128 characters")
        }
        self.platform = platform
        self.appID = appID
    }
}

/// An app version such as `2.3.0`: one to four numbers, compared number by number (2.10 > 2.9).
struct AppVersion: Sendable, Equatable {
    let parts: [Int]

    init?(_ text: String) {
        let pieces = text.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...4).contains(pieces.count) else { return nil }
        var parts: [Int] = []
        for piece in pieces {
            guard (1...9).contains(piece.count), piece.allSatisfy(\.isASCII), let number = Int(piece), number >= 0 else { return nil }
            parts.append(number)
        }
        self.parts = parts
    }

    /// Reads a query parameter; a malformed version is a 400 naming the parameter.
    static func parameter(_ text: String?, name: String) throws -> AppVersion? {
        guard let text, !text.isEmpty else { return nil }
        guard let version = AppVersion(text) else {
            throw ServiceError.badRequest(.invalidAppVersion, "\(name) must be a version like 2.3.0 (one to four numbers)")
        }
        return version
    }

    /// Four numbers, missing ones 0, so that 2.3 and 2.3.0 are the same version.
    var padded: [Int] { parts + Array(repeating: 0, count: 4 - parts.count) }

    /// PostgreSQL's text form of the `integer[]` it is stored and compared as.
    var arrayLiteral: String { "{" + padded.map(String.init).joined(separator: ",") + "}" }

    /// The dotted form (at least three numbers) of a stored `integer[]` (`{2,3,0,0}` is 2.3.0).
    static func dotted(fromArray text: String?) -> String? {
        guard let text else { return nil }
        var parts = text.trimmingCharacters(in: CharacterSet(charactersIn: "{}")).split(separator: ",").map(String.init)
        while parts.count > 3, parts.last == "0" { parts.removeLast() }
        return parts.joined(separator: ".")
    }
}

/// A problem found in a document, at a JSON Pointer (RFC 6901: `/routes/0/scheme`, "" for the whole).
struct DocumentProblem: Codable, Sendable, Equatable {
    let path: String
    let message: String

    /// An object key as one token of a JSON Pointer: `~` is `~0`, `/` is `~1`.
    static func token(_ key: String) -> String {
        key.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1")
    }
}

/// Every problem of a refused document.
struct DocumentProblems: Error, Sendable {
    let list: [DocumentProblem]
}

/// Parses and checks a document before it is published, and gives its canonical form.
enum DocumentValidator {
    /// The canonical JSON text (sorted keys) of a valid document, or every problem found.
    static func canonicalize(_ bytes: [UInt8], kind: DocumentKind) -> Result<String, DocumentProblems> {
        let value: JSONValue
        do {
            value = try JSONValue(parsing: bytes, maxDepth: maxDepth)
        } catch {
            return .failure(DocumentProblems(list: [DocumentProblem(path: "", message: "the document is \(error.message)")]))
        }
        guard value.isFinite else {
            return .failure(DocumentProblems(list: [DocumentProblem(path: "", message: "the document has a number too large for a 64-bit float")]))
        }
        var problems: [DocumentProblem] = []
        switch kind {
        case .serverURLWhitelist, .h5DomainWhitelist:
            if let list = value.arrayValue {
                for (index, item) in list.enumerated() {
                    guard let text = item.stringValue, !text.isEmpty, text.utf8.count <= 2048 else {
                        problems.append(DocumentProblem(path: "/\(index)", message: "must be a non-empty string of at most 2048 bytes"))
                        continue
                    }
                    if kind == .serverURLWhitelist, URLComponents(string: text)?.host == nil {
                        problems.append(
                            DocumentProblem(path: "/\(index)", message: "must be a server URL with a host, e.g. https://sa.example.com/sa?project=production"))
                    }
                }
            } else {
                problems.append(DocumentProblem(path: "", message: "a \(kind.rawValue) is a JSON array of strings"))
            }
        case .trackingTable:
            problems += TrackingTable.problems(value)
        case .remoteConfig:
            problems += SDKDocuments.remoteConfigProblems(value)
        case .visualConfig:
            problems += SDKDocuments.visualConfigProblems(value)
        case .appLinks:
            problems += AppLinks.problems(value)
        }
        guard problems.isEmpty else { return .failure(DocumentProblems(list: problems)) }
        return .success(value.canonicalText)
    }

    /// How deeply a document may nest (a tracking table nests four levels).
    static let maxDepth = 64

    /// A strong ETag: the SHA-256 of the canonical text.
    static func etag(ofCanonical text: String) -> String {
        "\"\(SHA256Digest.hex(Array(text.utf8)))\""
    }
}
