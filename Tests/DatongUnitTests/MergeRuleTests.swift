import DatongContracts
import IdentityCore
import Testing

@testable import Identity

/// The merge rule without PostgreSQL: what a record changes, given what the graph looks like to it.
/// (IdentityGraphTests runs the same rules through the store on a real database.)
@Suite("merge rule: what one record changes in the identity graph")
struct MergeRuleTests {
    static let login = "$identity_login_id"
    static let idfv = "$identity_idfv"
    static let anonymous = "$identity_anonymous_id"
    static let cookie = "$identity_cookie_id"
    static let mobile = "$identity_mobile"

    static func plan(_ identities: [String: String], type: String = "track") -> IdentityPlan {
        IdentityRules.plan(
            for: IdentityRecord(project: "p", type: type, distinctId: identities.values.sorted()[0], identities: identities, lib: "iOS"))
    }

    static func key(_ key: String, _ value: String) -> IdentityKey { IdentityKey(key: key, value: value) }

    static func note(_ kind: String, user: Int64?, other: Int64? = nil, _ identity: IdentityKey?, _ reason: String) -> GraphChange {
        .note(GraphNote(kind: kind, user: user, other: other, identity: identity, reason: reason))
    }

    typealias Decided = (user: Int64?, changes: [GraphChange])

    /// Runs the whole rule as `GraphTransaction` does; `newUser` is the id a new user would get.
    static func decide(_ plan: IdentityPlan, _ view: GraphView, newUser: Int64 = 99, strict: Bool = false) throws(GraphRefusal) -> Decided {
        guard MergeRule.needs(plan, owner: { view.owners[$0] }) != nil else { return (plan.identities.lazy.compactMap { view.owners[$0] }.first, []) }
        switch MergeRule.start(plan, in: view) {
        case .finished(let user, let changes): return (user, changes)
        case .attach(let user): return (user ?? newUser, try MergeRule.attach(plan, to: user ?? newUser, in: view, strict: strict))
        }
    }

    @Test("a returning device changes nothing and needs no lock; a new id is linked to the owner of the others")
    func returningDevice() throws {
        let plan = Self.plan([Self.idfv: "D1", Self.anonymous: "A1"])
        let view = GraphView(owners: [Self.key(Self.idfv, "D1"): 1, Self.key(Self.anonymous, "A1"): 1])
        #expect(MergeRule.needs(plan, owner: { view.owners[$0] }) == nil)
        #expect(try Self.decide(plan, view).user == 1)

        let withCookie = Self.plan([Self.idfv: "D1", Self.anonymous: "A1", Self.cookie: "C1"])
        let needs = try #require(MergeRule.needs(withCookie, owner: { view.owners[$0] }))
        #expect(needs.link == [Self.key(Self.cookie, "C1")] && needs.users == [1])
        let decided = try Self.decide(withCookie, view)
        #expect(decided.user == 1 && decided.changes == [.link(Self.key(Self.cookie, "C1"))])
    }

    @Test("nobody owns any of a record's ids: a new user gets them all")
    func newDevice() throws {
        let plan = Self.plan([Self.idfv: "D1", Self.anonymous: "A1"])
        #expect(MergeRule.start(plan, in: GraphView()) == .attach(user: nil))
        let decided = try Self.decide(plan, GraphView(), newUser: 7)
        #expect(decided.user == 7 && decided.changes == [.link(Self.key(Self.idfv, "D1")), .link(Self.key(Self.anonymous, "A1"))])
    }

    @Test("a signup merges the device's anonymous user into the login's user, once for all the ids it owned")
    func signupMerges() throws {
        let plan = Self.plan([Self.login: "alice", Self.idfv: "D1", Self.anonymous: "A1"], type: "track_signup")
        let view = GraphView(
            owners: [Self.key(Self.login, "alice"): 1, Self.key(Self.idfv, "D1"): 2, Self.key(Self.anonymous, "A1"): 2],
            logins: [1: [Self.login: "alice"], 2: [:]])
        let decided = try Self.decide(plan, view)
        #expect(decided.user == 1)
        #expect(decided.changes == [.merge(from: 2, reason: "$identity_idfv=D1 belonged to user 2")])
    }

    @Test("a first login on an anonymous device goes to the device's user")
    func firstLogin() throws {
        let plan = Self.plan([Self.login: "alice", Self.idfv: "D1"])
        let view = GraphView(owners: [Self.key(Self.idfv, "D1"): 2], logins: [2: [:]])
        let decided = try Self.decide(plan, view)
        #expect(decided.user == 2 && decided.changes == [.link(Self.key(Self.login, "alice"))])
    }

    @Test("a new login on a device whose user has another one is a new person; the device stays, the clash is recorded")
    func sharedPhone() throws {
        let plan = Self.plan([Self.login: "carol", Self.idfv: "D-alice"], type: "track_signup")
        let view = GraphView(owners: [Self.key(Self.idfv, "D-alice"): 1], logins: [1: [Self.login: "alice"]])
        #expect(MergeRule.start(plan, in: view) == .attach(user: nil))
        let decided = try Self.decide(plan, view, newUser: 5)
        #expect(decided.user == 5)
        let clash = "user 5 has $identity_login_id=carol and user 1 has $identity_login_id=alice: two people, not merged"
        #expect(decided.changes == [.link(Self.key(Self.login, "carol")), Self.note("conflict", user: 5, other: 1, Self.key(Self.idfv, "D-alice"), clash)])
        // Through the API the same link is refused outright, before anything changes.
        #expect(throws: GraphRefusal.self) { try Self.decide(plan, view, newUser: 5, strict: true) }
    }

    @Test("a merged user's login keys count for the next clash in the same record")
    func mergedLoginsCount() throws {
        let plan = Self.plan([Self.login: "L", Self.idfv: "D2", Self.cookie: "C3"])
        let view = GraphView(
            owners: [Self.key(Self.login, "L"): 1, Self.key(Self.idfv, "D2"): 2, Self.key(Self.cookie, "C3"): 3],
            logins: [1: [Self.login: "L"], 2: [Self.mobile: "111"], 3: [Self.mobile: "222"]])
        let decided = try Self.decide(plan, view)
        #expect(decided.user == 1)
        guard decided.changes.count == 2, case .note(let note) = decided.changes[1] else {
            Issue.record("expected a merge and a conflict: \(decided.changes)")
            return
        }
        #expect(decided.changes[0] == .merge(from: 2, reason: "$identity_idfv=D2 belonged to user 2"))
        #expect(note.kind == "conflict" && note.user == 1 && note.other == 3 && note.reason.contains("$identity_mobile=111"))
    }

    @Test("a login id a user already has another value of is not linked to it")
    func secondLoginValue() throws {
        let plan = Self.plan([Self.idfv: "D1", Self.mobile: "222"])
        let view = GraphView(owners: [Self.key(Self.idfv, "D1"): 1], logins: [1: [Self.mobile: "111"]])
        // The mobile number is the record's strongest id and nobody has it; the device's user already has another one.
        #expect(MergeRule.start(plan, in: view) == .attach(user: nil))
        let decided = try Self.decide(plan, view, newUser: 4)
        #expect(decided.changes.first == .link(Self.key(Self.mobile, "222")))
        let onOwner = try MergeRule.attach(plan, to: 1, in: view, strict: false)
        let reason = "user 1 already has $identity_mobile=111; $identity_mobile=222 is not linked to it"
        #expect(onOwner == [Self.note("conflict", user: 1, Self.key(Self.mobile, "222"), reason)])
    }

    @Test("$BindID links a new key but takes no cookie id from another user")
    func bind() throws {
        let plan = Self.plan([Self.login: "dan", Self.mobile: "138", Self.cookie: "C-web"], type: "track_id_bind")
        let view = GraphView(owners: [Self.key(Self.login, "dan"): 1, Self.key(Self.cookie, "C-web"): 2], logins: [1: [Self.login: "dan"], 2: [:]])
        let decided = try Self.decide(plan, view)
        #expect(decided.user == 1)
        let refusal = "a $BindID cannot take $identity_cookie_id from user 2"
        #expect(decided.changes == [.link(Self.key(Self.mobile, "138")), Self.note("refused", user: 1, other: 2, Self.key(Self.cookie, "C-web"), refusal)])
    }

    @Test("$UnbindID detaches its one pair, links nothing, and a forbidden one is only recorded")
    func unbind() throws {
        let pair = Self.key(Self.mobile, "138")
        let bound = try Self.decide(Self.plan([Self.mobile: "138"], type: "track_id_unbind"), GraphView(owners: [pair: 3]))
        #expect(bound.user == 3 && bound.changes == [.unbind(pair, from: 3)])

        let unbound = try Self.decide(Self.plan([Self.mobile: "138"], type: "track_id_unbind"), GraphView())
        #expect(
            unbound.user == nil
                && unbound.changes == [Self.note("refused", user: nil, pair, "$identity_mobile=138 is not bound to anyone")])

        // Naming a login id and two pairs: nothing is detached and nothing linked, though nobody owns them.
        let refused = try Self.decide(Self.plan([Self.login: "erin", Self.mobile: "1", "$identity_email": "e"], type: "track_id_unbind"), GraphView())
        #expect(refused.user == nil)
        #expect(refused.changes.allSatisfy { if case .note(let note) = $0 { note.kind == "refused" } else { false } })
        #expect(refused.changes.count == 2)
    }
}
