import DatongContracts
import DatongJSON
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

/// What one service accepts, the next one on its way carries (issue 37): limits derived from one
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
}
