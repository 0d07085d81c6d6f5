import DatongContracts
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import NIOFoundationEssentialsCompat
import Synchronization
import Testing

/// The gateway's identity cache, through live services on real PostgreSQL: returning devices are
/// resolved without calling identity-service, and merges, undos and unbinds made while devices
/// keep uploading reach the stored events within the documented bound (one refresh interval plus
/// one look at the invalidation log).
@Suite("gateway identity cache: returning devices cost no identity call; no merge, undo or unbind is missed beyond the bound")
struct GatewayIdentityCacheTests {
    static let service: HTTPFields = [.authorization: "Bearer \(RunningServices.serviceToken)", .contentType: "application/json"]
    static let refreshMilliseconds = 100
    static let refresh = Duration.milliseconds(refreshMilliseconds)
    /// What the test allows for a change to reach every upload: the refresh interval plus a look,
    /// with slack for a 2-core machine running the whole suite at once.
    static let bound = refresh + .milliseconds(900)
    static let base: Int64 = 1_795_273_119_000

    /// One upload as a device sends it; `sequence` makes each event distinct and names it.
    static func upload(_ identities: [String: String], sequence: Int) -> (String, ByteBuffer) {
        let ids = identities.map { #""\#($0.key)":"\#($0.value)""# }.joined(separator: ",")
        return EndToEndTests.form(
            #"""
            [{"type":"track","event":"Probe","time":\#(base + Int64(sequence)),"distinct_id":"\#(identities.values.sorted()[0])",
              "identities":{\#(ids)},"lib":{"$lib":"iOS","$lib_version":"4.5.0"},"properties":{"probe":\#(sequence)}}]
            """#)
    }

    struct Sent: Sendable {
        let device: Int
        let sequence: Int
        let sent: ContinuousClock.Instant
        let answered: ContinuousClock.Instant
    }

    /// What the uploading tasks share.
    final class Uploads: Sendable {
        let sent = Mutex<[Sent]>([])
        let next = Atomic<Int>(1000)
        let stop = Atomic<Bool>(false)
        /// The answers other than 200, as "device N: status".
        let refused = Mutex<[String]>([])
    }

    /// When a change was asked for and when identity-service answered it.
    struct Change {
        let started: ContinuousClock.Instant
        let finished: ContinuousClock.Instant
    }

    static func change(_ services: RunningServices, _ path: String, _ body: String) async throws -> (Change, [String: Any]) {
        let started = ContinuousClock.now
        let response = try await services.identity.execute(
            uri: "/v1/projects/default/\(path)", method: .post, headers: service, body: ByteBuffer(string: body))
        let finished = ContinuousClock.now
        #expect(response.status.code < 300, "\(path): \(response.text)")
        return (Change(started: started, finished: finished), try response.json())
    }

    static func metric(_ name: String, _ client: any TestClientProtocol) async throws -> Double {
        let text = try await client.execute(uri: "/metrics", method: .get).text
        let line = text.split(separator: "\n").first { $0.hasPrefix(name + " ") }
        return line.flatMap { Double($0.split(separator: " ")[1]) } ?? 0
    }

    /// Until the gateway's cache has made its first look at identity-service's log (a fixed three
    /// intervals was a guess a loaded machine could beat), for at most 30 s.
    static func firstLook(_ gateway: any TestClientProtocol) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while try await metric("datong_identity_cache_last_refresh_timestamp_seconds", gateway) == 0, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    @Test("devices upload while their users are merged, the merge undone and an identity unbound: every event sent a bound after a change has its new user")
    func changesWhileUploading() async throws {
        try await RunningServices.run(gatewayIdentityCacheRefreshMilliseconds: Self.refreshMilliseconds) { services in
            let devices: [[String: String]] = [
                ["$identity_idfv": "race-d1", "$identity_anonymous_id": "race-d1"],
                ["$identity_idfv": "race-d2", "$identity_anonymous_id": "race-d2"],
                ["$identity_mobile": "race-m"],
            ]
            // Each device's first upload makes its user; the later ones are answered from the cache
            // (once the gateway has looked at the log: what is read before the first look is not learned).
            try await Self.firstLook(services.gateway)
            var sequence = 0
            for identities in devices + devices + devices {
                let (uri, body) = Self.upload(identities, sequence: sequence)
                sequence += 1
                #expect(try await services.gateway.execute(uri: uri, method: .post, body: body).status == .ok)
            }
            func owner(_ key: String, _ value: String) async throws -> Int64? {
                let response = try await services.identity.execute(
                    uri: "/v1/projects/default/identities?key=\(key.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)&value=\(value)",
                    method: .get, headers: Self.service)
                return response.status == .ok ? (try response.json()["userId"] as? NSNumber)?.int64Value : nil
            }
            let first = try #require(try await owner("$identity_idfv", "race-d1"))
            let second = try #require(try await owner("$identity_idfv", "race-d2"))
            let mobile = try #require(try await owner("$identity_mobile", "race-m"))
            let hitsBefore = try await Self.metric("datong_gateway_identity_cache_hits_total", services.gateway)
            let missesBefore = try await Self.metric("datong_gateway_identity_cache_misses_total", services.gateway)
            #expect(hitsBefore >= 3, "no returning device was answered from the gateway's cache")

            // Three devices upload without pause while the changes are made.
            let shared = Uploads()
            let gateway = services.gateway
            let uploaders = (0..<devices.count).map { device in
                Task {
                    while !shared.stop.load(ordering: .relaxed) {
                        let number = shared.next.wrappingAdd(1, ordering: .relaxed).oldValue
                        let (uri, body) = Self.upload(devices[device], sequence: number)
                        let started = ContinuousClock.now
                        let status = try await gateway.execute(uri: uri, method: .post, body: body).status
                        if status == .ok {
                            shared.sent.withLock { $0.append(Sent(device: device, sequence: number, sent: started, answered: .now)) }
                        } else {
                            shared.refused.withLock { $0.append("device \(device): \(status.code)") }
                        }
                        try await Task.sleep(for: .milliseconds(5))
                    }
                }
            }
            let spacing = Self.bound * 2 + .milliseconds(500)
            try await Task.sleep(for: spacing)
            let (merged, merge) = try await Self.change(services, "merges", #"{"fromUser":\#(first),"intoUser":\#(second)}"#)
            let mergeID = try #require((merge["mergeId"] as? NSNumber)?.int64Value)
            try await Task.sleep(for: spacing)
            let (undone, _) = try await Self.change(services, "merges/\(mergeID)/undo", "{}")
            try await Task.sleep(for: spacing)
            let (unbound, _) = try await Self.change(services, "unbind", #"{"key":"$identity_mobile","value":"race-m"}"#)
            try await Task.sleep(for: spacing)
            // Until the mobile's device has uploads acknowledged that it sent a bound after the unbind
            // (on a busy machine a request may take longer than `spacing`), for at most 30 s.
            let settled = ContinuousClock.now + .seconds(30)
            while ContinuousClock.now < settled,
                shared.sent.withLock({ $0.count { $0.device == 2 && $0.sent > unbound.finished + Self.bound } }) < 5
            {
                try await Task.sleep(for: .milliseconds(100))
            }
            shared.stop.store(true, ordering: .relaxed)
            for uploader in uploaders { try await uploader.value }

            let stored = try await TestDatabase.rows(
                services.databaseURL, "SELECT (properties->>'probe')::int, user_id FROM collector.events WHERE event = 'Probe'")
            var users: [Int: Int64] = [:]
            for row in stored { if let probe = row[0].flatMap(Int.init), let user = row[1].flatMap(Int64.init) { users[probe] = user } }
            let uploads = shared.sent.withLock { $0 }
            #expect(uploads.count > 100, "the devices uploaded only \(uploads.count) times")

            // For each device: the user an event must have, given when it was sent and answered;
            // nil inside a change's window, where either user is right.
            func expected(_ upload: Sent) -> Int64?? {
                func after(_ change: Change) -> Bool { upload.sent > change.finished + Self.bound }
                func before(_ change: Change) -> Bool { upload.answered < change.started }
                switch upload.device {
                case 0:
                    if before(merged) || (after(undone)) { return .some(first) }
                    if after(merged) && before(undone) { return .some(second) }
                    return nil
                case 1:
                    return .some(second)
                default:
                    if before(unbound) { return .some(mobile) }
                    if after(unbound) { return .some(nil) }  // a new user: anything but the old one
                    return nil
                }
            }
            var checked = [0, 0, 0]
            var wrong: [String] = []
            var afterUnbind: Set<Int64> = []
            for upload in uploads {
                let user = users[upload.sequence]
                guard let want = expected(upload) else { continue }
                checked[upload.device] += 1
                if let want {
                    if user != want { wrong.append("device \(upload.device) event \(upload.sequence): user \(user ?? -1), not \(want)") }
                } else {
                    if user == nil || user == mobile { wrong.append("event \(upload.sequence) went to user \(user ?? -1) after the unbind") }
                    if let user { afterUnbind.insert(user) }
                }
            }
            #expect(uploads.allSatisfy { users[$0.sequence] != nil }, "an acknowledged event was not stored")
            #expect(wrong.isEmpty, "\(wrong.count) events with the wrong user, e.g. \(wrong.prefix(3))")
            let refused = shared.refused.withLock { $0 }
            #expect(
                afterUnbind.count == 1,
                "after the unbind the mobile's events went to \(afterUnbind.count) users; answers other than 200: \(refused.count), e.g. \(refused.prefix(3))"
            )
            #expect(checked.allSatisfy { $0 > 20 }, "too few events outside the changes' windows to judge: \(checked)")

            // Returning devices were answered by the gateway: identity-service was asked only
            // after a change made the cache forget.
            let hits = try await Self.metric("datong_gateway_identity_cache_hits_total", services.gateway) - hitsBefore
            let misses = try await Self.metric("datong_gateway_identity_cache_misses_total", services.gateway) - missesBefore
            #expect(hits > Double(uploads.count) * 0.9, "\(hits) of \(uploads.count) uploads answered from the gateway's cache")
            #expect(misses < 20, "\(misses) records went to identity-service")
        }
    }

    @Test("an upload's records from one device are resolved in one identity record; a record after an unbind is resolved after it")
    func repeatsResolvedOnce() async throws {
        try await RunningServices.run(gatewayIdentityCacheRefreshMilliseconds: Self.refreshMilliseconds) { services in
            try await Self.firstLook(services.gateway)
            let before = try await Self.metric("datong_gateway_identity_cache_misses_total", services.gateway)
            let device = #""identities":{"$identity_idfv":"once-d","$identity_anonymous_id":"once-d","$identity_mobile":"once-m"}"#
            let records = (0..<20).map { index in
                #"{"type":"track","event":"Probe","time":\#(Self.base + Int64(index)),"distinct_id":"once-d",\#(device),"lib":{"$lib":"iOS"},"properties":{}}"#
            }
            let (uri, body) = EndToEndTests.form("[" + records.joined(separator: ",") + "]")
            #expect(try await services.gateway.execute(uri: uri, method: .post, body: body).status == .ok)
            let asked = try await Self.metric("datong_gateway_identity_cache_misses_total", services.gateway) - before
            #expect(asked == 1, "20 records of one new device went to identity-service as \(asked) records")
            let stored = try await TestDatabase.rows(
                services.databaseURL, "SELECT count(*), count(DISTINCT user_id), min(user_id) FROM collector.events WHERE distinct_id = 'once-d'")
            #expect(stored.first?[0] == "20" && stored.first?[1] == "1")
            let user = try #require(stored.first?[2])

            // The same device, its mobile unbound in between: the record after the unbind links it
            // again, as it would had the three come in three uploads.
            let unbind =
                #"{"type":"track_id_unbind","event":"$UnbindID","time":\#(Self.base + 100),"distinct_id":"once-d","identities":{"$identity_mobile":"once-m"},"lib":{"$lib":"iOS"},"properties":{}}"#
            let again = [
                records[0].replacingOccurrences(of: "\(Self.base)", with: "\(Self.base + 99)"), unbind,
                records[0].replacingOccurrences(of: "\(Self.base)", with: "\(Self.base + 101)"),
            ]
            let (uri2, body2) = EndToEndTests.form("[" + again.joined(separator: ",") + "]")
            #expect(try await services.gateway.execute(uri: uri2, method: .post, body: body2).status == .ok)
            let owner = try await services.identity.execute(
                uri: "/v1/projects/default/identities?key=%24identity_mobile&value=once-m", method: .get, headers: Self.service)
            #expect(owner.status == .ok, "the record after the unbind did not link the mobile again: \(owner.text)")
            #expect((try owner.json()["userId"] as? NSNumber)?.stringValue == user)
        }
    }

    @Test("GET /v1/invalidations answers the horizon to start from, then what changed since it; a horizon that is not one is a 400")
    func invalidationLog() async throws {
        try await RunningServices.run { services in
            let first = try await services.identity.execute(uri: "/v1/invalidations", method: .get, headers: Self.service)
            #expect(first.status == .ok)
            let log = try InvalidationLog(jsonBytes: Array(first.body.readableBytesView))
            #expect(log.identities.isEmpty && log.complete)
            // A snapshot as PostgreSQL writes it: xmin:xmax:running ids.
            #expect(log.horizon.split(separator: ":", omittingEmptySubsequences: false).count == 3, "\(log.horizon)")
            let (_, _) = try await Self.change(services, "links", #"{"identities":{"$identity_mobile":"log-m"}}"#)
            let (_, _) = try await Self.change(services, "unbind", #"{"key":"$identity_mobile","value":"log-m"}"#)
            let next = try await services.identity.execute(uri: "/v1/invalidations?after=\(log.horizon)", method: .get, headers: Self.service)
            let changed = try InvalidationLog(jsonBytes: Array(next.body.readableBytesView))
            #expect(changed.identities == [IdentityName(project: "default", key: "$identity_mobile", value: "log-m")])
            #expect(changed.server == log.server)
            // A gateway of the previous version passes the oldest running transaction alone.
            let xmin = try #require(log.horizon.split(separator: ":").first)
            let old = try await services.identity.execute(uri: "/v1/invalidations?after=\(xmin)", method: .get, headers: Self.service)
            #expect(try InvalidationLog(jsonBytes: Array(old.body.readableBytesView)).identities == changed.identities)
            let bads = [
                "abc", "-1", "%2B1", "99999999999999999999999", "0", "5:3:", "1:5:7", "1:5:3,2", "1:5:2,", "1:5", "1:5:2:3",
                "9223372036854775808:9223372036854775809:",
            ]
            for bad in bads + [String(repeating: "1", count: 9000)] {
                let refused = try await services.identity.execute(uri: "/v1/invalidations?after=\(bad)", method: .get, headers: Self.service)
                #expect(refused.status == .badRequest, "after=\(bad): \(refused.status)")
                #expect(refused.text.contains("invalid_horizon"))
            }
            let anonymous = try await services.identity.execute(uri: "/v1/invalidations", method: .get)
            #expect(anonymous.status == .unauthorized)
        }
    }
}
