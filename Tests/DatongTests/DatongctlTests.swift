import ConfigService
import DatongContracts
import DatongCtl
import Foundation
import Hummingbird
import HummingbirdTesting
import Prometheus
import Testing

@testable import Collector

/// `datongctl` against a running config-service: what it prints and the exit codes scripts rely on.
@Suite("datongctl")
struct DatongctlTests {
    private func file(_ text: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("datongctl-\(UUID().uuidString).json").path
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test("publish, versions, show, diff and rollback from the command line")
    func lifecycle() async throws {
        try await RunningServices.run { services in
            let environment = ["DATONG_CONFIG_URL": "http://127.0.0.1:\(services.config.port!)", "DATONG_ADMIN_TOKEN": RunningServices.adminToken]
            func ctl(_ arguments: String...) async -> (output: String, exitCode: Int32) {
                await Datongctl.run(arguments, environment: environment)
            }
            let first = try file(#"{"PAGEPV":{"Home":{"userDefined":{"pageid":"1"},"pagePara":{}}}}"#)
            let second = try file(#"{"PAGEPV":{"Home":{"userDefined":{"pageid":"2"},"pagePara":{}}}}"#)
            let published = await ctl("publish", "default", "tracking-table", first, "--platform", "ios", "--note", "first")
            #expect(published.exitCode == 0)
            #expect(published.output.hasPrefix("published default/tracking-table version 1"))
            #expect(await ctl("publish", "default", "tracking-table", second, "--platform", "ios").exitCode == 0)

            let versions = await ctl("versions", "default", "tracking-table", "--platform", "ios")
            #expect(versions.exitCode == 0)
            #expect(versions.output.split(separator: "\n").map { $0.prefix(1) } == ["2", "1"])
            #expect(versions.output.contains("\tfirst"))

            let shown = await ctl("show", "default", "tracking-table", "1", "--platform", "ios")
            #expect(shown.output.contains(#""pageid": "1""#) || shown.output.contains(#""pageid":"1""#))

            let diff = await ctl("diff", "default", "tracking-table", "1", "2", "--platform", "ios")
            #expect(diff.output == #"~ /PAGEPV/Home/userDefined/pageid "1" -> "2""#)

            let rolled = await ctl("rollback", "default", "tracking-table", "1", "--platform", "ios")
            #expect(rolled.exitCode == 0)
            #expect(rolled.output.hasPrefix("restored version 1 of default/tracking-table as version 3"))
        }
    }

    @Test("user export, erase --wait, status, suppressions and lift from the command line")
    func userData() async throws {
        try await RunningServices.run { services in
            let environment = ["DATONG_CONFIG_URL": "http://127.0.0.1:\(services.config.port!)", "DATONG_ADMIN_TOKEN": RunningServices.adminToken]
            func ctl(_ arguments: String...) async -> (output: String, exitCode: Int32) {
                await Datongctl.run(arguments, environment: environment)
            }
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            _ = try await ErasureTests.upload(ErasureTests.records(now: now).ann, to: services.gateway)
            let out = FileManager.default.temporaryDirectory.appendingPathComponent("export-\(UUID().uuidString).jsonl").path
            let exported = await ctl("user", "export", "default", "--id", "$identity_login_id=ann", "--out", out)
            #expect(exported.exitCode == 0, "\(exported.output)")
            let lines = try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n")
            #expect(lines.filter { $0.contains(#""table" : "events""#) }.count == 4)
            #expect(lines.last == #"{"end":true,"rows":7}"#)

            // A distinct_id as analytics.events holds it, given as it is: Ann's phone is hers.
            let byDistinct = await ctl("user", "export", "default", "--id", "ann-phone", "--out", out)
            #expect(byDistinct.exitCode == 0, "\(byDistinct.output)")
            #expect(try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n").last == #"{"end":true,"rows":7}"#)
            // Another device whose anonymous id happens to be "ann": the bare value is two people's.
            _ = try await ErasureTests.upload(
                #"[{"type":"track","event":"AppStart","time":\#(now),"distinct_id":"ann","_track_id":5,"identities":{"$identity_anonymous_id":"ann"},"lib":{"$lib":"iOS"},"properties":{}}]"#,
                to: services.gateway)
            let ambiguous = await ctl("user", "erase", "default", "--id", "ann", "--wait")
            #expect(ambiguous.exitCode == 1)
            #expect(ambiguous.output.contains("HTTP 409"), "\(ambiguous.output)")
            #expect(ambiguous.output.contains("'ann' is an id of 2 users ($identity_"), "\(ambiguous.output)")
            #expect(ambiguous.output.contains("$identity_anonymous_id of user") && ambiguous.output.contains("$identity_login_id of user"))
            #expect(await ctl("user", "status", "default").output == "default has no erasures", "nothing was started")
            #expect(await ctl("user", "export", "default", "--id", "nobody-holds-this").output.contains("404"))
            #expect(await ctl("user", "lift", "default", "--id", "ann").exitCode == 2)
            #expect(await ctl("user", "erase", "default", "--user", "1", "--id", "a=b").exitCode == 2)
            // A user number nobody has (an id nobody holds still names a person: PRIVACY.md).
            #expect(await ctl("user", "erase", "default", "--user", "999999").exitCode == 1)
            let erased = await ctl("user", "erase", "default", "--id", "$identity_login_id=ann", "--wait")
            #expect(erased.exitCode == 0, "\(erased.output)")
            #expect(erased.output.contains("\tdone ") && erased.output.contains("collector: 4 events, 1 profiles, 1 profile records"))
            let status = await ctl("user", "status", "default")
            #expect(status.output.hasPrefix("1\tdone\t"))
            let suppressed = await ctl("user", "suppressions", "default")
            #expect(suppressed.output.contains("$identity_login_id=ann\terasure 1"))
            #expect(await ctl("user", "lift", "default", "--erasure", "1").output == #"lifted: {"lifted":2}"#)
            #expect(await ctl("user", "suppressions", "default").output == "default suppresses no ids")
        }
    }

    @Test("enrichment show and set from the command line, refused values exit 2")
    func enrichment() async throws {
        try await RunningServices.run { services in
            let environment = ["DATONG_CONFIG_URL": "http://127.0.0.1:\(services.config.port!)", "DATONG_ADMIN_TOKEN": RunningServices.adminToken]
            func ctl(_ arguments: String...) async -> (output: String, exitCode: Int32) {
                await Datongctl.run(arguments, environment: environment)
            }
            #expect(
                await ctl("enrichment", "default").output
                    == "default: $ip stored in full; region on; browser from the User-Agent on; crawlers' events kept")
            let set = await ctl("enrichment", "set", "default", "--ip", "truncated", "--user-agent", "off", "--bots", "drop")
            #expect(set.exitCode == 0, "\(set.output)")
            #expect(
                set.output
                    == "default: $ip stored truncated (IPv4 /24, IPv6 /48); region on; browser from the User-Agent off; crawlers' events dropped")
            #expect(await ctl("enrichment", "show", "default").output == set.output)
            #expect(await ctl("enrichment", "set", "default", "--ip", "half").exitCode == 2)
            #expect(await ctl("enrichment", "set", "default", "--region", "yes").exitCode == 2)
            #expect(await ctl("enrichment", "set", "default").exitCode == 2)
            #expect(await ctl("enrichment", "show", "nope").exitCode == 1)
        }
    }

    @Test("status: every service, ingest, the cache, the collector and partitions on one screen; exit 4 and why when something needs attention")
    func status() async throws {
        try await RunningServices.run { services in
            let gateway = "http://127.0.0.1:\(services.gateway.port!)"
            let environment = [
                "DATONG_CONFIG_URL": "http://127.0.0.1:\(services.config.port!)", "DATONG_ADMIN_TOKEN": RunningServices.adminToken,
                "DATONG_GATEWAY_URL": gateway,
            ]
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            _ = try await ErasureTests.upload(
                "["
                    + (0..<3).map {
                        #"{"type":"track","event":"Status","time":\#(now + Int64($0)),"distinct_id":"s-\#($0)","_track_id":\#($0),"lib":{"$lib":"Java"},"properties":{}}"#
                    }
                    .joined(separator: ",") + "]", to: services.gateway)
            // Maintenance and the identity cache report their first success within moments of the start.
            var result = await Datongctl.run(["status"], environment: environment)
            let deadline = Date().addingTimeInterval(20)
            while result.exitCode != 0, Date() < deadline {
                try await Task.sleep(for: .milliseconds(250))
                result = await Datongctl.run(["status"], environment: environment)
            }
            #expect(result.exitCode == 0, "\(result.output)")
            let lines = result.output.split(separator: "\n").map(String.init)
            for service in ["bridge-gateway", "identity-service", "config-service", "collector"] {
                #expect(
                    lines.contains { $0.hasPrefix(service) && $0.contains(" yes ") && $0.contains(" \(DatongRelease.version) ") },
                    "\(service): \(result.output)")
            }
            #expect(lines.contains { $0.hasPrefix("default") && $0.split(separator: " ").dropFirst().first == "3" }, "ingest: \(result.output)")
            #expect(result.output.contains("identity cache (gateway): refreshed"))
            #expect(result.output.contains("(2 months ahead)"), "\(result.output)")
            #expect(result.output.contains("Nothing needs attention."))

            let json = await Datongctl.run(["status", "--json"], environment: environment)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [String: Any], "\(json.output)")
            #expect((object["services"] as? [[String: Any]])?.count == 4)
            #expect((object["problems"] as? [Any])?.isEmpty == true)

            // A gateway that does not answer: exit 4, and the screen says which.
            let down = await Datongctl.run(["status", "--gateway", "http://127.0.0.1:1"], environment: environment)
            #expect(down.exitCode == 4, "\(down.output)")
            #expect(down.output.contains("Needs attention:\n  - bridge-gateway cannot be reached at http://127.0.0.1:1"), "\(down.output)")
            // Two gateway replicas named: a row each.
            let replicas = await Datongctl.run(["status", "--gateway", gateway, "--gateway", "http://127.0.0.1:1"], environment: environment)
            #expect(replicas.output.split(separator: "\n").filter { $0.hasPrefix("bridge-gateway") }.count == 2, "\(replicas.output)")
            #expect(replicas.exitCode == 4)
            #expect(await Datongctl.run(["status"], environment: environment.merging(["DATONG_ADMIN_TOKEN": "wrong"]) { $1 }).exitCode == 1)
        }
    }

    @Test("status: config-service's GATEWAY_URL gives the gateway's row; two releases side by side need attention")
    func statusThroughConfig() async throws {
        // A gateway of an older release, as config-service sees it mid-upgrade.
        let older = Router()
        older.get("/ready") { _, _ in #"{"status":"ready","checks":{}}"# }
        older.get("/metrics") { _, _ in "datong_build_info{version=\"0.4.0\"} 1\nprocess_start_time_seconds 1\n" }
        let stub = Application(router: older, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await stub.serving { gateway in
            let url = "http://127.0.0.1:\(gateway.port!)"
            try await RunningServices.run(configGatewayURL: url) { services in
                let environment = [
                    "DATONG_CONFIG_URL": "http://127.0.0.1:\(services.config.port!)", "DATONG_ADMIN_TOKEN": RunningServices.adminToken,
                ]
                let result = await Datongctl.run(["status"], environment: environment)
                let rows = result.output.split(separator: "\n").filter { $0.hasPrefix("bridge-gateway") }
                #expect(rows.count == 1 && rows[0].contains(" 0.4.0 ") && rows[0].hasSuffix(url), "\(result.output)")
                #expect(result.exitCode == 4)
                #expect(
                    result.output.contains("the services run different releases (0.4.0, \(DatongRelease.version)): finish the upgrade"),
                    "\(result.output)")
                // Named on the command line, the gateway is asked from here instead.
                let named = await Datongctl.run(
                    ["status", "--gateway", "http://127.0.0.1:\(services.gateway.port!)"], environment: environment)
                #expect(!named.output.contains("0.4.0"), "\(named.output)")
            }
        }
    }

    @Test("a service's replicas are the addresses its name resolves to; an address, a name with one, or https is asked as it is")
    func replicaURLs() async {
        #expect(ServiceProbes.resolve("localhost") == ["127.0.0.1"])
        #expect(await ServiceProbes.replicaURLs("http://localhost:8107") == ["http://localhost:8107"])
        #expect(await ServiceProbes.replicaURLs("http://10.0.0.7:8107") == ["http://10.0.0.7:8107"])
        #expect(await ServiceProbes.replicaURLs("http://[fd00::7]:8107") == ["http://[fd00::7]:8107"])
        #expect(await ServiceProbes.replicaURLs("https://identity.internal") == ["https://identity.internal"])
        #expect(await ServiceProbes.replicaURLs("http://no-such-host.invalid:8107") == ["http://no-such-host.invalid:8107"])
    }

    @Test("a project's time zone from the command line, through config-service to the collector, audited")
    func timeZone() async throws {
        try await RunningServices.run { services in
            let environment = ["DATONG_CONFIG_URL": "http://127.0.0.1:\(services.config.port!)", "DATONG_ADMIN_TOKEN": RunningServices.adminToken]
            func ctl(_ arguments: String...) async -> (output: String, exitCode: Int32) {
                await Datongctl.run(arguments, environment: environment)
            }
            #expect(await ctl("timezone", "default").output == "default counts its reports' days in UTC")
            let set = await ctl("timezone", "set", "default", "Asia/Shanghai")
            #expect(set.exitCode == 0, "\(set.output)")
            #expect(await ctl("timezone", "show", "default").output == "default counts its reports' days in Asia/Shanghai")
            let rows = try await TestDatabase.rows(
                services.databaseURL,
                "SELECT (SELECT time_zone FROM collector.report_settings WHERE project = 'default'), (SELECT count(*) FROM config.audit WHERE action = 'reports.time_zone_set')::text"
            )
            #expect(rows == [["Asia/Shanghai", "1"]])
            let unknown = await ctl("timezone", "set", "default", "Mars/Olympus")
            #expect(unknown.exitCode == 1 && unknown.output.contains("not a time zone PostgreSQL knows"), "\(unknown.output)")
            #expect(await ctl("timezone", "set", "default", "Asia/Shang hai").exitCode == 2)
        }
    }

    @Test("every datongctl command the README and docs show is one datongctl parses")
    func documentedCommandsParse() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let docs = try FileManager.default.contentsOfDirectory(at: root.appendingPathComponent("docs"), includingPropertiesForKeys: nil)
        var checked = 0
        for file in [root.appendingPathComponent("README.md")] + docs.filter({ $0.pathExtension == "md" }) {
            let lines = try String(contentsOf: file, encoding: .utf8).components(separatedBy: "\n")
            var index = 0
            while index < lines.count {
                var line = lines[index].trimmingCharacters(in: .whitespaces)
                index += 1
                guard line.hasPrefix("datongctl ") else { continue }
                while line.hasSuffix("\\"), index < lines.count {
                    line = String(line.dropLast()) + " " + lines[index].trimmingCharacters(in: .whitespaces)
                    index += 1
                }
                let words = Self.shellWords(line)
                if let problem = Datongctl.usageProblem(Array(words.dropFirst())) {
                    Issue.record("\(file.lastPathComponent): \(line)\n\(problem)")
                }
                checked += 1
            }
        }
        #expect(checked >= 25, "datongctl lines found in the docs: \(checked)")
    }

    /// A command line's words as a POSIX shell splits them: '…' and "…" quote, a # after a space
    /// starts a comment, and the command ends at a redirection or a pipe.
    static func shellWords(_ line: String) -> [String] {
        var words: [String] = []
        var word: String? = nil
        var quote: Character? = nil
        var previous: Character = " "
        for character in line {
            defer { previous = character }
            if let open = quote {
                if character == open { quote = nil } else { word = (word ?? "") + String(character) }
            } else if character == "'" || character == "\"" {
                quote = character
                word = word ?? ""
            } else if character == "#" && previous == " " {
                break
            } else if character == " " {
                if let done = word { words.append(done) }
                word = nil
            } else {
                word = (word ?? "") + String(character)
            }
        }
        if let done = word { words.append(done) }
        return Array(words.prefix { !["|", ">", ">>", "<", "&&", ";"].contains($0) })
    }

    @Test("datongctl report prints each report's rows as a table, CSV or JSON, through config-service and the collector")
    func reports() async throws {
        try await RunningServices.run { services in
            let environment = ["DATONG_CONFIG_URL": "http://127.0.0.1:\(services.config.port!)", "DATONG_ADMIN_TOKEN": RunningServices.adminToken]
            func ctl(_ arguments: String...) async -> (output: String, exitCode: Int32) {
                await Datongctl.run(arguments, environment: environment)
            }
            let traffic = ReportTests.traffic(seed: 72).map { record in
                var record = record
                record.project = "default"
                return record
            }
            try await TestDatabase.withPool(services.databaseURL) { pool in
                let store = PostgresEventStore(pool: pool)
                for offset in stride(from: 0, to: traffic.count, by: 500) {
                    _ = try await store.write(CollectBatch(receivedAt: ReportTests.start, records: Array(traffic[offset..<min(offset + 500, traffic.count)])))
                }
                // The trend reads the rollups: bring them up to date now rather than wait for the collector's next look.
                let rollup = ReportRollup(pool: pool, interval: .seconds(3600), registry: PrometheusCollectorRegistry(), logger: TestDatabase.logger)
                // (The collector's own look may commit first: this one then fails with 40001 and looks again.)
                var waiting = 1
                for attempt in 1...50 where waiting > 0 {
                    do {
                        waiting = try await rollup.look().daysWaiting
                    } catch  where attempt < 50 {
                        try await Task.sleep(for: .milliseconds(200))
                    }
                }
            }
            let days = ["--from-day", ReportTests.from, "--to-day", ReportTests.to]
            // A trend as a table: a header, a row a month, the count of rows; the same numbers as SQL.
            let trend = await Datongctl.run(["report", "trend", "default", "--event", "Pay", "--unit", "month"] + days, environment: environment)
            #expect(trend.exitCode == 0, "\(trend.output)")
            let expected = try await TestDatabase.rows(
                services.databaseURL,
                "SELECT count(*)::text FROM analytics.events WHERE project = 'default' AND event = 'Pay' AND time >= '2026-08-20Z' AND time < '2026-10-09Z' GROUP BY date_trunc('month', time AT TIME ZONE 'UTC') ORDER BY 1"
            )
            let lines = trend.output.split(separator: "\n").map(String.init)
            #expect(lines.first?.split(separator: " ", omittingEmptySubsequences: true) == ["BUCKET", "EVENT", "GROUP_VALUE", "VALUE"])
            #expect(lines.last == "(3 rows)", "\(trend.output)")
            #expect(lines.dropFirst().dropLast().map { String($0.split(separator: " ").last!) }.sorted() == expected.map { $0[0]! }.sorted())
            // A funnel with a filtered step as CSV: a header and a row a step.
            let funnel = await ctl(
                "report", "funnel", "default", "--step", "$AppStart", "--step",
                #"{"event": "AddToCart", "filters": [{"property": "price", "op": ">", "value": 10}]}"#,
                "--step", "Pay", "--from-day", "2026-08-20", "--to-day", "2026-09-30", "--format", "csv")
            #expect(funnel.exitCode == 0, "\(funnel.output)")
            let csv = funnel.output.components(separatedBy: "\r\n")
            #expect(csv.first == "group_value,step,event,people,conversion,median_seconds")
            #expect(csv.dropFirst().map { $0.split(separator: ",", omittingEmptySubsequences: false)[2] } == ["$AppStart", "AddToCart", "Pay"])
            // JSON is the answer as it is.
            let user = await ctl("report", "user", "default", "9", "--page-size", "3", "--format", "json")
            let answer = try JSONSerialization.jsonObject(with: Data(user.output.utf8)) as? [String: Any]
            #expect((answer?["rows"] as? [[Any]])?.count == 3, "\(user.output)")
            // The function's refusal, and a mistake on the command line.
            let refused = await ctl(
                "report", "retention", "default", "--start-event", "Pay", "--return-event", "Pay", "--periods", "31", "--from-day", "2026-09-01", "--to-day",
                "2026-09-02")
            #expect(refused.exitCode == 1 && refused.output.contains("periods 31: 1 to 30"), "\(refused.output)")
            let badFilter = await ctl(
                "report", "distribution", "default", "--event", "Pay", "--filter", "price>3", "--from-day", "2026-09-01", "--to-day", "2026-09-02")
            #expect(badFilter.exitCode == 2 && badFilter.output.contains("--filter is JSON"), "\(badFilter.output)")
        }
    }

    @Test("refusals and mistakes exit with their codes and say why")
    func failures() async throws {
        try await RunningServices.run { services in
            let url = "http://127.0.0.1:\(services.config.port!)"
            let environment = ["DATONG_CONFIG_URL": url, "DATONG_ADMIN_TOKEN": RunningServices.adminToken]
            let invalid = try file(#"{"BUTTONS":{},"PAGEPV":{"a/b":{"userDefined":{},"pagePara":{}}}}"#)
            let refused = await Datongctl.run(["publish", "default", "tracking-table", invalid], environment: environment)
            #expect(refused.exitCode == 1)
            #expect(refused.output.contains("HTTP 422"))
            #expect(refused.output.contains("/BUTTONS: unknown section"))
            #expect(refused.output.contains("/PAGEPV/a~1b: "))

            let wrongToken = await Datongctl.run(["versions", "default", "remote-config", "--token", "nope"], environment: ["DATONG_CONFIG_URL": url])
            #expect(wrongToken.exitCode == 1)
            #expect(wrongToken.output.contains("401"))
            let noToken = await Datongctl.run(["versions", "default", "remote-config"], environment: ["DATONG_CONFIG_URL": url])
            #expect(noToken.exitCode == 2)
            #expect(noToken.output.contains("DATONG_ADMIN_TOKEN"))
            let unknownKind = await Datongctl.run(["versions", "default", "colours"], environment: environment)
            #expect(unknownKind.exitCode == 2)
            let missingFile = await Datongctl.run(["publish", "default", "remote-config", "/nonexistent/x.json"], environment: environment)
            #expect(missingFile.exitCode == 2)
            let badArguments = await Datongctl.run(["diff", "default", "remote-config", "one"], environment: environment)
            #expect(badArguments.exitCode == 2)
            let unreachable = await Datongctl.run(["versions", "default", "remote-config", "--url", "http://127.0.0.1:1"], environment: environment)
            #expect(unreachable.exitCode == 3)
            #expect(unreachable.output.contains("cannot reach config-service"))
        }
    }
}

/// Every command's options can be found from the tool itself, as `--help` and as `help …`.
@Suite("datongctl help")
struct DatongctlHelpTests {
    @Test("there is a command tree to ask about")
    func tree() {
        #expect(Datongctl.commandPaths.contains(["user", "erase"]))
        #expect(Datongctl.commandPaths.count >= 20)
    }

    @Test("each command's --help and help … print that command's own usage", arguments: Datongctl.commandPaths)
    func help(path: [String]) async {
        let usage = "USAGE: datongctl \(path.joined(separator: " "))"
        for arguments in [path + ["--help"], ["help"] + path, path + ["-h"]] {
            let result = await Datongctl.run(arguments, environment: [:])
            #expect(result.exitCode == 0, "\(arguments)")
            #expect(result.output.contains(usage), "datongctl \(arguments.joined(separator: " ")) printed: \(result.output.prefix(300))")
        }
    }
}
