import DatongJSON
import Foundation

/// An app's link setup (the `app-links` document): the route table the app's router reads
/// (`scheme://module:port/method?{query}`), and the data the gateway publishes for Universal Links
/// and Android App Links (`/.well-known/apple-app-site-association`, `/.well-known/assetlinks.json`).
///
/// ```json
/// {"routes": [{"scheme": "shop", "module": "product", "port": 8080, "method": "detail",
///              "parameters": ["id"], "optionalParameters": ["from"]}],
///  "apple": [{"teamID": "ABCDE12345", "bundleID": "com.example.shop", "paths": ["/product/*", "NOT /internal/*"]}],
///  "android": [{"packageName": "com.example.shop", "sha256CertFingerprints": ["14:6D:…:B4"]}]}
/// ```
/// Every section is optional; what is there is checked so that neither the app's router nor Apple's
/// or Google's verifier misreads it.
enum AppLinks {
    static func problems(_ value: JSONValue) -> [DocumentProblem] {
        guard let document = value.objectValue else {
            return [.init(path: "", message: #"an app-links document is a JSON object {"routes": […], "apple": […], "android": […]}"#)]
        }
        var problems: [DocumentProblem] = []
        for key in document.keys.sorted() where !["routes", "apple", "android"].contains(key) {
            problems.append(.init(path: "/" + DocumentProblem.token(key), message: "unknown section; the sections are routes, apple and android"))
        }
        if document.isEmpty { problems.append(.init(path: "", message: "the document has no routes, apple or android section")) }
        problems += list(document["routes"], at: "/routes", routeProblems)
        problems += list(document["apple"], at: "/apple", appleProblems)
        problems += list(document["android"], at: "/android", androidProblems)
        // One route per address: the router could not tell two apart.
        var seen: [String: Int] = [:]
        for (index, route) in (document["routes"]?.arrayValue ?? []).enumerated() {
            guard let route = route.objectValue, let address = routeAddress(route) else { continue }
            if let first = seen[address] {
                problems.append(.init(path: "/routes/\(index)", message: "the same scheme, module, port and method as /routes/\(first)"))
            } else {
                seen[address] = index
            }
        }
        return problems
    }

    /// `scheme://module:port/method`, lowercased where the URL is case-insensitive.
    static func routeAddress(_ route: [String: JSONValue]) -> String? {
        guard let scheme = route["scheme"]?.stringValue, let module = route["module"]?.stringValue, let method = route["method"]?.stringValue
        else { return nil }
        let port = route["port"]?.integerValue.map { ":\($0)" } ?? ""
        return "\(scheme.lowercased())://\(module.lowercased())\(port)/\(method)"
    }

    private static func list(
        _ value: JSONValue?, at path: String, _ check: ([String: JSONValue], String) -> [DocumentProblem]
    ) -> [DocumentProblem] {
        guard let value else { return [] }
        guard let items = value.arrayValue else { return [.init(path: path, message: "must be a list")] }
        guard items.count <= 1000 else { return [.init(path: path, message: "at most 1000 entries")] }
        return items.enumerated().flatMap { index, item -> [DocumentProblem] in
            guard let object = item.objectValue else { return [.init(path: "\(path)/\(index)", message: "must be an object")] }
            return check(object, "\(path)/\(index)")
        }
    }

    private static func routeProblems(_ route: [String: JSONValue], _ path: String) -> [DocumentProblem] {
        var problems: [DocumentProblem] = []
        problems += unknownKeys(route, ["scheme", "module", "port", "method", "parameters", "optionalParameters", "description"], path)
        // RFC 3986 scheme; http(s) links are Universal Links / App Links, not routes.
        if let problem = text(route["scheme"], pattern: "^[A-Za-z][A-Za-z0-9+.-]{0,63}$", "a URL scheme: a letter, then letters, digits, + . or -") {
            problems.append(.init(path: "\(path)/scheme", message: problem))
        } else if let scheme = route["scheme"]?.stringValue?.lowercased(), ["http", "https", "file", "javascript", "data"].contains(scheme) {
            problems.append(.init(path: "\(path)/scheme", message: "'\(scheme)' is not an app scheme; web links go in the apple and android sections"))
        }
        if let problem = text(route["module"], pattern: "^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$", "a module name: letters, digits, _ or -") {
            problems.append(.init(path: "\(path)/module", message: problem))
        }
        if let problem = text(route["method"], pattern: "^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$", "a method name: letters, digits, _ or -") {
            problems.append(.init(path: "\(path)/method", message: problem))
        }
        if let port = route["port"] {
            if !(port.integerValue.map { (1...65535).contains($0) } ?? false) {
                problems.append(.init(path: "\(path)/port", message: "must be a whole number from 1 to 65535, or left out"))
            }
        }
        var names = Set<String>()
        for key in ["parameters", "optionalParameters"] {
            guard let value = route[key] else { continue }
            guard let list = value.arrayValue else {
                problems.append(.init(path: "\(path)/\(key)", message: "must be a list of parameter names"))
                continue
            }
            for (index, name) in list.enumerated() {
                if let problem = text(name, pattern: "^[A-Za-z_][A-Za-z0-9_]{0,63}$", "a parameter name: a letter or _, then letters, digits or _") {
                    problems.append(.init(path: "\(path)/\(key)/\(index)", message: problem))
                } else if let name = name.stringValue, !names.insert(name).inserted {
                    problems.append(.init(path: "\(path)/\(key)/\(index)", message: "'\(name)' is named twice"))
                }
            }
        }
        if let description = route["description"], !(description.stringValue.map { $0.utf8.count <= 1024 } ?? false) {
            problems.append(.init(path: "\(path)/description", message: "must be text of at most 1024 bytes"))
        }
        return problems
    }

    private static func appleProblems(_ app: [String: JSONValue], _ path: String) -> [DocumentProblem] {
        var problems = unknownKeys(app, ["teamID", "bundleID", "paths"], path)
        // Apple's app ID prefix is the 10-character team ID.
        if let problem = text(app["teamID"], pattern: "^[A-Z0-9]{10}$", "the 10-character team ID from the Apple developer account (A-Z, 0-9)") {
            problems.append(.init(path: "\(path)/teamID", message: problem))
        }
        if let problem = text(app["bundleID"], pattern: "^[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)+$", "a bundle ID such as com.example.shop") {
            problems.append(.init(path: "\(path)/bundleID", message: problem))
        } else if let bundle = app["bundleID"]?.stringValue, bundle.utf8.count > 155 {
            problems.append(.init(path: "\(path)/bundleID", message: "at most 155 characters"))
        }
        guard let paths = app["paths"]?.arrayValue, !paths.isEmpty else {
            return problems + [
                .init(path: "\(path)/paths", message: #"must list the paths the app opens, e.g. ["/product/*"] (a leading "NOT " excludes one)"#)
            ]
        }
        for (index, item) in paths.enumerated() {
            guard let pattern = item.stringValue, pattern.utf8.count <= 1024,
                pattern == "*" || pattern.hasPrefix("/") || pattern.hasPrefix("NOT /")
            else {
                problems.append(
                    .init(path: "\(path)/paths/\(index)", message: #"must be a path pattern starting with "/" (or "NOT /", or "*"), at most 1024 bytes"#))
                continue
            }
        }
        return problems
    }

    private static func androidProblems(_ app: [String: JSONValue], _ path: String) -> [DocumentProblem] {
        var problems = unknownKeys(app, ["packageName", "sha256CertFingerprints"], path)
        if let problem = text(app["packageName"], pattern: "^[A-Za-z][A-Za-z0-9_]*(\\.[A-Za-z][A-Za-z0-9_]*)+$", "an application ID such as com.example.shop") {
            problems.append(.init(path: "\(path)/packageName", message: problem))
        }
        guard let prints = app["sha256CertFingerprints"]?.arrayValue, !prints.isEmpty else {
            return problems + [.init(path: "\(path)/sha256CertFingerprints", message: "must list the SHA-256 fingerprints of the app's signing certificates")]
        }
        for (index, item) in prints.enumerated() {
            if let problem = text(
                item, pattern: "^([0-9A-F]{2}:){31}[0-9A-F]{2}$",
                "a SHA-256 fingerprint: 32 bytes as uppercase hex pairs joined by colons (keytool -list -v prints it)")
            {
                problems.append(.init(path: "\(path)/sha256CertFingerprints/\(index)", message: problem))
            }
        }
        return problems
    }

    private static func unknownKeys(_ object: [String: JSONValue], _ known: Set<String>, _ path: String) -> [DocumentProblem] {
        object.keys.sorted().filter { !known.contains($0) }.map {
            .init(path: "\(path)/" + DocumentProblem.token($0), message: "unknown field; the fields are \(known.sorted().joined(separator: ", "))")
        }
    }

    /// Why `value` is not a string matching `pattern`, or nil.
    private static func text(_ value: JSONValue?, pattern: String, _ expected: String) -> String? {
        guard let value else { return "missing: \(expected)" }
        // \A and \z: ICU's $ would also match before a final newline.
        let anchored = "\\A(?:" + pattern.dropFirst().dropLast() + ")\\z"
        guard let string = value.stringValue, string.range(of: anchored, options: .regularExpression) != nil else { return "must be \(expected)" }
        return nil
    }
}
