import ArgumentParser
import AsyncHTTPClient
import DatongContracts
import DatongJSON
import Foundation
import NIOCore
import NIOHTTP1

/// `datongctl status`: one screen of a running deployment, from the services' own `/ready` and
/// `/metrics` (config-service and the gateway asked directly, identity-service and the collector
/// through config-service's `GET /v1/status`) and the collector's per-minute counts.
struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "One screen of a running deployment: each service, ingest, the identity cache, the collector, PostgreSQL, partitions.",
        discussion: """
            Asks config-service (--url / DATONG_CONFIG_URL, with the admin token), which asks each replica of \
            identity-service, the collector and (with its GATEWAY_URL set) the gateway; the gateway is asked from \
            here instead when --gateway or DATONG_GATEWAY_URL names it (default without either: config-service's \
            rows, else http://127.0.0.1:8106). Exit codes: 0 all well, 4 something needs attention \
            (each thing named under "Needs attention"), 2 wrong command line, 3 config-service unreachable. \
            --json prints the same as one JSON object for scripts.
            """
    )

    @OptionGroup var connection: ConnectionOptions
    @Option(
        help:
            "Gateway base URL, asked from here; repeat it for each replica (default: DATONG_GATEWAY_URL, else config-service's rows, else http://127.0.0.1:8106)."
    )
    var gateway: [String] = []
    @Flag(help: "Print one JSON object instead of the screen.")
    var json = false

    func run() throws {}

    /// Exit code when something needs attention (the screen is printed either way).
    static let attentionExitCode: Int32 = 4

    func execute(environment: [String: String]) async -> (output: String, exitCode: Int32) {
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(timeout: .init(connect: .seconds(3))))
        let result = await report(environment: environment, client: client)
        try? await client.shutdown()
        return result
    }

    private func report(environment: [String: String], client: HTTPClient) async -> (output: String, exitCode: Int32) {
        do {
            let admin = Admin(target: try Target(options: connection, environment: environment), http: client)
            // Named here, the gateways are asked from here; otherwise config-service's view of them
            // (its GATEWAY_URL, each replica), or the default URL when it has none.
            let named = gateway.isEmpty ? environment["DATONG_GATEWAY_URL"].map { [$0] } : gateway
            let gateways = named?.map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "/")) }
            let report = try await DeploymentStatus.gather(admin: admin, gatewayURLs: gateways, http: client)
            let text: String
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
                text = String(decoding: try encoder.encode(report), as: UTF8.self)
            } else {
                text = report.screen
            }
            return (text, report.problems.isEmpty ? 0 : Self.attentionExitCode)
        } catch let failure as CtlFailure {
            return (failure.message, failure.exitCode)
        } catch {
            return ("datongctl: \(error)", CtlFailure.unreachable("").exitCode)
        }
    }
}

/// What `datongctl status` found, and what needs attention.
struct DeploymentStatus: Codable {
    struct Service: Codable {
        var name: String
        var url: String
        var reachable: Bool
        var ready: Bool
        var failedChecks: [String]
        var uptimeSeconds: Double?
        /// The release it runs (`datong_build_info{version}`); nil from one too old to say.
        var version: String?
    }

    struct Ingest: Codable {
        var project: String
        var received = 0
        var stored = 0
        var duplicates = 0
        var rejected = 0
    }

    struct Standby: Codable {
        var name: String
        var lagSeconds: Double?
        var lagBytes: Double?
    }

    var at: String
    var services: [Service] = []
    var ingestMinutes = 5
    var ingest: [Ingest] = []
    var identityCacheAgeSeconds: Double?
    var gatewayRefusals: [String: Double] = [:]
    var collectorWaitingRecords: Double?
    var reportRollupAgeSeconds: Double?
    var standbys: Double?
    var standbyLag: [Standby] = []
    var oldestPartition: String?
    var newestPartition: String?
    var partitionMonthsAhead: Double?
    var maintenanceAgeSeconds: Double?
    var problems: [String] = []

    static let order = ["bridge-gateway", "identity-service", "config-service", "collector"]

    /// - Parameter gatewayURLs: the gateways to ask from here; nil: config-service's rows of them.
    static func gather(admin: Admin, gatewayURLs: [String]?, http: HTTPClient) async throws -> DeploymentStatus {
        let now = Date()
        var status = DeploymentStatus(at: ISO8601DateFormatter().string(from: now))
        async let configProbe = probe("config-service", admin.target.baseURL, http: http)
        let behind = try admin.decode(ServicesStatus.self, try await admin.send(.GET, "/v1/status"))
        var gateways = behind.services.filter { $0.name == "bridge-gateway" }
        if let urls = gatewayURLs ?? (gateways.isEmpty ? ["http://127.0.0.1:8106"] : nil) {
            gateways = []
            for url in urls.prefix(32) { gateways.append(await probe("bridge-gateway", url, http: http)) }
        }
        let probes = gateways + [await configProbe] + behind.services.filter { $0.name != "bridge-gateway" }
        // Each service's samples, every replica's together (the gateway's replicas by their URL).
        var metrics: [String: [MetricSample]] = [:]
        for probe in probes.sorted(by: { (order.firstIndex(of: $0.name) ?? 9) < (order.firstIndex(of: $1.name) ?? 9) }) {
            let samples = MetricSample.parse(probe.metrics ?? "")
            metrics[probe.name, default: []] += samples
            let checks = (probe.readiness.flatMap { try? JSONValue(parsing: Array($0.utf8)) })?["checks"]?.objectValue ?? [:]
            let failed = checks.filter { $0.value.stringValue != "ok" }.map(\.key).sorted()
            let started = MetricSample.value(samples, "process_start_time_seconds")
            status.services.append(
                Service(
                    name: probe.name, url: probe.url, reachable: probe.error == nil, ready: probe.ready, failedChecks: failed,
                    uptimeSeconds: started.map { now.timeIntervalSince1970 - $0 },
                    version: samples.first { $0.name == "datong_build_info" }?.label("version")))
            if probe.error != nil {
                status.problems.append("\(probe.name) cannot be reached at \(probe.url)")
            } else if !probe.ready {
                status.problems.append("\(probe.name) is not ready" + (failed.isEmpty ? "" : ": \(failed.joined(separator: ", ")) failed"))
            }
        }
        let gateway = metrics["bridge-gateway"] ?? []
        // The stalest cache among the replicas.
        if let refreshed = gateway.filter({ $0.name == "datong_identity_cache_last_refresh_timestamp_seconds" }).map(\.value).min() {
            status.identityCacheAgeSeconds = now.timeIntervalSince1970 - refreshed
        }
        for sample in gateway where sample.name == "datong_refusals_total" {
            status.gatewayRefusals[sample.label("code") ?? "?", default: 0] += sample.value
        }
        let collector = metrics["collector"] ?? []
        status.collectorWaitingRecords = MetricSample.value(collector, "datong_collector_waiting_records")
        status.reportRollupAgeSeconds = MetricSample.value(collector, "datong_report_rollup_age_seconds").flatMap { $0 >= 0 ? $0 : nil }
        status.standbys = MetricSample.value(collector, "datong_postgres_standbys")
        for sample in collector where sample.name == "datong_postgres_standby_lag_seconds" {
            let name = sample.label("standby") ?? "?"
            let bytes = collector.first { $0.name == "datong_postgres_standby_lag_bytes" && $0.label("standby") == name }?.value
            status.standbyLag.append(Standby(name: name, lagSeconds: sample.value, lagBytes: bytes))
        }
        status.partitionMonthsAhead = MetricSample.value(collector, "datong_collector_partition_months_ahead")
        status.oldestPartition = MetricSample.value(collector, "datong_collector_partition_oldest_start_timestamp_seconds").map(month)
        status.newestPartition = MetricSample.value(collector, "datong_collector_partition_newest_end_timestamp_seconds").map {
            month($0 - 86_400)
        }
        if let last = MetricSample.value(collector, "datong_collector_partition_maintenance_last_success_timestamp_seconds"), last > 0 {
            status.maintenanceAgeSeconds = now.timeIntervalSince1970 - last
        }
        try await status.countIngest(admin: admin, now: now)
        status.judge()
        return status
    }

    /// Records a project received in the last `ingestMinutes`, from the collector's per-minute counts.
    private mutating func countIngest(admin: Admin, now: Date) async throws {
        let projects = try admin.decode([ProjectInfo].self, try await admin.send(.GET, "/v1/projects"))
        let since = now.addingTimeInterval(-Double(ingestMinutes * 60))
        let parser = ISO8601DateFormatter()
        parser.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let plain = ISO8601DateFormatter()
        for project in projects.prefix(50) {
            let answer = try await admin.send(.GET, "/v1/projects/\(project.name)/ingest-counts", query: [("hours", "1")])
            var counts = Ingest(project: project.name)
            for minute in (try? JSONValue(parsing: answer))?["minutes"]?.arrayValue ?? [] {
                let text = (minute["minute"]?.stringValue ?? "").replacingOccurrences(of: " ", with: "T")
                guard let at = parser.date(from: text) ?? plain.date(from: text) ?? Self.postgresTime(text), at >= since else { continue }
                counts.received += Int(minute["received"]?.integerValue ?? 0)
                counts.stored += Int(minute["stored"]?.integerValue ?? 0)
                counts.duplicates += Int(minute["duplicates"]?.integerValue ?? 0)
                counts.rejected += Int(minute["rejected"]?.integerValue ?? 0)
            }
            ingest.append(counts)
        }
    }

    /// PostgreSQL's `timestamptz` as JSON gives it (`2026-11-29T04:30:00+00:00`).
    private static func postgresTime(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "yyyy-MM-dd'T'HH:mm:ssXXXXX"
        return formatter.date(from: text)
    }

    /// What needs attention, by the thresholds of deploy/prometheus/datong-rules.yml.
    private mutating func judge() {
        // Two releases side by side: right during a rolling upgrade, a problem when it stays.
        let versions = Set(services.compactMap(\.version))
        if versions.count > 1 {
            problems.append("the services run different releases (\(versions.sorted().joined(separator: ", "))): finish the upgrade")
        }
        if let age = identityCacheAgeSeconds, age > 60 {
            problems.append("the gateway's identity cache has not refreshed for \(Self.duration(age)) (DatongIdentityCacheStale)")
        }
        if let waiting = collectorWaitingRecords, waiting > 100_000 {
            problems.append("\(Int(waiting)) records wait for a collector writer (DatongCollectorBacklog)")
        }
        if let ahead = partitionMonthsAhead, ahead < 1 {
            problems.append("next month's event partitions do not exist (DatongPartitionsMissing)")
        }
        if let age = maintenanceAgeSeconds, age > 3 * 3600 {
            problems.append("partition maintenance and retention last succeeded \(Self.duration(age)) ago (DatongPartitionMaintenanceLate)")
        }
        for standby in standbyLag where (standby.lagSeconds ?? 0) > 30 || (standby.lagBytes ?? 0) > 1e9 {
            problems.append("standby \(standby.name) lags \(Self.duration(standby.lagSeconds ?? 0)) (DatongStandbyLagging)")
        }
        if let age = reportRollupAgeSeconds, age > 300 {
            problems.append("report rollups are \(Self.duration(age)) behind (DatongReportsBehind)")
        }
    }

    var screen: String {
        var lines = ["Datong status at \(at)", ""]
        lines.append(Self.columns(["SERVICE", "READY", "UP", "VERSION", "URL"]))
        for service in services {
            let ready =
                !service.reachable
                ? "unreachable" : service.ready ? "yes" : "no" + (service.failedChecks.isEmpty ? "" : " (\(service.failedChecks.joined(separator: ", ")))")
            lines.append(
                Self.columns([service.name, ready, service.uptimeSeconds.map(Self.duration) ?? "-", service.version ?? "-", service.url]))
        }
        lines.append("")
        lines.append(Self.columns(["INGEST, LAST \(ingestMinutes) MIN", "RECEIVED", "STORED", "DUPLICATES", "REJECTED"]))
        for project in ingest {
            lines.append(Self.columns([project.project, "\(project.received)", "\(project.stored)", "\(project.duplicates)", "\(project.rejected)"]))
        }
        lines.append("")
        if let age = identityCacheAgeSeconds {
            lines.append("identity cache (gateway): refreshed \(Self.duration(age)) ago")
        }
        if !gatewayRefusals.isEmpty {
            let top = gatewayRefusals.sorted { ($1.value, $0.key) < ($0.value, $1.key) }.prefix(5)
            lines.append("gateway refusals since it started: " + top.map { "\($0.key) \(Int($0.value))" }.joined(separator: ", "))
        }
        var collectorLine = "collector: \(collectorWaitingRecords.map { "\(Int($0))" } ?? "?") records waiting"
        if let age = reportRollupAgeSeconds { collectorLine += "; report rollups \(Self.duration(age)) behind" }
        lines.append(collectorLine)
        var database = "PostgreSQL: \(standbys.map { "\(Int($0)) standby(s) streaming" } ?? "standbys unknown")"
        for standby in standbyLag {
            database += "; \(standby.name) \(Self.duration(standby.lagSeconds ?? 0)) behind (\(Int(standby.lagBytes ?? 0)) bytes)"
        }
        lines.append(database)
        var partitions = "partitions: \(oldestPartition ?? "?") to \(newestPartition ?? "?")"
        if let ahead = partitionMonthsAhead { partitions += " (\(Int(ahead)) months ahead)" }
        if let age = maintenanceAgeSeconds {
            partitions += "; maintenance and retention ran \(Self.duration(age)) ago, next in about \(Self.duration(max(0, 3600 - age)))"
        }
        lines.append(partitions)
        lines.append("")
        if problems.isEmpty {
            lines.append("Nothing needs attention.")
        } else {
            lines.append("Needs attention:")
            lines += problems.map { "  - " + $0 }
        }
        return lines.joined(separator: "\n")
    }

    private static func columns(_ values: [String]) -> String {
        let widths = [24, 12, 10, 12, 10]
        return values.enumerated().map { index, value in
            index == values.count - 1 ? value : value.padding(toLength: max(widths[min(index, widths.count - 1)], value.count + 1), withPad: " ", startingAt: 0)
        }.joined()
    }

    static func duration(_ seconds: Double) -> String {
        if seconds < 60 { return String(format: "%.1f s", seconds) }
        let whole = Int(seconds)
        if whole < 3600 { return "\(whole / 60) min" }
        if whole < 86_400 { return "\(whole / 3600) h \(whole % 3600 / 60) min" }
        return "\(whole / 86_400) d \(whole % 86_400 / 3600) h"
    }

    private static func month(_ unixSeconds: Double) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let parts = calendar.dateComponents([.year, .month], from: Date(timeIntervalSince1970: unixSeconds))
        return String(format: "%04d-%02d", parts.year ?? 0, parts.month ?? 0)
    }

    /// A service's `/ready` and `/metrics`, each within 3 s.
    static func probe(_ name: String, _ baseURL: String, http: HTTPClient) async -> ServiceProbe {
        func get(_ path: String, limit: Int) async -> (status: UInt, text: String)? {
            var request = HTTPClientRequest(url: baseURL + path)
            request.method = .GET
            guard let response = try? await http.execute(request, timeout: .seconds(3)),
                let body = try? await response.body.collect(upTo: limit)
            else { return nil }
            return (response.status.code, String(buffer: body))
        }
        async let ready = get("/ready", limit: 64 << 10)
        async let metrics = get("/metrics", limit: ServiceProbe.maxMetricsBytes)
        let (readiness, text) = await (ready, metrics)
        return ServiceProbe(
            name: name, url: baseURL, ready: readiness?.status == 200, readiness: readiness?.text, metrics: text?.text,
            error: readiness == nil && text == nil ? "cannot be reached" : nil)
    }
}

/// One sample of Prometheus' text format: `name{labels} value`.
struct MetricSample {
    let name: String
    let labels: [String: String]
    let value: Double

    func label(_ key: String) -> String? { labels[key] }

    static func value(_ samples: [MetricSample], _ name: String) -> Double? {
        samples.first { $0.name == name }?.value
    }

    /// The samples of `text`; comments and lines it cannot read are left out.
    static func parse(_ text: String) -> [MetricSample] {
        text.split(separator: "\n").compactMap { line in
            guard !line.hasPrefix("#"), let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                return nil
            }
            let series = line[..<space]
            guard let brace = series.firstIndex(of: "{") else { return MetricSample(name: String(series), labels: [:], value: value) }
            var labels: [String: String] = [:]
            let inner = series[series.index(after: brace)...].dropLast()
            for pair in inner.split(separator: ",") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                guard parts.count == 2 else { continue }
                labels[String(parts[0])] = String(parts[1]).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            }
            return MetricSample(name: String(series[..<brace]), labels: labels, value: value)
        }
    }
}
