import BenchSupport
import DatongPostgres
import Foundation
import Logging
import Synchronization

/// What the drills found: each check prints ok or FAIL at once, and `finish` exits 1 when any failed.
@MainActor
final class Checks {
    private(set) var failures: [String] = []

    func check(_ condition: Bool, _ message: String) {
        Bench.say("  \(condition ? "ok  " : "FAIL") \(message)")
        if !condition { failures.append(message) }
    }

    func finish(logDirectory: String) -> Never {
        if failures.isEmpty {
            say("all drills passed")
            exit(0)
        }
        say("\(failures.count) checks failed (service logs in \(logDirectory)):")
        for failure in failures { print("  - \(failure)") }
        exit(1)
    }

    /// After the load stopped: every acknowledged event is in `analytics.events` exactly once,
    /// nothing was refused for good or rejected, and `analytics.ingest_counts` adds up.
    func storedExactlyOnce(url: String, client: SDKClient, logger: Logger) async throws {
        let tally = client.snapshot
        say("checking what is stored")
        let pool = PostgresPool(url: url, maxConnections: 1, logger: logger)
        let stored = try await pool.withConnection { connection in
            try connection.query("SELECT properties->>'datong_tag' FROM analytics.events").rows.map { $0[0] ?? "" }
        }
        let counts = try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT (SELECT count(*) FROM collector.events), (SELECT count(*) FROM collector.rejected),
                       sum(received), sum(stored), sum(duplicates), sum(rejected) FROM analytics.ingest_counts
                """
            ).rows[0].map { Int($0 ?? "") ?? -1 }
        }
        await pool.close()
        var seen: [String: Int] = [:]
        for tag in stored { seen[tag, default: 0] += 1 }
        let expected = tally.acknowledged.flatMap(client.tags(of:))
        let missing = expected.filter { seen[$0] == nil }
        let repeated = seen.filter { $0.value > 1 }
        check(tally.acknowledged.count > 0, "\(tally.acknowledged.count) batches (\(expected.count) events) acknowledged during the drills")
        check(
            missing.isEmpty,
            "every acknowledged event is in analytics.events (\(missing.count) missing\(missing.isEmpty ? "" : ", e.g. " + missing.prefix(3).joined(separator: ", ")))"
        )
        check(repeated.isEmpty, "no event is stored twice (\(repeated.count) stored more than once)")
        check(tally.dropped.isEmpty, "no batch was refused for good (\(tally.dropped.prefix(3).joined(separator: "; ")))")
        check(counts[1] == 0, "nothing rejected (\(counts[1]) rejected records)")
        check(
            counts[2] == counts[3] + counts[4] + counts[5],
            "ingest_counts: received \(counts[2]) = stored \(counts[3]) + duplicates \(counts[4]) + rejected \(counts[5])")
        check(counts[3] == counts[0], "ingest_counts: stored \(counts[3]) = rows in analytics.events \(counts[0])")
        check(counts[5] == counts[1], "ingest_counts: rejected \(counts[5]) = rows in analytics.rejected \(counts[1])")
        Bench.say(
            "    \(stored.count - expected.count) events stored beyond the acknowledged ones (sent, stored, but the answer was lost to a kill; the SDK would send them again and they would count as duplicates)"
        )
    }
}

func say(_ message: String) { Bench.say("==> \(message)") }

/// One line of the load's progress so far.
func progress(_ client: SDKClient, _ label: String) {
    let tally = client.snapshot
    let retried = tally.retriedStatuses.sorted { $0.key < $1.key }.map { "\($0.value)×\($0.key)" }.joined(separator: " ")
    Bench.say(
        "    \(label): \(tally.acknowledged.count) batches acknowledged; retried after \(tally.networkErrors) network errors\(retried.isEmpty ? "" : " and " + retried)"
    )
}

/// Runs a shell command (from the script) on a thread of its own; true when it exited 0.
func shell(_ command: String) async throws -> Bool {
    let status = Mutex<Int32>(-1)
    try await HTTPLoad.onThread { status.withLock { $0 = system(command) } }
    return status.withLock { $0 } == 0
}
