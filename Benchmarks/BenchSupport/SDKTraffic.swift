import CompressNIO
import Foundation
import NIOCore

/// Realistic SDK traffic, built the way the SDKs build it (docs/PROTOCOL.md sections 1 and 3): iOS app
/// events, H5 events the app relayed (`_hybrid_h5`), raw bridge messages in their three forms, the
/// upload body the iOS SDK posts (`gzip=1`, base64, `crc`, form-encoded `data_list`), and the JS
/// SDK's one-record requests from web pages (image beacon, ajax or `sendBeacon`).
///
/// `tag`, when given, is stored as the property `datong_tag`, so a drill can find each record it
/// sent; `time` must differ between records a test wants stored as distinct events (the dedup key
/// is built from what a retry keeps: time, ids, event and properties).
package enum SDKTraffic {
    /// A device (and, when logged in, a person): the ids an app SDK sends with every record.
    package struct Device: Sendable {
        package let idfv: String
        package let cookie: String
        package let login: String?

        /// Device number `number`; `login` for a user who logged in on it.
        package init(_ number: Int, login: String? = nil) {
            let hex = String(number, radix: 16)
            idfv = "A1B2C3D4-\(hex)-4E5F-8A9B-0C1D2E3F4A5B"
            cookie = "18f2a\(hex)c1d-0aa1b2c3d4e5f6-26021d51-370944-18f2a\(hex)c1e"
            self.login = login
        }
    }

    /// An iOS SDK record from the app itself (auto-tracked clicks and screens, custom events).
    package static func appEvent(_ device: Device, sequence: Int, time: Int64, tag: String? = nil) -> [String: Any] {
        var identities = ["$identity_idfv": device.idfv, "$identity_anonymous_id": device.idfv]
        if let login = device.login { identities["$identity_login_id"] = login }
        var properties: [String: Any] = [
            "$os": "iOS", "$os_version": "17.4", "$model": "iPhone15,2", "$manufacturer": "Apple", "$screen_width": 393,
            "$screen_height": 852, "$wifi": true, "$network_type": "WIFI", "$carrier": "中国移动", "$app_id": "com.example.shop",
            "$app_name": "Shop", "$app_version": "2.3.0", "$timezone_offset": -480, "$is_first_day": false,
            "$element_content": "加入购物车", "$element_type": "UIButton", "$screen_name": "ProductViewController",
            "$title": "商品详情", "price": 129.5, "sku": "SKU-\(sequence)", "tags": ["sale", "new"],
            "paid_at": "2024-01-02 03:04:05.06",
        ]
        if let tag { properties["datong_tag"] = tag }
        var record: [String: Any] = [
            "type": "track", "event": ["$AppClick", "$AppViewScreen", "AddToCart", "$AppStart"][sequence % 4],
            "time": time, "distinct_id": device.login ?? device.idfv, "anonymous_id": device.idfv,
            "identities": identities,
            "lib": ["$lib": "iOS", "$lib_method": "autoTrack", "$lib_version": "4.5.0", "$app_version": "2.3.0"],
            "properties": properties,
            "_track_id": Int32.random(in: Int32.min...Int32.max), "_flush_time": time,
        ]
        if let login = device.login { record["login_id"] = login }
        return record
    }

    /// A profile record of the device's user as the iOS SDK uploads it: `profile_set`,
    /// `profile_increment` and `profile_append` in turn by `sequence`.
    package static func profileRecord(_ device: Device, sequence: Int, time: Int64) -> [String: Any] {
        var identities = ["$identity_idfv": device.idfv, "$identity_anonymous_id": device.idfv]
        if let login = device.login { identities["$identity_login_id"] = login }
        let (type, properties): (String, [String: Any]) =
            switch sequence % 3 {
            case 0: ("profile_set", ["plan": "plan-\(sequence % 7)", "city": "Hangzhou", "$city": "杭州"])
            case 1: ("profile_increment", ["visits": 1])
            default: ("profile_append", ["viewed": ["SKU-\(sequence)"]])
            }
        return [
            "type": type, "time": time, "distinct_id": device.login ?? device.idfv, "identities": identities,
            "lib": ["$lib": "iOS", "$lib_method": "code", "$lib_version": "4.5.0", "$app_version": "2.3.0"],
            "properties": properties, "_track_id": Int32.random(in: Int32.min...Int32.max), "_flush_time": time,
        ]
    }

    /// An H5 page's record as the app's SDK uploads it after the page sent it through the bridge.
    package static func h5Event(_ device: Device, sequence: Int, time: Int64, tag: String? = nil) -> [String: Any] {
        var properties: [String: Any] = [
            "$timezone_offset": -480, "$screen_height": 852, "$screen_width": 393, "$viewport_height": 700, "$viewport_width": 393,
            "$lib": "js", "$lib_version": "1.27.10", "$latest_traffic_source_type": "引荐流量", "$latest_search_keyword": "未取到值",
            "$latest_referrer": "https://ref.example.org/from", "$url": "https://h5.example.com/shop/item?id=\(sequence)",
            "$title": "Test Page", "$is_first_day": false, "$os": "iOS", "$model": "iPhone15,2", "$app_version": "2.3.0",
        ]
        if let tag { properties["datong_tag"] = tag }
        return [
            "type": "track", "event": "$pageview", "time": time,
            "distinct_id": device.login ?? device.idfv, "_hybrid_h5": true,
            "identities": ["$identity_cookie_id": device.cookie, "$identity_idfv": device.idfv],
            "lib": ["$lib": "js", "$lib_method": "code", "$lib_version": "1.27.10", "$app_version": "2.3.0"],
            "properties": properties,
            "_track_id": Int32.random(in: Int32.min...Int32.max), "_flush_time": time,
        ]
    }

    /// A record exactly as an H5 page hands it to the JS bridge: its own cookie id, and the
    /// `server_url` the page meant to send to.
    package static func bridgeRecord(_ device: Device, sequence: Int, time: Int64, serverURL: String, tag: String? = nil) -> [String: Any] {
        var record = h5Event(device, sequence: sequence, time: time, tag: tag)
        record["_hybrid_h5"] = nil
        record["server_url"] = serverURL
        record["distinct_id"] = device.cookie
        return record
    }

    /// A record as the JS SDK sends it from a web page on its own (docs/PROTOCOL.md section 1; the
    /// fixture `js-sdk-1.27.10.jsonl` has captured ones): the page's cookie id, and the login id
    /// once the user logged in.
    package static func webEvent(_ device: Device, sequence: Int, time: Int64, tag: String? = nil) -> [String: Any] {
        var properties: [String: Any] = [
            "$timezone_offset": -480, "$screen_height": 1080, "$screen_width": 1920, "$viewport_height": 960, "$viewport_width": 1903,
            "$lib": "js", "$lib_version": "1.27.10", "$latest_traffic_source_type": "自然搜索流量", "$latest_search_keyword": "未取到值",
            "$latest_referrer": "https://www.example.org/search", "$url": "https://www.example.com/shop/item?id=\(sequence)",
            "$url_path": "/shop/item", "$title": "商品详情", "$referrer": "https://www.example.com/shop", "$is_first_day": false,
        ]
        if let tag { properties["datong_tag"] = tag }
        var identities = ["$identity_cookie_id": device.cookie, "$identity_anonymous_id": device.cookie]
        if let login = device.login { identities["$identity_login_id"] = login }
        var record: [String: Any] = [
            "type": "track", "event": ["$pageview", "$WebClick", "AddToCart"][sequence % 3], "time": time,
            "distinct_id": device.login ?? device.cookie, "anonymous_id": device.cookie, "identities": identities,
            "lib": ["$lib": "js", "$lib_method": "code", "$lib_version": "1.27.10"],
            "properties": properties,
            "_track_id": Int32.random(in: Int32.min...Int32.max), "_flush_time": time,
        ]
        if let login = device.login { record["login_id"] = login }
        return record
    }

    /// How the JS SDK sends one record: its image beacon (`GET …/sa.gif?…&data=…&ext=crc%3DN`), or
    /// ajax and `sendBeacon` (`POST …/sa.gif` with the same parameters as a `text/plain` body).
    package enum WebTransport: Sendable {
        case image
        case beacon
    }

    /// Browsers' User-Agents, one per device in turn: what the JS SDK's requests carry, and what
    /// the gateway reads `$browser` and `$os` from.
    package static let browserUserAgents = [
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 MicroMessenger/8.0.49(0x18003129) NetType/WIFI Language/zh_CN",
        "Mozilla/5.0 (Linux; Android 14; 23049RAD8C Build/UKQ1.230804.001; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/122.0.6261.120 Mobile Safari/537.36",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15",
    ]

    /// The JS SDK's request for one `record` to `project`: base64 of the JSON, no gzip, `ext=crc=N`,
    /// from a browser whose User-Agent is `userAgent`.
    package static func webRequest(
        _ record: [String: Any], project: String, transport: WebTransport, userAgent: String = browserUserAgents[0]
    ) -> (
        method: String, uri: String, body: [UInt8], headers: [(String, String)]
    ) {
        let base64 = Data(json(record)).base64EncodedString()
        let parameters = "data=\(formEncoded(base64))&ext=\(formEncoded("crc=\(javaHashCode(base64))"))"
        switch transport {
        case .image:
            return ("GET", "/sa.gif?project=\(project)&\(parameters)", [], [("User-Agent", userAgent)])
        case .beacon:
            return (
                "POST", "/sa.gif?project=\(project)", Array(parameters.utf8),
                [("Content-Type", "text/plain;charset=UTF-8"), ("User-Agent", userAgent)]
            )
        }
    }

    /// The iOS SDK's upload body for `records`: JSON, gzip, base64, then form-encoded with its crc.
    package static func uploadBody(_ records: [[String: Any]]) throws -> [UInt8] {
        var buffer = ByteBuffer(bytes: json(records))
        let gzipped = try buffer.compress(with: .gzip())
        let base64 = Data(gzipped.readableBytesView).base64EncodedString()
        return Array("gzip=1&data_list=\(formEncoded(base64))&crc=\(javaHashCode(base64))".utf8)
    }

    /// `POST /v1/bridge` for `records` sent by `device`'s pages, the three message forms in turn.
    package static func relayBody(_ device: Device, records: [[String: Any]], serverURL: String) -> [UInt8] {
        let messages: [String] = records.enumerated().map { position, record in
            let text = String(decoding: json(record), as: UTF8.self)
            switch position % 3 {
            case 0: return #"{"callType":"app_h5_track","data":\#(text)}"#
            case 1: return text
            default: return "sensorsanalytics://trackEvent?event=" + formEncoded(text)
            }
        }
        var identities = ["$identity_idfv": device.idfv]
        if let login = device.login { identities["$identity_login_id"] = login }
        var app: [String: Any] = [
            "server_url": serverURL, "anonymous_id": device.idfv, "identities": identities,
            "properties": ["$os": "iOS", "$model": "iPhone15,2", "$app_version": "2.3.0", "$screen_width": 393],
            "app_version": "2.3.0",
        ]
        if let login = device.login { app["login_id"] = login }
        return json(["app": app, "messages": messages] as [String: Any])
    }

    package static func json(_ value: Any) -> [UInt8] { Array(try! JSONSerialization.data(withJSONObject: value)) }

    /// Java's `String.hashCode`, which the Sensors SDKs send as `crc` of the base64 text.
    package static func javaHashCode(_ text: String) -> Int32 {
        var hash: Int32 = 0
        for unit in text.utf16 { hash = hash &* 31 &+ Int32(unit) }
        return hash
    }

    private static let unreserved = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))

    package static func formEncoded(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: unreserved)!
    }
}
