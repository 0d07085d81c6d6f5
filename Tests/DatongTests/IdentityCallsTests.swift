import BenchSupport
import DatongContracts
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import Synchronization
import Testing

@testable import Gateway

/// The gateway folds the records of uploads that wait for an identity-service call into one
/// `POST /v1/resolve`, and gives each upload the users of its own records.
@Suite("gateway: uploads that wait for identity-service go in one resolve call")
struct IdentityCallsTests {
    static let base: Int64 = 1_795_273_119_000

    /// Upload `number` from a device never seen before: two distinct events.
    static func upload(_ number: Int, device: String) -> HTTPLoad.Request {
        let events = (0..<2).map { position in
            #"{"type":"track","event":"IdentityFolded","time":\#(base + Int64(2 * number + position)),"distinct_id":"\#(device)","#
                + #""lib":{"$lib":"iOS","$lib_version":"4.5.0"},"properties":{"upload":\#(number)}}"#
        }
        let (uri, body) = EndToEndTests.form("[\(events.joined(separator: ","))]")
        return HTTPLoad.Request("POST", uri, body: Array(body.readableBytesView), headers: [("Content-Type", "application/x-www-form-urlencoded")])
    }

    /// Sends `requests` at once, one connection each, and returns each answer's status and body.
    static func sendAll(_ requests: [HTTPLoad.Request], to gateway: any TestClientProtocol) async throws -> [(Int, String)] {
        let answers = Mutex([(Int, String)](repeating: (0, ""), count: requests.count))
        _ = try await HTTPLoad.run(port: gateway.port!, requests: requests, connections: requests.count) { index, answer in
            answers.withLock { $0[index] = (answer.status, answer.text) }
        }
        return answers.withLock { $0 }
    }

    @Test("new devices uploading at once with one call slot: fewer resolve calls than uploads, each event with its own device's user")
    func folded() async throws {
        let uploads = 48
        try await RunningServices.run(gatewayIdentityCalls: 1) { services in
            let answers = try await Self.sendAll((0..<uploads).map { Self.upload($0, device: "fold-\($0)") }, to: services.gateway)
            for (status, text) in answers { #expect(status == 200, "\(text)") }
            let calls = try await GatewayIdentityCacheTests.metric("datong_gateway_identity_calls_total", services.gateway)
            let folded = try await GatewayIdentityCacheTests.metric("datong_gateway_identity_uploads_total", services.gateway)
            #expect(folded == Double(uploads))
            #expect(calls < folded, "\(Int(calls)) resolve calls carried \(Int(folded)) uploads")
            // Every event has the user identity-service keeps for its device, and no two devices share one.
            let rows = try await TestDatabase.rows(
                services.databaseURL,
                """
                SELECT count(*), count(DISTINCT e.user_id), count(DISTINCT e.distinct_id)
                FROM analytics.events e
                WHERE e.event = 'IdentityFolded' AND EXISTS (
                    SELECT FROM identity.identities i WHERE i.project = e.project AND i.value = e.distinct_id AND i.user_id = e.user_id)
                """)
            #expect(rows == [[String(2 * uploads), String(uploads), String(uploads)]])
        }
    }

    /// A stand-in identity-service: holds each resolve call 300 ms (5 s for `held`'s), refuses (400) any call that
    /// carries `refused`'s records, and gives every other record user 7. Says what it was called with.
    final class StubIdentity: Sendable {
        static let refused = "refused-device"
        static let held = "held-device"
        let calls = Mutex<[(records: Int, refused: Bool)]>([])

        func application() -> some ApplicationProtocol {
            let router = Router()
            router.post("/v1/resolve") { request, _ -> Response in
                let body = try await request.body.collect(upTo: 1 << 20)
                let resolve = try ResolveRequest(jsonBytes: Array(body.readableBytesView))
                let refused = resolve.records.contains { $0.distinctId == Self.refused }
                self.calls.withLock { $0.append((resolve.records.count, refused)) }
                // The first upload's call is held long enough for the others to reach the gateway
                // and wait for it on a loaded 2-core machine (2 s was once too short beside a build).
                try await Task.sleep(for: resolve.records.contains { $0.distinctId == Self.held } ? .seconds(5) : .milliseconds(300))
                if refused {
                    return Response(
                        status: .badRequest, headers: [.contentType: "application/json"],
                        body: .init(byteBuffer: ByteBuffer(string: #"{"error":"invalid_identity","message":"this device is refused"}"#)))
                }
                let answer = ResolveResponse(users: resolve.records.map { _ in ResolvedUser(userId: 7, created: false) })
                return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: answer.jsonBytes)))
            }
            return Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        }
    }

    @Test("a refusal of a folded call is not shared: only the upload at fault gets the 400, the others are stored")
    func refusalNotShared() async throws {
        let stub = StubIdentity()
        try await stub.application().serving { identity in
            // The calls' deadline well beyond their 300 ms each: on a loaded machine (the
            // full parallel run) two uploads once waited past the default 5 s and got 503s.
            try await RunningServices.run(
                identityURL: "http://127.0.0.1:\(identity.port!)", gatewayIdentityCalls: 1, gatewayUpstreamTimeoutSeconds: 30
            ) { services in
                // The first upload holds the only call slot; the next ones, with the refused
                // device among them, wait for it and go in one call.
                async let first = Self.sendAll([Self.upload(0, device: StubIdentity.held)], to: services.gateway)
                // Until its call has reached the stand-in, which holds it 5 s (a fixed 100 ms
                // wait let the others overtake it on a loaded machine).
                while stub.calls.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(10)) }
                let waiting = (1...8).map { Self.upload($0, device: $0 == 4 ? StubIdentity.refused : "device-\($0)") }
                // Sent while the first is held: `try await first + sendAll(…)` sent them only once
                // the first was answered, when no call was busy, and the refused upload went alone
                // whenever it happened to arrive first.
                async let rest = Self.sendAll(waiting, to: services.gateway)
                let answers = try await first + rest
                for (index, (status, text)) in answers.enumerated() {
                    #expect(status == (index == 4 ? 400 : 200), "upload \(index): \(text)")
                }
                #expect(answers[4].1.contains("invalid_identity"))
                let calls = stub.calls.withLock { $0 }
                // An upload's two events name one device: one record to resolve.
                #expect(calls.contains { $0.refused && $0.records > 1 }, "a call carried the refused upload with others: \(calls)")
                #expect(calls.contains { $0.refused && $0.records == 1 }, "the refused upload was sent again alone: \(calls)")
                let rows = try await TestDatabase.rows(
                    services.databaseURL,
                    "SELECT count(*), count(*) FILTER (WHERE user_id = 7), count(*) FILTER (WHERE distinct_id = '\(StubIdentity.refused)') FROM analytics.events WHERE event = 'IdentityFolded'"
                )
                #expect(rows == [["16", "16", "0"]])
            }
        }
    }
}
