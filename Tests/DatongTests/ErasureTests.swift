import DatongContracts
import DatongCtl
import DatongPostgres
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import NIOFoundationEssentialsCompat
import Testing

@testable import Collector

/// A user's data on request (docs/PRIVACY.md), on real PostgreSQL with the four services: an
/// export returns what is held, an erasure removes it from every table and cache and leaves
/// other users alone, retried uploads of the erased ids are dropped, and a job a dead runner
/// held is finished by another.
@Suite("erasure, export and suppression of a user's data")
struct ErasureTests {
    static let admin: HTTPFields = [.authorization: "Bearer \(RunningServices.adminToken)", .contentType: "application/json"]
    static let service: HTTPFields = [.authorization: "Bearer \(RunningServices.serviceToken)", .contentType: "application/json"]
    static let day: Int64 = 86_400_000

    /// Ann: a phone (`ann-phone`) that logs in as `ann`, three months of events, a profile, a
    /// refused record; a tablet (`ann-tablet`) merged into her. Carl: one phone, the same kinds.
    static func records(now: Int64) -> (ann: String, tablet: String, carl: String) {
        func track(_ event: String, _ distinct: String, _ time: Int64, identities: String, extra: String = "") -> String {
            #"{"type":"track","event":"\#(event)","time":\#(time),"distinct_id":"\#(distinct)","_track_id":\#(time % 1_000_000),"identities":\#(identities),"lib":{"$lib":"iOS","$lib_version":"4.5.0"},"properties":{"$app_version":"2.3.0"\#(extra)}}"#
        }
        let annPhone = #"{"$identity_anonymous_id":"ann-phone"}"#
        let annLogin = #"{"$identity_login_id":"ann","$identity_anonymous_id":"ann-phone"}"#
        let ann = [
            track("AppStart", "ann-phone", now - 65 * day, identities: annPhone),
            track("ViewProduct", "ann-phone", now - 35 * day, identities: annPhone),
            #"{"type":"track_signup","event":"$SignUp","time":\#(now - 34 * day),"distinct_id":"ann","original_id":"ann-phone","_track_id":11,"identities":\#(annLogin),"lib":{"$lib":"iOS"},"properties":{}}"#,
            track("Buy", "ann", now - day, identities: annLogin, extra: #","price":9.9,"account":"ann""#),
            #"{"type":"profile_set","time":\#(now - day),"distinct_id":"ann","_track_id":12,"identities":\#(annLogin),"lib":{"$lib":"iOS"},"properties":{"name":"Ann"}}"#,
            // Refused at the gateway (a property name Sensors forbids): kept with the raw record.
            track("Broken", "ann-phone", now - day, identities: annPhone, extra: #","1bad":1"#),
        ]
        let tablet = [track("AppStart", "ann-tablet", now - 2 * day, identities: #"{"$identity_anonymous_id":"ann-tablet"}"#)]
        let carlIDs = #"{"$identity_anonymous_id":"carl-phone"}"#
        let carl = [
            track("AppStart", "carl-phone", now - 65 * day, identities: carlIDs),
            track("Buy", "carl-phone", now - day, identities: carlIDs),
            #"{"type":"profile_set","time":\#(now - day),"distinct_id":"carl-phone","_track_id":13,"identities":\#(carlIDs),"lib":{"$lib":"iOS"},"properties":{"name":"Carl"}}"#,
            // Carl's, though it quotes Ann's login id: not hers to export or erase.
            track("Broken", "carl-phone", now - day, identities: carlIDs, extra: #","1bad":1,"referred_by":"ann""#),
        ]
        return ("[" + ann.joined(separator: ",") + "]", "[" + tablet.joined(separator: ",") + "]", "[" + carl.joined(separator: ",") + "]")
    }

    static func upload(_ records: String, to gateway: any TestClientProtocol) async throws -> [String: Any] {
        let (uri, body) = EndToEndTests.form(records)
        let response = try await gateway.execute(uri: uri, method: .post, body: body)
        #expect(response.status == .ok, "\(response.text)")
        return try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any])
    }

    /// Rows a person has in each table and view, by their user numbers and ids.
    static func held(_ url: String, users: [Int64], ids: [String]) async throws -> [String: String] {
        let list = "{" + users.map(String.init).joined(separator: ",") + "}"
        let names = "{" + ids.joined(separator: ",") + "}"
        let queries: [String: String] = [
            "collector.events":
                "SELECT count(*) FROM collector.events WHERE project = 'default' AND (user_id = ANY('\(list)'::bigint[]) OR distinct_id = ANY('\(names)'::text[]))",
            "analytics.events":
                "SELECT count(*) FROM analytics.events WHERE project = 'default' AND (user_id = ANY('\(list)'::bigint[]) OR distinct_id = ANY('\(names)'::text[]))",
            "collector.profile_records":
                "SELECT count(*) FROM collector.profile_records WHERE project = 'default' AND (user_id = ANY('\(list)'::bigint[]) OR distinct_id = ANY('\(names)'::text[]))",
            "analytics.profiles":
                "SELECT count(*) FROM analytics.profiles WHERE project = 'default' AND (user_id = ANY('\(list)'::bigint[]) OR distinct_id = ANY('\(names)'::text[]))",
            "analytics.rejected":
                "SELECT count(*) FROM analytics.rejected r WHERE project = 'default' AND EXISTS (SELECT 1 FROM unnest('\(names)'::text[]) n WHERE strpos(r.raw, '\"distinct_id\":\"' || n || '\"') > 0)",
            "identity.identities":
                "SELECT count(*) FROM identity.identities WHERE project = 'default' AND (user_id = ANY('\(list)'::bigint[]) OR value = ANY('\(names)'::text[]))",
            "identity.users": "SELECT count(*) FROM identity.users WHERE project = 'default' AND user_id = ANY('\(list)'::bigint[])",
            "identity.merges":
                "SELECT count(*) FROM identity.merges WHERE project = 'default' AND (from_user = ANY('\(list)'::bigint[]) OR into_user = ANY('\(list)'::bigint[]))",
            "identity.history":
                "SELECT count(*) FROM identity.history WHERE project = 'default' AND (user_id = ANY('\(list)'::bigint[]) OR other_user = ANY('\(list)'::bigint[]) OR value = ANY('\(names)'::text[]))",
            "analytics.user_canonical":
                "SELECT count(*) FROM analytics.user_canonical WHERE project = 'default' AND (user_id = ANY('\(list)'::bigint[]) OR canonical_user_id = ANY('\(list)'::bigint[]))",
        ]
        var counts: [String: String] = [:]
        for (table, sql) in queries { counts[table] = try await TestDatabase.rows(url, sql).first?[0] ?? "?" }
        return counts
    }

    static func user(_ url: String, _ distinctID: String) async throws -> Int64 {
        try #require(
            try await TestDatabase.rows(url, "SELECT DISTINCT user_id FROM analytics.events WHERE distinct_id = $1", [distinctID]).first?[0]
                .flatMap(Int64.init))
    }

    /// Polls the erasure until it is done (or 60 s pass).
    static func finished(_ id: Int64, _ config: any TestClientProtocol) async throws -> ErasureJob {
        for _ in 0..<600 {
            let response = try await config.execute(uri: "/v1/projects/default/erasures/\(id)", method: .get, headers: admin)
            #expect(response.status == .ok)
            let job = try JSONDecoder().decode(ErasureJob.self, from: Data(buffer: response.body))
            if job.state == "done" { return job }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw Timeout()
    }

    struct Timeout: Error {}

    @Test("a user with three months of events, a profile, a merged device and a refused record is exported, then erased everywhere; retries are dropped")
    func eraseEverywhere() async throws {
        // Two rows a step: the job takes several steps, each saved, as a large user's would.
        try await RunningServices.run(erasureSettleSeconds: 3, erasureBatchRows: 2) { services in
            let url = services.databaseURL
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let (ann, tablet, carl) = Self.records(now: now)
            for records in [ann, tablet, carl] { _ = try await Self.upload(records, to: services.gateway) }
            // The tablet is Ann's too: an operator merges it into her.
            let (annUser, tabletUser) = (try await Self.user(url, "ann"), try await Self.user(url, "ann-tablet"))
            let merge = try await services.identity.execute(
                uri: "/v1/projects/default/merges", method: .post, headers: Self.service,
                body: ByteBuffer(string: #"{"fromUser":\#(tabletUser),"intoUser":\#(annUser),"actor":"test"}"#))
            #expect(merge.status == .created, "\(merge.text)")
            let annIDs = ["ann", "ann-phone", "ann-tablet"]
            let carlUser = try await Self.user(url, "carl-phone")
            let annBefore = try await Self.held(url, users: [annUser, tabletUser], ids: annIDs)
            let carlBefore = try await Self.held(url, users: [carlUser], ids: ["carl-phone"])
            // What Ann has: 5 events of hers and the tablet's, her profile and its record, the
            // refused record, 3 ids, 2 users, the merge.
            #expect(annBefore["collector.events"] == "5" && annBefore["analytics.profiles"] == "1" && annBefore["analytics.rejected"] == "1")
            #expect(annBefore["identity.identities"] == "3" && annBefore["identity.users"] == "2" && annBefore["identity.merges"] == "1")
            #expect(carlBefore["collector.events"] == "2" && carlBefore["analytics.profiles"] == "1" && carlBefore["analytics.rejected"] == "1")

            // The export, by her login id: every row of hers, and the end line that says it is whole.
            let export = try await services.config.execute(
                uri: "/v1/projects/default/user-data?key=%24identity_login_id&value=ann", method: .get, headers: Self.admin)
            #expect(export.status == .ok)
            let lines = export.text.split(separator: "\n").map { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            var tables: [String: Int] = [:]
            for line in lines { if let table = line?["table"] as? String { tables[table, default: 0] += 1 } }
            #expect(tables == ["identity.users": 2, "identity.history": 2, "events": 5, "profiles": 1, "profile_records": 1, "rejected": 1])
            #expect((lines.last??["end"] as? Bool) == true && (lines.last??["rows"] as? Int) == 8)
            #expect(!export.text.contains("carl"))

            // What the gateways read each refresh: revalidated, an unchanged list is a 304.
            let ingestion = try await services.config.execute(uri: "/v1/projects/default/ingestion", method: .get, headers: Self.service)
            let etag = try #require(ingestion.headers[.eTag])
            var revalidate = Self.service
            revalidate[.ifNoneMatch] = etag
            #expect(try await services.config.execute(uri: "/v1/projects/default/ingestion", method: .get, headers: revalidate).status == .notModified)

            // The erasure, by her login id.
            let asked = try await services.config.execute(
                uri: "/v1/projects/default/erasures", method: .post, headers: Self.admin,
                body: ByteBuffer(string: #"{"user":{"key":"$identity_login_id","value":"ann"}}"#))
            #expect(asked.status == .accepted, "\(asked.text)")
            let job = try JSONDecoder().decode(ErasureJob.self, from: Data(buffer: asked.body))
            #expect(job.state == "waiting" && Set(job.users) == [annUser, tabletUser] && job.identityCount == 3)
            // Her ids are in the list now: the old ETag gets the new list.
            let changed = try await services.config.execute(uri: "/v1/projects/default/ingestion", method: .get, headers: revalidate)
            #expect(changed.status == .ok && changed.text.contains(#""value":"ann""#) && changed.headers[.eTag] != etag)
            let done = try await Self.finished(job.erasureId, services.config)
            #expect(done.collector?.events == 5 && done.collector?.profiles == 1 && done.collector?.profileRecords == 1)
            #expect(done.collector?.rejected == 1 && done.identity?.identities == 3 && done.identity?.users == 2 && done.identity?.merges == 1)
            #expect(done.requested.value == "(erased)" && done.collector?.left == 0)

            let annAfter = try await Self.held(url, users: [annUser, tabletUser], ids: annIDs)
            #expect(annAfter.values.allSatisfy { $0 == "0" }, "\(annAfter)")
            // The catalog's sample of a property whose first value was her login id is gone; the
            // property stays (a name, a type, no one's).
            #expect(
                try await TestDatabase.rows(url, "SELECT name, type, sample FROM analytics.catalog_properties WHERE name IN ('account', 'price') ORDER BY name")
                    == [["account", "STRING", ""], ["price", "NUMBER", "9.9"]])
            #expect(try await Self.held(url, users: [carlUser], ids: ["carl-phone"]) == carlBefore)
            // The audit says who asked and what went by count, never her ids.
            let audit = try await TestDatabase.rows(url, "SELECT action, actor, detail FROM config.audit WHERE action LIKE 'user.%' ORDER BY id")
            #expect(audit.map { $0[0] } == ["user.exported", "user.erasure_requested", "user.erased"])
            #expect(audit.allSatisfy { row in !annIDs.contains { (row[2] ?? "").contains("\"\($0)\"") } })

            // Her phone retries its batch, her tablet its event: dropped and counted, nothing stored.
            let retried = try await Self.upload(ann, to: services.gateway)
            #expect(retried["suppressed"] as? Int == 6 && retried["stored"] as? Int == 0 && retried["rejected"] as? Int == 0)
            // Her refused record is suppressed too: not listed among the problems.
            #expect((retried["problems"] as? [Any] ?? []).isEmpty, "\(retried)")
            #expect((try await Self.upload(tablet, to: services.gateway))["suppressed"] as? Int == 1)
            #expect(try await Self.held(url, users: [annUser, tabletUser], ids: annIDs)["collector.events"] == "0")
            #expect(try await Self.held(url, users: [], ids: annIDs)["identity.identities"] == "0")
            // Carl uploads as before.
            let carlAgain = try await Self.upload(
                #"[{"type":"track","event":"Later","time":\#(now),"distinct_id":"carl-phone","_track_id":99,"identities":{"$identity_anonymous_id":"carl-phone"},"lib":{"$lib":"iOS"},"properties":{}}]"#,
                to: services.gateway)
            #expect(carlAgain["stored"] as? Int == 1 && carlAgain["suppressed"] == nil)

            // Lifting the suppression lets her phone's records in again, as a new user.
            let suppressions = try await services.config.execute(uri: "/v1/projects/default/suppressions", method: .get, headers: Self.admin)
            #expect(try JSONDecoder().decode([Suppression].self, from: Data(buffer: suppressions.body)).count == 3)
            let lifted = try await services.config.execute(
                uri: "/v1/projects/default/suppressions?erasure=\(job.erasureId)", method: .delete, headers: Self.admin)
            #expect(lifted.status == .ok && lifted.text == #"{"lifted":3}"#)
        }
    }

    @Test(
        "the retention dry run names the tables and rows by project that retention then drops, and nothing else; a project's own months are set, audited and cleared"
    )
    func retentionDryRun() async throws {
        try await RunningServices.run { services in
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let (ann, _, carl) = Self.records(now: now)
            _ = try await Self.upload(ann, to: services.gateway)
            _ = try await Self.upload(carl, to: services.gateway)
            let environment = ["DATONG_CONFIG_URL": "http://127.0.0.1:\(services.config.port!)", "DATONG_ADMIN_TOKEN": RunningServices.adminToken]
            // The retention whose cutoff is just past the oldest event's month: that month goes, the
            // month of 35 days ago stays (whatever today's date).
            let oldest = MonthPartition(unixMillis: now - 65 * Self.day)
            let table = ProjectMonth(month: oldest, project: "default").tableName
            let days = Int((now - oldest.next.startUnixMillis) / Self.day)
            // The project's own retention: this month and the one before. The oldest event's month
            // (65 days ago) is always past it; which others are depends on today's date, so the
            // plan is checked against the rule as well.
            let set = await Datongctl.run(["retention", "set", "default", "--months", "1"], environment: environment)
            #expect(set.exitCode == 0 && set.output.contains("default keeps 1 months"), "\(set.output)")
            let own = try JSONDecoder().decode(
                RetentionPlan.self, from: Data(buffer: try await services.config.execute(uri: "/v1/retention", method: .get, headers: Self.admin).body))
            let current = MonthPartition(unixMillis: now)
            let stillHeld = try await TestDatabase.withPool(services.databaseURL) { try await EventPartitions(pool: $0).existing() }
            let expected = stillHeld.projectMonths.filter { $0.month.index <= current.index - 2 }.map(\.tableName).sorted()
            #expect(own.projects == [ProjectRetention(project: "default", months: 1)] && own.partitions.map(\.name).sorted() == expected)
            #expect(expected.contains(table))
            let trail = try await services.config.execute(uri: "/v1/audit?project=default", method: .get, headers: Self.admin)
            #expect(trail.text.contains("retention.set") && trail.text.contains("1 months"), "\(trail.text)")
            // Trying another setting changes nothing; clearing goes back to RETENTION_DAYS.
            let tried = try await services.config.execute(uri: "/v1/retention?project=default&months=0", method: .get, headers: Self.admin)
            #expect(try JSONDecoder().decode(RetentionPlan.self, from: Data(buffer: tried.body)).projects.isEmpty)
            let clear = await Datongctl.run(["retention", "clear", "default"], environment: environment)
            #expect(clear.exitCode == 0, "\(clear.output)")
            let show = await Datongctl.run(["retention"], environment: environment)
            #expect(
                show.exitCode == 0 && show.output.contains("other projects keep all their events") && !show.output.contains("default keeps"), "\(show.output)")
            let dryRun = await Datongctl.run(["retention", "--days", "\(days)"], environment: environment)
            #expect(dryRun.exitCode == 0, "\(dryRun.output)")
            let answer = try await services.config.execute(uri: "/v1/retention?days=\(days)", method: .get, headers: Self.admin)
            let plan = try JSONDecoder().decode(RetentionPlan.self, from: Data(buffer: answer.body))
            #expect(plan.partitions.map(\.name) == [table] && plan.days == days && plan.retentionDays == 0 && plan.projects.isEmpty)
            let held = try await TestDatabase.rows(
                services.databaseURL, "SELECT project, count(*) FROM collector.\(table) GROUP BY project ORDER BY project")
            #expect(plan.partitions.first?.rows.map { [$0.project, String($0.rows)] } == held.map { $0.map { $0 ?? "" } })
            #expect(held.count == 1 && dryRun.output.contains("\(table)\t") && dryRun.output.contains("default \(held[0][1] ?? "")"))
            let before = try await TestDatabase.rows(services.databaseURL, "SELECT count(*) FROM collector.events")
            // Retention with the same days drops exactly what the dry run named (and the month's
            // table, empty once its one project's table is gone).
            let dropped = try await TestDatabase.withPool(services.databaseURL) { pool in
                try await PartitionMaintenance(
                    partitions: EventPartitions(pool: pool), settings: RetentionSettings(pool: pool), retentionDays: days, logger: TestDatabase.logger
                ).maintain(nowMillis: now)
            }
            #expect(dropped == plan.partitions.map(\.name) + [oldest.tableName])
            let after = try await TestDatabase.rows(services.databaseURL, "SELECT count(*) FROM collector.events")
            let planned = plan.partitions.flatMap(\.rows).map(\.rows).reduce(0, +)
            #expect(Int(after.first?[0] ?? "") == Int(before.first?[0] ?? "")! - planned)

            let unknown = try await services.config.execute(
                uri: "/v1/projects/nosuch/retention", method: .put, headers: Self.admin, body: ByteBuffer(string: #"{"months":3}"#))
            #expect(unknown.status == .notFound && unknown.text.contains("unknown_project"))
            let bad = try await services.config.execute(
                uri: "/v1/projects/default/retention", method: .put, headers: Self.admin, body: ByteBuffer(string: #"{"months":0}"#))
            #expect(bad.status == .badRequest)
        }
    }

    @Test("a person known only from refused records is exported and erased by their id, and suppressed after")
    func onlyRefused() async throws {
        // The wait is the gateway's refresh of the suppression list (WHITELIST_REFRESH_SECONDS, 2):
        // shorter, the upload after the erasure may meet the list the gateway read before it
        // (it did, once, in a loaded full run).
        try await RunningServices.run(erasureSettleSeconds: 2) { services in
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            // Refused at the gateway before any id was resolved: identity-service never heard of dora-phone.
            let dora =
                #"[{"type":"track","event":"Broken","time":\#(now),"distinct_id":"dora-phone","_track_id":7,"identities":{"$identity_anonymous_id":"dora-phone"},"lib":{"$lib":"iOS"},"properties":{"1bad":1}}]"#
            #expect((try await Self.upload(dora, to: services.gateway))["rejected"] as? Int == 1)
            let id = "key=%24identity_anonymous_id&value=dora-phone"
            let export = try await services.config.execute(uri: "/v1/projects/default/user-data?\(id)", method: .get, headers: Self.admin)
            #expect(export.status == .ok, "\(export.text)")
            let lines = export.text.split(separator: "\n").map { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            #expect(lines.compactMap { $0?["table"] as? String } == ["rejected"], "\(export.text)")
            #expect((lines.last??["end"] as? Bool) == true && (lines.last??["rows"] as? Int) == 1, "\(export.text)")
            let asked = try await services.config.execute(
                uri: "/v1/projects/default/erasures", method: .post, headers: Self.admin,
                body: ByteBuffer(string: #"{"user":{"key":"$identity_anonymous_id","value":"dora-phone"}}"#))
            #expect(asked.status == .accepted, "\(asked.text)")
            let job = try JSONDecoder().decode(ErasureJob.self, from: Data(buffer: asked.body))
            let done = try await Self.finished(job.erasureId, services.config)
            #expect(done.collector?.rejected == 1)
            let left = try await TestDatabase.rows(
                services.databaseURL, "SELECT count(*) FROM analytics.rejected WHERE strpos(raw, 'dora-phone') > 0")
            #expect(left.first?[0] == "0")
            #expect((try await Self.upload(dora, to: services.gateway))["suppressed"] as? Int == 1)
            // A user number nobody has is still a 404.
            let nobody = try await services.config.execute(uri: "/v1/projects/default/user-data?user=999999", method: .get, headers: Self.admin)
            #expect(nobody.status == .notFound && nobody.text.contains("unknown_user"))
        }
    }

    @Test("a project config-service does not know is a 404, even when identity-service holds users under its name")
    func unknownProject() async throws {
        try await RunningServices.run { services in
            // identity-service keeps no list of projects: a user can exist under any name.
            let linked = try await services.identity.execute(
                uri: "/v1/projects/nosuch/links", method: .post, headers: Self.service,
                body: ByteBuffer(string: #"{"identities":{"$identity_login_id":"someone"}}"#))
            #expect(linked.status == .ok)
            let erase = try await services.config.execute(
                uri: "/v1/projects/nosuch/erasures", method: .post, headers: Self.admin, body: ByteBuffer(string: #"{"user":{"userId":1}}"#))
            #expect(erase.status == .notFound && erase.text.contains("unknown_project"), "\(erase.text)")
            let export = try await services.config.execute(uri: "/v1/projects/nosuch/user-data?user=1", method: .get, headers: Self.admin)
            #expect(export.status == .notFound && export.text.contains("unknown_project"), "\(export.text)")
        }
    }

    @Test("a job whose runner died mid-way is finished by another once its lease runs out, its counts added to those before")
    func resumesAfterADeadRunner() async throws {
        try await RunningServices.run(erasureSettleSeconds: 0) { services in
            let url = services.databaseURL
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let (_, _, carl) = Self.records(now: now)
            _ = try await Self.upload(carl, to: services.gateway)
            let carlUser = try await Self.user(url, "carl-phone")
            // A runner erased Carl's identities and one batch of rows, then died holding the lease.
            let subject = #"{"users":[\#(carlUser)],"identities":[{"key":"$identity_anonymous_id","value":"carl-phone"}]}"#
            let erased = try await services.identity.execute(
                uri: "/v1/projects/default/erasures/apply", method: .post, headers: Self.service, body: ByteBuffer(string: subject))
            #expect(erased.status == .ok)
            let id = try #require(
                try await TestDatabase.rows(
                    url,
                    """
                    INSERT INTO config.erasures (project, requested, actor, suppress, subject, user_ids, identity_count, state, not_before,
                                                 lease_until, identity_counts, collector_counts)
                    VALUES ('default', '{"userId": \(carlUser)}', 'admin:test', false, $1::jsonb, '{\(carlUser)}', 1, 'collector', now(),
                            now() + interval '2 seconds', '{"identities":1,"users":1,"merges":0,"history":0}',
                            '{"events":7,"profileRecords":0,"profiles":0,"details":0,"rejected":0,"left":2,"rejectedAfter":0,"done":false}')
                    RETURNING erasure_id
                    """, [subject]
                ).first?[0].flatMap(Int64.init))
            let done = try await Self.finished(id, services.config)
            #expect(done.collector?.events == 7 + 2 && done.collector?.profiles == 1 && done.collector?.rejected == 1)
            #expect(try await Self.held(url, users: [carlUser], ids: ["carl-phone"]).values.allSatisfy { $0 == "0" })
            // Asking again for a user who is gone is a 404, not a second job.
            let again = try await services.config.execute(
                uri: "/v1/projects/default/erasures", method: .post, headers: Self.admin, body: ByteBuffer(string: #"{"user":{"userId":\#(carlUser)}}"#))
            #expect(again.status == .notFound)
        }
    }
}
