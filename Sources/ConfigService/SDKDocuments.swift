import DatongJSON

/// The checks the Sensors-style documents pass before they are published (docs/PROTOCOL.md section 5):
/// what SDKs would misread is refused with its JSON Pointer.
enum SDKDocuments {
    /// A remote config: `{"configs": {…switches…}, "nv": "…"}`; unknown switches pass through for
    /// newer SDKs, the known ones must have the type SDKs read.
    static func remoteConfigProblems(_ value: JSONValue) -> [DocumentProblem] {
        guard let document = value.objectValue else {
            return [.init(path: "", message: #"a remote-config is a JSON object {"configs": {…}}"#)]
        }
        var problems: [DocumentProblem] = []
        if let nv = document["nv"], nv.stringValue == nil { problems.append(.init(path: "/nv", message: "must be a string")) }
        guard let configs = document["configs"] else {
            return problems + [.init(path: "/configs", message: "missing: the switches SDKs read (may be {})")]
        }
        guard let switches = configs.objectValue else {
            return problems + [.init(path: "/configs", message: "must be an object of switches")]
        }
        for name in ["disableSDK", "disableDebugMode"] where switches[name] != nil && switches[name]?.boolValue == nil {
            problems.append(.init(path: "/configs/" + DocumentProblem.token(name), message: "must be true or false"))
        }
        if let mode = switches["autoTrackMode"], !(mode.integerValue.map { (-1...15).contains($0) } ?? false) {
            problems.append(.init(path: "/configs/autoTrackMode", message: "must be -1 (the app's own setting), 0 (all off) or a bitmask up to 15"))
        }
        if let mode = switches["effect_mode"], !(mode.integerValue.map { (0...1).contains($0) } ?? false) {
            problems.append(.init(path: "/configs/effect_mode", message: "must be 0 (at the next start) or 1 (at once)"))
        }
        if let blacklist = switches["event_blacklist"] {
            if let names = blacklist.arrayValue {
                for (index, name) in names.enumerated() where name.stringValue == nil {
                    problems.append(.init(path: "/configs/event_blacklist/\(index)", message: "must be an event name"))
                }
            } else {
                problems.append(.init(path: "/configs/event_blacklist", message: "must be a list of event names"))
            }
        }
        return problems
    }

    /// A visual-tracking config: `{"events": [{"event_name", "event_type", "event": {…}, "properties": […]}]}`.
    static func visualConfigProblems(_ value: JSONValue) -> [DocumentProblem] {
        guard let document = value.objectValue else {
            return [.init(path: "", message: #"a visual-config is a JSON object {"events": […]}"#)]
        }
        guard let events = document["events"]?.arrayValue else {
            return [.init(path: "/events", message: "must be a list of events (may be [])")]
        }
        var problems: [DocumentProblem] = []
        for (index, item) in events.enumerated() {
            let path = "/events/\(index)"
            guard let event = item.objectValue else {
                problems.append(.init(path: path, message: "must be an object with event_name, event_type and event"))
                continue
            }
            for field in ["event_name", "event_type"] where !(event[field]?.stringValue.map { !$0.isEmpty } ?? false) {
                problems.append(.init(path: "\(path)/\(field)", message: "must be a non-empty string"))
            }
            if event["event"]?.objectValue == nil {
                problems.append(.init(path: "\(path)/event", message: "must be an object (element_path, screen_name, …)"))
            }
            if let properties = event["properties"], properties.arrayValue == nil {
                problems.append(.init(path: "\(path)/properties", message: "must be a list"))
            }
        }
        return problems
    }
}
