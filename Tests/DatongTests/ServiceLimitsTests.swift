import AsyncHTTPClient
import BenchSupport
import CompressNIO
import DatongContracts
import DatongJSON
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import NIOHTTP1
import Testing

@testable import Gateway

/// What one service accepts, the next one on its way carries: limits derived from one
/// another and tested together, so nothing valid is lost between services.
@Suite("limits that derive from one another")
struct ServiceLimitsTests {
    /// A tracking table of `entries` pages, compact: jsonb's text has a space after every ':' and ','.
    static func trackingTable(entries: Int) -> String {
        let pages = (0..<entries).map { page in
            let values = (0..<8).map { #""k\#($0)":"\#(page)""# }.joined(separator: ",")
            return #""Page\#(page)":{"pagePara":{},"userDefined":{\#(values)}}"#
        }
        return #"{"PAGEPV":{\#(pages.joined(separator: ","))}}"#
    }

    @Test("a tracking table just under the document limit is served by the gateway as the text that was checked")
    func largeDocument() async throws {
        var entries = 5_000
        while Self.trackingTable(entries: entries + 100).utf8.count < 1 << 20 { entries += 100 }
        let table = Self.trackingTable(entries: entries)
        let canonical = try JSONValue(parsing: Array(table.utf8)).canonicalText
        try await RunningServices.run { services in
            let published = try await AppDownloadsTests.publish(services, "tracking-table", table, query: "?platform=ios")
            #expect(published.status == .created, "\(published.text)")
            let served = try await services.gateway.execute(uri: "/config/tracking-table.json?project=default&platform=ios", method: .get)
            #expect(served.status == .ok, "\(served.text.prefix(300))")
            // jsonb's text was longer than what was published, and than the gateway read (1 MiB).
            #expect(canonical.utf8.count < 1 << 20)
            #expect(served.body.readableBytes == canonical.utf8.count)
            #expect(String(buffer: served.body) == canonical)
        }
    }

    @Test("a remote config number beyond a double is served with every digit")
    func exactNumbers() async throws {
        try await RunningServices.run { services in
            let document = #"{"configs": {"disableSDK": false, "custom": 12345678901234567890, "ratio": 0.10}, "nv": "1"}"#
            #expect(try await AppDownloadsTests.publish(services, "remote-config", document, query: "?platform=ios").status == .created)
            let stored = try await services.config.execute(uri: "/v1/projects/default/remote-config?platform=ios", method: .get)
            #expect(stored.text.contains(#""custom":12345678901234567890"#), "\(stored.text)")
            let served = try await services.gateway.execute(uri: "/config/iOS.conf?project=default", method: .get)
            #expect(served.status == .ok)
            #expect(served.text.contains(#""custom":12345678901234567890"#) && served.text.contains(#""ratio":0.10"#), "\(served.text)")
        }
    }

    @Test("a document's canonical text is never longer than the text published")
    func canonicalIsNoLonger() throws {
        for text in [#"["\b\f\n\r\t\u0001\u00e9\/"]"#, #"{"a":1,"a":2,"b":[1e300,-0.0,1E+2]}"#, #"{ "x" : "\ud83d\ude00" }"#] {
            let canonical = try JSONValue(parsing: Array(text.utf8)).canonicalText
            #expect(canonical.utf8.count <= text.utf8.count, "\(text) → \(canonical)")
        }
    }

    @Test("an upload within every gateway limit whose identities exceed one identity-service call is stored whole")
    func largeIdentityBatch() async throws {
        // 130 records × 80 identities, keys of 100 bytes, values of 255 Chinese characters (765
        // bytes): 8.6 MiB of resolve text, over the smallest IDENTITY_MAX_REQUEST_BYTES allowed
        // (8 MiB), which identity-service refused as one call (the SDK got a 400 and dropped it).
        // The records share 79 identities (the size is what matters, and new identities are what
        // costs identity-service) and each has one of its own.
        let time = Int64(Date().timeIntervalSince1970 * 1000)
        let shared = (1..<80).map { key in
            let name = "k\(key)_".padding(toLength: 100, withPad: "x", startingAt: 0)
            return #""\#(name)":"\#("\(key)-".padding(toLength: 255, withPad: "值", startingAt: 0))""#
        }.joined(separator: ",")
        var payload: [UInt8] = Array("[".utf8)
        for record in 0..<130 {
            if record > 0 { payload.append(UInt8(ascii: ",")) }
            let own = #""k0_\#(record)":"\#("\(record)-".padding(toLength: 255, withPad: "值", startingAt: 0))""#
            payload += Array(
                #"{"type":"track","event":"Big","time":\#(time),"distinct_id":"r\#(record)","identities":{\#(own),\#(shared)},"properties":{}}"#.utf8)
        }
        payload.append(UInt8(ascii: "]"))
        #expect(payload.count > 8 << 20 && payload.count < 20 << 20)
        let body = try HostileInputTests.form(payload)
        try await RunningServices.run(identityMaxRequestBytes: 2 * ResolveRequest.maxCallBytes) { services in
            // A debug build takes 10-20 s over 8.6 MiB of identities on a busy machine: past the
            // test client's 20 s read timeout, so this request gets a client of its own.
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(try #require(services.gateway.port))/sa?project=default")
            request.method = .POST
            request.body = .bytes(body)
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(180))
            let text = String(buffer: try await response.body.collect(upTo: 1 << 20))
            #expect(response.status == .ok, "\(text)")
            #expect(text.contains(#""stored":130"#), "\(text)")
            let stored = try await TestDatabase.rows(
                services.databaseURL, "SELECT count(*)::text, count(user_id)::text FROM analytics.events WHERE event = 'Big'")
            #expect(stored == [["130", "130"]])
        }
    }

    @Test("a record's identities are bounded, so one record always fits in a call")
    func identitiesBound() {
        let record = IdentityRecord(
            project: "p", type: "track", distinctId: String(repeating: "\u{1}", count: 255),
            identities: Dictionary(
                uniqueKeysWithValues: (0..<IdentityRecord.maxIdentities).map {
                    ("k\($0)".padding(toLength: 100, withPad: "x", startingAt: 0), String(repeating: "\u{1}", count: 255))
                }))
        #expect(record.maxWireBytes < ResolveRequest.maxCallBytes / 4)
        let runs = ResolveRequest.calls(of: Array(repeating: record, count: 40))
        #expect(runs.count > 1 && runs.flatMap { Array($0) } == Array(0..<40))
    }

    @Test("time_free records reach a bounded set of months: none in the future, none older than TIME_FREE_PAST_DAYS")
    func partitionsOnDemand() async throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let day: Int64 = 86_400_000
        func record(_ event: String, _ time: Int64) -> String {
            #"{"type":"track","event":"\#(event)","time":\#(time),"time_free":true,"distinct_id":"importer","properties":{}}"#
        }
        // 2999-01-15 and 2999-02-15: each made a partition that stayed, with its indexes.
        let future = [record("Future1", 32_473_296_000_000), record("Future2", 32_475_974_400_000)]
        let old = record("Old", now - 3_700 * day)
        let history = record("History", now - 2_000 * day)
        try await RunningServices.run(limits: UploadLimits(timeWindowPastDays: 730)) { services in
            let partitions = "SELECT count(*)::text FROM pg_inherits WHERE inhparent = 'collector.events'::regclass"
            let before = try await TestDatabase.rows(services.databaseURL, partitions)
            let answer = try await HardeningTests.upload(services, future + [old, history])
            #expect(answer["stored"] as? Int == 1 && answer["rejected"] as? Int == 3, "\(answer)")
            #expect("\(answer)".contains("time_free imports history, not the future"), "\(answer)")
            #expect("\(answer)".contains("TIME_FREE_PAST_DAYS"), "\(answer)")
            let after = try await TestDatabase.rows(services.databaseURL, partitions)
            // Only History's month, if no test record made it before.
            #expect(Int(after[0][0]!)! - Int(before[0][0]!)! <= 1)
            #expect(try await TestDatabase.rows(services.databaseURL, "SELECT count(*)::text FROM collector.events WHERE time > '2100-01-01'") == [["0"]])
        }
    }

    @Test("gzip may inflate at most 256 times its size beyond 1 MiB; a form's unknown fields cost no work")
    func gzipRatio() async throws {
        // A form of junk fields around one record, as a hostile client or a confused proxy sends it.
        let record = Data(#"[{"type":"track","event":"Dense","time":\#(Int64(Date().timeIntervalSince1970 * 1000)),"distinct_id":"d","properties":{}}]"#.utf8)
        func form(junkFields: Int) -> ByteBuffer {
            ByteBuffer(string: String(repeating: "a=1&", count: junkFields) + "data_list=\(SDKTraffic.formEncoded(record.base64EncodedString()))")
        }
        var dense = form(junkFields: 1_300_000)  // 5 MiB of form
        let denseGzip = try dense.compress(with: .gzip())
        #expect(denseGzip.readableBytes < 20_000)
        var light = form(junkFields: 200_000)  // 800 KB: under the 1 MiB every gzip may reach
        let lightGzip = try light.compress(with: .gzip())
        // 1,000 identical records: SDK data at its most compressible (193:1).
        var identical = ByteBuffer(
            string: "[" + Array(repeating: String(decoding: record.dropFirst().dropLast(), as: UTF8.self), count: 1000).joined(separator: ",") + "]")
        let identicalGzip = try identical.compress(with: .gzip())
        #expect(GzipInflater.limit(compressedBytes: 4_000, ceiling: 20 << 20) == 1 << 20)
        #expect(GzipInflater.limit(compressedBytes: 20_000, ceiling: 20 << 20) == 5_120_000)
        #expect(GzipInflater.limit(compressedBytes: Int.max / 2, ceiling: 20 << 20) == 20 << 20)
        try await RunningServices.run { services in
            let refused = try await services.gateway.execute(
                uri: "/sa?project=default", method: .post, headers: [.contentEncoding: "gzip"], body: denseGzip)
            #expect(refused.status == .contentTooLarge, "\(refused.text)")
            #expect(refused.text.contains("256 times"), "\(refused.text)")
            let stored = try await services.gateway.execute(uri: "/sa?project=default", method: .post, headers: [.contentEncoding: "gzip"], body: lightGzip)
            #expect(stored.status == .ok && stored.text.contains(#""stored":1"#), "\(stored.text)")
            let batch = try await services.gateway.execute(
                uri: "/sa?project=default", method: .post,
                body: ByteBuffer(string: "gzip=1&data_list=\(SDKTraffic.formEncoded(Data(identicalGzip.readableBytesView).base64EncodedString()))"))
            // Each is the record stored just before: all taken, none refused.
            #expect(batch.status == .ok && batch.text.contains(#""duplicates":1000"#) && batch.text.contains(#""rejected":0"#), "\(batch.text)")
        }
    }
}
