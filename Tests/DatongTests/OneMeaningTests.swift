import DatongContracts
import DatongJSON
import Foundation
import HummingbirdTesting
import Testing

@testable import Gateway

/// One JSON text, one meaning: how a record was written — escaped or plain keys, a
/// Unicode form, a time in seconds or milliseconds — never changes what is stored.
@Suite("one JSON text, one meaning")
struct OneMeaningTests {
    static let time = Int64(Date().timeIntervalSince1970 * 1000) / 1000 * 1000

    static func milliseconds(_ text: String) throws -> Int64? {
        RecordNormalizer.milliseconds(try JSONParser.parse(Array(text.utf8), maxDepth: 4).root)
    }

    @Test("an escaped key is the key it spells: it sets the time and the login flag, and every number is kept exactly")
    func escapedKeys() async throws {
        let happened = Self.time - 60_000
        let values = #""big":123456789012345678901234567890,"u64":18446744073709551615,"price":9.90"#
        let plain =
            #"{"type":"track","event":"Plain","time":\#(Self.time),"distinct_id":"user-plain","properties":{"$time":\#(happened),"$is_login_id":true,\#(values),"x":1,"city":"北京"}}"#
        // The same JSON strings written with escapes, keys and values alike.
        let escaped =
            #"{"\u0074ype":"track","event":"Escaped","time":\#(Self.time),"distinct_id":"user-escaped","properties":{"\u0024time":\#(happened),"\u0024is_login_id":true,\#(values),"\u0078":1,"city":"\u5317\u4eac"}}"#
        try await RunningServices.run { services in
            let answer = try await HardeningTests.upload(services, [plain, escaped])
            #expect(answer["stored"] as? Int == 2, "\(answer)")
            let rows = try await TestDatabase.rows(
                services.databaseURL,
                """
                SELECT event, (extract(epoch FROM time) * 1000)::bigint::text, login_id, properties::text
                FROM analytics.events ORDER BY event
                """)
            #expect(rows.count == 2)
            #expect(rows.map { $0[1] } == ["\(happened)", "\(happened)"])
            #expect(rows.map { $0[2] } == ["user-escaped", "user-plain"])
            #expect(rows[0][3] == rows[1][3])
            #expect(rows[0][3]?.contains("123456789012345678901234567890") == true, "\(rows)")
            #expect(rows[0][3]?.contains("18446744073709551615") == true, "\(rows)")
            #expect(rows[0][3]?.contains("9.90") == true, "\(rows)")
            #expect(rows[0][3]?.contains("$time") == false && rows[0][3]?.contains("is_login_id") == false, "\(rows)")
        }
    }

    @Test("a number time below 10^10 is seconds, with its fraction; from 10^10 it is milliseconds")
    func timeRule() throws {
        #expect(try Self.milliseconds("76204800000") == 76_204_800_000)  // 1972-06-01 in milliseconds
        #expect(try Self.milliseconds("1795578076.148") == 1_795_578_076_148)
        #expect(try Self.milliseconds("1795578076") == 1_795_578_076_000)
        #expect(try Self.milliseconds("9999999999") == 9_999_999_999_000)
        #expect(try Self.milliseconds("10000000000") == 10_000_000_000)
        #expect(try Self.milliseconds("1795578076148.4") == 1_795_578_076_148)
        #expect(try Self.milliseconds("-1") == nil)
        #expect(try Self.milliseconds("1e300") == nil)
    }

    @Test("a login id in NFC and in NFD are two ids, in the gateway's cache as in identity-service and the database")
    func unicodeForms() async throws {
        let nfc = "jos\u{E9}"  // é as one code point
        let nfd = "jose\u{301}"  // e and a combining acute accent: canonically equivalent, other bytes
        #expect(nfc == nfd)  // Swift's own comparison
        #expect(!ExactText.equal(nfc, nfd))
        @Sendable func record(_ event: String, device: String?, login: String) -> String {
            let cookie = device.map { #","$identity_cookie_id":"\#($0)""# } ?? ""
            return
                #"{"type":"track","event":"\#(event)","time":\#(Self.time),"distinct_id":"\#(login)","identities":{"$identity_login_id":"\#(login)"\#(cookie)},"properties":{}}"#
        }
        try await RunningServices.run { services in
            // Each upload after the first finds the first's ids in the gateway's cache if it compares canonically.
            for (event, device, login) in [("NFC1", "device-a", nfc), ("NFD2", "device-a", nfd), ("NFC3", nil, nfc), ("NFD4", nil, nfd)] {
                let answer = try await HardeningTests.upload(services, [record(event, device: device, login: login)])
                #expect(answer["stored"] as? Int == 1, "\(answer)")
            }
            let rows = try await TestDatabase.rows(
                services.databaseURL, "SELECT event, user_id::text, encode(convert_to(distinct_id, 'UTF8'), 'hex') FROM analytics.events ORDER BY event")
            #expect(rows.count == 4)
            let users = Dictionary(uniqueKeysWithValues: rows.map { ($0[0]!, $0[1]) })
            #expect(users["NFC1"] != nil && users["NFC1"] == users["NFC3"], "\(rows)")
            #expect(users["NFD2"] != nil && users["NFD2"] == users["NFD4"], "\(rows)")
            #expect(users["NFD2"] != users["NFC1"], "NFD must be another user: \(rows)")
            // Stored as sent: the bytes of each form.
            #expect(rows.map { $0[2] } == ["6a6f73c3a9", "6a6f73c3a9", "6a6f7365cc81", "6a6f7365cc81"])
            let identities = try await TestDatabase.rows(
                services.databaseURL, "SELECT count(DISTINCT user_id)::text FROM identity.identities WHERE key = '$identity_login_id'")
            #expect(identities == [["2"]])
        }
    }

    @Test("profile operations apply with Sensors' meaning, or are refused with a reason in analytics.rejected")
    func profileOperations() async throws {
        var clock = Self.time - 60_000
        func record(_ type: String, _ properties: String) -> String {
            clock += 1_000
            return #"{"type":"\#(type)","time":\#(clock),"distinct_id":"profile-ops","properties":\#(properties)}"#
        }
        let firstRecords = [
            record("profile_set", #"{"age":10,"score":10,"big":1.79e308}"#),
            // Refused by the gateway whatever the profile holds: not a number, not a list of strings.
            record("profile_increment", #"{"age":"5"}"#),
            record("profile_increment", #"{"age":true}"#),
            record("profile_append", #"{"tags":"x"}"#),
            record("profile_append", #"{"tags":[1]}"#),
        ]
        let secondRecords = [
            // Refused for its type: score is a NUMBER profile property (its first value's type).
            record("profile_append", #"{"score":["a"]}"#),
            // Stored, but it does not apply to what the profile holds: the collector says why.
            record("profile_increment", #"{"big":1.79e308}"#),
            // These apply.
            record("profile_increment", #"{"age":1,"visits":2}"#),
            record("profile_append", #"{"tags":["x","y"]}"#),
        ]
        try await RunningServices.run { services in
            let first = try await HardeningTests.upload(services, firstRecords)
            #expect(first["stored"] as? Int == 1 && first["rejected"] as? Int == 4, "\(first)")
            #expect("\(first)".contains("is not a number") && "\(first)".contains("must be a list of strings"), "\(first)")
            let second = try await HardeningTests.upload(services, secondRecords)
            #expect(second["stored"] as? Int == 3 && second["rejected"] as? Int == 1, "\(second)")
            let profile = try await TestDatabase.rows(
                services.databaseURL,
                """
                SELECT properties->>'age', properties->>'score', (properties->>'big')::float8 = 1.79e308, properties->>'visits', properties->>'tags'
                FROM analytics.profiles WHERE distinct_id = 'profile-ops'
                """)
            #expect(profile == [["11", "10", "t", "2", #"["x", "y"]"#]])
            let reasons = try await TestDatabase.rows(
                services.databaseURL,
                "SELECT reason FROM analytics.rejected WHERE reason LIKE '%not applied%' OR reason LIKE 'PROPERTY_WITH_WRONG_TYPE%' ORDER BY reason")
            #expect(
                reasons == [
                    [#"PROPERTY_WITH_WRONG_TYPE: property 'score' is NUMBER; the value ["a"] is LIST"#],
                    ["profile_increment of big not applied: the sum is beyond what a double holds"],
                ])
        }
    }
}
