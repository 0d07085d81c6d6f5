import Foundation
import Synchronization
import Yams

/// What a browser's User-Agent says of it, as the uap-core rules read it (docs/ANALYTICS.md names
/// the properties): `$browser`, `$browser_version`, `$os`, `$os_version`, `$model`, `$manufacturer`.
public struct ParsedUserAgent: Sendable, Equatable {
    /// uap-core's user agent: family and version parts (family "Other" when no rule matched).
    public var agent: Family
    /// uap-core's operating system.
    public var os: Family
    /// uap-core's device: family, brand and model.
    public var device: Device

    public struct Family: Sendable, Equatable {
        public var family: String
        public var major: String?
        public var minor: String?
        public var patch: String?
        public var patchMinor: String?

        /// The version as Sensors stores one: the parts there are, joined by dots.
        public var version: String? {
            let parts = [major, minor, patch, patchMinor].prefix { $0 != nil }.compactMap { $0 }
            return parts.isEmpty ? nil : parts.joined(separator: ".")
        }
    }

    public struct Device: Sendable, Equatable {
        public var family: String
        public var brand: String?
        public var model: String?
    }

    /// A crawler, as uap-core marks one (device family `Spider`).
    public var isBot: Bool { device.family == "Spider" }

    /// The preset properties this User-Agent gives a record, by name; only what it says.
    public var properties: [(name: String, value: String)] {
        var found: [(String, String)] = []
        if agent.family != "Other" {
            found.append(("$browser", agent.family))
            if let version = agent.version { found.append(("$browser_version", version)) }
        }
        if os.family != "Other" {
            found.append(("$os", os.family))
            if let version = os.version { found.append(("$os_version", version)) }
        }
        if !isBot, device.family != "Other" {
            if let model = device.model { found.append(("$model", model)) }
            if let brand = device.brand, !Self.placeholderBrands.contains(brand) { found.append(("$manufacturer", brand)) }
        }
        return found
    }

    /// Brands uap-core gives devices it cannot name: no manufacturer.
    static let placeholderBrands: Set<String> = ["Generic", "Generic_Android", "Generic_Android_Tablet", "Generic_Inettv", "Spider"]
}

/// Reads User-Agent strings with the rules of uap-core (its `regexes.yaml`, as Debian's `uap-core`
/// package installs it) through ICU's regular expressions, after Datong's rules for the Chinese
/// in-app browsers uap-core does not know (`ChineseBrowsers`). Answers are kept by the text of the
/// User-Agent: a browser sends the same one with every request, and a cold one costs the rules'
/// whole list once.
public final class UserAgentParser: Sendable {
    /// The largest User-Agent read; a longer one is read as its first this many bytes.
    public static let maxLength = 1024

    private let agents: [Rule]
    private let systems: [Rule]
    private let devices: [Rule]
    private let cache: Mutex<[String: ParsedUserAgent]>
    private let cacheEntries: Int

    public struct InvalidRules: Error, CustomStringConvertible {
        public let description: String
    }

    /// Reads the rules of a uap-core `regexes.yaml`; the rules the regex engine refuses are
    /// skipped and counted in `skippedRules`.
    public convenience init(contentsOf path: String, cacheEntries: Int = 10_000) throws {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw InvalidRules(description: "cannot read \(path)")
        }
        try self.init(yaml: String(decoding: data, as: UTF8.self), cacheEntries: cacheEntries)
    }

    /// Rules of the file the regex engine refused (ICU's syntax is not every engine's).
    public let skippedRules: Int

    public init(yaml: String, cacheEntries: Int = 10_000) throws {
        let document: Any?
        do {
            document = try Yams.load(yaml: yaml)
        } catch {
            throw InvalidRules(description: "regexes.yaml is not YAML: \(error)")
        }
        guard let root = document as? [String: Any], let agents = root["user_agent_parsers"] as? [[String: Any]],
            let systems = root["os_parsers"] as? [[String: Any]], let devices = root["device_parsers"] as? [[String: Any]]
        else {
            throw InvalidRules(description: "regexes.yaml has no user_agent_parsers, os_parsers and device_parsers lists")
        }
        var skipped = 0
        func rules(_ list: [[String: Any]], _ names: [String]) -> [Rule] {
            list.compactMap { entry in
                guard let rule = Rule(entry, replacements: names) else {
                    skipped += 1
                    return nil
                }
                return rule
            }
        }
        self.agents =
            ChineseBrowsers.rules.compactMap { Rule($0 as [String: Any], replacements: Rule.agentNames) } + rules(agents, Rule.agentNames)
        self.systems = rules(systems, Rule.osNames)
        self.devices = rules(devices, Rule.deviceNames)
        guard !self.agents.isEmpty, !self.systems.isEmpty, !self.devices.isEmpty else {
            throw InvalidRules(description: "regexes.yaml holds no rule this regex engine reads")
        }
        self.skippedRules = skipped
        self.cacheEntries = cacheEntries
        self.cache = Mutex([:])
    }

    public var ruleCount: Int { agents.count + systems.count + devices.count }

    /// The User-Agent's browser, OS and device; the same text gives the same answer.
    public func parse(_ userAgent: String) -> ParsedUserAgent {
        // Read and kept by its first `maxLength` bytes: the cache holds at most that per entry.
        let text = userAgent.utf8.count > Self.maxLength ? String(decoding: userAgent.utf8.prefix(Self.maxLength), as: UTF8.self) : userAgent
        if cacheEntries > 0, let known = cache.withLock({ $0[text] }) { return known }
        let parsed = parseUncached(text)
        if cacheEntries > 0 {
            cache.withLock { cache in
                // Full: start again rather than track ages (the set of browsers seen is small).
                if cache.count >= cacheEntries { cache.removeAll(keepingCapacity: true) }
                cache[text] = parsed
            }
        }
        return parsed
    }

    func parseUncached(_ text: String) -> ParsedUserAgent {
        let agent = Self.first(agents, text).map {
            ParsedUserAgent.Family(family: $0[0] ?? "Other", major: $0[1], minor: $0[2], patch: $0[3], patchMinor: $0[4])
        }
        let os = Self.first(systems, text).map {
            ParsedUserAgent.Family(family: $0[0] ?? "Other", major: $0[1], minor: $0[2], patch: $0[3], patchMinor: $0[4])
        }
        let device = Self.first(devices, text).map { ParsedUserAgent.Device(family: $0[0] ?? "Other", brand: $0[1], model: $0[2]) }
        return ParsedUserAgent(
            agent: agent ?? .init(family: "Other"), os: os ?? .init(family: "Other"), device: device ?? .init(family: "Other"))
    }

    private static func first(_ rules: [Rule], _ text: String) -> [String?]? {
        let range = NSRange(location: 0, length: text.utf16.count)
        for rule in rules {
            if let match = rule.regex.firstMatch(in: text, range: range) { return rule.values(match, in: text) }
        }
        return nil
    }
}

/// One rule of regexes.yaml: a regex and what replaces each of its results.
private struct Rule: @unchecked Sendable {
    // NSRegularExpression is immutable and documented thread-safe; it is not marked Sendable.
    let regex: NSRegularExpression
    /// Per result: the replacement text (with `$1`…`$9` for groups), or nil for the default group.
    let replacements: [String?]
    /// Per result: the group it is when there is no replacement, or nil for none.
    let defaults: [Int?]

    static let agentNames = ["family_replacement", "v1_replacement", "v2_replacement", "v3_replacement", "v4_replacement"]
    static let osNames = ["os_replacement", "os_v1_replacement", "os_v2_replacement", "os_v3_replacement", "os_v4_replacement"]
    static let deviceNames = ["device_replacement", "brand_replacement", "model_replacement"]

    init?(_ entry: [String: Any], replacements names: [String]) {
        guard let pattern = entry["regex"] as? String else { return nil }
        var options: NSRegularExpression.Options = []
        if (entry["regex_flag"] as? String) == "i" { options.insert(.caseInsensitive) }
        guard let regex = try? NSRegularExpression(pattern: pattern, options: options) else { return nil }
        self.regex = regex
        replacements = names.map { name in
            switch entry[name] {
            case let text as String: return text
            case let number as Int: return String(number)
            case let number as Double: return String(number)
            default: return nil
            }
        }
        // Devices: the family and the model are the first group; the brand none.
        defaults = names == Self.deviceNames ? [1, nil, 1] : [1, 2, 3, 4, 5]
    }

    func values(_ match: NSTextCheckingResult, in text: String) -> [String?] {
        func group(_ index: Int) -> String? {
            guard index < match.numberOfRanges, let range = Range(match.range(at: index), in: text) else { return nil }
            return String(text[range])
        }
        return zip(replacements, defaults).map { replacement, fallback in
            let value: String?
            if let replacement {
                value = replacement.contains("$") ? Self.substitute(replacement, group) : replacement
            } else {
                value = fallback.flatMap(group)
            }
            guard let trimmed = value?.trimmingCharacters(in: .whitespaces), !trimmed.isEmpty else { return nil }
            return trimmed
        }
    }

    /// `$1`…`$9` in `replacement` replaced by the groups' texts (empty for a group that did not take part).
    private static func substitute(_ replacement: String, _ group: (Int) -> String?) -> String {
        var out = ""
        var iterator = replacement.makeIterator()
        while let character = iterator.next() {
            guard character == "$" else {
                out.append(character)
                continue
            }
            guard let next = iterator.next() else {
                out.append(character)
                break
            }
            if let digit = next.wholeNumberValue, (1...9).contains(digit) {
                out += group(digit) ?? ""
            } else {
                out.append(character)
                out.append(next)
            }
        }
        return out
    }
}

/// The in-app browsers of Chinese apps, which uap-core does not name (its rules read them as the
/// WebView they run in: "Chrome Mobile WebView", "Mobile Safari UI/WKWebView"). Read first, in
/// this order: an app's marker before the browser engine it embeds (QQ's in-app browser carries
/// `MQQBrowser` too; WeCom's carries `MicroMessenger`). Tests/Fixtures/user-agents/in-app.json
/// holds real User-Agents of these apps, as published in public code, and what each gives.
enum ChineseBrowsers {
    static let rules: [[String: String]] = [
        ["regex": #"(wxwork)/(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "WeCom"],
        ["regex": #"(MicroMessenger)/(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "WeChat"],
        ["regex": #"(AlipayClient)/(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "Alipay"],
        ["regex": #"(DingTalk)/(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "DingTalk"],
        ["regex": #"(Lark)/(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "Feishu"],
        ["regex": #"AppName/(aweme|aweme_lite) app_version/(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "Douyin"],
        ["regex": #"AppName/(musical_ly|trill) app_version/(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "TikTok"],
        ["regex": #"(NewsArticle)/(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "Toutiao"],
        ["regex": #"(__weibo__)(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "Weibo"],
        ["regex": #"(?:^| )(QQ)/(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "QQ"],
        ["regex": #"(baiduboxapp)/(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "Baidu App"],
        ["regex": #"(Quark)/(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "Quark"],
        ["regex": #"(HuaweiBrowser)/(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "Huawei Browser"],
        ["regex": #"(VivoBrowser)/(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "Vivo Browser"],
        ["regex": #"(HeyTapBrowser)/(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "HeyTap Browser"],
        ["regex": #"(SogouMobileBrowser)/(\d+)\.(\d+)(?:\.(\d+)|)"#, "family_replacement": "Sogou Browser"],
    ]
}
