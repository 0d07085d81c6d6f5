import Foundation

/// The checks the Sensors-style documents pass before they are published (docs/PROTOCOL.md section 5):
/// what SDKs would misread is refused with its JSON Pointer.
enum SDKDocuments {
    /// A remote config: `{"configs": {…switches…}, "nv": "…"}`; unknown switches pass through for
    /// newer SDKs, the known ones must have the type SDKs read.
    static func remoteConfigProblems(_ value: Any) -> [DocumentProblem] {
        guard let document = value as? [String: Any] else {
            return [.init(path: "", message: #"a remote-config is a JSON object {"configs": {…}}"#)]
        }
        var problems: [DocumentProblem] = []
        if let nv = document["nv"], !(nv is String) { problems.append(.init(path: "/nv", message: "must be a string")) }
        guard let configs = document["configs"] else {
            return problems + [.init(path: "/configs", message: "missing: the switches SDKs read (may be {})")]
        }
        guard let switches = configs as? [String: Any] else {
            return problems + [.init(path: "/configs", message: "must be an object of switches")]
        }
        for name in ["disableSDK", "disableDebugMode"] where switches[name] != nil && !isBoolean(switches[name]) {
            problems.append(.init(path: "/configs/\(name)", message: "must be true or false"))
        }
        if let mode = switches["autoTrackMode"], !(integer(mode).map { (-1...15).contains($0) } ?? false) {
            problems.append(.init(path: "/configs/autoTrackMode", message: "must be -1 (the app's own setting), 0 (all off) or a bitmask up to 15"))
        }
        if let mode = switches["effect_mode"], !(integer(mode).map { (0...1).contains($0) } ?? false) {
            problems.append(.init(path: "/configs/effect_mode", message: "must be 0 (at the next start) or 1 (at once)"))
        }
        if let blacklist = switches["event_blacklist"] {
            if let names = blacklist as? [Any] {
                for (index, name) in names.enumerated() where !(name is String) {
                    problems.append(.init(path: "/configs/event_blacklist/\(index)", message: "must be an event name"))
                }
            } else {
                problems.append(.init(path: "/configs/event_blacklist", message: "must be a list of event names"))
            }
        }
        return problems
    }

    /// A visual-tracking config: `{"events": [{"event_name", "event_type", "event": {…}, "properties": […]}]}`.
    static func visualConfigProblems(_ value: Any) -> [DocumentProblem] {
        guard let document = value as? [String: Any] else {
            return [.init(path: "", message: #"a visual-config is a JSON object {"events": […]}"#)]
        }
        guard let events = document["events"] as? [Any] else {
            return [.init(path: "/events", message: "must be a list of events (may be [])")]
        }
        var problems: [DocumentProblem] = []
        for (index, item) in events.enumerated() {
            let path = "/events/\(index)"
            guard let event = item as? [String: Any] else {
                problems.append(.init(path: path, message: "must be an object with event_name, event_type and event"))
                continue
            }
            for field in ["event_name", "event_type"] where !((event[field] as? String).map { !$0.isEmpty } ?? false) {
                problems.append(.init(path: "\(path)/\(field)", message: "must be a non-empty string"))
            }
            if !(event["event"] is [String: Any]) {
                problems.append(.init(path: "\(path)/event", message: "must be an object (element_path, screen_name, …)"))
            }
            if let properties = event["properties"], !(properties is [Any]) {
                problems.append(.init(path: "\(path)/properties", message: "must be a list"))
            }
        }
        return problems
    }

    /// JSON `true` and `false` arrive as NSNumbers whose type encoding is `c`.
    static func isBoolean(_ value: Any?) -> Bool {
        guard let number = value as? NSNumber else { return false }
        return String(cString: number.objCType) == "c"
    }

    private static func integer(_ value: Any) -> Int? {
        guard let number = value as? NSNumber, !isBoolean(number), number.doubleValue == number.doubleValue.rounded() else { return nil }
        return number.intValue
    }
}
