import DatongRuntime
import DatongTestSupport
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

/// What the services export at /metrics, read as Prometheus reads it: the figures the alerting
/// rules (deploy/prometheus) are written against, and Prometheus' naming conventions.
@Suite("metrics")
struct MetricsTests {
    /// Each sample line: `name{labels} value`, comments left out.
    static func samples(_ text: String) -> [(name: String, labels: String, value: Double)] {
        text.split(separator: "\n").compactMap { line in
            guard !line.hasPrefix("#"), let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                return nil
            }
            let series = line[..<space]
            let brace = series.firstIndex(of: "{") ?? series.endIndex
            return (String(series[..<brace]), String(series[brace...]), value)
        }
    }

    static func value(_ samples: [(name: String, labels: String, value: Double)], _ name: String, _ labels: String = "") -> Double? {
        samples.first { $0.name == name && ($0.labels == labels || labels.isEmpty) }?.value
    }

    /// Metrics the rules name that a test stack does not export: the standby's only with a standby
    /// streaming; Hummingbird's request metrics (`hb_requests`, `http_server_request_duration`) go
    /// through swift-metrics, which only a service's `main` bootstraps onto its registry (scraped
    /// from a running service in docs/OPERATING.md), never code the tests run twice.
    static let notInTests: Set = [
        "datong_postgres_standby_lag_seconds", "datong_postgres_standby_lag_bytes", "hb_requests", "http_server_request_duration_bucket",
    ]

    @Test("every metric the alerting rules name is exported, with the conventions' names, and moves with what happens")
    func rulesNameExportedMetrics() async throws {
        try await RunningServices.run { services in
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let records = (0..<3).map { index in
                #"{"type":"track","event":"Metrics","time":\#(now + Int64(index)),"distinct_id":"m-\#(index)","_track_id":\#(index),"lib":{"$lib":"Java"},"properties":{}}"#
            }
            let rejected = #"{"type":"track","event":"Metrics","time":\#(now),"_track_id":9,"lib":{"$lib":"Java"},"properties":{}}"#
            let (uri, body) = EndToEndTests.form("[" + (records + [records[0], rejected]).joined(separator: ",") + "]")
            let answer = try await services.gateway.execute(uri: uri, method: .post, body: body)
            #expect(answer.status == .ok, "\(answer.text)")
            let refused = try await services.gateway.execute(uri: "/sa?project=default", method: .post, body: ByteBuffer(string: "data_list=%%%"))
            #expect(refused.status == .badRequest)

            var exported: [String: [(name: String, labels: String, value: Double)]] = [:]
            var texts: [String: String] = [:]
            for (job, client) in [
                ("bridge-gateway", services.gateway), ("identity-service", services.identity), ("config-service", services.config),
                ("collector", services.collector),
            ] {
                let response = try await client.execute(uri: "/metrics", method: .get)
                #expect(response.status == .ok)
                exported[job] = Self.samples(response.text)
                texts[job] = response.text
            }
            let gateway = try #require(exported["bridge-gateway"])
            #expect(Self.value(gateway, "datong_gateway_records_total", #"{outcome="stored"}"#) == 3)
            #expect(Self.value(gateway, "datong_gateway_records_total", #"{outcome="duplicate"}"#) == 1)
            #expect(Self.value(gateway, "datong_gateway_records_total", #"{outcome="rejected"}"#) == 1)
            #expect(Self.value(gateway, "datong_ready", #"{check="collector"}"#) == 1)
            let collector = try #require(exported["collector"])
            #expect(Self.value(collector, "datong_ready", #"{check="database"}"#) == 1)
            #expect(Self.value(collector, "datong_collector_waiting_records") == 0)

            // Every datong_ counter ends in _total, and every name the rules use is exported (by a
            // histogram's _bucket series for the latency rules).
            let names = Set(exported.values.flatMap { $0.map(\.name) })
            let rules = try String(
                contentsOf: Fixtures.directory.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                    .appendingPathComponent("deploy/prometheus/datong-rules.yml"), encoding: .utf8)
            let used = Set(
                rules.matches(of: /\b(datong_[a-z_]+|hb_requests|http_server_request_duration_bucket)\b/).map { String($0.output.1) })
            #expect(used.count >= 15, "\(used.sorted())")
            for name in used.subtracting(Self.notInTests).sorted() {
                #expect(names.contains(name), "the rules name \(name), which no service exports")
            }
            for (job, text) in texts {
                for line in text.split(separator: "\n") where line.hasPrefix("# TYPE datong_") && line.hasSuffix(" counter") {
                    let name = line.split(separator: " ")[2]
                    #expect(name.hasSuffix("_total"), "\(job): the counter \(name) does not end in _total")
                }
            }
        }
    }

    @Test("partition maintenance and the identity cache report when they last succeeded")
    func lastSuccess() async throws {
        try await RunningServices.run { services in
            let started = Date().timeIntervalSince1970 - 1
            let deadline = Date().addingTimeInterval(30)
            var collector: [(name: String, labels: String, value: Double)] = []
            var gateway: [(name: String, labels: String, value: Double)] = []
            while Date() < deadline {
                collector = Self.samples(try await services.collector.execute(uri: "/metrics", method: .get).text)
                gateway = Self.samples(try await services.gateway.execute(uri: "/metrics", method: .get).text)
                if (Self.value(collector, "datong_collector_partition_maintenance_last_success_timestamp_seconds") ?? 0) > 0,
                    (Self.value(gateway, "datong_identity_cache_last_refresh_timestamp_seconds") ?? 0) > 0
                {
                    break
                }
                try await Task.sleep(for: .milliseconds(200))
            }
            #expect(Self.value(collector, "datong_collector_partition_months_ahead") == 2)
            #expect((Self.value(collector, "datong_collector_partition_maintenance_last_success_timestamp_seconds") ?? 0) >= started)
            #expect((Self.value(gateway, "datong_identity_cache_last_refresh_timestamp_seconds") ?? 0) >= started)
        }
    }

    @Test("a scrape waits for the readiness checks a bounded time: one that hangs counts as failed")
    func readinessWithinLimit() async throws {
        let checks = [
            ReadinessCheck("fast") { true },
            ReadinessCheck("hangs") {
                try? await Task.sleep(for: .seconds(30))
                return true
            },
            ReadinessCheck("fails") { false },
        ]
        let started = ContinuousClock.now
        let passed = await ReadinessCheck.run(checks, within: .milliseconds(300))
        #expect(passed == [true, false, false])
        #expect(ContinuousClock.now - started < .seconds(10), "the scrape did not wait for the hung check")
    }
}
