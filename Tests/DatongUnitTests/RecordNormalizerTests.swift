import DatongContracts
import DatongJSON
import DatongTestSupport
import Foundation
import Testing

@testable import Gateway

@Suite("Record validation and normalization (docs/PROTOCOL.md section 2)")
struct RecordNormalizerTests {
    let normalizer = RecordNormalizer(limits: UploadLimits(timeWindowPastDays: 36_500))
    let now: Int64 = 1_795_273_200_000

    private func record(_ json: String) throws -> JSONRef {
        try JSONParser.parse(Array(json.utf8), maxDepth: 16).root
    }

    private func normalize(_ json: String, project: String = "default") throws -> Result<NormalizedRecord, RecordRefusal> {
        normalizer.normalize(try record(json), defaultProject: project, now: now)
    }

    private func reason(_ json: String) throws -> String? {
        if case .failure(let rejection) = try normalize(json) { return rejection.reason }
        return nil
    }

    @Test("the Python SDK's track record keeps its meaning")
    func pythonTrack() throws {
        let requests = try Fixtures.python()
        let parameters = FormParameters(query: requests[0].query, body: Array(requests[0].body!.utf8))
        let value = try UploadPayload.records(from: parameters, limits: UploadLimits())[0]
        let normalized = try normalizer.normalize(value, defaultProject: "default", now: now).get()
        #expect(normalized.collect.event == "ViewProduct")
        #expect(normalized.collect.time == 1_795_273_119_736)
        #expect(normalized.collect.distinctId == "user-123")
        #expect(normalized.collect.loginId == "user-123")
        #expect(normalized.collect.lib == "python")
        #expect(normalized.collect.appVersion == "1.2.3")
        #expect(normalized.identity?.isLoginId == true)
        let properties = try #require(try JSONSerialization.jsonObject(with: Data(normalized.collect.properties.utf8)) as? [String: Any])
        #expect(properties["price"] as? Double == 9.9)
        #expect(properties["tags"] as? [String] == ["a", "b"])
        #expect(properties["when"] as? String == "2024-01-02 03:04:05.678")
    }

    @Test("the record's project overrides the request's")
    func projectOverride() throws {
        let result = try normalize(#"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","project":"proj_x"}"#)
        #expect(try result.get().collect.project == "proj_x")
    }

    @Test("times in seconds become milliseconds, and $time wins and is removed")
    func times() throws {
        let seconds = try normalize(#"{"type":"track","event":"E","time":1795273119,"distinct_id":"d"}"#).get()
        #expect(seconds.collect.time == 1_795_273_119_000)
        let override = try normalize(#"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"$time":1795273000000}}"#).get()
        #expect(override.collect.time == 1_795_273_000_000)
        #expect(override.collect.properties == "{}")
    }

    @Test("equal properties give equal text whatever their order")
    func canonicalProperties() throws {
        let a = try normalize(#"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"b":1,"a":"x\"y"}}"#).get()
        let b = try normalize(#"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"a":"x\"y","b":1}}"#).get()
        #expect(a.collect.properties == b.collect.properties)
        #expect(a.collect.properties == #"{"a":"x\"y","b":1}"#)
    }

    @Test("stored keys are in byte order however long the prefix they share, a repeated one keeping its last value")
    func keyOrder() throws {
        let keys = [
            "$screen_height", "$screen_width", "$screen_", "$screen_heightx", "$lib", "$lib_version", "a", "A", "_", "$", "Z9",
            "aaaaaaaa", "aaaaaaaab", "aaaaaaab", "aaaaaaa", "$screen_height",
        ]
        // Every rotation and its reverse: each key comes first, last and between the others.
        let pairs = Array(keys.enumerated())
        let orders = pairs.indices.flatMap { shift in
            let rotated = Array(pairs[shift...] + pairs[..<shift])
            return [rotated, rotated.reversed()]
        }
        for sent in orders {
            let members = sent.map { "\"\($0.element)\":\($0.offset)" }.joined(separator: ",")
            let json = #"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"# + members + "}}"
            // The oracle: byte order of the distinct keys, each with the value sent last.
            var last: [String: Int] = [:]
            for (offset, key) in sent { last[key] = offset }
            let expected = last.keys.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
                .map { "\"\($0)\":\(last[$0]!)" }.joined(separator: ",")
            #expect(try normalize(json).get().collect.properties.text == "{" + expected + "}")
        }
    }

    @Test("implicit event names for signup, bind and unbind")
    func implicitEvents() throws {
        let signup = try normalize(#"{"type":"track_signup","time":1795273119736,"distinct_id":"u","original_id":"a"}"#).get()
        #expect(signup.collect.event == "$SignUp")
        #expect(signup.identity?.originalId == "a")
    }

    @Test("a multi-entity record naming its user at the top and in its properties alike is the one user")
    func userNamedTwiceAlike() throws {
        let profile = try normalize(
            #"{"type":"profile_set","time":1795273119736,"version":"2.0","schema":"users","distinct_id":"a","identities":{"$identity_login_id":"a"},"properties":{"distinct_id":"a","identities":{"$identity_login_id":"a"},"n":1}}"#
        ).get()
        #expect(profile.identity?.identities == ["$identity_login_id": "a"])
        #expect(profile.collect.properties == #"{"n":1}"#)
    }

    @Test("item records have no user", arguments: [#"{"type":"item_set","time":1795273119736,"item_type":"book","item_id":"42","properties":{"name":"x"}}"#])
    func itemRecords(json: String) throws {
        let item = try normalize(json).get()
        #expect(item.identity == nil)
        #expect(item.collect.itemId == "42")
    }

    @Test(
        "invalid records are refused with a reason",
        arguments: [
            (#"[1]"#, "not a JSON object"),
            (#"{"event":"E","time":1795273119736,"distinct_id":"d"}"#, "no type"),
            (#"{"type":"nope","event":"E","time":1795273119736,"distinct_id":"d"}"#, "unknown type"),
            (#"{"type":"track","time":1795273119736,"distinct_id":"d"}"#, "needs an event name"),
            // The multi-entity protocol: each schema with its own types, a user named by identities.
            (#"{"type":"detail_set","time":1795273119736,"id":"d-1","properties":{}}"#, "multi-entity protocol"),
            (#"{"type":"profile_set","time":1795273119736,"version":"2.0","schema":"users","id":12345,"properties":{"a":1}}"#, "Sensors user_id"),
            (
                #"{"type":"track","event":"E","time":1795273119736,"version":"2.0","schema":"users","properties":{"distinct_id":"d"}}"#,
                "schema 'users' holds profile records"
            ),
            (
                #"{"type":"track_id_bind","time":1795273119736,"version":"2.0","schema":"products","properties":{}}"#,
                "an item schema's events are track records"
            ),
            (#"{"type":"item_set","time":1795273119736,"version":"2.0","schema":"products","properties":{}}"#, "needs an id"),
            (
                #"{"type":"item_set","time":1795273119736,"version":"2.0","schema":"products","id":1e21,"properties":{}}"#,
                "is a string or a whole number, not 1e21"
            ),
            (
                #"{"type":"item_set","time":1795273119736,"version":"2.0","schema":"products","id":true,"properties":{}}"#,
                "is a string or a whole number, not true"
            ),
            (#"{"type":"profile_set","time":1795273119736,"version":"2.0","schema":"Users","id":"u","properties":{}}"#, "schema 'Users' is not 'users'"),
            (#"{"type":"track","event":"E","time":1795273119736,"version":"2.0","schema":"EVENTS","properties":{}}"#, "schema 'EVENTS' is not 'events'"),
            (#"{"type":"track","event":"E","time":1795273119736,"version":"2.0","properties":{}}"#, "needs a schema"),
            (#"{"type":"track","event":"E","time":1795273119736,"version":"2.0","schema":"events","properties":{"user_id":12345}}"#, "Sensors user_id"),
            // A user named at the top and in the properties: one user, or the record is refused.
            (
                #"{"type":"profile_set","time":1795273119736,"version":"2.0","schema":"users","distinct_id":"a","identities":{"$identity_login_id":"a"},"properties":{"identities":{"$identity_login_id":"b"}}}"#,
                "its identities and properties.identities differ"
            ),
            (
                #"{"type":"profile_set","time":1795273119736,"version":"2.0","schema":"users","distinct_id":"a","properties":{"distinct_id":"b"}}"#,
                "distinct_id 'a' and properties.distinct_id 'b'"
            ),
            (
                #"{"type":"track","event":"E","time":1795273119736,"version":"2.0","schema":"events","distinct_id":7,"properties":{"distinct_id":"8"}}"#,
                "names two users"
            ),
            (#"{"type":"track","event":"E","distinct_id":"d"}"#, "no numeric time"),
            (#"{"type":"track","event":"E","time":1795273119736}"#, "no distinct_id"),
            (#"{"type":"track","event":"1E","time":1795273119736,"distinct_id":"d"}"#, "event name"),
            (#"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"user_id":1}}"#, "reserved"),
            (#"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"User_Tag_x":1}}"#, "reserved"),
            (#"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"a-b":1}}"#, "names start"),
            (#"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"o":{"x":1}}}"#, "objects are not allowed"),
            // Only PHP's DateTime shape, exactly, is a date-time.
            (
                #"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"o":{"date":"2026-11-21 09:10:11.456789","timezone_type":3,"timezone":"UTC","x":1}}}"#,
                "objects are not allowed"
            ),
            (
                #"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"o":{"date":"2026-11-21T09:10:11.456789","timezone_type":3,"timezone":"UTC"}}}"#,
                "objects are not allowed"
            ),
            (
                #"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"o":{"date":"2026-11-21 09:10:11.456789","date":"x","timezone":"UTC"}}}"#,
                "objects are not allowed"
            ),
            (#"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"l":[1]}}"#, "lists may only hold strings"),
            (#"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"s":"a\u0000b"}}"#, "NUL"),
            (#"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","project":"no-dash"}"#, "project"),
            (#"{"type":"track","event":"E","time":4102444800000,"distinct_id":"d"}"#, "in the future"),
            (#"{"type":"item_set","time":1795273119736,"item_type":"book"}"#, "item_id"),
            // Every text stored in its own column is checked, not only properties: PostgreSQL refuses NUL.
            (#"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","lib":{"$lib":"js\u0000"}}"#, "lib.$lib contains a NUL"),
            (#"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","anonymous_id":"a\u0000"}"#, "anonymous_id contains a NUL"),
            (
                #"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","identities":{"$identity_cookie_id":"c\u0000"}}"#,
                "identity '$identity_cookie_id' contains a NUL"
            ),
            (#"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","identities":{"bad key":"c"}}"#, "identity key"),
            (
                #"{"type":"track_signup","time":1795273119736,"distinct_id":"u","original_id":"\#(String(repeating: "x", count: 256))"}"#,
                "original_id is 256 characters long; the limit is 255 characters"
            ),
            (
                #"{"type":"track","event":"E","time":1795273119736,"distinct_id":"\#(String(repeating: "x", count: 256))"}"#,
                "distinct_id is 256 characters long; the limit is 255 characters"
            ),
        ])
    func refused(json: String, expected: String) throws {
        let reason = try #require(try reason(json))
        #expect(reason.contains(expected), "\(reason)")
    }

    @Test("a length counted from UTF-8 bytes is Java's and JavaScript's: UTF-16 units")
    func utf16Lengths() {
        var generator = SystemRandomNumberGenerator()
        let samples: [Character] = ["x", "é", "中", "😀", "\u{0301}", "𠀀", "\u{7F}", "ß"]
        for _ in 0..<200 {
            var text = String((0..<Int.random(in: 0...40, using: &generator)).map { _ in samples.randomElement(using: &generator)! })
            let counted = text.withUTF8 { TextLength.utf16Count(utf8: $0) }
            #expect(counted == text.utf16.count, "\(text)")
        }
    }

    @Test("strings are counted as the SDKs count them: in characters (UTF-16 units), with a byte ceiling of their own")
    func lengthsInCharacters() throws {
        let normalizer = RecordNormalizer(limits: UploadLimits())
        func reason(_ value: String) throws -> String? {
            let json = #"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"s":"\#(value)"}}"#
            guard case .failure(let rejection) = normalizer.normalize(try record(json), defaultProject: "default", now: now) else { return nil }
            return rejection.reason
        }
        // What the Java SDK keeps of a longer string: its first 8192 characters (SensorsAnalyticsUtil).
        #expect(try reason(String(repeating: "x", count: 8192)) == nil)
        // 3,000 Chinese characters are 9,000 bytes: legal for every SDK.
        #expect(try reason(String(repeating: "中", count: 3000)) == nil)
        #expect(try reason(String(repeating: "中", count: 8192)) == nil)
        // An emoji is two UTF-16 units, as Java and JavaScript count it.
        #expect(try reason(String(repeating: "😀", count: 4096)) == nil)
        #expect(try reason(String(repeating: "😀", count: 4097))?.contains("8194 characters long; the limit is 8192 characters") == true)
        #expect(try reason(String(repeating: "x", count: 8193))?.contains("8193 characters long") == true)
        // An escaped string is counted after unescaping.
        let escaped =
            #"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"s":"\#(String(repeating: #"\u4e2d"#, count: 8192))"}}"#
        guard case .success = normalizer.normalize(try record(escaped), defaultProject: "default", now: now) else {
            Issue.record("8192 escaped characters were refused")
            return
        }
        // The byte ceiling holds on its own.
        let ceiling = RecordNormalizer(limits: UploadLimits(maxStringBytes: 1000))
        let json = #"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"s":"\#(String(repeating: "中", count: 400))"}}"#
        guard case .failure(let rejection) = ceiling.normalize(try record(json), defaultProject: "default", now: now) else {
            Issue.record("a string over the byte ceiling was accepted")
            return
        }
        #expect(rejection.reason.contains("1200 bytes long; the limit is 1000 bytes"), "\(rejection.reason)")
        // Ids count characters too: 255 Chinese characters (765 bytes) are an id.
        let id = String(repeating: "中", count: 255)
        let withID = #"{"type":"track","event":"E","time":1795273119736,"distinct_id":"\#(id)","identities":{"$identity_login_id":"\#(id)"}}"#
        guard case .success = normalizer.normalize(try record(withID), defaultProject: "default", now: now) else {
            Issue.record("an id of 255 characters was refused")
            return
        }
    }

    @Test(
        "records over a limit are refused with the limit named: too old, a string too long, too many properties",
        arguments: [
            (UploadLimits(timeWindowPastDays: 1), #"{"type":"track","event":"E","time":1795100400000,"distinct_id":"d"}"#, "days in the past"),
            (
                UploadLimits(maxStringLength: 16, timeWindowPastDays: 36_500),
                #"{"type":"track","event":"E","time":1795273200000,"distinct_id":"d","properties":{"s":"xxxxxxxxxxxxxxxxx"}}"#,
                "17 characters long; the limit is 16 characters"
            ),
            (
                UploadLimits(maxPropertiesPerRecord: 2, timeWindowPastDays: 36_500),
                #"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"a":1,"b":2,"c":3}}"#,
                "3 properties; the limit is 2"
            ),
        ])
    func overLimits(limits: UploadLimits, json: String, reason: String) throws {
        guard case .failure(let rejection) = RecordNormalizer(limits: limits).normalize(try record(json), defaultProject: "default", now: now) else {
            Issue.record("a record over a limit was accepted")
            return
        }
        #expect(rejection.reason.contains(reason), "\(rejection.reason)")
    }

    @Test("stored properties are the ones sent: escapes resolved, a repeated key's last value, numbers as written")
    func storedText() throws {
        let json =
            #"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","properties":{"#
            + #""b":"first","s":"\u0041\/x\ttab","a":1,"b":"last","n":1e3,"big":12345678901234567890,"l":["\u00e9","x"],"z":null}}"#
        let normalized = try normalize(json).get()
        #expect(
            normalized.collect.properties
                == #"{"a":1,"b":"last","big":12345678901234567890,"l":["é","x"],"n":1e3,"s":"A/x\ttab","z":null}"#)
    }

    @Test("every fixture record's stored properties mean what the SDK sent")
    func fixturesKeepTheirProperties() throws {
        var records: [JSONRef] = []
        for request in try Fixtures.python() {
            records += try UploadPayload.records(from: FormParameters(query: request.query, body: Array((request.body ?? "").utf8)), limits: UploadLimits())
        }
        for emission in try Fixtures.javascript() {
            guard case .text(let message) = emission.payload, emission.kind == "android.sensorsdata_track" else { continue }
            records.append(try record(message))
        }
        var compared = 0
        for record in records {
            guard case .success(let normalized) = normalizer.normalize(record, defaultProject: "default", now: now) else { continue }
            let sent = try JSONSerialization.jsonObject(with: Data((record["properties"]?.rawText ?? "{}").utf8)) as? NSDictionary
            let stored = try JSONSerialization.jsonObject(with: Data(normalized.collect.properties.utf8)) as? NSDictionary
            let expected = sent?.mutableCopy() as? NSMutableDictionary
            expected?.removeObject(forKey: "$time")
            expected?.removeObject(forKey: "$is_login_id")
            // Date-times get 3 millisecond digits, read as the sending SDK means them (tested on their own below).
            let style = RecordNormalizer.DateTimeStyle(lib: record["lib"]?["$lib"]?.stringValue)
            for case (let key as String, let text as String) in sent ?? [:] {
                if let padded = RecordNormalizer.normalizedDateTime(Array(text.utf8), style: style) {
                    expected?.setObject(String(decoding: padded, as: UTF8.self), forKey: key as NSString)
                }
            }
            #expect(stored == expected, "\(normalized.collect.properties)")
            compared += 1
        }
        #expect(compared >= 10)
    }

    @Test("the Ruby SDK's own date-times are stored as the times it was given")
    func rubyFixtureTimes() throws {
        // capture.rb sends Time values of 600 ms, 60 ms, 4 ms and whole seconds past 22:58:39.
        let request = try #require(try Fixtures.ruby().first)
        let records = try UploadPayload.records(
            from: FormParameters(query: request.query, body: Array((request.body ?? "").utf8)), limits: UploadLimits())
        let normalized = try #require(records.first.map { normalizer.normalize($0, defaultProject: "default", now: now) })
        guard case .success(let stored) = normalized else {
            Issue.record("the Ruby SDK's record was refused: \(normalized)")
            return
        }
        let properties = try #require(try JSONSerialization.jsonObject(with: Data(stored.collect.properties.utf8)) as? [String: Any])
        #expect(properties["ms600"] as? String == "2026-11-21 22:58:39.600")
        #expect(properties["ms60"] as? String == "2026-11-21 22:58:39.060")
        #expect(properties["ms4"] as? String == "2026-11-21 22:58:39.004")
        #expect(properties["ms0"] as? String == "2026-11-21 22:58:39.000")
    }

    @Test("a refused record is kept exactly as it was sent")
    func rejectedRaw() throws {
        let bad = #"{ "type" : "track", "event": "Bad", "time":1795273119736, "distinct_id":"d", "properties": {"user_id": 1} }"#
        let payload = Array("[\(bad)]".utf8)
        let body = "data_list=" + Data(payload).base64EncodedString().addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let upload = try PreparedUpload(query: nil, body: Array(body.utf8), limits: UploadLimits(timeWindowPastDays: 36_500), now: now)
        #expect(upload.accepted.isEmpty)
        #expect(upload.rejected.map(\.raw) == [bad])
        #expect(upload.problems.map(\.index) == [0])
    }

    @Test(
        "date-times keep the meaning their SDK gave them, stored with 3 millisecond digits",
        arguments: [
            // JS pads the millisecond count to 2 digits, Python not at all: the fraction is a count.
            ("js", "2024-01-02 03:04:05.06", "2024-01-02 03:04:05.006"),
            ("js", "2024-01-02 03:04:05.60", "2024-01-02 03:04:05.060"),
            ("python", "2024-01-02 03:04:05.6", "2024-01-02 03:04:05.006"),
            ("python", "2024-01-02 03:04:05.67", "2024-01-02 03:04:05.067"),
            // Ruby writes the count unpadded too: `.60` is 60 ms, `.4` is 4 ms, `.0` whole seconds.
            ("Ruby", "2026-11-21 22:58:39.60", "2026-11-21 22:58:39.060"),
            ("Ruby", "2026-11-21 22:58:39.4", "2026-11-21 22:58:39.004"),
            ("Ruby", "2026-11-21 22:58:39.600", "2026-11-21 22:58:39.600"),
            ("Ruby", "2026-11-21 22:58:39.0", "2026-11-21 22:58:39.000"),
            // PHP writes `.0` whatever the time (`format("Y-m-d H:i:s.0")`), C++ three digits (`%03d`).
            ("php", "2026-11-21 22:58:39.0", "2026-11-21 22:58:39.000"),
            ("cpp", "2026-11-21 22:58:39.004", "2026-11-21 22:58:39.004"),
            // Go trims trailing zeros of a decimal fraction, and writes whole seconds without one.
            ("Golang", "2026-11-20 08:30:15.67", "2026-11-20 08:30:15.670"),
            ("Golang", "2026-11-20 08:30:15.6", "2026-11-20 08:30:15.600"),
            ("Golang", "2026-11-20 08:30:15.006", "2026-11-20 08:30:15.006"),
            ("Golang", "2026-11-20 08:30:15", "2026-11-20 08:30:15.000"),
            // Java, Android and iOS always write three digits.
            ("Android", "2024-01-02 03:04:05.600", "2024-01-02 03:04:05.600"),
            ("js", "2024-01-02 03:04:05.600", "2024-01-02 03:04:05.600"),
            ("js", "2024-01-02 03:04:05", "2024-01-02 03:04:05.000"),
            ("js", "2024-01-02", "2024-01-02"),
            ("js", "2024-01-02 03:04:05.x6", "2024-01-02 03:04:05.x6"),
            ("js", "2024-01-02 03:04:05.", "2024-01-02 03:04:05."),
        ])
    func dateTimes(lib: String, sent: String, stored: String) throws {
        let json = #"{"type":"track","event":"E","time":1795273119736,"distinct_id":"d","lib":{"$lib":"\#(lib)"},"properties":{"at":"\#(sent)"}}"#
        let normalized = try normalize(json).get()
        #expect(normalized.collect.properties.text == #"{"at":"\#(stored)"}"#)
    }
}
