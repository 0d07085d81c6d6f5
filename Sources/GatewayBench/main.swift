// gateway-bench: events/s through bridge-gateway's decode + validate + rewrite path alone (no HTTP,
// no storage), next to plain JSON parsing of the same bytes measured in the same run.
//
//   swift run -c release gateway-bench [--rounds N] [--uploads N] [--only TEXT]
//
// `--only TEXT` runs the baseline and the paths whose name contains TEXT (for profiling one path).
import BenchSupport
import CompressNIO
import Foundation
import Gateway
import NIOCore

let rounds = Bench.option("--rounds", default: 7)
let uploadCount = Bench.option("--uploads", default: 200)
let recordsPerUpload = 50
let limits = UploadLimits()
let now = Int64(Date().timeIntervalSince1970 * 1000)

// MARK: A realistic corpus: app events, app-relayed H5 events, raw bridge messages.

func appEvent(user: Int, sequence: Int) -> [String: Any] {
    let anonymous = "A1B2C3D4-\(user)-4E5F-8A9B-0C1D2E3F4A5B"
    return [
        "type": "track", "event": ["$AppClick", "$AppViewScreen", "AddToCart", "$AppStart"][sequence % 4],
        "time": now - Int64(sequence * 1000), "distinct_id": anonymous, "anonymous_id": anonymous,
        "identities": ["$identity_idfv": anonymous, "$identity_anonymous_id": anonymous],
        "lib": ["$lib": "iOS", "$lib_method": "autoTrack", "$lib_version": "4.5.0", "$app_version": "2.3.0"],
        "properties": [
            "$os": "iOS", "$os_version": "17.4", "$model": "iPhone15,2", "$manufacturer": "Apple", "$screen_width": 393,
            "$screen_height": 852, "$wifi": true, "$network_type": "WIFI", "$carrier": "中国移动", "$app_id": "com.example.shop",
            "$app_name": "Shop", "$app_version": "2.3.0", "$timezone_offset": -480, "$is_first_day": false,
            "$element_content": "加入购物车", "$element_type": "UIButton", "$screen_name": "ProductViewController",
            "$title": "商品详情", "price": 129.5, "sku": "SKU-\(sequence)", "tags": ["sale", "new"],
            "paid_at": "2024-01-02 03:04:05.06",
        ],
        "_track_id": Int32.random(in: Int32.min...Int32.max), "_flush_time": now,
    ]
}

func h5Event(user: Int, sequence: Int) -> [String: Any] {
    let cookie = "18f2a\(user)c1d-0aa1b2c3d4e5f6-26021d51-370944-18f2a\(user)c1e"
    return [
        "type": "track", "event": "$pageview", "time": now - Int64(sequence * 1000),
        "distinct_id": "A1B2C3D4-\(user)-4E5F-8A9B-0C1D2E3F4A5B", "_hybrid_h5": true,
        "identities": ["$identity_cookie_id": cookie, "$identity_idfv": "A1B2C3D4-\(user)-4E5F-8A9B-0C1D2E3F4A5B"],
        "lib": ["$lib": "js", "$lib_method": "code", "$lib_version": "1.27.10", "$app_version": "2.3.0"],
        "properties": [
            "$timezone_offset": -480, "$screen_height": 852, "$screen_width": 393, "$viewport_height": 700, "$viewport_width": 393,
            "$lib": "js", "$lib_version": "1.27.10", "$latest_traffic_source_type": "引荐流量", "$latest_search_keyword": "未取到值",
            "$latest_referrer": "https://ref.example.org/from", "$url": "https://h5.example.com/shop/item?id=\(sequence)",
            "$title": "Test Page", "$is_first_day": false, "$os": "iOS", "$model": "iPhone15,2", "$app_version": "2.3.0",
        ],
        "_track_id": Int32.random(in: Int32.min...Int32.max), "_flush_time": now,
    ]
}

func bridgeRecord(user: Int, sequence: Int) -> [String: Any] {
    var record = h5Event(user: user, sequence: sequence)
    record["_hybrid_h5"] = nil
    record["server_url"] = "https://sa.example.com:8106/sa.gif?project=production"
    record["distinct_id"] = "18f2a\(user)c1d-0aa1b2c3d4e5f6-26021d51-370944-18f2a\(user)c1e"
    return record
}

func json(_ value: Any) -> [UInt8] { Array(try! JSONSerialization.data(withJSONObject: value)) }

func javaHashCode(_ text: String) -> Int32 {
    var hash: Int32 = 0
    for unit in text.utf16 { hash = hash &* 31 &+ Int32(unit) }
    return hash
}

/// An upload exactly as the iOS SDK sends it: gzip=1, base64, crc, form-encoded `data_list`.
struct Upload {
    let payload: [UInt8]
    let body: [UInt8]
}

let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))
var uploads: [Upload] = []
var relays: [[UInt8]] = []
for index in 0..<uploadCount {
    let records: [[String: Any]] = (0..<recordsPerUpload).map {
        $0 % 5 == 4 ? h5Event(user: index, sequence: $0) : appEvent(user: index, sequence: $0)
    }
    let payload = json(records)
    var buffer = ByteBuffer(bytes: payload)
    let gzipped = try buffer.compress(with: .gzip())
    let base64 = Data(gzipped.readableBytesView).base64EncodedString()
    let form = "gzip=1&data_list=\(base64.addingPercentEncoding(withAllowedCharacters: allowed)!)&crc=\(javaHashCode(base64))"
    uploads.append(Upload(payload: payload, body: Array(form.utf8)))

    let messages: [String] = (0..<recordsPerUpload).map { sequence in
        let record = String(decoding: json(bridgeRecord(user: index, sequence: sequence)), as: UTF8.self)
        switch sequence % 3 {
        case 0: return #"{"callType":"app_h5_track","data":\#(record)}"#
        case 1: return record
        default: return "sensorsanalytics://trackEvent?event=" + record.addingPercentEncoding(withAllowedCharacters: allowed)!
        }
    }
    relays.append(json([
        "app": [
            "server_url": "https://sa.example.com/sa?project=production", "anonymous_id": "A1B2C3D4-\(index)-4E5F-8A9B-0C1D2E3F4A5B",
            "identities": ["$identity_idfv": "A1B2C3D4-\(index)-4E5F-8A9B-0C1D2E3F4A5B"],
            "properties": ["$os": "iOS", "$model": "iPhone15,2", "$app_version": "2.3.0", "$screen_width": 393],
            "app_version": "2.3.0",
        ] as [String: Any],
        "messages": messages,
    ]))
}
let eventsPerRound = uploadCount * recordsPerUpload

// MARK: Baseline: the generic Codable enum the gateway used before its own parser.

enum FoundationJSON: Decodable {
    case null, bool(Bool), int(Int64), double(Double), string(String), array([FoundationJSON]), object([String: FoundationJSON])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let value = try? container.decode(Bool.self) { self = .bool(value) }
        else if let value = try? container.decode(Int64.self) { self = .int(value) }
        else if let value = try? container.decode(Double.self) { self = .double(value) }
        else if let value = try? container.decode(String.self) { self = .string(value) }
        else if let value = try? container.decode([FoundationJSON].self) { self = .array(value) }
        else { self = .object(try container.decode([String: FoundationJSON].self)) }
    }
}

// MARK: Measurement

struct Path {
    let name: String
    let run: () throws -> Int
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
            count += try GatewayHotPath.validate(json: upload.payload, project: "production", limits: limits, now: now)
        }
        return count
    },
    Path(name: "Datong: full upload (form, crc, base64, gunzip, parse, validate)") {
        var count = 0
        for upload in uploads {
            count += try GatewayHotPath.upload(query: "project=production", body: upload.body, limits: limits, now: now)
        }
        return count
    },
    Path(name: "Datong: bridge relay (read 3 forms, verify, rewrite, validate)") {
        var count = 0
        for relay in relays {
            count += try GatewayHotPath.relay(body: relay, project: "production", limits: limits, now: now)
        }
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
