import BenchSupport
import CompressNIO
import DatongRuntime
import Foundation
import Gateway
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

/// What an attacker or a broken client sends the gateway, on a real stack (RELIABILITY.md, hostile
/// inputs): each request gets a 4xx naming the problem, the services stay up, nothing wrong is stored,
/// and every record that could be read is in `analytics.rejected` with its reason.
@Suite("hostile inputs")
struct HostileInputTests {
    static let limits = UploadLimits(
        maxBodyBytes: 256 << 10, maxDecompressedBytes: 1 << 20, maxRecordsPerRequest: 500, maxJSONDepth: 16,
        timeWindowPastDays: 36_500, bodyTimeoutSeconds: 1
    )
    static let time = Int64(Date().timeIntervalSince1970 * 1000)

    /// The iOS SDK's form body for `payload` (JSON bytes): `gzip=1`, base64, crc.
    static func form(_ payload: [UInt8], crc: Int32? = nil) throws -> ByteBuffer {
        var buffer = ByteBuffer(bytes: payload)
        let base64 = Data(try buffer.compress(with: .gzip()).readableBytesView).base64EncodedString()
        let checksum = crc ?? SDKTraffic.javaHashCode(base64)
        return ByteBuffer(string: "gzip=1&data_list=\(SDKTraffic.formEncoded(base64))&crc=\(checksum)")
    }

    static func record(event: String = "ViewProduct", distinctID: String = "hostile-device", properties: [String: Any] = [:]) -> [String: Any] {
        ["type": "track", "event": event, "time": time, "distinct_id": distinctID, "properties": properties]
    }

    /// The answer is `status` with a JSON problem naming `code` and saying why.
    static func expectRefusal(_ response: TestResponse, _ status: HTTPResponse.Status, _ code: String, sourceLocation: SourceLocation = #_sourceLocation) throws
    {
        #expect(response.status == status, sourceLocation: sourceLocation)
        let problem = try response.json()
        #expect(problem["error"] as? String == code, "\(problem)", sourceLocation: sourceLocation)
        #expect(((problem["message"] as? String) ?? "").count > 10, sourceLocation: sourceLocation)
    }

    @Test("every hostile request is refused with a reason, nothing wrong is stored, readable records are in analytics.rejected")
    func hostileRequests() async throws {
        try await RunningServices.run(limits: Self.limits) { services in
            let gateway = services.gateway
            let post = { (uri: String, body: ByteBuffer, headers: HTTPFields) in
                try await gateway.execute(uri: uri, method: .post, headers: headers, body: body)
            }

            // A gzip bomb: 64 MiB of zeros in 64 KiB, inflating past the 1 MiB limit. Inflating stops at the limit.
            var zeros = ByteBuffer(repeating: UInt8(ascii: " "), count: 64 << 20)
            zeros.writeString("[]")
            let bomb = try zeros.compress(with: .gzip())
            let bombBase64 = Data(bomb.readableBytesView).base64EncodedString()
            try Self.expectRefusal(
                try await post("/sa?project=default", ByteBuffer(string: "gzip=1&data_list=\(SDKTraffic.formEncoded(bombBase64))"), [:]),
                .contentTooLarge, "payload_too_large"
            )
            try Self.expectRefusal(
                try await post("/v1/bridge?project=default", bomb, [.contentEncoding: "gzip"]), .contentTooLarge, "body_too_large"
            )

            // A body over the limit.
            try Self.expectRefusal(
                try await post("/sa?project=default", ByteBuffer(repeating: UInt8(ascii: "a"), count: (256 << 10) + 1), [:]),
                .contentTooLarge, "body_too_large"
            )

            // Invalid UTF-8 in a record.
            let badUTF8 = Array(#"[{"type":"track","event":"E","time":1795273119736,"distinct_id":""#.utf8) + [0xC3, 0x28, 0x22, 0x7D, 0x5D]
            try Self.expectRefusal(try await post("/sa?project=default", try Self.form(badUTF8), [:]), .badRequest, "invalid_utf8")

            // Nesting far past any parser's stack: refused at the configured depth, without a crash.
            let deep = Array(("[" + String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000) + "]").utf8)
            try Self.expectRefusal(try await post("/sa?project=default", try Self.form(deep), [:]), .badRequest, "json_too_deep")
            try Self.expectRefusal(
                try await post("/v1/bridge?project=default", ByteBuffer(bytes: deep), [:]), .badRequest, "json_too_deep"
            )

            // Huge arrays: more records than a request may hold, and one record with 100,000 list items.
            let many = SDKTraffic.json(Array(repeating: Self.record(), count: 501))
            try Self.expectRefusal(try await post("/sa?project=default", try Self.form(many), [:]), .contentTooLarge, "too_many_records")
            let hugeList = SDKTraffic.json([Self.record(properties: ["tags": Array(repeating: "x", count: 100_000)])])
            let hugeListAnswer = try await post("/sa?project=default", try Self.form(hugeList), [:])
            #expect(hugeListAnswer.status == .ok)
            #expect(try hugeListAnswer.json()["rejected"] as? Int == 1)

            // Invalid base64, and a crc that does not match the data.
            try Self.expectRefusal(
                try await post("/sa?project=default", ByteBuffer(string: "gzip=1&data_list=%21%21not*base64%21%21"), [:]),
                .badRequest, "invalid_base64"
            )
            try Self.expectRefusal(
                try await post("/sa?project=default", try Self.form(SDKTraffic.json([Self.record()]), crc: 12345), [:]),
                .badRequest, "crc_mismatch"
            )

            // Unknown and malformed projects; a project with a token, sent without it or with a wrong one.
            let valid = try Self.form(SDKTraffic.json([Self.record()]))
            try Self.expectRefusal(try await post("/sa?project=nosuch", valid, [:]), .notFound, "unknown_project")
            try Self.expectRefusal(try await post("/sa?project=default%27%3BDROP%20TABLE%20x", valid, [:]), .badRequest, "invalid_project")
            let admin: HTTPFields = [.authorization: "Bearer \(RunningServices.adminToken)", .contentType: "application/json"]
            let tokened = try await services.config.execute(
                uri: "/v1/projects/proj_x", method: .put, headers: admin, body: ByteBuffer(string: #"{"token":"proj-x-secret-token"}"#)
            )
            #expect(tokened.status == .ok || tokened.status == .created)
            try await Task.sleep(for: .seconds(2.2))  // the gateway's project list is cached for 2 s
            try Self.expectRefusal(try await post("/sa?project=proj_x", valid, [:]), .forbidden, "missing_token")
            try Self.expectRefusal(try await post("/sa?project=proj_x&token=wrong", valid, [:]), .forbidden, "invalid_token")

            // Reserved and SQL-looking names are rejected record by record; an SQL-looking value is
            // data and is stored exactly as sent.
            let injection = "x'); DROP TABLE collector.events; --"
            let names = SDKTraffic.json([
                Self.record(properties: ["distinct_id": "reserved"]),
                Self.record(properties: ["user_tag_x": 1]),
                Self.record(event: "Buy'; DROP TABLE collector.events; --"),
                Self.record(properties: ["a\"; DELETE FROM collector.events; --": 1]),
                Self.record(event: "SQLValue", properties: ["note": injection]),
            ])
            let named = try await post("/sa?project=default", try Self.form(names), [:])
            #expect(named.status == .ok)
            #expect(try named.json()["stored"] as? Int == 1)
            #expect(try named.json()["rejected"] as? Int == 4)

            // Bridge messages whose server_url points elsewhere: another host, another project,
            // a look-alike host.
            let device = SDKTraffic.Device(7)
            let forged = [
                "https://evil.example.net/sa?project=default", "https://sa.example.com/sa?project=proj_x",
                "https://sa.example.com.evil.net/sa?project=default", "javascript:alert(1)",
            ]
            let records = forged.enumerated().map { index, url in
                SDKTraffic.bridgeRecord(device, sequence: index, time: Self.time - Int64(index), serverURL: url)
            }
            let relay = try await post(
                "/v1/bridge?project=default",
                ByteBuffer(bytes: SDKTraffic.relayBody(device, records: records, serverURL: "https://sa.example.com/sa?project=default")), [:]
            )
            #expect(relay.status == .ok)
            #expect(try relay.json()["rejected"] as? Int == forged.count)
            #expect(try relay.json()["stored"] as? Int == 0)

            // A body that trickles in: 408 once the body deadline (1 s here) passes; the connection is closed.
            // Without a deadline the answer would never come: the read gives up after 10 s.
            // The socket is blocking: it is driven from a thread of its own, never the cooperative pool
            // the in-process services need to answer.
            let port = gateway.port!
            let (timedOut, afterwards) = try await HTTPLoad.onThread {
                let connection = try HTTPLoad.Connection(port: port, receiveTimeout: 10)
                defer { connection.close() }
                try connection.write(Array("POST /sa?project=default HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\ngzip=1&".utf8))
                // One byte every 100 ms for 2 s; the answer waits in the socket.
                for _ in 0..<20 {
                    try? connection.write([UInt8(ascii: "a")])
                    Thread.sleep(forTimeInterval: 0.1)
                }
                let timedOut = try connection.readAnswer()
                let afterwards: String
                do {
                    afterwards = "answered \(try connection.readAnswer().status)"
                } catch {
                    afterwards = "\(error)"
                }
                return (timedOut, afterwards)
            }
            #expect(timedOut.status == 408)
            #expect(timedOut.text.contains("body_timeout"))
            #expect(timedOut.headers["connection"] == "close")
            #expect(afterwards == "the server closed the connection")

            // Every service is still up.
            for client in [services.gateway, services.identity, services.collector, services.config] {
                #expect(try await client.execute(uri: "/health", method: .get).status == .ok)
            }

            // Stored: only the record with the SQL-looking value, exactly as sent. Rejected with a
            // reason: the oversized list, the four bad names and the four forged relays.
            let events = try await TestDatabase.rows(services.databaseURL, "SELECT event, properties->>'note' FROM analytics.events ORDER BY event")
            #expect(events == [["SQLValue", injection]])
            let rejected = try await TestDatabase.rows(services.databaseURL, "SELECT reason FROM analytics.rejected ORDER BY received_at, reason")
            #expect(rejected.count == 9)
            let reasons = rejected.compactMap { $0.first ?? nil }.joined(separator: "\n")
            for expected in ["reserved name", "server_url", "user_tag_x", "evil.example.net", "proj_x", "the limit is 500"] {
                #expect(reasons.contains(expected), "no rejection mentions \(expected):\n\(reasons)")
            }
            let counts = try await TestDatabase.rows(
                services.databaseURL, "SELECT sum(received), sum(stored), sum(duplicates), sum(rejected) FROM analytics.ingest_counts"
            )
            #expect(counts == [["10", "1", "0", "9"]])
        }
    }

    @Test("the collector refuses a batch only for what concerns the whole batch; a record it cannot store is refused alone")
    func collectorBatchChecks() async throws {
        let good = #"{"project":"default","type":"track","event":"Good","time":1700000000000,"hybridH5":false,"properties":{}}"#
        let badRecords = [
            #"{"project":"default","type":"track","event":"E","time":9223372036854775806,"hybridH5":false,"properties":{}}"#,
            #"{"project":"","type":"track","event":"E","time":1,"hybridH5":false,"properties":{}}"#,
            #"{"project":"default","type":"","event":"E","time":1,"hybridH5":false,"properties":{}}"#,
        ]
        try await RunningServices.run { services in
            let token: HTTPFields = [.authorization: "Bearer \(RunningServices.serviceToken)"]
            // Past year 9999 the microseconds of a timestamp overflow Int64 (this one trapped the
            // collector before its rows were written, from the fuzzer).
            for receivedAt in ["-1", "17952731197369736", "9223372036854775807"] {
                let refused = try await services.collector.execute(
                    uri: "/v1/batches", method: .post, headers: token,
                    body: ByteBuffer(string: #"{"receivedAt":\#(receivedAt),"records":[\#(good)],"rejected":[]}"#)
                )
                try Self.expectRefusal(refused, .badRequest, "invalid_batch")
            }
            // Inside a group the same refusals come in a 200, and are counted all the same.
            let group = #"{"batches":[{"receivedAt":-1,"records":[\#(good)]},{"records":[]}]}"#
            let grouped = try await services.collector.execute(uri: "/v1/batch-groups", method: .post, headers: token, body: ByteBuffer(string: group))
            #expect(grouped.status == .ok, "\(grouped.text)")
            let metrics = try await services.collector.execute(uri: "/metrics", method: .get).text
            #expect(metrics.contains(#"datong_refusals_total{code="invalid_batch"} 4"#), "\(metrics)")
            #expect(metrics.contains(#"datong_refusals_total{code="invalid_body"} 1"#), "\(metrics)")
            for bad in badRecords {
                let batch = #"{"receivedAt":1700000000000,"records":[\#(bad),\#(good)],"rejected":[]}"#
                let answer = try await services.collector.execute(uri: "/v1/batches", method: .post, headers: token, body: ByteBuffer(string: batch))
                #expect(answer.status == .ok, "\(answer.text)")
                #expect(try answer.json()["rejectedIndexes"] as? [Int] == [0])
                // The bad record refused at its place; the good one stored (a duplicate after the first round).
                let outcomes = try answer.json()["records"] as? [Any]
                #expect(outcomes?.count == 2 && (outcomes?[0] as? [String: Any])?["refused"] != nil, "\(answer.text)")
                #expect(["stored", "duplicate"].contains(outcomes?[1] as? String), "\(answer.text)")
                #expect(try answer.json()["rejected"] as? Int == 1)
            }
            // A rejected entry naming an invalid project is kept under `default`, saying so.
            let odd = try await services.collector.execute(
                uri: "/v1/batches", method: .post, headers: token,
                body: ByteBuffer(string: #"{"receivedAt":1,"records":[],"rejected":[{"project":"no such;","reason":"r","raw":"x"}]}"#)
            )
            #expect(odd.status == .ok)
            #expect(try await services.collector.execute(uri: "/health", method: .get).status == .ok)
            #expect(try await TestDatabase.rows(services.databaseURL, "SELECT count(*) FROM collector.events") == [["1"]])
            let rejected = try await TestDatabase.rows(services.databaseURL, "SELECT project, reason FROM analytics.rejected ORDER BY reason")
            #expect(rejected.count == 4)
            #expect(rejected.contains { $0[0] == "default" && ($0[1] ?? "").contains("no such;") })
        }
    }
}
