// gateway-bench: events/s through bridge-gateway's decode + validate + rewrite path alone (no HTTP,
// no storage), next to plain JSON parsing of the same bytes measured in the same run.
//
//   swift run -c release gateway-bench [--rounds N] [--uploads N] [--records N] [--only TEXT]
//
// `--only TEXT` runs the baseline and the paths whose name contains TEXT (for profiling one path);
// `--records N` puts N records in each upload and relay (50 by default; 1 is web traffic).
import BenchSupport
import Collector
import DatongContracts
import DatongCrypto
import Enrichment
import Foundation
import Gateway
import GatewayHarness
import Logging
import NIOCore

let rounds = Bench.option("--rounds", default: 7)
let uploadCount = Bench.option("--uploads", default: 200)
let recordsPerUpload = Bench.option("--records", default: 50)
let limits = UploadLimits()
let now = Int64(Date().timeIntervalSince1970 * 1000)

// MARK: A realistic corpus: app events, app-relayed H5 events, raw bridge messages.

var uploads: [Upload] = []
var relays: [[UInt8]] = []
for index in 0..<uploadCount {
    let device = SDKTraffic.Device(index)
    let records: [[String: Any]] = (0..<recordsPerUpload).map {
        let time = now - Int64($0 * 1000)
        return $0 % 5 == 4 ? SDKTraffic.h5Event(device, sequence: $0, time: time) : SDKTraffic.appEvent(device, sequence: $0, time: time)
    }
    uploads.append(Upload(payload: SDKTraffic.json(records), body: try SDKTraffic.uploadBody(records)))
    let pageRecords = (0..<recordsPerUpload).map {
        SDKTraffic.bridgeRecord(device, sequence: $0, time: now - Int64($0 * 1000), serverURL: "https://sa.example.com:8106/sa.gif?project=production")
    }
    relays.append(SDKTraffic.relayBody(device, records: pageRecords, serverURL: "https://sa.example.com/sa?project=production"))
}

// The same uploads encrypted as an SDK with enableEncrypt sends them (gzip=9), for an RSA and an EC key.
let rsaKey = try GeneratedKeyPair.generate(.rsa)
let ecKey = try GeneratedKeyPair.generate(.ec)
let keys = try GatewayHarness.projectKeys([(1, .rsa, rsaKey.privateKeyDER), (2, .ec, ecKey.privateKeyDER)])
/// Encrypted uploads: `newProcess` gives every upload a new AES key and ekey (an app process per
/// upload, the worst case); otherwise one app process sends them all with one ekey, as a device does.
func encryptedUploads(_ pair: GeneratedKeyPair, pkv: Int, newProcess: Bool) throws -> [[UInt8]] {
    var process = try SDKEncryption(publicKeyBase64: pair.publicKeyBase64, type: pair.type, pkv: pkv)
    return try (0..<uploadCount).map { index in
        let device = SDKTraffic.Device(index)
        let records: [[String: Any]] = (0..<recordsPerUpload).map {
            let time = now - Int64($0 * 1000)
            return $0 % 5 == 4 ? SDKTraffic.h5Event(device, sequence: $0, time: time) : SDKTraffic.appEvent(device, sequence: $0, time: time)
        }
        if newProcess { process = try SDKEncryption(publicKeyBase64: pair.publicKeyBase64, type: pair.type, pkv: pkv) }
        return try process.uploadBody(records)
    }
}
let rsaUploads = try encryptedUploads(rsaKey, pkv: 1, newProcess: true)
let rsaDevice = try encryptedUploads(rsaKey, pkv: 1, newProcess: false)
let ecUploads = try encryptedUploads(ecKey, pkv: 2, newProcess: true)
let ecDevice = try encryptedUploads(ecKey, pkv: 2, newProcess: false)

/// An upload exactly as the iOS SDK sends it, and the JSON inside it.
struct Upload {
    let payload: [UInt8]
    let body: [UInt8]
}
let eventsPerRound = uploadCount * recordsPerUpload

// MARK: Baseline: the generic Codable enum the gateway used before its own parser.

enum FoundationJSON: Decodable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([FoundationJSON])
    case object([String: FoundationJSON])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .int(value)
        } else if let value = try? container.decode(Double.self) {
            self = .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([FoundationJSON].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: FoundationJSON].self))
        }
    }
}

// MARK: Measurement

let collectorBatches = try uploads.map { upload in
    CollectBatch(
        receivedAt: now,
        records: try GatewayHarness.prepareUpload(query: "project=production", body: upload.body, limits: limits, now: now).accepted)
}
let collectorBodies = collectorBatches.map(\.jsonBytes)

let enrichmentSources = EnrichmentSources(
    trustedProxies: try TrustedProxies.parse("127.0.0.1").get(), geoIPDatabase: ProcessInfo.processInfo.environment["GEOIP_DATABASE"],
    userAgentRules: GatewaySettings.defaultUserAgentRules, logger: Logger(label: "gateway-bench"))

struct Path {
    let name: String
    let run: () throws -> Int
}

/// The gateway's upload path over encrypted bodies.
func encryptedPath(_ name: String, _ bodies: [[UInt8]]) -> Path {
    Path(name: "Datong: encrypted upload gzip=9, \(name)") {
        var count = 0
        for body in bodies {
            count += try GatewayHarness.prepareUpload(query: "project=production", body: body, limits: limits, now: now, keys: keys).accepted.count
        }
        return count
    }
}

let allPaths: [Path] = [
    Path(name: "JSONSerialization, parse only (baseline)") {
        var count = 0
        for upload in uploads {
            count += (try JSONSerialization.jsonObject(with: Data(upload.payload)) as? [Any])?.count ?? 0
        }
        return count
    },
    Path(name: "JSONDecoder into a Codable enum, parse only") {
        var count = 0
        for upload in uploads {
            if case .array(let list) = try JSONDecoder().decode(FoundationJSON.self, from: Data(upload.payload)) { count += list.count }
        }
        return count
    },
    Path(name: "Datong: parse + validate + normalize") {
        var count = 0
        for upload in uploads {
            count += try GatewayHarness.validate(json: upload.payload, project: "production", limits: limits, now: now)
        }
        return count
    },
    Path(name: "Datong: full upload (form, crc, base64, gunzip, parse, validate)") {
        var count = 0
        for upload in uploads {
            count += try GatewayHarness.upload(query: "project=production", body: upload.body, limits: limits, now: now)
        }
        return count
    },
    // The same uploads from a device behind a trusted balancer, with what Sensors' server adds
    // ($ip, region from GEOIP_DATABASE when set, browser from uap-core's rules when installed).
    Path(name: "Datong: full upload, enriched (address, region, User-Agent)") {
        var count = 0
        for (index, upload) in uploads.enumerated() {
            count += try GatewayHarness.enrichedUpload(
                query: "project=production", body: upload.body, limits: limits, now: now, sources: enrichmentSources,
                peer: IPAddress("127.0.0.1")!, forwardedFor: "1.2.\(3 + index % 2).\(1 + index % 50)",
                userAgent: SDKTraffic.browserUserAgents[index % SDKTraffic.browserUserAgents.count])
        }
        return count
    },
    encryptedPath("RSA, a new ekey every upload", rsaUploads),
    encryptedPath("RSA, one device process (same ekey)", rsaDevice),
    encryptedPath("EC, a new ekey every upload", ecUploads),
    encryptedPath("EC, one device process (same ekey)", ecDevice),
    Path(name: "Datong: bridge relay (read 3 forms, verify, rewrite, validate)") {
        var count = 0
        for relay in relays {
            count += try GatewayHarness.relay(body: relay, project: "production", limits: limits, now: now)
        }
        return count
    },
    // What the gateway sends the collector for these uploads: the internal hop's JSON, written as
    // the gateway writes it, then read as the collector reads it (into its COPY rows).
    Path(name: "Collector wire: the gateway writes the batches") {
        var count = 0
        for batch in collectorBatches where !batch.jsonBytes.isEmpty { count += batch.records.count }
        return count
    },
    Path(name: "Collector wire: the collector reads them into COPY rows") {
        var count = 0
        for body in collectorBodies { count += try IncomingBatch(jsonBytes: body).records.count }
        return count
    },
]

let only = Bench.text("--only")
let paths = allPaths.enumerated().filter { $0.offset == 0 || only.map($0.element.name.contains) ?? true }.map(\.element)

print("gateway-bench: \(uploadCount) requests x \(recordsPerUpload) records = \(eventsPerRound) events per round, \(rounds) rounds, median")
// Rounds interleave the paths, so a slow moment of this shared machine hits all of them alike.
var rates = [[Double]](repeating: [], count: paths.count)
for _ in 0..<rounds {
    for (position, path) in paths.enumerated() {
        let clock = ContinuousClock()
        var accepted = 0
        let elapsed = try clock.measure { accepted = try path.run() }
        guard accepted == eventsPerRound else {
            print("\(path.name): accepted \(accepted) of \(eventsPerRound) events; the corpus is wrong")
            exit(1)
        }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        rates[position].append(Double(eventsPerRound) / seconds)
    }
}
let medians = rates.map(Bench.median)
let baseline = medians[0]
let nameWidth = paths.map(\.name.count).max()!
print("path".padding(toLength: nameWidth, withPad: " ", startingAt: 0) + "   events/s   µs/event   vs baseline")
for (path, rate) in zip(paths, medians) {
    let name = path.name.padding(toLength: nameWidth, withPad: " ", startingAt: 0)
    let perEvent = 1e6 / rate
    print(name + String(format: " %10.0f %10.2f %12.2fx", rate, perEvent, rate / baseline))
}

// What a hostile body costs: a form of half a million junk fields, each named otherwise (5 MiB,
// what about 20 KB of gzip inflates to), around one real upload's parameters. Each field was a
// decoded String in a dictionary (1.6-1.9 s of CPU a request in an outside probe); only the
// parameters the gateway reads are kept now.
// (`--only junk` runs it alone; another `--only` leaves it out.)
if only.map({ "junk fields".contains($0) }) ?? true {
    let junkForm = Array((0..<500_000).map { "f\($0)=1&" }.joined().utf8) + uploads[0].body
    var junkSeconds: [Double] = []
    for _ in 0..<rounds {
        let clock = ContinuousClock()
        let elapsed = try clock.measure { _ = try GatewayHarness.upload(query: "project=production", body: junkForm, limits: limits, now: now) }
        junkSeconds.append(Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }
    let median = Bench.median(junkSeconds) * 1000
    print(String(format: "a %.1f MiB form of 500,000 junk fields around one upload: %.1f ms a request (median)", Double(junkForm.count) / 1_048_576, median))
}
