import DatongContracts
import DatongPostgres
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import Gateway
@testable import Identity

/// The rule that decides who a person is runs in two places: the gateway answers what its cache
/// knows and sends the rest (folding repeats), identity-service resolves what it is sent. Random
/// sequences of an app's records — anonymous and logged-in events, sign-ups, binds, unbinds, a
/// mobile alone — go through the gateway (its cache on) and, upload by upload, straight to
/// identity-service's store on a database of its own (two replicas taking turns, no cache). Every
/// record must land on the same person both ways.
@Suite("one resolve: the gateway's cached path and identity-service agree on every record's person")
struct ResolveDifferentialTests {
    static let base: Int64 = 1_795_273_119_000

    /// SplitMix64: the same sequence for a seed on every machine.
    struct Seeded: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// One record of the universe of 4 devices, 3 login ids and 2 mobiles.
    static func record(_ random: inout Seeded, sequence: Int) -> String {
        let device = "dd\(Int.random(in: 0..<4, using: &random))"
        let login = "du\(Int.random(in: 0..<3, using: &random))"
        let mobile = "dm\(Int.random(in: 0..<2, using: &random))"
        let deviceIDs = #""$identity_idfv":"\#(device)","$identity_anonymous_id":"\#(device)""#
        let (type, event, distinct, identities, extra): (String, String, String, String, String)
        switch Int.random(in: 0..<10, using: &random) {
        case 0...2: (type, event, distinct, identities, extra) = ("track", "Probe", device, deviceIDs, "")
        case 3...4:
            (type, event, distinct, identities, extra) = ("track", "Probe", login, deviceIDs + #","$identity_login_id":"\#(login)""#, "")
        case 5:
            (type, event, distinct, identities, extra) = (
                "track_signup", "$SignUp", login, deviceIDs + #","$identity_login_id":"\#(login)""#, #","original_id":"\#(device)""#
            )
        case 6: (type, event, distinct, identities, extra) = ("track_id_bind", "$BindID", device, deviceIDs + #","$identity_mobile":"\#(mobile)""#, "")
        case 7: (type, event, distinct, identities, extra) = ("track_id_unbind", "$UnbindID", device, #""$identity_mobile":"\#(mobile)""#, "")
        default: (type, event, distinct, identities, extra) = ("track", "Probe", mobile, #""$identity_mobile":"\#(mobile)""#, "")
        }
        return #"""
            {"type":"\#(type)","event":"\#(event)","time":\#(base + Int64(sequence)),"distinct_id":"\#(distinct)"\#(extra),"identities":{\#(identities)},"lib":{"$lib":"iOS","$lib_version":"4.5.0"},"properties":{"seq":\#(sequence)}}
            """#
    }

    /// Each user's survivor: the user it was merged into, followed to the end.
    static func survivors(_ url: String) async throws -> [Int64: Int64] {
        let rows = try await TestDatabase.rows(url, "SELECT user_id, merged_into FROM identity.users")
        var into: [Int64: Int64] = [:]
        for row in rows { if let user = row[0].flatMap({ Int64($0) }), let merged = row[1].flatMap({ Int64($0) }) { into[user] = merged } }
        var survivor: [Int64: Int64] = [:]
        for row in rows {
            guard var user = row[0].flatMap({ Int64($0) }) else { continue }
            let start = user
            var steps = 0
            while let next = into[user], steps < 1000 {
                user = next
                steps += 1
            }
            survivor[start] = user
        }
        return survivor
    }

    @Test("random app sequences, 4 seeds × 40 uploads of 1–6 records: the same person for every record both ways", arguments: [11, 22, 33, 44] as [UInt64])
    func agree(seed: UInt64) async throws {
        var random = Seeded(state: seed)
        var uploads: [[String]] = []
        var sequence = 0
        for _ in 0..<40 {
            uploads.append(
                (0..<Int.random(in: 1...6, using: &random)).map { _ in
                    sequence += 1
                    return Self.record(&random, sequence: sequence)
                })
        }
        // Identity-service alone, two replicas taking turns, as the gateway would call it with no cache.
        let referenceURL = try await TestDatabase.create()
        let pools = [
            PostgresPool(url: referenceURL, maxConnections: 2, logger: TestDatabase.logger),
            PostgresPool(url: referenceURL, maxConnections: 2, logger: TestDatabase.logger),
        ]
        var reference: [Int: Int64?] = [:]
        do {
            try await Migrator.migrate(schema: IdentitySchema.name, migrations: IdentitySchema.migrations, pool: pools[0], logger: TestDatabase.logger)
            let replicas = pools.map { PostgresIdentityStore(pool: $0) }
            for (number, upload) in uploads.enumerated() {
                let (_, body) = EndToEndTests.form("[" + upload.joined(separator: ",") + "]")
                let prepared = try PreparedUpload(query: "project=default", body: Array(body.readableBytesView), limits: UploadLimits(), now: Self.base)
                #expect(prepared.rejected.isEmpty, "\(prepared.rejected)")
                let users = try await replicas[number % 2].resolve(prepared.accepted.map { $0.identity! })
                for (record, user) in zip(prepared.accepted, users) {
                    let properties = try JSONSerialization.jsonObject(with: Data(record.collect.properties.utf8)) as! [String: Any]
                    reference[properties["seq"] as! Int] = user.userId
                }
            }
        } catch {
            for pool in pools { await pool.close() }
            throw error
        }
        for pool in pools { await pool.close() }
        let referenceSurvivors = try await Self.survivors(referenceURL)
        let (sent, count, resolved) = (uploads, sequence, reference)

        try await RunningServices.run(gatewayIdentityCacheRefreshMilliseconds: 100) { services in
            for upload in sent {
                let (uri, body) = EndToEndTests.form("[" + upload.joined(separator: ",") + "]")
                let answer = try await services.gateway.execute(uri: uri, method: .post, body: body)
                let stored = try answer.json()["stored"] as? Int
                #expect(answer.status == .ok && stored == upload.count, "\(answer.text)")
            }
            let stored = try await TestDatabase.rows(
                services.databaseURL, "SELECT (properties->>'seq')::int, user_id FROM collector.events ORDER BY 1")
            let gatewaySurvivors = try await Self.survivors(services.databaseURL)
            #expect(stored.count == count)
            // The same partition of records into people: a one-to-one map of survivors.
            var toReference: [Int64: Int64] = [:]
            var fromReference: [Int64: Int64] = [:]
            var disagreements: [String] = []
            for row in stored {
                let number = Int(row[0]!)!
                let gatewayUser = row[1].flatMap { Int64($0) }.map { gatewaySurvivors[$0] ?? $0 }
                let referenceUser = (resolved[number] ?? nil).map { referenceSurvivors[$0] ?? $0 }
                guard let gatewayUser, let referenceUser else {
                    if (gatewayUser == nil) != (referenceUser == nil) { disagreements.append("record \(number): a user one way, none the other") }
                    continue
                }
                if toReference[gatewayUser, default: referenceUser] != referenceUser || fromReference[referenceUser, default: gatewayUser] != gatewayUser {
                    disagreements.append("record \(number): \(sent.flatMap { $0 }[number - 1])")
                }
                toReference[gatewayUser] = referenceUser
                fromReference[referenceUser] = gatewayUser
            }
            // Enough people and changes to judge: sequences of these seeds make 5 to 13 people.
            #expect(Set(toReference.keys).count >= 4, "seed \(seed): only \(toReference.count) people")
            #expect(disagreements.isEmpty, "seed \(seed): \(disagreements.count) records on another person, e.g. \(disagreements.prefix(3))")
        }
    }
}
