import DatongContracts
import Foundation

// What the unit and integration tests share: the SDK captures and samples built from them. Pure:
// no database, no service.

/// The SDK captures in Tests/Fixtures/sensors (its README says where each came from).
package enum Fixtures {
    package static let directory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fixtures/sensors")

    /// One HTTP request the Python SDK sent.
    package struct CapturedRequest: Decodable, Sendable {
        package let method: String
        package let path: String
        package let query: String
        package let headers: [String: String]
        package let body: String?
    }

    /// One emission of the JS SDK.
    package struct JSEmission: Decodable, Sendable {
        package let scenario: String
        package let kind: String
        package let payload: Payload

        package enum Payload: Decodable, Sendable {
            case text(String)
            case request([String: String])

            package init(from decoder: any Decoder) throws {
                let container = try decoder.singleValueContainer()
                if let text = try? container.decode(String.self) {
                    self = .text(text)
                } else {
                    var fields: [String: String] = [:]
                    let object = try container.decode([String: JSONAny].self)
                    for (key, value) in object { fields[key] = value.text }
                    self = .request(fields)
                }
            }
        }
    }

    /// Any JSON value, kept as text for strings and re-encoded otherwise.
    package struct JSONAny: Decodable {
        package let text: String
        package init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let string = try? container.decode(String.self) {
                text = string
            } else if let object = try? container.decode([String: String].self) {
                text = String(decoding: try JSONEncoder().encode(object), as: UTF8.self)
            } else {
                text = ""
            }
        }
    }

    package static func python() throws -> [CapturedRequest] {
        try requests("python-sdk-1.11.0.jsonl")
    }

    package static func ruby() throws -> [CapturedRequest] {
        try requests("ruby-sdk-1.6.3.jsonl")
    }

    /// A capture of HTTP requests (the Python capture's format: the Go, Java, mini-program and Ruby ones).
    package static func requests(_ file: String) throws -> [CapturedRequest] {
        try lines(file).map { try JSONDecoder().decode(CapturedRequest.self, from: Data($0.utf8)) }
    }

    package static func javascript() throws -> [JSEmission] {
        try lines("js-sdk-1.27.10.jsonl").map { try JSONDecoder().decode(JSEmission.self, from: Data($0.utf8)) }
    }

    private static func lines(_ name: String) throws -> [String] {
        let text = try String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8)
        return text.split(separator: "\n").map(String.init).filter { !$0.isEmpty }
    }

    /// The bridge messages of one scenario of the JS fixture (`ios`, `ios_old`, `android`).
    package static func bridgeMessages(_ scenario: String) throws -> [String] {
        try javascript().filter { $0.scenario == scenario }.compactMap {
            if case .text(let text) = $0.payload { return text }
            return nil
        }
    }

    /// The app context of a bridge relay (`POST /v1/bridge`), as an iOS app sends it.
    package static func relayApp(anonymousID: String, idfv: String, loginID: String? = nil) -> [String: Any] {
        var app: [String: Any] = [
            "server_url": "https://sa.example.com/sa?project=production",
            "anonymous_id": anonymousID,
            "identities": ["$identity_idfv": idfv, "$identity_anonymous_id": anonymousID],
            "properties": ["$os": "iOS", "$model": "iPhone15,2", "$app_version": "2.3.0", "$screen_width": 393],
            "app_version": "2.3.0",
        ]
        if let loginID { app["login_id"] = loginID }
        return app
    }

    /// A record with every field set to something other than its default.
    package static let fullRecord = CollectRecord(
        project: "default", type: "track", event: "$AppClick", time: 1_795_273_119_736, distinctId: "a\"b\\c", userId: 42,
        anonymousId: "anon", loginId: "login", lib: "iOS", libVersion: "4.5.0", appVersion: "2.3.0", hybridH5: true,
        properties: #"{"$carrier":"中国移动","price":129.5}"#, itemType: "book", itemId: "42", libMethod: "code",
        libDetail: "ViewController##viewDidLoad", originalId: "first-anon", identities: ["$identity_login_id": "login", "$identity_idfv": "I"],
        trackId: -1_289_564_112, schema: "products"
    )
}
