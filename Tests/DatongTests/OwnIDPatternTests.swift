import Foundation
import Testing

@testable import Collector

/// The regular expression that finds a refused record's own user in its text (`UserData.ownIDPattern`),
/// run by PostgreSQL as the erasure and the export run it.
@Suite("a refused record names its own user by its ids, not by any text that holds them")
struct OwnIDPatternTests {
    @Test("identities, distinct_id, original_id, login_id and anonymous_id name the user; elsewhere the id names nobody")
    func ownIDs() async throws {
        let url = try await TestDatabase.create()
        func matches(_ text: String, _ id: String) async throws -> Bool {
            try await TestDatabase.rows(url, "SELECT ($1 ~ $2)::text", [text, UserData.ownIDPattern(id)]) == [["true"]]
        }
        let own = [
            #"{"type":"track","identities":{"$identity_login_id":"ann"}}"#,
            #"{"identities" : { "$identity_cookie_id": "c1", "$identity_mobile" :  "ann" }, "event": 3}"#,
            #"{"distinct_id":"ann","properties":{}}"#,
            #"{"original_id": "ann"}"#,
            #"{"login_id":"ann"}"#,
            #"{"anonymous_id":"ann"}"#,
        ]
        for text in own { #expect(try await matches(text, "ann"), "\(text)") }
        let others = [
            // Among the properties, or in another object after the identities closed.
            #"{"properties":{"friend":"ann"},"distinct_id":"bob"}"#,
            #"{"identities":{"$identity_login_id":"bob"},"note":"ann"}"#,
            // Nested deeper than the identities' own values.
            #"{"identities":{"x":{"y":"ann"}}}"#,
            // Only part of an id: the quotes are matched too.
            #"{"distinct_id":"anna"}"#,
            #"{"identities":{"$identity_login_id":"joann"}}"#,
            // Not JSON at all, yet a refused record's text.
            "ann",
        ]
        for text in others { #expect(try await matches(text, "ann") == false, "\(text)") }
        // An id with a quote, a backslash and regular-expression characters is found as written.
        let odd = #"a"n\n.*(1)"#
        let encoded = String(decoding: try JSONEncoder().encode(["identities": ["k": odd]]), as: UTF8.self)
        #expect(try await matches(encoded, odd), "\(encoded)")
        #expect(try await matches(#"{"identities":{"k":"aXn"}}"#, odd) == false)
    }
}
