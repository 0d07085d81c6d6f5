import DatongCrypto
import Foundation
import Testing

@testable import Gateway

/// The Sensors SDKs' payload encryption, decrypted with what the Android SDK's own classes made
/// (Tests/Fixtures/sensors/android-sdk-encrypt.jsonl, for the published test keys beside it).
/// The value, or a test failure naming what was missing (#require cannot nest).
func need<T>(_ value: T?, _ what: String = "a value", sourceLocation: SourceLocation = #_sourceLocation) throws -> T {
    try #require(value, "\(what) is missing", sourceLocation: sourceLocation)
}

@Suite("payload encryption")
struct EncryptionTests {
    struct TestKey: Decodable {
        let pkv: Int
        let type: KeyType
        let publicKey: String
        let privateKeyPKCS8: String
    }

    struct Capture: Decodable {
        let scenario: String
        let query: String
        let body: String
    }

    static func keys() throws -> [TestKey] {
        struct File: Decodable { let keys: [TestKey] }
        return try JSONDecoder().decode(File.self, from: Data(contentsOf: Fixtures.directory.appendingPathComponent("encryption-test-keys.json"))).keys
    }

    static func captures() throws -> [Capture] {
        try String(contentsOf: Fixtures.directory.appendingPathComponent("android-sdk-encrypt.jsonl"), encoding: .utf8)
            .split(separator: "\n").map { try JSONDecoder().decode(Capture.self, from: Data($0.utf8)) }
    }

    static func privateKeys() throws -> [Int: EnvelopePrivateKey] {
        var found: [Int: EnvelopePrivateKey] = [:]
        for key in try keys() {
            found[key.pkv] = try EnvelopePrivateKey(pkcs8DER: Array(try need(Data(base64Encoded: key.privateKeyPKCS8))), type: key.type, pkv: key.pkv)
        }
        return found
    }

    @Test("the Android SDK's RSA and ECIES key wraps and AES payloads decrypt with OpenSSL")
    func androidVectors() throws {
        let keys = try Self.privateKeys()
        var records = 0
        for capture in try Self.captures() {
            let form = FormParameters(query: capture.query, body: Array(capture.body.utf8))
            let envelopes = try need(try JSONSerialization.jsonObject(with: Data(try need(form["data_list"]).utf8)) as? [[String: Any]])
            #expect(envelopes.count == (capture.scenario.hasPrefix("gzip9") ? 2 : 1))
            for envelope in envelopes {
                let key = try need(keys[try need(envelope["pkv"] as? Int)])
                let aes = try key.unwrap(Array(try need(Data(base64Encoded: try need(envelope["ekey"] as? String)))))
                #expect(aes.count == 16)
                let payloads = try (envelope["payloads"] as? [String]) ?? [need(envelope["payloads"] as? String)]
                for payload in payloads {
                    let gzipped = try EnvelopePayload.decrypt(Array(try need(Data(base64Encoded: payload))), key: aes)
                    let json = try gzipped.withUnsafeBytes { try GzipInflater.inflate($0, limit: 1 << 20) }
                    let text = String(decoding: json, as: UTF8.self)
                    #expect(text.contains("only the server reads this"))
                    records += text.components(separatedBy: "\"type\":\"track\"").count - 1
                }
            }
        }
        // Per key: 2 envelopes x 2 records (gzip=9) and a batch of 3 (gzip=13).
        #expect(records == 14)
    }

    @Test("a tampered key wrap or payload never decrypts")
    func tampering() throws {
        let keys = try Self.privateKeys()
        let capture = try need(try Self.captures().first { $0.scenario == "gzip9-EC-pkv2" })
        let form = FormParameters(query: nil, body: Array(capture.body.utf8))
        let envelope = try need((try JSONSerialization.jsonObject(with: Data(try need(form["data_list"]).utf8)) as? [[String: Any]])?.first)
        var ekey = Array(try need(Data(base64Encoded: try need(envelope["ekey"] as? String))))
        let aes = try keys[2]!.unwrap(ekey)
        ekey[70] ^= 1
        #expect(throws: CryptoFailure.self) { try keys[2]!.unwrap(ekey) }
        // The RSA key cannot unwrap what was made for the EC key.
        let wrapped = Array(try need(Data(base64Encoded: envelope["ekey"] as! String)))
        #expect(throws: CryptoFailure.self) { try keys[1]!.unwrap(wrapped) }
        var payload = Array(try need(Data(base64Encoded: (envelope["payloads"] as! [String])[0])))
        payload[payload.count - 1] ^= 0xFF
        let garbled = try? EnvelopePayload.decrypt(payload, key: aes)
        // Bad padding is refused; on the rare padding that survives, the gzip check refuses it.
        if let garbled { #expect((try? garbled.withUnsafeBytes { try GzipInflater.inflate($0, limit: 1 << 20) }) == nil) }
    }

    @Test("key pairs made here are the SDKs' format and round-trip through the sealer")
    func keyPairs() throws {
        let sealer = try KeySealer(masterKeyBase64: Data((0..<32).map { UInt8($0) }).base64EncodedString())
        for type in KeyType.allCases {
            let pair = try GeneratedKeyPair.generate(type)
            // SPKI prefixes the SDKs expect: RSA "MIIBIjANBgkqhkiG9w0BAQEF", P-256 "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE".
            #expect(pair.publicKeyBase64.hasPrefix(type == .rsa ? "MIIBIjANBgkqhkiG9w0BAQEF" : "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE"))
            let sealed = try sealer.seal(pair.privateKeyDER, label: "p/1")
            #expect(sealed != pair.privateKeyDER)
            #expect(try sealer.open(sealed, label: "p/1") == pair.privateKeyDER)
            #expect(throws: CryptoFailure.self) { try sealer.open(sealed, label: "p/2") }
            let other = try KeySealer(masterKeyBase64: Data(repeating: 7, count: 32).base64EncodedString())
            #expect(throws: CryptoFailure.self) { try other.open(sealed, label: "p/1") }
            _ = try EnvelopePrivateKey(pkcs8DER: pair.privateKeyDER, type: type, pkv: 1)
        }
        #expect(throws: CryptoFailure.self) { try KeySealer(masterKeyBase64: "short") }
    }
}
