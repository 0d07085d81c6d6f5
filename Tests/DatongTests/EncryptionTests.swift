import BenchSupport
import DatongCrypto
import DatongCtl
import DatongTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
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

/// Encrypted uploads through the whole stack: keys made and served by Datong, the Android SDK's
/// own uploads decrypted and stored, and every way an envelope can fail kept without loss.
@Suite("encrypted uploads end to end")
struct EncryptedUploadTests {
    static let admin: HTTPFields = [.authorization: "Bearer \(RunningServices.adminToken)", .contentType: "application/json"]

    /// The published test keys, as config-service keeps keys: sealed under the master key. A
    /// deployment restoring keys from a backup does the same.
    static func installTestKeys(_ url: String) async throws {
        let sealer = try KeySealer(masterKeyBase64: RunningServices.masterKey)
        for key in try EncryptionTests.keys() {
            let sealed = try sealer.seal(Array(try need(Data(base64Encoded: key.privateKeyPKCS8))), label: "production/\(key.pkv)")
            _ = try await TestDatabase.rows(
                url,
                """
                INSERT INTO config.encryption_keys (project, pkv, type, public_key, sealed_private, created_by)
                VALUES ('production', $1::integer, $2, $3, decode($4, 'base64'), 'test')
                """, [String(key.pkv), key.type.rawValue, key.publicKey, Data(sealed).base64EncodedString()])
        }
    }

    static func post(_ body: String, to gateway: any TestClientProtocol) async throws -> TestResponse {
        try await gateway.execute(uri: "/sa?project=production", method: .post, body: ByteBuffer(string: body))
    }

    @Test("the Android SDK's gzip=9 and gzip=13 uploads, RSA and EC, are stored like plain ones")
    func androidUploads() async throws {
        try await RunningServices.run { services in
            try await Self.installTestKeys(services.databaseURL)
            for capture in try EncryptionTests.captures() {
                let answer = try await Self.post(capture.body, to: services.gateway)
                #expect(answer.status == .ok, "\(capture.scenario): \(answer.text)")
                #expect(try answer.json()["rejected"] as? Int == 0, "\(capture.scenario): \(answer.text)")
            }
            let stored = try await TestDatabase.rows(
                services.databaseURL,
                """
                SELECT event, count(*), count(*) FILTER (WHERE properties->>'secret' = 'only the server reads this'), min(lib),
                       string_agg(DISTINCT properties->>'$ip', ',')
                FROM analytics.events GROUP BY 1 ORDER BY 1
                """)
            // Opened, they are enriched as plain uploads are: the device's address (this test's, loopback).
            #expect(stored == [["Encrypted13", "6", "6", "Android", "127.0.0.1"], ["Encrypted9", "8", "8", "Android", "127.0.0.1"]])
            // The catalog has the types the Android SDK meant, from the records it encrypted, and
            // the `$ip` the gateway adds to a device's events.
            let types = try await TestDatabase.rows(
                services.databaseURL,
                "SELECT name || ' ' || type FROM analytics.catalog_properties WHERE project = 'production' ORDER BY name")
            #expect(types == [["$ip STRING"], ["$os STRING"], ["n NUMBER"], ["secret STRING"]])
            // Sent again (the SDK retried): every record is a duplicate.
            let again = try await Self.post(try EncryptionTests.captures()[0].body, to: services.gateway)
            #expect(try again.json()["duplicates"] as? Int == 4)
        }
    }

    @Test("an envelope that cannot be opened is kept, never stored, never lost; without keys the answer is 503")
    func failures() async throws {
        try await RunningServices.run { services in
            try await Self.installTestKeys(services.databaseURL)
            let capture = try EncryptionTests.captures().first { $0.scenario == "gzip9-EC-pkv2" }!
            let form = FormParameters(query: nil, body: Array(capture.body.utf8))
            let dataList = try need(form["data_list"])
            func body(_ text: String, gzip: String = "9") -> String {
                "gzip=\(gzip)&data_list=" + text.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            }
            // An unknown pkv: kept as received, with the reason, answered 200 (nothing to retry).
            let unknown = dataList.replacingOccurrences(of: "\"pkv\":2", with: "\"pkv\":99")
            let kept = try await Self.post(body(unknown), to: services.gateway)
            #expect(kept.status == .ok)
            #expect(try kept.json()["rejected"] as? Int == 2)
            // A tampered payload: refused, never a stored record.
            var envelopes = try need(try JSONSerialization.jsonObject(with: Data(dataList.utf8)) as? [[String: Any]])
            var payloads = envelopes[0]["payloads"] as! [String]
            var bytes = Array(Data(base64Encoded: payloads[0])!)
            bytes[bytes.count - 20] ^= 0x55
            payloads[0] = Data(bytes).base64EncodedString()
            envelopes[0]["payloads"] = payloads
            let tampered = String(decoding: try JSONSerialization.data(withJSONObject: envelopes), as: UTF8.self)
            let refused = try await Self.post(body(tampered), to: services.gateway)
            #expect(refused.status == .ok)
            #expect(try refused.json()["stored"] as? Int == 2)  // the second envelope is intact
            #expect(try refused.json()["rejected"] as? Int == 1)
            let reasons = try await TestDatabase.rows(services.databaseURL, "SELECT reason, raw FROM analytics.rejected ORDER BY reason")
            #expect(reasons.count == 3)
            #expect(reasons.filter { ($0[0] ?? "").contains("no active key pkv 99") }.count == 2)
            #expect(reasons.allSatisfy { ($0[1] ?? "").contains("\"ekey\"") })
            #expect(try await TestDatabase.rows(services.databaseURL, "SELECT count(*) FROM analytics.events") == [["2"]])

            // The key of pkv 99 comes back (restored from a backup): the replay stores what was kept.
            let ecKey = try EncryptionTests.keys().first { $0.type == .ec }!
            let sealed = try KeySealer(masterKeyBase64: RunningServices.masterKey)
                .seal(Array(try need(Data(base64Encoded: ecKey.privateKeyPKCS8))), label: "production/99")
            _ = try await TestDatabase.rows(
                services.databaseURL,
                """
                INSERT INTO config.encryption_keys (project, pkv, type, public_key, sealed_private, created_by)
                VALUES ('production', 99, 'ec', $1, decode($2, 'base64'), 'restore')
                """, [ecKey.publicKey, Data(sealed).base64EncodedString()])
            try await Task.sleep(for: .seconds(1.1))  // the gateway reads keys again at most once a second
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("scripts/replay-encrypted").path
            let arguments = [script, "production", "--database", services.databaseURL, "--gateway", "http://127.0.0.1:\(services.gateway.port!)"]
            // Waited for on a thread of its own: the in-process gateway it talks to needs the cooperative pool.
            let (status, printed) = try await HTTPLoad.onThread {
                let replay = Process()
                replay.executableURL = URL(fileURLWithPath: "/bin/bash")
                replay.arguments = arguments
                let output = Pipe()
                replay.standardOutput = output
                replay.standardError = output
                try replay.run()
                let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                replay.waitUntilExit()
                return (replay.terminationStatus, printed)
            }
            #expect(status == 0, "\(printed)")
            #expect(printed.contains("replayed 2, still without a usable key 0"), "\(printed)")
            // 4 records in the two envelopes; the second envelope's 2 were stored from the tampered
            // upload already (the same records), so they count as duplicates.
            #expect(try await TestDatabase.rows(services.databaseURL, "SELECT count(*) FROM analytics.events") == [["4"]])
            // The tampered envelope stays: it would never decrypt.
            #expect(try await TestDatabase.rows(services.databaseURL, "SELECT count(*) FROM analytics.rejected") == [["1"]])
        }
        // A gateway that cannot open keys answers 503: the SDK keeps the batch.
        try await RunningServices.run(gatewayHasMasterKey: false) { services in
            try await Self.installTestKeys(services.databaseURL)
            let answer = try await Self.post(try EncryptionTests.captures()[0].body, to: services.gateway)
            #expect(answer.status == .serviceUnavailable)
            #expect(answer.headers[.retryAfter] != nil)
        }
    }

    @Test("keys are made, listed, served to SDKs in their form, rotated and retired through the admin API and datongctl")
    func keyLifecycle() async throws {
        try await RunningServices.run { services in
            func conf() async throws -> [String: Any] {
                let answer = try await services.gateway.execute(uri: "/config/Android.conf?project=production", method: .get)
                #expect(answer.status == .ok)
                return try answer.json()
            }
            let before = try await conf()
            #expect((before["configs"] as? [String: Any])?["key"] == nil)
            let environment = ["DATONG_CONFIG_URL": "http://127.0.0.1:\(services.config.port!)", "DATONG_ADMIN_TOKEN": RunningServices.adminToken]
            let rsa = await Datongctl.run(["keys", "create", "production", "--type", "rsa"], environment: environment)
            #expect(rsa.exitCode == 0, "\(rsa.output)")
            #expect(rsa.output.contains("pkv 1"))
            let ec = try await services.config.execute(
                uri: "/v1/projects/production/keys", method: .post, headers: Self.admin, body: ByteBuffer(string: #"{"type":"ec"}"#))
            #expect(ec.status == .created)
            #expect(try ec.json()["pkv"] as? Int == 2)
            #expect(try ec.json().keys.contains { $0.lowercased().contains("private") } == false)
            let onTransport = try await services.config.execute(
                uri: "/v1/projects/production/transport-encryption", method: .put, headers: Self.admin, body: ByteBuffer(string: #"{"enabled":true}"#)
            )
            #expect(onTransport.status == .ok)
            try await Task.sleep(for: .seconds(2.2))  // the gateway reads keys again every 2 s

            let served = try await conf()
            let configs = try need(served["configs"] as? [String: Any])
            let key = try need(configs["key"] as? [String: Any])
            #expect(key["pkv"] as? Int == 1)
            #expect(key["type"] == nil)
            #expect((key["public_key"] as? String)?.hasPrefix("MIIBIjANBgkqhkiG9w0BAQEF") == true)
            let keyEC = try need(try JSONSerialization.jsonObject(with: Data(try need(key["key_ec"] as? String).utf8)) as? [String: Any])
            #expect(keyEC["pkv"] as? Int == 2 && keyEC["type"] as? String == "EC")
            let v2 = try need(configs["key_v2"] as? [String: Any])
            #expect(v2["pkv"] as? Int == 2 && v2["type"] as? String == "EC+AES")
            #expect((v2["public_key"] as? String)?.hasPrefix("MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE") == true)
            #expect(configs["supportTransportEncrypt"] as? Bool == true)
            let version = try need(served["v"] as? String)
            #expect(version != before["v"] as? String)

            // Rotation: a new EC key is served, the old keys keep decrypting; v changes.
            #expect(await Datongctl.run(["keys", "create", "production", "--type", "ec"], environment: environment).exitCode == 0)
            let listed = await Datongctl.run(["keys", "list", "production"], environment: environment)
            #expect(listed.output.split(separator: "\n").count == 3, "\(listed.output)")
            let retired = await Datongctl.run(["keys", "retire", "production", "1"], environment: environment)
            #expect(retired.exitCode == 0, "\(retired.output)")
            #expect(await Datongctl.run(["keys", "retire", "production", "1"], environment: environment).exitCode == 1)
            try await Task.sleep(for: .seconds(2.2))
            let rotated = try await conf()
            #expect(rotated["v"] as? String != version)
            let rotatedConfigs = try need(rotated["configs"] as? [String: Any])
            #expect((rotatedConfigs["key_v2"] as? [String: Any])?["pkv"] as? Int == 3)
            #expect((rotatedConfigs["key"] as? [String: Any])?["public_key"] == nil)

            let audit = try await TestDatabase.rows(
                services.databaseURL, "SELECT action FROM config.audit WHERE project = 'production' AND action LIKE 'key.%' ORDER BY id")
            #expect(audit == [["key.created"], ["key.created"], ["key.created"], ["key.retired"]])
            // The private keys are sealed: no PKCS#8 DER in the table.
            let raw = try await TestDatabase.rows(
                services.databaseURL, "SELECT count(*) FROM config.encryption_keys WHERE position('\\x3082'::bytea in sealed_private) = 1")
            #expect(raw == [["0"]])
        }
    }
}
