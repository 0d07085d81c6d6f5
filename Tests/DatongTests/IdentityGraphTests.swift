import DatongContracts
import DatongPostgres
import Foundation
import IdentityCore
import Synchronization
import Testing

@testable import Collector
@testable import Identity

/// The identity graph's rules on a real PostgreSQL: guards, conflicts, binds and unbinds, merges
/// and their undo, and the cache's freshness across replicas.
@Suite("identity graph: guards, merges, undo, unbind, cache")
struct IdentityGraphTests {
    /// A fresh database with identity-service's schema, and a store on it (no cache).
    static func withStore(_ body: @escaping @Sendable (PostgresIdentityStore, String) async throws -> Void) async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: IdentitySchema.name, migrations: IdentitySchema.migrations, pool: pool, logger: TestDatabase.logger)
            try await body(PostgresIdentityStore(pool: pool), url)
        }
    }

    static func record(_ type: String = "track", _ identities: [String: String], distinct: String? = nil, original: String? = nil) -> IdentityRecord {
        IdentityRecord(
            project: "default", type: type, distinctId: distinct ?? identities.values.sorted().first ?? "", originalId: original,
            identities: identities, lib: "iOS"
        )
    }

    static func user(_ store: PostgresIdentityStore, _ identities: [String: String], type: String = "track") async throws -> Int64? {
        try await store.resolve([record(type, identities)], requestID: "test").first?.userId
    }

    static func owner(_ store: PostgresIdentityStore, _ key: String, _ value: String) async throws -> Int64? {
        try await store.owner(project: "default", identity: IdentityKey(key: key, value: value))
    }

    static let login = "$identity_login_id"
    static let idfv = "$identity_idfv"
    static let anonymous = "$identity_anonymous_id"
    static let cookie = "$identity_cookie_id"

    @Test("illegal ids link nothing: the record gets no user and the graph stays empty")
    func illegalValues() async throws {
        try await Self.withStore { store, url in
            let users = try await store.resolve([
                Self.record("track", ["$identity_cookie_id": "undefined", "$identity_login_id": "null"]),
                Self.record("track", ["$identity_anonymous_id": "[object Object]", "$identity_idfv": "00000000"]),
            ])
            #expect(users[0].userId == nil)
            let kept = try #require(users[1].userId)
            #expect(try await TestDatabase.rows(url, "SELECT key, value, user_id FROM identity.identities") == [[Self.idfv, "00000000", String(kept)]])
        }
    }

    @Test("a signup folds the anonymous user into the login user it names, records why, and the undo restores both")
    func signupMergeAndUndo() async throws {
        try await Self.withStore { store, url in
            let phone = try #require(try await Self.user(store, [Self.idfv: "D1", Self.anonymous: "A1"]))
            let laptop = try #require(try await Self.user(store, [Self.login: "alice", Self.cookie: "C1"]))
            #expect(phone != laptop)
            // The phone's user logs in as alice: the phone's anonymous user joins alice's user.
            let signup = IdentityRecord(
                project: "default", type: "track_signup", distinctId: "alice", originalId: "A1",
                identities: [Self.idfv: "D1", Self.anonymous: "A1", Self.login: "alice"], lib: "iOS"
            )
            #expect(try await store.resolve([signup], requestID: "req-7").first?.userId == laptop)
            #expect(try await Self.owner(store, Self.idfv, "D1") == laptop)
            #expect(try await Self.user(store, [Self.anonymous: "A1"]) == laptop)

            let history = try #require(try await store.history(project: "default", user: laptop))
            let merge = try #require(history.merges.first)
            #expect(history.merges.count == 1)
            #expect(merge.fromUser == phone && merge.intoUser == laptop)
            #expect(Set(merge.identities) == [IdentityPair(key: Self.idfv, value: "D1"), IdentityPair(key: Self.anonymous, value: "A1")])
            #expect(merge.actor == "gateway")
            #expect(merge.cause == ChangeCause(requestId: "req-7", record: 0, type: "track_signup", distinctId: "alice"))
            #expect(
                try await TestDatabase.rows(url, "SELECT user_id, canonical_user_id FROM analytics.user_canonical")
                    == [[String(phone), String(laptop)]])
            let merged = try #require(try await store.user(project: "default", id: phone))
            #expect(merged.canonicalUserId == laptop && merged.mergedInto == laptop && merged.identities.isEmpty)

            let undone = try await store.undo(project: "default", mergeID: merge.mergeId, cause: .api("undo", actor: "ops:li", requestID: "r"))
            #expect(undone.undoneBy == "ops:li" && undone.undoneAt != nil)
            #expect(try await Self.owner(store, Self.idfv, "D1") == phone)
            #expect(try await Self.owner(store, Self.anonymous, "A1") == phone)
            #expect(try await Self.owner(store, Self.login, "alice") == laptop)
            #expect(try await TestDatabase.rows(url, "SELECT count(*) FROM analytics.user_canonical") == [["0"]])
            let restored = try #require(try await store.user(project: "default", id: phone))
            #expect(restored.mergedInto == nil && restored.canonicalUserId == phone)
            await #expect(throws: GraphRefusal.self) {
                try await store.undo(project: "default", mergeID: merge.mergeId, cause: .api("undo", actor: nil, requestID: "r"))
            }
        }
    }

    @Test(
        "a returning user's new phone joins the user when it logs in, whichever official SDK's device id it has",
        arguments: [
            "$identity_idfv", "$identity_android_id", "$identity_mp_id", "$identity_ali_mp_id", "$identity_byte_mp_id", "$identity_taobao_uuid",
        ])
    func newPhoneJoinsUser(deviceKey: String) async throws {
        try await Self.withStore { store, url in
            // Phone 1 logs in as erin; phone 2 is used anonymously, then logs in as erin too (what the
            // mini program sends: its device id and anonymous id are the same UUID).
            let first = try #require(try await Self.user(store, [deviceKey: "P1", Self.anonymous: "P1"]))
            #expect(try await Self.user(store, [deviceKey: "P1", Self.anonymous: "P1", Self.login: "erin"], type: "track_signup") == first)
            let second = try #require(try await Self.user(store, [deviceKey: "P2", Self.anonymous: "P2"]))
            #expect(second != first)
            #expect(try await Self.user(store, [deviceKey: "P2", Self.anonymous: "P2", Self.login: "erin"], type: "track_signup") == first)
            // The second phone's earlier events now belong to erin's user.
            #expect(try await Self.owner(store, deviceKey, "P2") == first)
            #expect(try await TestDatabase.rows(url, "SELECT from_user::text, into_user::text FROM identity.merges") == [[String(second), String(first)]])
        }
    }

    @Test("two users holding different login ids are never merged: the record goes to its login's user and the conflict is recorded")
    func loginConflict() async throws {
        try await Self.withStore { store, url in
            let alice = try #require(try await Self.user(store, [Self.login: "alice", Self.idfv: "D-alice"]))
            let bob = try #require(try await Self.user(store, [Self.login: "bob", Self.idfv: "D-bob"]))
            // alice uses bob's phone while logged in.
            #expect(try await Self.user(store, [Self.login: "alice", Self.idfv: "D-bob"]) == alice)
            #expect(try await Self.owner(store, Self.idfv, "D-bob") == bob)
            #expect(try await TestDatabase.rows(url, "SELECT count(*) FROM identity.merges") == [["0"]])
            let entries = try #require(try await store.history(project: "default", user: alice)).entries
            let conflict = try #require(entries.first { $0.kind == "conflict" })
            #expect(conflict.userId == alice && conflict.otherUser == bob)
            #expect(conflict.reason.contains("alice") && conflict.reason.contains("bob"), "\(conflict.reason)")

            // carol signs up on alice's phone: a new user for carol, the phone stays alice's.
            let carol = try #require(try await Self.user(store, [Self.login: "carol", Self.idfv: "D-alice"], type: "track_signup"))
            #expect(carol != alice && carol != bob)
            #expect(try await Self.owner(store, Self.idfv, "D-alice") == alice)
            #expect(try await Self.owner(store, Self.login, "carol") == carol)

            // Through the API a link that would merge two logins is refused outright.
            await #expect(throws: GraphRefusal.self) {
                try await store.link(
                    project: "default", identities: [Self.login: "bob", "$identity_email": "x@example.com", Self.idfv: "D-alice"],
                    cause: .api("link", actor: nil, requestID: "r"))
            }
            #expect(try await Self.owner(store, "$identity_email", "x@example.com") == nil)
        }
    }

    @Test("$BindID links a new key but cannot take a cookie id from another user; $UnbindID detaches only its pair")
    func bindAndUnbind() async throws {
        try await Self.withStore { store, url in
            let user = try #require(try await Self.user(store, [Self.anonymous: "A1", Self.login: "dan"]))
            let web = try #require(try await Self.user(store, [Self.cookie: "C-web"]))
            #expect(try await Self.user(store, [Self.anonymous: "A1", Self.login: "dan", "$identity_mobile": "13800000000"], type: "track_id_bind") == user)
            #expect(try await Self.owner(store, "$identity_mobile", "13800000000") == user)
            #expect(try await Self.user(store, [Self.anonymous: "A1", Self.login: "dan", Self.cookie: "C-web"], type: "track_id_bind") == user)
            #expect(try await Self.owner(store, Self.cookie, "C-web") == web, "a $BindID took a cookie id")
            let refusals = try #require(try await store.history(project: "default", user: user)).entries
            #expect(refusals.contains { $0.kind == "refused" && $0.key == Self.cookie })

            // Unbinding the mobile number detaches it alone; the next record with it makes a new user.
            #expect(try await Self.user(store, ["$identity_mobile": "13800000000"], type: "track_id_unbind") == user)
            #expect(try await Self.owner(store, "$identity_mobile", "13800000000") == nil)
            #expect(try await Self.owner(store, Self.login, "dan") == user)
            #expect(try await Self.owner(store, Self.anonymous, "A1") == user)
            let unbinds = try await TestDatabase.rows(url, "SELECT key, value, user_id FROM identity.history WHERE kind = 'unbind'")
            #expect(unbinds == [["$identity_mobile", "13800000000", String(user)]])
            let again = try #require(try await Self.user(store, ["$identity_mobile": "13800000000"]))
            #expect(again != user)

            // Login and anonymous ids cannot be unbound.
            #expect(try await Self.user(store, [Self.login: "dan"], type: "track_id_unbind") == user)
            #expect(try await Self.owner(store, Self.login, "dan") == user)
            // An unbind that detaches nothing links nothing either, not even an id nobody owns.
            #expect(try await Self.user(store, [Self.login: "erin", "$identity_mobile": "1", "$identity_email": "e"], type: "track_id_unbind") == nil)
            #expect(try await Self.owner(store, Self.login, "erin") == nil)
            #expect(try await Self.owner(store, "$identity_mobile", "1") == nil)
            await #expect(throws: GraphRefusal.self) {
                try await store.unbind(
                    project: "default", identity: IdentityKey(key: Self.anonymous, value: "A1"), cause: .api("unbind", actor: nil, requestID: "r"))
            }
        }
    }

    @Test("an undo puts back a chain of merges one at a time, newest first")
    func undoChain() async throws {
        try await Self.withStore { store, url in
            let k = try #require(try await Self.user(store, [Self.cookie: "K"]))
            let a = try #require(try await Self.user(store, [Self.idfv: "A"]))
            let b = try #require(try await Self.user(store, [Self.login: "bea"]))
            let first = try await store.merge(project: "default", from: k, into: a, cause: .api("merge", actor: "ops", requestID: "r"))
            let second = try await store.merge(project: "default", from: a, into: b, cause: .api("merge", actor: "ops", requestID: "r"))
            #expect(
                try await TestDatabase.rows(url, "SELECT user_id, canonical_user_id FROM identity.user_map ORDER BY user_id")
                    == [[String(k), String(b)], [String(a), String(b)]].sorted { Int($0[0]!)! < Int($1[0]!)! })
            #expect(try await Self.owner(store, Self.cookie, "K") == b)

            // The first merge's survivor was merged since: that one must be undone first.
            do {
                _ = try await store.undo(project: "default", mergeID: first.mergeId, cause: .api("undo", actor: nil, requestID: "r"))
                Issue.record("an undo under a later merge went through")
            } catch let refusal as GraphRefusal {
                #expect(refusal.code == .mergedSince)
            }
            _ = try await store.undo(project: "default", mergeID: second.mergeId, cause: .api("undo", actor: nil, requestID: "r"))
            #expect(try await TestDatabase.rows(url, "SELECT user_id, canonical_user_id FROM identity.user_map") == [[String(k), String(a)]])
            #expect(try await Self.owner(store, Self.cookie, "K") == a)
            #expect(try await Self.owner(store, Self.idfv, "A") == a)
            _ = try await store.undo(project: "default", mergeID: first.mergeId, cause: .api("undo", actor: nil, requestID: "r"))
            #expect(try await Self.owner(store, Self.cookie, "K") == k)
            #expect(try await TestDatabase.rows(url, "SELECT count(*) FROM identity.user_map") == [["0"]])
        }
    }

    @Test("known identities resolve from memory, and a merge made through another replica is seen within the refresh interval")
    func cacheAcrossReplicas() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { poolA in
            try await TestDatabase.withPool(url) { poolB in
                try await Migrator.migrate(schema: IdentitySchema.name, migrations: IdentitySchema.migrations, pool: poolA, logger: TestDatabase.logger)
                let interval = Duration.milliseconds(200)
                let cacheB = IdentityCache(capacity: 1000, maxStaleness: .seconds(60))  // only the refresher can make B look again
                let refresherB = CacheFeed(cache: cacheB, source: PostgresInvalidationLog(pool: poolB), interval: interval, logger: TestDatabase.logger)
                let replicaA = PostgresIdentityStore(pool: poolA)
                let replicaB = PostgresIdentityStore(pool: poolB, cache: cacheB)
                try await refresherB.refresh()

                let web = try #require(try await Self.user(replicaB, [Self.cookie: "C9"]))
                let app = try #require(try await Self.user(replicaA, [Self.idfv: "D9"]))
                #expect(cacheB.count == 1)
                // From memory: a change behind the cache's back (no invalidation) is not seen.
                try await poolA.withConnection { try $0.query("UPDATE identity.identities SET user_id = 0 WHERE value = 'C9'") }
                #expect(try await Self.user(replicaB, [Self.cookie: "C9"]) == web)
                try await poolA.withConnection { try $0.query("UPDATE identity.identities SET user_id = $1 WHERE value = 'C9'", [String(web)]) }

                // Replica A merges the web user into the app user; B follows after its next look.
                _ = try await replicaA.merge(project: "default", from: web, into: app, cause: .api("merge", actor: nil, requestID: "r"))
                #expect(try await Self.user(replicaB, [Self.cookie: "C9"]) == web, "B answered from memory before looking")
                let started = ContinuousClock.now
                let looking = Task { try await refresherB.run() }
                var seen: Int64?
                while ContinuousClock.now - started < .seconds(5) {
                    seen = try await Self.user(replicaB, [Self.cookie: "C9"])
                    if seen == app { break }
                    try await Task.sleep(for: .milliseconds(20))
                }
                let elapsed = ContinuousClock.now - started
                looking.cancel()
                #expect(seen == app)
                // Three intervals, plus two seconds of slack for a 2-core machine running the whole suite
                // at once (0.69 s was seen there): a refresher that did not loop on its interval would
                // leave B answering from memory for the cache's 60 s.
                #expect(elapsed < interval * 3 + .seconds(2), "the merge took \(elapsed) to reach the other replica")
            }
        }
    }

    @Test(
        "a caller with its own cache (the gateway) is answered from PostgreSQL, told which users own all of a record's identities, and which identities the call moved"
    )
    func resolveForCache() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: IdentitySchema.name, migrations: IdentitySchema.migrations, pool: pool, logger: TestDatabase.logger)
            let cache = IdentityCache(capacity: 1000, maxStaleness: .seconds(60))
            let store = PostgresIdentityStore(pool: pool, cache: cache)
            try await CacheFeed(cache: cache, source: PostgresInvalidationLog(pool: pool), interval: .seconds(60), logger: TestDatabase.logger).refresh()
            func resolve(_ identities: [String: String], forCache: Bool) async throws -> ResolveResponse {
                try await store.resolve(ResolveRequest(records: [Self.record("track", identities)], forCache: forCache), requestID: "r")
            }

            let first = try #require(try await resolve([Self.idfv: "D1"], forCache: true).users.first)
            let phone = try #require(first.userId)
            #expect(first.created && first.owned)
            let other = try #require(try await Self.user(store, [Self.idfv: "D2"]))
            // D1 moves to the other user behind the cache's back (as a merge another replica made
            // is, until the next look): this replica's cache still says the phone's user...
            try await pool.withConnection { try $0.query("UPDATE identity.identities SET user_id = $1 WHERE value = 'D1'", [String(other)]) }
            #expect(try await resolve([Self.idfv: "D1"], forCache: false).users.first?.userId == phone)
            // ...but a caller with its own cache is told what PostgreSQL says, so it never learns
            // an owner older than the invalidations it has already read.
            #expect(try await resolve([Self.idfv: "D1"], forCache: true).users.first == ResolvedUser(userId: other, created: false, owned: true))

            // A login folds that user in: both its identities move, and the answer names them.
            let alice = try #require(try await Self.user(store, [Self.login: "alice"]))
            let merged = try await resolve([Self.login: "alice", Self.idfv: "D2"], forCache: true)
            #expect(merged.users == [ResolvedUser(userId: alice, created: false, owned: true)])
            #expect(Set(merged.invalidated.map(\.value)) == ["D1", "D2"])
            // Two login ids never merge: the record goes to bob's user, D2 stays with alice's, so
            // the record's identities are not all its user's and nothing may be learned from it.
            let bob = try #require(try await Self.user(store, [Self.login: "bob"]))
            let clash = try await resolve([Self.login: "bob", Self.idfv: "D2"], forCache: true)
            #expect(clash.users == [ResolvedUser(userId: bob, created: false, owned: false)])
            // An unbind changes something: never answerable from a cache, never owned.
            let unbind = try await store.resolve(
                ResolveRequest(records: [Self.record("track_id_unbind", [Self.idfv: "D2"])], forCache: true), requestID: "r")
            #expect(unbind.users.first?.owned == false)
            #expect(unbind.invalidated.map(\.value) == ["D2"])

            // From this replica's cache too, a record after an unbind in the same batch is resolved
            // after it: it links the identity again, as it would in a later upload.
            let phoneRecord = Self.record("track", [Self.idfv: "D5", "$identity_mobile": "M5"])
            let owner = try #require(try await store.resolve([phoneRecord]).first?.userId)
            _ = try await store.resolve([phoneRecord])  // now known to the cache
            let batch = [phoneRecord, Self.record("track_id_unbind", ["$identity_mobile": "M5"]), phoneRecord]
            #expect(try await store.resolve(batch).map(\.userId) == [owner, owner, owner])
            #expect(try await Self.owner(store, "$identity_mobile", "M5") == owner, "the record after the unbind was answered from memory")
        }
    }

    @Test("the cache stays within its capacity and stops answering when it cannot refresh")
    func cacheBounds() {
        let cache = IdentityCache(capacity: 100, maxStaleness: .milliseconds(50))
        let identities = (0..<1000).map { ScopedIdentity(project: "p", identity: IdentityKey(key: Self.cookie, value: "c\($0)")) }
        #expect(cache.users(of: [[identities[0]]]) == [nil])
        cache.refreshed(forgetting: [], at: .now)
        let epoch = cache.epoch
        cache.update(learned: identities.map { ($0, 7) }, readAt: epoch, forgetting: [])
        #expect(cache.count <= 100)
        #expect(cache.users(of: [[identities[999]], [identities[998], identities[999]]]) == [7, 7])
        // A read that began before something was forgotten learns nothing.
        let before = cache.epoch
        cache.update(learned: [], readAt: before, forgetting: [identities[999]])
        cache.update(learned: [(identities[999], 8)], readAt: before, forgetting: [])
        #expect(cache.users(of: [[identities[999]]]) == [nil])
        cache.refreshed(forgetting: [], at: .now - .milliseconds(60))
        #expect(cache.users(of: [[identities[998]]]) == [nil], "a stale cache answered")
    }

    @Test("what a cache answers for a batch, by the one rule the gateway and identity-service share")
    func cacheAnswers() {
        let cache = IdentityCache(capacity: 100, maxStaleness: .seconds(60))
        cache.refreshed(forgetting: [], at: .now)
        func scoped(_ key: String, _ value: String) -> ScopedIdentity { ScopedIdentity(project: "default", identity: IdentityKey(key: key, value: value)) }
        cache.update(
            learned: [
                (scoped(Self.idfv, "D1"), 1), (scoped(Self.cookie, "C1"), 1), (scoped(Self.idfv, "D2"), 2), (scoped(Self.login, "ann"), 3),
                (scoped("$identity_anonymous_id", "ann"), 4),
            ], readAt: cache.epoch, forgetting: [])
        func plan(_ record: IdentityRecord) -> (project: String, plan: IdentityPlan) { ("default", IdentityRules.plan(for: record)) }
        // An old SDK's record: no identities, no flag, its distinct_id a known login id.
        let flagless = IdentityRecord(project: "default", type: "track", distinctId: "ann", lib: "Ruby")
        let answers = cache.answers(for: [
            plan(Self.record("track", [Self.idfv: "D1", Self.cookie: "C1"])),  // both ids one user's
            plan(Self.record("track", [Self.idfv: "D1", Self.cookie: "C9"])),  // one id unknown
            plan(Self.record("track", [Self.idfv: "D1", Self.cookie: "C1"]).with(identities: [Self.idfv: "D1", Self.login: "ann"])),  // two users
            plan(flagless),  // the login id's user, not the anonymous id's
            plan(Self.record("track_id_unbind", [Self.idfv: "D2"])),  // changes the graph
            plan(Self.record("track", [Self.idfv: "D2"])),  // after it: not from memory
        ])
        #expect(answers == [1, nil, nil, 3, nil, nil])
    }

    @Test("after a failed refresh the cache neither answers nor learns, and a refresh from another server (a failover) forgets everything")
    func cacheAcrossFailover() {
        let cache = IdentityCache(capacity: 100, maxStaleness: .seconds(60))
        let known = ScopedIdentity(project: "p", identity: IdentityKey(key: Self.cookie, value: "known"))
        let other = ScopedIdentity(project: "p", identity: IdentityKey(key: Self.cookie, value: "other"))
        #expect(cache.refreshed(forgetting: [], at: .now, server: "primary started 10:00") == false)
        cache.update(learned: [(known, 7)], readAt: cache.epoch, forgetting: [])
        #expect(cache.users(of: [[known]]) == [7])

        // The primary dies: a read made while refreshing fails is not learned, and nothing is answered.
        cache.refreshFailed()
        #expect(cache.users(of: [[known]]) == [nil], "answered while the database could not be refreshed from")
        let during = cache.epoch
        cache.update(learned: [(other, 8)], readAt: during, forgetting: [])

        // The standby is promoted: the old primary's merges may be lost there, so nothing is kept.
        #expect(cache.refreshed(forgetting: [], at: .now, server: "standby started 09:00") == true)
        #expect(cache.users(of: [[known]]) == [nil], "kept an owner learned from the old primary")
        #expect(cache.users(of: [[other]]) == [nil], "learned from a read made while refreshing failed")
        #expect(cache.count == 0)
        cache.update(learned: [(known, 9)], readAt: cache.epoch, forgetting: [])
        #expect(cache.users(of: [[known]]) == [9])
        // The same server again forgets only what its log says.
        #expect(cache.refreshed(forgetting: [], at: .now, server: "standby started 09:00") == false)
        #expect(cache.users(of: [[known]]) == [9])
    }

    @Test("an erased person's ids leave the invalidation log once every cache has read it (5 minutes), not an hour later")
    func erasedIDsLeaveTheLog() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: IdentitySchema.name, migrations: IdentitySchema.migrations, pool: pool, logger: TestDatabase.logger)
            let store = PostgresIdentityStore(pool: pool)
            let user = try #require(try await Self.user(store, [Self.login: "ann@example.com", Self.idfv: "ann-phone"]))
            let subject = try #require(try await store.erasureSubject(project: "default", reference: UserReference(userId: user)))
            _ = try await store.erase(project: "default", subject: subject)
            let held = "SELECT value FROM identity.invalidations ORDER BY value"
            #expect(try await TestDatabase.rows(url, held) == [["ann-phone"], ["ann@example.com"]], "caches must be told")
            func age(_ minutes: Int) async throws {
                try await pool.withConnection { connection in
                    try connection.query("UPDATE identity.invalidations SET created_at = now() - make_interval(mins => \(minutes))")
                }
                _ = try await PostgresInvalidationLog(pool: pool).look(after: nil)  // a new log prunes on its first look
            }
            try await age(4)
            #expect(try await TestDatabase.rows(url, held).count == 2, "a cache may not have read them yet")
            try await age(6)
            #expect(try await TestDatabase.rows(url, held).isEmpty)
        }
    }

    @Test("a look reads each change once, however long another transaction runs; one running at a look is read when it ends")
    func looksReadEachChangeOnce() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: IdentitySchema.name, migrations: IdentitySchema.migrations, pool: pool, logger: TestDatabase.logger)
            try await pool.withConnection { try $0.execute("CREATE TABLE public.gate (opened boolean)") }
            @Sendable func entry(_ value: String) -> String {
                "INSERT INTO identity.invalidations (project, key, value) VALUES ('default', '\(Self.cookie)', '\(value)')"
            }
            let log = PostgresInvalidationLog(pool: pool)
            var look = try await log.look(after: nil)
            func next() async throws -> [String] {
                look = try await log.look(after: look.horizon)
                return look.identities.map(\.value)
            }
            // A transaction (a long erasure, a backfill: any writer on the server) that writes an
            // entry and stays open until the gate opens, or for a minute at most.
            let long = Task {
                try await pool.transaction { connection in
                    try connection.execute(entry("long"))
                    try connection.execute(
                        """
                        DO $$ BEGIN
                            FOR second IN 1..6000 LOOP
                                EXIT WHEN EXISTS (SELECT 1 FROM public.gate);
                                PERFORM pg_sleep(0.01);
                            END LOOP;
                        END $$
                        """)
                }
            }
            let running = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_xid IS NOT NULL"
            while try await TestDatabase.rows(url, running) != [["1"]] { try await Task.sleep(for: .milliseconds(20)) }

            try await pool.withConnection { try $0.execute(entry("short")) }
            #expect(try await next() == ["short"])
            // Read once: while the long transaction holds the oldest running transaction back, a
            // look that read it again would make every cache forget it again each interval (and
            // learn nothing that a look overlapped).
            #expect(try await next() == [], "read again while another transaction runs")
            #expect(try await next() == [])
            try await pool.withConnection { try $0.execute("INSERT INTO public.gate VALUES (true)") }
            try await long.value
            #expect(try await next() == ["long"], "a transaction running at a look is read once it has ended")
            #expect(try await next() == [])

            // A horizon stays a size a URL carries: with thousands of transactions running, the
            // oldest alone (which reads again what finished after it).
            #expect(PostgresInvalidationLog.bounded("3:5:4") == "3:5:4")
            #expect(PostgresInvalidationLog.bounded("3:5000:" + (3..<4999).map(String.init).joined(separator: ",")) == "3:3:")
        }
    }

    @Test("a look that ends long after the last good one began forgets everything: the log may have pruned what it missed")
    func cacheForgetsAfterAHungLook() async throws {
        /// A log whose look takes `delay` on the feed's clock, which it moves on by that much: the
        /// test sleeps for nothing. (It slept 3 s against a 2 s gap once, and a single loaded core
        /// took longer than 2 s between two looks on time.)
        final class SlowSource: InvalidationSource {
            let delay = Mutex<Duration>(.zero)
            let moved = Mutex<Duration>(.zero)
            func look(after horizon: String?) async throws -> InvalidationLog {
                let delay = delay.withLock { $0 }
                moved.withLock { $0 += delay }
                return InvalidationLog(server: "s", horizon: "1", identities: [], complete: true)
            }
        }
        let cache = IdentityCache(capacity: 100, maxStaleness: .seconds(600))
        let known = ScopedIdentity(project: "p", identity: IdentityKey(key: Self.cookie, value: "known"))
        let source = SlowSource()
        // A gap no scheduler delay reaches; the slow look takes it and a second more.
        let feed = CacheFeed(
            cache: cache, source: source, interval: .milliseconds(10), maxGap: .seconds(120), logger: TestDatabase.logger,
            now: { .now + source.moved.withLock { $0 } })
        try await feed.refresh()
        cache.update(learned: [(known, 7)], readAt: cache.epoch, forgetting: [])
        try await feed.refresh()
        #expect(cache.users(of: [[known]]) == [7], "a look on time forgets only what the log says")
        source.delay.withLock { $0 = .seconds(121) }
        try await feed.refresh()
        #expect(cache.users(of: [[known]]) == [nil], "kept an owner across a look that may have missed pruned entries")
    }

    @Test("analytics.events follows merges and undos also when the collector migrated before identity-service")
    func collectorMigratedFirst() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: TestDatabase.logger)
            try await Migrator.migrate(schema: IdentitySchema.name, migrations: IdentitySchema.migrations, pool: pool, logger: TestDatabase.logger)
            let identities = PostgresIdentityStore(pool: pool)
            let web = try #require(try await Self.user(identities, [Self.cookie: "W1"]))
            let app = try #require(try await Self.user(identities, [Self.idfv: "D1"]))
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            _ = try await PostgresEventStore(pool: pool).write(
                CollectBatch(
                    receivedAt: now,
                    records: [web, app].map { user in
                        CollectRecord(
                            project: "default", type: "track", event: "View", time: now, distinctId: "d\(String(describing: user))", userId: user,
                            properties: "{}")
                    }))
            let merge = try await identities.merge(project: "default", from: web, into: app, cause: .api("merge", actor: nil, requestID: "r"))
            let users = "SELECT user_id, stored_user_id FROM analytics.events ORDER BY stored_user_id"
            #expect(try await TestDatabase.rows(url, users) == [[String(app), String(web)], [String(app), String(app)]])
            _ = try await identities.undo(project: "default", mergeID: merge.mergeId, cause: .api("undo", actor: nil, requestID: "r"))
            #expect(try await TestDatabase.rows(url, users) == [[String(web), String(web)], [String(app), String(app)]])
        }
    }
}

/// The owner lookup every resolve makes (twice) is a primary-key lookup per identity in the generic
/// plan PostgreSQL caches for a prepared statement, also when that plan was made while the table
/// was small: it is kept until the next ANALYZE, however large the table grows meanwhile.
@Suite("identity graph: the owner lookup's plan")
struct OwnerLookupPlanTests {
    /// The generic plan of `query` (parameters: project, keys, values) on `connection`.
    static func genericPlan(_ query: String, on connection: PostgresConnection) throws -> String {
        _ = try connection.execute("SET plan_cache_mode = force_generic_plan")
        _ = try connection.execute("PREPARE owners_plan (text, text[], text[]) AS \(query)")
        let plan = try connection.query("EXPLAIN EXECUTE owners_plan('default', '{$identity_idfv}', '{device-1}')").rows
        _ = try connection.execute("DEALLOCATE owners_plan")
        return plan.compactMap { $0[0] }.joined(separator: "\n")
    }

    @Test("300 devices' identities, analyzed: one index lookup per identity, not a scan of the table")
    func indexLookups() async throws {
        try await IdentityGraphTests.withStore { _, url in
            try await TestDatabase.withPool(url) { pool in
                try await pool.withConnection { connection in
                    _ = try connection.execute(
                        """
                        INSERT INTO identity.users (project) SELECT 'default' FROM generate_series(1, 300);
                        INSERT INTO identity.identities (project, key, value, user_id)
                        SELECT 'default', k, 'device-' || n, n FROM generate_series(1, 300) n,
                            unnest(ARRAY['$identity_idfv', '$identity_anonymous_id', '$identity_login_id']) k;
                        ANALYZE identity.identities;
                        """)
                    let plan = try Self.genericPlan(GraphTransaction.ownersQuery, on: connection)
                    #expect(plan.contains("Index Scan using identities_pkey on identities"), "\(plan)")
                    #expect(!plan.contains("Seq Scan on identities"), "\(plan)")
                    // A bare distinct_id's holders (erasures, exports): the index too, never every id
                    // (with 60,000 ids a scan of the table costs more than a lookup per key).
                    _ = try connection.execute(
                        """
                        INSERT INTO identity.identities (project, key, value, user_id)
                        SELECT 'default', k, 'other-' || n, 1 FROM generate_series(1, 20000) n,
                            unnest(ARRAY['$identity_idfv', '$identity_anonymous_id', '$identity_login_id']) k;
                        ANALYZE identity.identities;
                        SET plan_cache_mode = force_generic_plan;
                        """)
                    _ = try connection.execute("PREPARE holders_plan (text, text) AS \(PostgresIdentityStore.holdersQuery)")
                    let holders = try connection.query("EXPLAIN EXECUTE holders_plan('default', 'device-7')").rows.compactMap { $0[0] }.joined(separator: "\n")
                    #expect(!holders.contains("Seq Scan on identities"), "\(holders)")
                    #expect(
                        try connection.query(
                            "EXECUTE holders_plan('default', 'device-7')"
                        ).rows.map { $0[1] ?? "" }
                            == ["$identity_anonymous_id", "$identity_idfv", "$identity_login_id"])
                }
            }
        }
    }
}

extension IdentityRecord {
    fileprivate func with(identities: [String: String]) -> IdentityRecord {
        var record = self
        record.identities = identities
        return record
    }
}
