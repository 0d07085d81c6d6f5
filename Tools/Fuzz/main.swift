// datong-fuzz: libFuzzer targets for every parser that reads untrusted bytes (docs/RELIABILITY.md).
//
//   datong-fuzz TARGET [libFuzzer options] [CORPUS_DIR ...]   fuzz (a build with -DFUZZING, scripts/fuzz)
//   datong-fuzz TARGET FILE ...                                 replay inputs once (any build)
//   datong-fuzz seed FIXTURES_DIR OUT_DIR                       write seed corpora from the SDK captures
//
// Targets, and what each asserts beyond "no crash, no hang, no sanitizer report":
//   form    an upload's form body through form decoding, crc, base64, gzip, JSON and every record's
//           checks; every record the gateway accepts is one PostgreSQL stores (`UntrustedText.storageProblem`)
//   records the decoded JSON payload through the same path (base64-encoded here, so the fuzzer
//           explores JSON and records rather than base64)
//   relay   a bridge relay body: the app context, the three message forms, verification, rewriting
//           and record checks; the same storability oracle
//   gzip    the bounded multi-member gzip inflater; never more output than the limit
//   json    the tape parser and its readers: unescaping, integers, numbers, entry links in bounds;
//           every string reads as Foundation reads it, where Foundation reads it
//   url     the WHATWG-style URL reader for server_url and page hosts; hosts hold no forbidden byte
//   address X-Forwarded-For lines (one per input line) from a trusted balancer, and the same text
//           as a $url: the client found reads back as itself from its text and its truncation is
//           stable; a $url_host holds no / ? # and is in the URL
//   batch   the collector's batch decoding and the batch writer: what decodes writes back the same;
//           the collector's one-pass reading (`IncomingBatch`, over the contract's one record
//           reader, `CollectRecordReader`) agrees with the typed batch on what is a batch, on every
//           record's key, and on which records cannot be stored
//   group   a group of batches (`POST /v1/batch-groups`): each batch is read on its own, refused
//           alone exactly when the contract refuses it, and read whole otherwise
//   escapes the decoded JSON payload, and the same JSON with every string (keys too) written as
//           \uXXXX escapes: both must store byte for byte the same records ("one JSON text, one
//           meaning"); and ids compare as their bytes (`ExactText`), never canonically, so an NFC
//           and an NFD form of one text are two ids
//   envelopes  an encrypted upload's data_list (gzip=9/13 envelopes) with the published test keys of
//           Tests/Fixtures/sensors: unwrapping, AES, gunzip, records; the storability oracle
import CLibFuzzer
import Collector
import DatongContracts
import DatongCrypto
import DatongJSON
import Enrichment
import Foundation
import Gateway
import GatewayHarness
import IdentityCore

let limits = UploadLimits(maxDecompressedBytes: 1 << 20, maxRecordsPerRequest: 200, timeWindowPastDays: 36_500)
let now: Int64 = 1_795_273_119_736
/// The balancers the `address` target's peer is one of.
let balancers = try! TrustedProxies.parse("10.0.0.0/8, fd00::/8").get()

/// Stops the run the way libFuzzer reports a crash: the input is saved and the reason printed.
func violated(_ what: String, _ input: [UInt8]) -> Never {
    fatalError("\(what); input \(input.count) bytes: \(String(decoding: input.prefix(200), as: UTF8.self).debugDescription)")
}

/// What PostgreSQL would refuse in a record the gateway accepted.
func checkStorable(_ outcome: GatewayHarness.Outcome, _ input: [UInt8]) {
    for record in outcome.accepted {
        if let problem = UntrustedText.storageProblem(ofJSONObject: record.properties.utf8) {
            violated("accepted properties PostgreSQL refuses: \(problem)", input)
        }
        let texts = [
            record.type, record.event, record.distinctId, record.anonymousId, record.loginId, record.lib,
            record.libVersion, record.appVersion, record.itemType, record.itemId, record.project,
        ]
        for text in texts.compactMap({ $0 }) where text.utf8.contains(0) { violated("an accepted field holds NUL", input) }
        for id in [record.distinctId, record.anonymousId, record.loginId].compactMap({ $0 }) where !IDRule.fits(id) {
            violated("an accepted id is over \(IDRule.maxLength) characters", input)
        }
        if !(0...StoredTime.latestMillis).contains(record.time) { violated("an accepted time is out of range", input) }
    }
}

/// The published test keys (Tests/Fixtures/sensors/encryption-test-keys.json), for the envelopes target.
let testKeys: GatewayHarness.ProjectKeysHandle? = {
    guard let data = FileManager.default.contents(atPath: "Tests/Fixtures/sensors/encryption-test-keys.json"),
        let file = try? JSONSerialization.jsonObject(with: data) as? [String: Any], let keys = file["keys"] as? [[String: Any]]
    else { return nil }
    let parsed: [(pkv: Int, type: KeyType, pkcs8DER: [UInt8])] = keys.compactMap { key in
        guard let pkv = key["pkv"] as? Int, let type = (key["type"] as? String).flatMap(KeyType.init(rawValue:)),
            let der = (key["privateKeyPKCS8"] as? String).flatMap({ Data(base64Encoded: $0) })
        else { return nil }
        return (pkv, type, Array(der))
    }
    return try? GatewayHarness.ProjectKeysHandle(parsed)
}()

/// `value` as JSON text with every string, keys included, written as `\uXXXX` escapes (surrogate
/// pairs beyond the BMP): the same JSON value, spelled otherwise. nil when a string holds a lone
/// surrogate escape (read as U+FFFD, which re-escaped would be another text).
func escapedForm(_ value: JSONRef) -> [UInt8]? {
    var out: [UInt8] = []
    func string(_ ref: JSONRef) -> Bool {
        let text = Array(ref.textBytes)
        if text.contains(0xEF), String(decoding: text, as: UTF8.self).unicodeScalars.contains("\u{FFFD}") { return false }
        out.append(UInt8(ascii: "\""))
        for unit in String(decoding: text, as: UTF8.self).utf16 {
            out += Array("\\u".utf8) + Array(String(format: "%04x", unit).utf8)
        }
        out.append(UInt8(ascii: "\""))
        return true
    }
    func write(_ ref: JSONRef) -> Bool {
        switch ref.kind {
        case .string: return string(ref)
        case .object:
            out.append(UInt8(ascii: "{"))
            for (index, (key, member)) in ref.members.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                guard string(key) else { return false }
                out.append(UInt8(ascii: ":"))
                guard write(member) else { return false }
            }
            out.append(UInt8(ascii: "}"))
        case .array:
            out.append(UInt8(ascii: "["))
            for (index, element) in ref.elements.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                guard write(element) else { return false }
            }
            out.append(UInt8(ascii: "]"))
        default: out += ref.rawBytes
        }
        return true
    }
    return write(value) ? out : nil
}

/// An upload of `json` as the iOS SDK sends it (base64, form-encoded).
func upload(json: [UInt8]) -> GatewayHarness.Outcome? {
    let body = Array("data_list=".utf8) + Array(Data(json).base64EncodedString().addingPercentEncoding(withAllowedCharacters: .alphanumerics)!.utf8)
    return try? GatewayHarness.prepareUpload(query: "project=fuzz", body: body, limits: limits, now: now)
}

let targets: [String: ([UInt8]) -> Void] = [
    "escapes": { input in
        guard let document = try? JSONParser.parse(input, maxDepth: limits.maxJSONDepth), let escaped = escapedForm(document.root) else { return }
        let plain = upload(json: input)
        let other = upload(json: escaped)
        guard let plain, let other else {
            if (plain == nil) != (other == nil) { violated("one spelling of the JSON is an upload and the other is not", input) }
            return
        }
        // Byte for byte: CollectRecord's == compares strings as Swift does (canonically).
        if CollectBatch(receivedAt: now, records: plain.accepted).jsonBytes != CollectBatch(receivedAt: now, records: other.accepted).jsonBytes
            || plain.rejected.count != other.rejected.count
        {
            violated("the escaped spelling of the JSON stores other records", input)
        }
        let ids = plain.accepted.prefix(16).compactMap(\.distinctId)
        for a in ids {
            for b in ids {
                let same = IdentityKey(key: "k", value: a) == IdentityKey(key: "k", value: b)
                if same != Array(a.utf8).elementsEqual(Array(b.utf8)) { violated("ids compare otherwise than their bytes", input) }
                if same, IdentityKey(key: "k", value: a).hashValue != IdentityKey(key: "k", value: b).hashValue {
                    violated("equal ids hash differently", input)
                }
            }
        }
    },
    "form": { input in
        guard let outcome = try? GatewayHarness.prepareUpload(query: "project=fuzz", body: input, limits: limits, now: now) else { return }
        checkStorable(outcome, input)
    },
    "records": { input in
        let body = Array("data_list=".utf8) + Array(Data(input).base64EncodedString().addingPercentEncoding(withAllowedCharacters: .alphanumerics)!.utf8)
        guard let outcome = try? GatewayHarness.prepareUpload(query: "project=fuzz", body: body, limits: limits, now: now) else { return }
        checkStorable(outcome, input)
    },
    "relay": { input in
        guard
            let outcome = try? GatewayHarness.prepareRelay(
                body: input, project: "production", whitelistedPages: ["*.example.com"], limits: limits, now: now
            )
        else { return }
        checkStorable(outcome, input)
    },
    "gzip": { input in
        let limit = 1 << 16
        if let output = try? input.withUnsafeBytes({ try GatewayHarness.inflate($0, limit: limit) }), output.count > limit {
            violated("inflated past the limit", input)
        }
    },
    "json": { input in
        guard let document = try? JSONParser.parse(input, maxDepth: 64) else { return }
        for (index, entry) in document.entries.enumerated() {
            guard Int(entry.next) > index, Int(entry.next) <= document.entries.count, entry.start >= 0,
                Int(entry.end) <= input.count, entry.start <= entry.end
            else { violated("an entry points outside the document", input) }
            let value = JSONRef(document: document, index: index)
            switch entry.kind {
            case .string:
                let text = Array(value.textBytes)
                if !text.withUnsafeBufferPointer(JSONParser.isValidUTF8) { violated("unescaped text is not UTF-8", input) }
                // Foundation reads the same string the same way, where it reads it (it refuses a
                // lone surrogate, which the parser replaces).
                // The first 64 entries only: Foundation is slow, and the fuzzer's inputs are small.
                if index < 64,
                    let expected = try? JSONSerialization.jsonObject(
                        with: Data([0x22] + input[Int(entry.start)..<Int(entry.end)] + [0x22]), options: .fragmentsAllowed) as? String,
                    Array(expected.utf8) != text
                {
                    violated("a string reads otherwise than with Foundation", input)
                }
            case .number:
                _ = value.int64Value
                _ = value.doubleValue
                _ = value.rawBytes.withContiguousStorageIfAvailable { JSONNumberRule.problem($0) }
            default: break
            }
        }
        _ = document.root.value
    },
    "url": { input in
        guard let host = GatewayHarness.host(ofURL: String(decoding: input, as: UTF8.self)) else { return }
        if host.isEmpty || host.utf8.contains(where: { $0 <= 0x20 || $0 >= 0x7F || "/\\?#@%".utf8.contains($0) && !host.hasPrefix("[") }) {
            violated("a host with a forbidden byte: \(host.debugDescription)", input)
        }
    },
    "address": { input in
        let text = String(decoding: input, as: UTF8.self)
        let peer = IPAddress("10.0.0.1")!
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard let client = balancers.client(peer: peer, forwardedFor: lines) else { violated("no client for a known peer", input) }
        if IPAddress(client.description) != client { violated("\(client) does not read back as itself", input) }
        if client.truncated.truncated != client.truncated { violated("truncating \(client) twice moves it", input) }
        if let host = GatewayHarness.urlHost(text) {
            // Compared as bytes: `String.contains` matches whole characters, and a combining mark
            // after the host (`[x]` + U+0487) makes `]` part of a character the host does not end.
            let (textBytes, hostBytes) = (Array(text.utf8), Array(host.utf8))
            let inText = textBytes.indices.contains { textBytes[$0...].starts(with: hostBytes) }
            if host.isEmpty || host.utf8.contains(where: { "/?#".utf8.contains($0) }) || !inText {
                violated("a $url_host that is not the URL's host: \(host.debugDescription)", input)
            }
        }
    },
    "group": { input in
        func elements() -> [JSONRef]? {
            guard let root = try? WireField.object(input, maxDepth: CollectBatch.maxDepth + 2, "the group"), let list = root["batches"] else {
                return nil
            }
            return try? WireField.array(list, "batches").map { $0 }
        }
        guard let read = try? IncomingBatch.group(jsonBytes: input, keys: .trackIDs) else {
            if elements() != nil { violated("the collector refuses a group whose batches it could read one by one", input) }
            return
        }
        guard let elements = elements(), elements.count == read.count else { violated("the collector reads a group that is not one", input) }
        for (index, (element, mine)) in zip(elements, read).enumerated() {
            let contract: Result<CollectBatch, ContractDecodingError>
            do throws(ContractDecodingError) {
                contract = .success(try CollectBatch(wire: element, path: "batches[\(index)]"))
            } catch {
                contract = .failure(error)
            }
            switch (contract, mine) {
            case (.success(let batch), .success(let incoming)):
                guard incoming.records.count + incoming.rejected.count == batch.records.count + batch.rejected.count else {
                    violated("a batch of a group read with other records than the contract's", input)
                }
            case (.failure, .failure):
                // Both refuse; the messages may differ when a batch has several faults, since the
                // readers check in another order (the first find: no receivedAt and a bad record).
                break
            default:
                violated("a batch of a group read by one reader and refused by the other", input)
            }
        }
    },
    "envelopes": { input in
        guard let keys = testKeys else { violated("run from the repository root: the test keys are missing", input) }
        let text = String(decoding: input, as: UTF8.self).addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        let body = Array("gzip=9&data_list=\(text)".utf8)
        guard let outcome = try? GatewayHarness.prepareUpload(query: "project=production", body: body, limits: limits, now: now, keys: keys.keys)
        else { return }
        checkStorable(outcome, input)
    },
    "batch": { input in
        let read = try? IncomingBatch(jsonBytes: input)
        guard let batch = try? CollectBatch(jsonBytes: input) else {
            if read != nil { violated("the collector reads a batch the contract refuses", input) }
            return
        }
        guard let again = try? CollectBatch(jsonBytes: batch.jsonBytes), again == batch else { violated("a batch does not survive its writer", input) }
        guard let read else { violated("the collector refuses a batch the contract reads", input) }
        // Refused whole (a 400) only for a receivedAt PostgreSQL cannot hold; its records are read all the same.
        if (read.problem != nil) == (0...StoredTime.latestMillis).contains(batch.receivedAt) {
            violated("the collector refuses a batch it can write, or writes one it cannot", input)
        }
        // Each record is kept with RecordKey(of:)'s key, or refused with CollectRecord's reason.
        var kept = read.records.makeIterator()
        var refused = read.rejected.dropFirst(batch.rejected.count).makeIterator()
        for record in batch.records {
            if let problem = record.storageProblem {
                guard refused.next()?.reason == "collector: \(problem)" else { violated("a record refused without its reason", input) }
            } else {
                guard let mine = kept.next(), mine.key == RecordKey(of: record), mine.project == record.project, mine.time == record.time
                else { violated("a record read with another key", input) }
                switch mine.content {
                case .event: if !RecordTypes.isEvent(record.type) { violated("a profile record read as an event", input) }
                case .profile(let profile):
                    if RecordTypes.isEvent(record.type) || profile != record { violated("a record read as another profile record", input) }
                }
            }
        }
        if kept.next() != nil || refused.next() != nil { violated("the collector read more records than the batch holds", input) }
    },
]

// MARK: Seeds

/// Seed corpora from the SDK captures: real bodies, payloads, relays and URLs.
func writeSeeds(fixtures: URL, output: URL) throws {
    func write(_ target: String, _ name: String, _ bytes: [UInt8]) throws {
        let directory = output.appendingPathComponent(target)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try Data(bytes).write(to: directory.appendingPathComponent(name))
    }
    func lines(_ file: String) throws -> [[String: Any]] {
        try String(contentsOf: fixtures.appendingPathComponent(file), encoding: .utf8).split(separator: "\n")
            .compactMap { try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }
    var count = 0
    for (index, request) in try lines("python-sdk-1.11.0.jsonl").enumerated() {
        guard let body = request["body"] as? String else { continue }
        try write("form", "python-\(index)", Array(body.utf8))
        let form = URLComponents(string: "?" + body.replacingOccurrences(of: "+", with: "%2B"))?.queryItems ?? []
        if let data = form.first(where: { $0.name == "data_list" || $0.name == "data" })?.value,
            let gzipped = Data(base64Encoded: data.replacingOccurrences(of: " ", with: "+"))
        {
            try write("gzip", "python-\(index)", Array(gzipped))
            if let json = try? gzipped.withUnsafeBytes({ try GatewayHarness.inflate($0, limit: 1 << 20) }) {
                try write("records", "python-\(index)", json)
                try write("escapes", "python-\(index)", json)
                try write("json", "python-\(index)", json)
                if let outcome = try? GatewayHarness.prepareUpload(query: "project=default", body: Array(body.utf8), limits: limits, now: now) {
                    let batch = CollectBatch(receivedAt: now, records: outcome.accepted).jsonBytes
                    try write("batch", "python-\(index)", batch)
                    try write("group", "python-\(index)", CollectBatchGroup.jsonBytes(joining: [batch, Array(#"{"receivedAt":-1,"records":[]}"#.utf8), batch]))
                }
            }
        }
        count += 1
    }
    var messages: [String] = []
    for (index, emission) in try lines("js-sdk-1.27.10.jsonl").enumerated() {
        let kind = emission["kind"] as? String ?? ""
        switch emission["payload"] {
        case let text as String:
            if kind.contains("postMessage") || kind.contains("sensorsdata_track") || kind == "iframe.src" { messages.append(text) }
            try write("url", "js-\(index)", Array(text.utf8))
            if text.hasPrefix("{") { try write("json", "js-\(index)", Array(text.utf8)) }
        case let request as [String: Any]:
            if let body = request["body"] as? String { try write("form", "js-\(index)", Array(body.utf8)) }
            if let url = request["url"] as? String { try write("url", "js-\(index)", Array(url.utf8)) }
        default: break
        }
        count += 1
    }
    if let text = try? String(contentsOf: fixtures.appendingPathComponent("android-sdk-encrypt.jsonl"), encoding: .utf8) {
        for (index, line) in text.split(separator: "\n").enumerated() {
            guard let request = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], let body = request["body"] as? String,
                let dataList = URLComponents(string: "?" + body)?.queryItems?.first(where: { $0.name == "data_list" })?.value
            else { continue }
            try write("envelopes", "android-\(index)", Array(dataList.utf8))
            count += 1
        }
    }
    let app: [String: Any] = [
        "server_url": "https://sa.example.com:8106/sa?project=production", "anonymous_id": "fuzz-idfv",
        "identities": ["$identity_idfv": "fuzz-idfv"], "properties": ["$os": "iOS", "$model": "iPhone15,2", "$app_version": "2.3.0"],
        "app_version": "2.3.0", "page_url": "https://h5.example.com/shop/item?id=42",
    ]
    let relay = try JSONSerialization.data(withJSONObject: ["app": app, "messages": messages])
    try write("relay", "js-relay", Array(relay))
    for (index, message) in messages.enumerated() {
        try write("relay", "js-\(index)", Array(try JSONSerialization.data(withJSONObject: ["app": app, "messages": [message]])))
    }
    // One text in NFC and in NFD, as ids and values, for the escapes target.
    let time = now - 1_000
    try write(
        "escapes", "unicode-forms",
        Array(
            #"[{"type":"track","event":"E","time":\#(time),"distinct_id":"jos\#u{E9}","properties":{"$time":\#(time),"name":"jose\#u{301}","big":18446744073709551615}},{"type":"profile_set","time":\#(time),"distinct_id":"jose\#u{301}","properties":{"$is_login_id":true}}]"#
                .utf8))
    print("datong-fuzz: seeds from \(count) captures written to \(output.path)")
}

// MARK: Driver

var arguments = CommandLine.arguments
guard arguments.count >= 2 else {
    print(
        "usage: datong-fuzz TARGET [libFuzzer options] [CORPUS ...] | datong-fuzz seed FIXTURES_DIR OUT_DIR\ntargets: \(targets.keys.sorted().joined(separator: ", "))"
    )
    exit(2)
}
let name = arguments.remove(at: 1)
if name == "seed" {
    guard arguments.count == 3 else {
        print("usage: datong-fuzz seed FIXTURES_DIR OUT_DIR")
        exit(2)
    }
    try writeSeeds(fixtures: URL(fileURLWithPath: arguments[1]), output: URL(fileURLWithPath: arguments[2]))
    exit(0)
}
guard let chosen = targets[name] else {
    print("datong-fuzz: no target '\(name)'; targets: \(targets.keys.sorted().joined(separator: ", "))")
    exit(2)
}
nonisolated(unsafe) let target = chosen

/// libFuzzer's callback. `LLVMFuzzerRunDriver` below is given it directly; the fuzzer runtime also
/// expects the symbol to exist.
@_cdecl("LLVMFuzzerTestOneInput")
func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    target(size == 0 || data == nil ? [] : Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

#if FUZZING
    var argc = Int32(arguments.count)
    var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
    let status = argv.withUnsafeMutableBufferPointer { buffer -> Int32 in
        var pointer: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = buffer.baseAddress
        return LLVMFuzzerRunDriver(&argc, &pointer) { data, size in fuzzOneInput(data, size) }
    }
    exit(status)
#else
    // Replay: each file (or each file in a directory) once, as a test of the crash inputs kept.
    var replayed = 0
    for path in arguments.dropFirst() {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { continue }
        let files =
            isDirectory.boolValue
            ? try FileManager.default.contentsOfDirectory(atPath: path).sorted().map { "\(path)/\($0)" } : [path]
        for file in files {
            target(Array(try Data(contentsOf: URL(fileURLWithPath: file))))
            replayed += 1
        }
    }
    print("datong-fuzz \(name): replayed \(replayed) inputs, no failure")
#endif
