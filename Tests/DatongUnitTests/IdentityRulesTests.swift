import DatongContracts
import IdentityCore
import Testing

@testable import Identity

@Suite("Identity rules (docs/PROTOCOL.md section 4)")
struct IdentityRulesTests {
    @Test("a signup links the previous anonymous id to the login id")
    func signup() {
        let record = IdentityRecord(project: "p", type: "track_signup", distinctId: "user-123", originalId: "anon-device-abc", lib: "python")
        #expect(
            IdentityRules.identities(of: record) == [
                IdentityKey(key: "$identity_login_id", value: "user-123"),
                IdentityKey(key: "$identity_anonymous_id", value: "anon-device-abc"),
            ])
    }

    @Test(
        "old SDKs' distinct ids are device ids of the lib's kind, and anonymous ids as every SDK's are",
        arguments: [
            ("js", "$identity_cookie_id"), ("iOS", "$identity_idfv"), ("Android", "$identity_android_id"), ("python", "$identity_anonymous_id"),
        ])
    func deviceKinds(lib: String, key: String) {
        let record = IdentityRecord(project: "p", type: "track", distinctId: "d1", lib: lib)
        #expect(Set(IdentityRules.identities(of: record)) == [IdentityKey(key: key, value: "d1"), IdentityKey(key: "$identity_anonymous_id", value: "d1")])
    }

    @Test("$is_login_id makes distinct_id a login id")
    func loginFlag() {
        let record = IdentityRecord(project: "p", type: "profile_set", distinctId: "user-123", isLoginId: true, lib: "python")
        #expect(IdentityRules.identities(of: record) == [IdentityKey(key: "$identity_login_id", value: "user-123")])
    }

    @Test("identities from new SDKs come strongest first")
    func identitiesObject() {
        let record = IdentityRecord(
            project: "p", type: "track", distinctId: "user-123",
            identities: ["$identity_cookie_id": "c1", "$identity_anonymous_id": "c1", "$identity_login_id": "user-123"]
        )
        #expect(IdentityRules.identities(of: record).map(\.key) == ["$identity_login_id", "$identity_anonymous_id", "$identity_cookie_id"])
    }

    @Test("loginWithKey ids are split into their pair")
    func keyedDistinctID() {
        let record = IdentityRecord(project: "p", type: "track", distinctId: "$identity_mobile+13800000000")
        #expect(IdentityRules.identities(of: record) == [IdentityKey(key: "$identity_mobile", value: "13800000000")])
    }

    @Test(
        "illegal values never become identities",
        arguments: ["", "null", "undefined", "0", "-1", "anonymous", "[object Object]", "NaN", "None", "\"null\"", "'undefined'"])
    func illegal(value: String) {
        let record = IdentityRecord(project: "p", type: "track", distinctId: value, lib: "js")
        #expect(IdentityRules.identities(of: record).isEmpty)
        #expect(!IdentityRules.isLegal(value))
    }

    @Test("a batch's repeats are resolved once, but none across an unbind, and a record without a legal id is left out")
    func distinctIdentities() {
        let device = IdentityRecord(project: "p", type: "track", distinctId: "d1", identities: ["$identity_idfv": "d1"], lib: "iOS")
        let login = IdentityRecord(
            project: "p", type: "track_signup", distinctId: "u1", identities: ["$identity_idfv": "d1", "$identity_login_id": "u1"], lib: "iOS")
        let unbind = IdentityRecord(project: "p", type: "track_id_unbind", distinctId: "d1", identities: ["$identity_mobile": "m1"], lib: "iOS")
        let nobody = IdentityRecord(project: "p", type: "track", distinctId: "undefined", lib: "js")
        let batch = [device, login, device, nobody, unbind, device, login, device]
        let entries = DistinctIdentities(batch).entries
        #expect(entries.map(\.positions) == [[0, 2], [1], [4], [5, 7], [6]])
        #expect(entries.map(\.record) == [device, login, unbind, device, login])
    }
}
