import BenchSupport
import Foundation
import Synchronization

/// A client that behaves like the Sensors SDKs when the server fails: it keeps a batch until it is
/// acknowledged, retrying after network errors, 5xx, 403 and 404 (honouring `Retry-After`, capped
/// at `maxBackoff` so that a drill stays short), and drops a batch only on any other 4xx. Each
/// worker is a thread with one keep-alive connection, sending its next batch once the last one is
/// acknowledged or dropped.
///
/// Batch `n` holds `recordsPerBatch` records tagged `d<n>-<position>` (property `datong_tag`). Of 50
/// (app traffic), 7 in 10 batches are iOS SDK uploads, 3 in 10 bridge relays; of 1 (web traffic),
/// each is a web page's record as the JS SDK sends it, by image beacon and `sendBeacon` in turn. 1
/// in 5 from a new device.
final class SDKClient: Sendable {
    struct Tally: Sendable {
        var acknowledged: [Int] = []
        /// When each batch of `acknowledged` was acknowledged, and how long it took from its first
        /// attempt (retries included: the wait the SDK's user sees).
        var acknowledgedAt: [ContinuousClock.Instant] = []
        var waits: [Duration] = []
        var dropped: [String] = []
        var networkErrors = 0
        var retriedStatuses: [Int: Int] = [:]
        /// When each attempt failed (a network error or a status the client retries after).
        var failedAt: [ContinuousClock.Instant] = []
        /// The longest any one attempt waited for its answer (or its error).
        var longestAttempt: Duration = .zero
    }

    let recordsPerBatch: Int
    let port: Int
    let maxBackoff: Double
    private let stopping = Atomic<Bool>(false)
    private let next = WorkCounter()
    private let tally = Mutex(Tally())
    private let base = Int64(Date().timeIntervalSince1970 * 1000)
    private let serverURL = "https://sa.example.com/sa?project=default"

    /// - Parameter recordsPerBatch: 50 for app SDK traffic, 1 for web pages' (`--records`).
    init(port: Int, recordsPerBatch: Int = 50, maxBackoff: Double = 0.5) {
        self.port = port
        self.recordsPerBatch = recordsPerBatch
        self.maxBackoff = maxBackoff
    }

    var snapshot: Tally { tally.withLock { $0 } }

    /// Runs `workers` until `stop()`; each then finishes the batch it holds (retrying it until it is
    /// acknowledged, at most `drainSeconds` more).
    func run(workers: Int, drainSeconds: Double = 60) async {
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<workers {
                group.addTask { try? await HTTPLoad.onThread { self.work(drainSeconds: drainSeconds) } }
            }
        }
    }

    func stop() { stopping.store(true, ordering: .relaxed) }

    private func work(drainSeconds: Double) {
        var connection: HTTPLoad.Connection?
        defer { connection?.close() }
        var drainDeadline: ContinuousClock.Instant?
        while !stopping.load(ordering: .relaxed), let number = next.take(below: Int.max) {
            let request = batch(number)
            let firstAttempt = ContinuousClock.now
            var backoff = 0.05
            while true {
                if stopping.load(ordering: .relaxed) {
                    drainDeadline = drainDeadline ?? ContinuousClock.now + .seconds(drainSeconds)
                    if ContinuousClock.now > drainDeadline! { return }
                }
                let attempt = ContinuousClock.now
                let answered = {
                    let took = ContinuousClock.now - attempt
                    self.tally.withLock { $0.longestAttempt = max($0.longestAttempt, took) }
                }
                do {
                    if connection == nil { connection = try HTTPLoad.Connection(port: port) }
                    let answer: HTTPLoad.Answer
                    do {
                        answer = try connection!.exchange(request.bytes)
                        answered()
                    } catch {
                        answered()
                        throw error
                    }
                    if answer.headers["connection"]?.lowercased() == "close" {
                        connection?.close()
                        connection = nil
                    }
                    switch answer.status {
                    case 200:
                        let now = ContinuousClock.now
                        tally.withLock {
                            $0.acknowledged.append(number)
                            $0.acknowledgedAt.append(now)
                            $0.waits.append(now - firstAttempt)
                        }
                    case 403, 404, 500...599:
                        tally.withLock {
                            $0.retriedStatuses[answer.status, default: 0] += 1
                            $0.failedAt.append(.now)
                        }
                        let asked = answer.headers["retry-after"].flatMap(Double.init) ?? backoff
                        Thread.sleep(forTimeInterval: min(asked, maxBackoff))
                        backoff = min(backoff * 2, maxBackoff)
                        continue
                    default:
                        tally.withLock { $0.dropped.append("batch \(number): HTTP \(answer.status) \(answer.text.prefix(200))") }
                    }
                    break
                } catch {
                    connection?.close()
                    connection = nil
                    tally.withLock {
                        $0.networkErrors += 1
                        $0.failedAt.append(.now)
                    }
                    Thread.sleep(forTimeInterval: backoff)
                    backoff = min(backoff * 2, maxBackoff)
                }
            }
        }
    }

    /// The tags of batch `number`'s records.
    func tags(of number: Int) -> [String] { (0..<recordsPerBatch).map { "d\(number)-\($0)" } }

    /// Batch `number`, as the worker that takes that number sends it.
    func batch(_ number: Int) -> HTTPLoad.Request {
        let device = SDKTraffic.Device(number % 5 == 0 ? 1_000_000 + number : number % 200, login: number % 2 == 0 ? "user-\(number % 200)" : nil)
        let first = number * recordsPerBatch
        if recordsPerBatch == 1 {
            let record = SDKTraffic.webEvent(device, sequence: first, time: base - Int64(first), tag: "d\(number)-0")
            let web = SDKTraffic.webRequest(record, project: "default", transport: number % 2 == 0 ? .image : .beacon)
            return HTTPLoad.Request(web.method, web.uri, body: web.body, headers: web.headers)
        }
        if number % 10 >= 7 {
            let records = (0..<recordsPerBatch).map {
                SDKTraffic.bridgeRecord(device, sequence: first + $0, time: base - Int64(first + $0), serverURL: serverURL, tag: "d\(number)-\($0)")
            }
            return HTTPLoad.Request("POST", "/v1/bridge?project=default", body: SDKTraffic.relayBody(device, records: records, serverURL: serverURL))
        }
        let records = (0..<recordsPerBatch).map { position -> [String: Any] in
            let sequence = first + position
            let time = base - Int64(sequence)
            let tag = "d\(number)-\(position)"
            return position % 5 == 4
                ? SDKTraffic.h5Event(device, sequence: sequence, time: time, tag: tag)
                : SDKTraffic.appEvent(device, sequence: sequence, time: time, tag: tag)
        }
        return HTTPLoad.Request("POST", "/sa?project=default", body: try! SDKTraffic.uploadBody(records))
    }
}

extension SDKClient.Tally {
    /// Batches acknowledged in `window`, and the 99th percentile of their waits.
    func acknowledged(in window: Range<ContinuousClock.Instant>) -> (count: Int, p99: Duration) {
        let waits = zip(acknowledgedAt, waits).filter { window.contains($0.0) }.map(\.1).sorted()
        guard !waits.isEmpty else { return (0, .zero) }
        return (waits.count, waits[min(waits.count - 1, Int(Double(waits.count) * 0.99))])
    }
}
