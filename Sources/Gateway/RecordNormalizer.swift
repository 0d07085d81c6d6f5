import DatongContracts
import DatongJSON

/// A record that passed validation: what the collector stores and what identity-service resolves.
package struct NormalizedRecord: Sendable, Equatable {
    package var collect: CollectRecord
    /// nil for item records, which belong to no user.
    var identity: IdentityRecord?
    /// The record's own ingestion token, when it names its own project (never for bridged records).
    var token: String? = nil
    /// Sent by a crawler, by its User-Agent (`RequestEnrichment`).
    var isBot = false
}

/// Validates one SDK record and normalizes it (docs/PROTOCOL.md section 2). Pure: the same record and
/// clock give the same answer. A failure is a reason a person can act on.
package struct RecordNormalizer: Sendable {
    let limits: UploadLimits

    package init(limits: UploadLimits) { self.limits = limits }

    static let reservedNames: Set<String> = [
        "distinct_id", "original_id", "time", "properties", "id", "first_id", "second_id", "users", "events", "event",
        "user_id", "date", "datetime", "event_id", "device_id",
    ]

    static let implicitEventNames = ["track_signup": "$SignUp", "track_id_bind": "$BindID", "track_id_unbind": "$UnbindID"]

    /// - Parameters:
    ///   - record: the record as sent, inside its parsed document.
    ///   - fields: `record`'s top-level fields when the caller already read them.
    ///   - bridged: for a record an H5 page handed to an app, what the app puts in place of the
    ///     record's own fields (`BridgeRewriter`); nil for an ordinary upload.
    ///   - defaultProject: the request's project (`?project=`), used unless the record names its own.
    ///   - now: the server's clock in milliseconds since the Unix epoch.
    ///   - enrichment: what the request says that the record does not (its events only).
    package func normalize(
        _ record: JSONRef, fields: RecordFields? = nil, bridged: BridgeOverrides? = nil, defaultProject: String, now: Int64,
        enrichment: RequestEnrichment? = nil
    ) -> Result<NormalizedRecord, RecordRefusal> {
        guard record.isObject else {
            return .failure(.init(project: defaultProject, reason: "the record is not a JSON object"))
        }
        let fields = fields ?? RecordFields(record)
        var project = defaultProject
        // A bridged record goes to the relay's project: the app removes the page's `project`.
        // An empty `project` means "not given": the Go SDK sends `"project":""` when it was set up
        // without a project name, leaving the URL's `?project=` to decide.
        if bridged == nil, let override = fields.project, override.stringValue?.isEmpty != true {
            guard let name = override.stringValue, ProjectName.isValid(name) else {
                return .failure(.init(project: defaultProject, reason: "the record's project is not a valid project name"))
            }
            project = name
        }
        do {
            return .success(try normalize(fields, project: project, bridged: bridged, now: now, enrichment: enrichment))
        } catch {
            return .failure(.init(project: project, reason: error.reason))
        }
    }

    /// The record's checks, each a step of its own, in the order their reasons take precedence.
    private func normalize(
        _ fields: RecordFields, project: String, bridged: BridgeOverrides?, now: Int64, enrichment: RequestEnrichment?
    ) throws(RecordRefusal) -> NormalizedRecord {
        let kind = try Self.kind(of: fields, bridged: bridged != nil)
        let properties = try readProperties(fields, kind: kind, bridged: bridged != nil)
        let time = try Self.time(of: fields, properties, bridged: bridged != nil, now: now, limits: limits)
        let event = try Self.eventName(of: fields, kind: kind)
        let user = try Self.user(of: fields, properties, kind: kind, bridged: bridged)
        let sdk = try sdkFields(of: fields, properties, user: user, type: kind.type, bridged: bridged)
        var presets = kind.isEvent ? bridged?.presets ?? [] : []
        var isBot = false
        if kind.isEvent, let enrichment {
            let added = enrichment.presets(lib: sdk.lib, relayed: sdk.hybrid, ip: properties.ip, url: properties.url)
            presets = PropertyPreset.merge(presets, added.presets)
            isBot = added.isBot
        }
        let collect = CollectRecord(
            project: project, type: kind.type, event: event, time: time, distinctId: user.distinctID, userId: nil,
            anonymousId: sdk.anonymousID, loginId: sdk.loginID, lib: sdk.lib, libVersion: sdk.libVersion, appVersion: sdk.appVersion,
            hybridH5: sdk.hybrid,
            properties: properties.canonicalText(replacing: presets, dateTimes: DateTimeStyle(lib: sdk.lib)),
            itemType: user.itemType, itemId: user.itemID, libMethod: sdk.libMethod, libDetail: sdk.libDetail, originalId: sdk.originalID,
            identities: user.identities,
            // An integer, as every SDK sends it; anything else is no track id, and the record is
            // then identified by its content.
            trackId: fields.trackID?.int64Value,
            schema: kind.entity?.isItemEvent == true ? kind.entity?.schema : nil
        )
        let identity =
            !user.hasUser
            ? nil
            : IdentityRecord(
                project: project, type: kind.type, distinctId: user.distinctID ?? "",
                originalId: sdk.originalID, identities: user.identities, isLoginId: sdk.isLoginID, lib: sdk.lib
            )
        let token = bridged == nil ? fields.token?.stringValue.flatMap { $0.isEmpty ? nil : $0 } : nil
        return NormalizedRecord(collect: collect, identity: identity, token: token, isBot: isBot)
    }

    /// What a record is: its type, and the multi-entity protocol's schema when it follows it.
    struct Kind {
        let type: String
        let isEvent: Bool
        let isDetail: Bool
        let entity: MultiEntity?
        /// Item records and events on an item belong to no user.
        let isItem: Bool
    }

    static func kind(of fields: RecordFields, bridged: Bool) throws(RecordRefusal) -> Kind {
        guard let type = fields.type?.stringValue else { throw RecordRefusal("the record has no type") }
        guard RecordTypes.all.contains(type) else { throw RecordRefusal("unknown type '\(UntrustedText.quoted(type, limit: 64))'") }
        let isDetail = RecordTypes.isDetail(type)
        // The multi-entity protocol (docs/PROTOCOL.md section 2): a `schema` says what the record is
        // about, and a user's records carry the user among their properties.
        let entity = try MultiEntity.of(fields, type: type, bridged: bridged).get()
        if isDetail, entity == nil {
            throw RecordRefusal("a \(type) record belongs to the multi-entity protocol: it needs version \"2.0\" and a schema")
        }
        return Kind(
            type: type, isEvent: RecordTypes.isEvent(type), isDetail: isDetail, entity: entity,
            isItem: RecordTypes.isItem(type) || entity?.isItemEvent == true)
    }

    /// The record's properties, read once and checked against the limits.
    private func readProperties(_ fields: RecordFields, kind: Kind, bridged: Bool) throws(RecordRefusal) -> PropertiesReading {
        if let raw = fields.properties {
            guard raw.isObject else { throw RecordRefusal("properties is not a JSON object") }
            let count = Int(raw.entry.count)
            guard count <= limits.maxPropertiesPerRecord else {
                throw RecordRefusal("\(count) properties; the limit is \(limits.maxPropertiesPerRecord)")
            }
        }
        return try PropertiesReading.read(fields.properties, bridged: bridged, multiEntity: kind.entity != nil, type: kind.type, normalizer: self)
            .get()
    }

    /// The record's time in milliseconds, within the time window.
    static func time(
        of fields: RecordFields, _ properties: PropertiesReading, bridged: Bool, now: Int64, limits: UploadLimits
    ) throws(RecordRefusal) -> Int64 {
        // Milliseconds, or seconds from SDKs that send 10 digits; a `$time` property wins (for a
        // bridged record only a numeric one, as the app SDK applies it).
        var timeValue = fields.time
        if let override = properties.time, !bridged || override.isNumber { timeValue = override }
        guard let time = milliseconds(timeValue) else { throw RecordRefusal("the record has no numeric time from 1970 to 9999") }
        // `time_free: true` marks an import of history (the server SDKs' `enableTimeFree`): Sensors
        // skips its time window for it; Datong widens it to TIME_FREE_PAST_DAYS, as every month
        // stored is a partition (a record of 2999 made one that stays), and keeps the future bound.
        if let problem = timeProblem(time, now: now, timeFree: fields.timeFree?.isTrue ?? false, limits: limits) {
            throw RecordRefusal(problem)
        }
        return time
    }

    /// An event's name (its type's implicit one for a signup, bind or unbind); nil for a profile or item record.
    static func eventName(of fields: RecordFields, kind: Kind) throws(RecordRefusal) -> String? {
        guard kind.isEvent else { return nil }
        guard let name = fields.event?.stringValue ?? implicitEventNames[kind.type] else {
            throw RecordRefusal("a \(kind.type) record needs an event name")
        }
        if let problem = nameProblem(name) { throw RecordRefusal("event name: \(problem)") }
        return name
    }

    /// Whom a record is about: its user (the app's, for a bridged record), or its item.
    struct User {
        let bridged: BridgeOverrides.User?
        let distinctID: String?
        let identities: [String: String]?
        /// Whether it belongs to a user (not an item, nor a detail of an item).
        let hasUser: Bool
        let itemType: String?
        let itemID: String?
    }

    static func user(
        of fields: RecordFields, _ properties: PropertiesReading, kind: Kind, bridged: BridgeOverrides?
    ) throws(RecordRefusal) -> User {
        let user = kind.isItem ? nil : bridged?.user
        // A multi-entity record's user is among its properties (events, details) or at its top
        // level (users); one that names it in both places must name the same user.
        if kind.entity != nil, let problem = userNamedTwice(fields, properties) { throw RecordRefusal(problem) }
        let distinctField = fields.distinctID ?? (kind.entity == nil ? nil : properties.distinctID)
        let identitiesField = fields.identities ?? (kind.entity == nil ? nil : properties.identities)
        var distinctID: String?
        if let user {
            distinctID = user.distinctID
        } else if let value = distinctField {
            distinctID = value.stringValue ?? value.int64Value.map { String($0) }
        }
        // A Sensors user number: `properties.user_id` on events and details, the `id` of a `users` record.
        let namesSensorsUser = properties.sensorsUserID != nil || (kind.entity?.schema == MultiEntity.users && fields.entityID != nil)
        if kind.entity != nil, !kind.isItem, distinctID == nil, identitiesField == nil, namesSensorsUser {
            throw RecordRefusal("the record names its user by a Sensors user_id, which Datong does not have; send the user's identities")
        }
        // A detail may belong to an item instead of a user.
        let hasUser = !kind.isItem && !(kind.isDetail && distinctID == nil && identitiesField == nil)
        if hasUser, distinctID?.isEmpty ?? true { throw RecordRefusal("the record has no distinct_id") }
        let item = try Self.item(fields, type: kind.type, entity: kind.entity).get()
        var identities: [String: String]?
        if let user {
            // The page's identities with the app's: the page's keys are checked here.
            if let problem = keyProblem(user.identities) { throw RecordRefusal(problem) }
            identities = user.identities
        } else if let raw = identitiesField {
            identities = try Self.identities(raw).get()
        }
        return User(bridged: user, distinctID: distinctID, identities: identities, hasUser: hasUser, itemType: item?.type, itemID: item?.id)
    }

    /// What the SDK says of itself and of the user's ids, each a text the database stores.
    struct SDKFields {
        let lib: String?
        let libVersion: String?
        let appVersion: String?
        let libMethod: String?
        let libDetail: String?
        let anonymousID: String?
        let loginID: String?
        let originalID: String?
        let isLoginID: Bool
        /// Sent by an H5 page inside an app.
        let hybrid: Bool
    }

    private func sdkFields(
        of fields: RecordFields, _ properties: PropertiesReading, user: User, type: String, bridged: BridgeOverrides?
    ) throws(RecordRefusal) -> SDKFields {
        let lib = fields.lib.flatMap { $0.isObject ? $0 : nil }
        let isLoginID = properties.isLoginID?.isTrue ?? false
        let app = user.bridged
        let recordLoginID = app.map { $0.loginID } ?? fields.loginID?.stringValue
        let sdk = SDKFields(
            lib: lib?["$lib"]?.stringValue ?? properties.lib?.stringValue,
            libVersion: lib?["$lib_version"]?.stringValue ?? properties.libVersion?.stringValue,
            appVersion: bridged?.appVersion ?? lib?["$app_version"]?.stringValue ?? properties.appVersion?.stringValue,
            libMethod: lib?["$lib_method"]?.stringValue, libDetail: lib?["$lib_detail"]?.stringValue,
            anonymousID: app.map { $0.anonymousID } ?? fields.anonymousID?.stringValue ?? user.identities?["$identity_anonymous_id"],
            loginID: recordLoginID ?? user.identities?["$identity_login_id"] ?? (isLoginID || type == "track_signup" ? user.distinctID : nil),
            originalID: app?.originalID ?? fields.originalID?.stringValue, isLoginID: isLoginID,
            hybrid: bridged != nil || (fields.hybrid?.isTrue ?? false))
        if let detail = sdk.libDetail, let problem = limits.stringProblem(detail) { throw RecordRefusal("lib.$lib_detail: \(problem)") }
        let storedTexts: [(StaticString, String?)] = [
            ("distinct_id", user.distinctID), ("anonymous_id", sdk.anonymousID), ("login_id", sdk.loginID), ("original_id", sdk.originalID),
            ("item_id", user.itemID), ("lib.$lib", sdk.lib), ("lib.$lib_version", sdk.libVersion), ("lib.$app_version", sdk.appVersion),
            ("lib.$lib_method", sdk.libMethod),
        ]
        for (field, value) in storedTexts {
            if let problem = Self.idProblem(value) { throw RecordRefusal("\(field) \(problem)") }
        }
        // The label is made only for a refusal: every record has identities.
        for (key, value) in user.identities ?? [:] {
            if let problem = Self.idProblem(value) { throw RecordRefusal("identity '\(key)' \(problem)") }
        }
        return sdk
    }

    /// The item (or detail) a record of `type` is keyed by: `item_type` and `item_id`, or a
    /// multi-entity record's schema and `id`; nil for a record of another type.
    static func item(_ fields: RecordFields, type: String, entity: MultiEntity?) -> Result<(type: String, id: String)?, RecordRefusal> {
        if let entity, entity.keysItem(type) {
            guard let sent = fields.entityID, sent.stringValue != "" else {
                return .failure(.init("a \(type) record of schema '\(entity.schema)' needs an id"))
            }
            guard let id = sent.stringValue ?? sent.int64Value.map({ String($0) }) else {
                return .failure(
                    .init(
                        "the id of a \(type) record of schema '\(entity.schema)' is a string or a whole number, not \(UntrustedText.quoted(sent.rawText, limit: 40))"
                    ))
            }
            return .success((entity.schema, id))
        }
        guard RecordTypes.isItem(type) else { return .success(nil) }
        guard let kind = fields.itemType?.stringValue, nameProblem(kind) == nil else {
            return .failure(.init("an item record needs a valid item_type"))
        }
        guard let id = fields.itemID?.stringValue, !id.isEmpty else { return .failure(.init("an item record needs an item_id")) }
        return .success((kind, id))
    }

    /// Why a key of `identities` is not a valid name, or nil.
    static func keyProblem(_ identities: [String: String]) -> String? {
        guard identities.count <= IdentityRecord.maxIdentities else {
            return "identities has \(identities.count) members; the limit is \(IdentityRecord.maxIdentities)"
        }
        for key in identities.keys {
            if let problem = nameProblem(key) { return "identity key '\(UntrustedText.quoted(key))': \(problem)" }
        }
        return nil
    }

    /// Why a multi-entity record's top-level `distinct_id` or `identities` and those in its
    /// properties name different users, or nil (either absent, or the same).
    static func userNamedTwice(_ fields: RecordFields, _ properties: PropertiesReading) -> String? {
        func text(_ value: JSONRef) -> String? { value.stringValue ?? value.int64Value.map { String($0) } }
        if let top = fields.distinctID, let inner = properties.distinctID, text(top) != text(inner) {
            return
                "the record names two users: distinct_id '\(UntrustedText.quoted(text(top) ?? "?"))' and properties.distinct_id '\(UntrustedText.quoted(text(inner) ?? "?"))'"
        }
        if let top = fields.identities, let inner = properties.identities,
            case .success(let topPairs) = identities(top), (try? identities(inner).get()) != topPairs
        {
            return "the record names two users: its identities and properties.identities differ"
        }
        return nil
    }

    /// A record's `identities` object: string values under valid names.
    static func identities(_ raw: JSONRef) -> Result<[String: String], RecordRefusal> {
        guard raw.isObject else { return .failure(.init("identities is not a JSON object")) }
        guard raw.entry.count <= IdentityRecord.maxIdentities else {
            return .failure(.init("identities has \(raw.entry.count) members; the limit is \(IdentityRecord.maxIdentities)"))
        }
        var pairs: [String: String] = [:]
        pairs.reserveCapacity(Int(raw.entry.count))
        for (keyRef, value) in raw.members {
            let key = keyRef.stringValue(sharing: IdentityRecord.commonKeys) ?? ""
            guard let text = value.stringValue else { return .failure(.init("identity '\(UntrustedText.quoted(key))' is not a string")) }
            if let problem = nameProblem(key) { return .failure(.init("identity key '\(UntrustedText.quoted(key))': \(problem)")) }
            pairs[key] = text
        }
        return .success(pairs)
    }

    /// Epoch milliseconds from a JSON number. The rule: a value of at most ten integer digits
    /// (below 10^10) is seconds, anything larger milliseconds. Seconds below 10^10 reach the year
    /// 2286 and milliseconds from 10^10 start in April 1970, so no time a record can mean is read
    /// the wrong way (`76204800000` is 1972-06-01 in milliseconds). A fraction is kept to the
    /// millisecond (`1795578076.148` seconds is …076148 ms), rounded to the nearest. nil for a time no
    /// record can have (before 1970, after 9999): the window check would refuse it anyway, and
    /// scaling a hostile value must not overflow.
    static func milliseconds(_ value: JSONRef?) -> Int64? {
        guard let value, value.isNumber else { return nil }
        let scaled: Int64
        if let int = value.int64Value {
            guard int >= 0 else { return nil }
            scaled = int < secondsBelow ? int * 1000 : int
        } else if let double = value.doubleValue, double.isFinite, double >= 0, double < 1e15 {
            scaled = Int64((double < Double(secondsBelow) ? double * 1000 : double).rounded())
        } else {
            return nil
        }
        return scaled <= StoredTime.latestMillis ? scaled : nil
    }

    /// Why `time` is outside the window a record may have, or nil.
    static func timeProblem(_ time: Int64, now: Int64, timeFree: Bool, limits: UploadLimits) -> String? {
        let pastDays = timeFree ? limits.timeFreePastDays : limits.timeWindowPastDays
        if time < now - Int64(pastDays) * 86_400_000 {
            return timeFree
                ? "time \(time) is more than \(pastDays) days in the past, even for time_free (TIME_FREE_PAST_DAYS: each month stored is a partition)"
                : "time \(time) is more than \(pastDays) days in the past (send time_free: true for an import of history)"
        }
        if time > now + Int64(limits.timeWindowFutureMinutes) * 60_000 {
            return
                "time \(time) is more than \(limits.timeWindowFutureMinutes) minutes in the future\(timeFree ? " (time_free imports history, not the future)" : "")"
        }
        return nil
    }

    /// A number time below this is seconds (see `milliseconds`).
    static let secondsBelow: Int64 = 10_000_000_000

    /// How an SDK writes the fraction of a date-time value (`yyyy-MM-dd HH:mm:ss.f`), read from each
    /// SDK's formatter. Stored values always have three millisecond digits.
    enum DateTimeStyle: Sendable, Equatable {
        /// The fraction is the millisecond count, not padded to three digits: the JS SDK pads it to
        /// two (`formatDate`: `e<10?"0"+e:e` on `getMilliseconds()`, sensorsdata.es6.min.js), so 6 ms
        /// is `.06`; the Python SDK not at all (`int(obj.microsecond / 1000)`, sensorsanalytics/sdk.py
        /// `DatetimeSerializer`), so 6 ms is `.6`, nor the Ruby SDK (`strftime("%Y-%m-%d
        /// %H:%M:%S.#{(value.to_f * 1000.0).to_i % 1000}")`, lib/sensors_analytics/client.rb), so 60
        /// ms is `.60` and whole seconds `.0`. docs/PROTOCOL.md lists every SDK's rule.
        case milliseconds
        /// The fraction is a decimal fraction of a second with trailing zeros trimmed, and none at all
        /// for whole seconds: Go's `Format("2006-01-02 15:04:05.999")` (structs/event.go), so 670 ms
        /// is `.67` and 600 ms `.6`. The Java, Android (`yyyy-MM-dd HH:mm:ss.SSS`, TimeUtils.java,
        /// SensorsAnalyticsUtil.java) and iOS (the same pattern in the framework) SDKs always write three
        /// digits, which both styles read alike; this is the reading for them and anything unknown.
        case decimalFraction

        /// The style of the SDK named by `lib.$lib` (or the `$lib` property).
        init(lib: String?) {
            switch lib?.lowercased() {
            case "js", "python", "ruby", "miniprogram", "mp": self = .milliseconds
            default: self = .decimalFraction
            }
        }
    }

    /// A date-time value `yyyy-MM-dd HH:mm:ss`, `.f`, `.ff` written with three millisecond digits as
    /// `style` means it, or nil when `text` needs no change (or is no date-time).
    static func normalizedDateTime(_ text: some Collection<UInt8>, style: DateTimeStyle) -> [UInt8]? {
        guard (19...22).contains(text.count), text.count != 20 else { return nil }
        let bytes = Array(text)
        for (byte, expected) in zip(bytes, dateTimePattern) {
            if expected == UInt8(ascii: "d") {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            } else if byte != expected {
                return nil
            }
        }
        // Whole seconds: `.000`.
        guard bytes.count > 19 else { return bytes + Array(".000".utf8) }
        for byte in bytes[20...] where byte < UInt8(ascii: "0") || byte > UInt8(ascii: "9") { return nil }
        let zeros = repeatElement(UInt8(ascii: "0"), count: 23 - bytes.count)
        switch style {
        case .milliseconds: return Array(bytes[..<20]) + zeros + bytes[20...]
        case .decimalFraction: return bytes + zeros
        }
    }

    private static let dateTimePattern = Array("dddd-dd-dd dd:dd:dd.".utf8)

    /// PHP's `DateTime` as the PHP SDK 2.0.4 sends it: its `_assert_properties` formats a
    /// `DateTime` into a copy it then drops, so `json_encode` writes the object itself,
    /// `{"date":"2026-11-20 08:30:15.123000","timezone_type":3,"timezone":"Asia/Shanghai"}`. Read
    /// as the date-time it is, its wall clock with three millisecond digits (a date-time has no
    /// zone in Sensors' model); nil for any other object.
    static func phpDateTime(at index: Int, bytes: UnsafeBufferPointer<UInt8>, entries: UnsafeBufferPointer<JSONDocument.Entry>) -> [UInt8]? {
        let object = entries[index]
        guard object.kind == .object, object.count == 3 else { return nil }
        var date: [UInt8]?
        var hasType = false
        var hasZone = false
        var position = index + 1
        for _ in 0..<3 {
            let key = entries[position]
            let value = entries[position + 1]
            guard key.kind == .string, !key.flag else { return nil }
            let name = UnsafeBufferPointer(rebasing: bytes[Int(key.start)..<Int(key.end)])
            if name.elementsEqual("date".utf8), date == nil, value.kind == .string, !value.flag, value.end - value.start == 26 {
                let text = Array(bytes[Int(value.start)..<Int(value.end)])
                for (offset, byte) in text.enumerated() {
                    let expected = offset < dateTimePattern.count ? dateTimePattern[offset] : UInt8(ascii: "d")
                    let isDigit = byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
                    guard expected == UInt8(ascii: "d") ? isDigit : byte == expected else { return nil }
                }
                date = Array(text[..<23])
            } else if name.elementsEqual("timezone_type".utf8), !hasType, value.kind == .number {
                hasType = true
            } else if name.elementsEqual("timezone".utf8), !hasZone, value.kind == .string {
                hasZone = true
            } else {
                return nil
            }
            position = Int(value.next)
        }
        return hasType && hasZone ? date : nil
    }

    /// Why `name` is not a valid event or property name, or nil when it is.
    static func nameProblem(_ name: String) -> String? {
        var name = name
        return name.withUTF8 { nameProblem(utf8: $0) }
    }

    /// `nameProblem` over the name's UTF-8 bytes, as property keys are read straight from the upload.
    static func nameProblem(utf8 name: UnsafeBufferPointer<UInt8>) -> String? {
        guard name.count > 0, name.count <= 100 else { return nameRule }
        for (index, byte) in name.enumerated() {
            let isLetter =
                (byte | 0x20) >= UInt8(ascii: "a") && (byte | 0x20) <= UInt8(ascii: "z")
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "$")
            let isDigit = byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
            guard isLetter || (isDigit && index > 0) else { return nameRule }
        }
        // Presets (`$os`, `$url`, …) are never reserved; only look further for other names.
        if name[0] == UInt8(ascii: "$") { return nil }
        // Case-insensitive: a name's byte matches a reserved lowercase letter or `_` as itself or
        // with the ASCII lowercase bit set.
        func matches(_ reserved: [UInt8]) -> Bool {
            zip(reserved, name).allSatisfy { $0 == $1 || $0 == $1 | 0x20 }
        }
        let isReserved =
            reservedNameBytes.contains { $0.count == name.count && matches($0) }
            || reservedPrefixes.contains { $0.count <= name.count && matches($0) }
        return isReserved ? "'\(UntrustedText.quoted(String(decoding: name, as: UTF8.self)))' is a reserved name" : nil
    }

    /// Lowercase letters and `_` only.
    private static let reservedNameBytes = reservedNames.map { Array($0.utf8) }
    private static let reservedPrefixes = [Array("user_tag".utf8), Array("user_group".utf8)]

    private static let nameRule = "names start with a letter, _ or $ and have at most 100 letters, digits, _ or $"

    /// Why an id or other short text the record stores in its own column cannot be stored, or nil:
    /// PostgreSQL refuses NUL characters, and ids are at most 255 characters (`IDRule`: the SDKs
    /// refuse longer ones, and identity-service links nothing longer).
    static func idProblem(_ value: String?) -> String? {
        guard var value else { return nil }
        // Over the contiguous bytes, not the UTF-8 view's iterator: every id of every record.
        return value.withUTF8 { bytes in
            if bytes.contains(0) { return "contains a NUL character" }
            return TextLength.problem(utf8: bytes, maxLength: IDRule.maxLength).map { "is \($0)" }
        }
    }

    /// Why the property value at entry `index` cannot be stored, or nil. Values are numbers,
    /// booleans, strings, lists of strings (and null); `profile_unset` sends `true`; nothing nests deeper.
    func valueProblem(
        at index: Int, bytes: UnsafeBufferPointer<UInt8>, entries: UnsafeBufferPointer<JSONDocument.Entry>
    ) -> String? {
        let entry = entries[index]
        switch entry.kind {
        case .null, .bool: return nil
        case .number: return JSONNumberRule.problem(UnsafeBufferPointer(rebasing: bytes[Int(entry.start)..<Int(entry.end)]))
        case .string: return stringProblem(entry, bytes: bytes)
        case .array:
            guard Int(entry.count) <= limits.maxListItems else { return "a list holds \(entry.count) items; the limit is \(limits.maxListItems)" }
            var position = index + 1
            for _ in 0..<Int(entry.count) {
                let item = entries[position]
                guard item.kind == .string else { return "lists may only hold strings" }
                if let problem = stringProblem(item, bytes: bytes) { return problem }
                position = Int(item.next)
            }
            return nil
        case .object:
            return Self.phpDateTime(at: index, bytes: bytes, entries: entries) == nil ? "objects are not allowed as property values" : nil
        }
    }

    private func stringProblem(_ entry: JSONDocument.Entry, bytes: UnsafeBufferPointer<UInt8>) -> String? {
        // Without escapes a string holds no NUL (the parser refuses raw control characters), and
        // no more characters than bytes; an escape only ever makes the text shorter than it was sent.
        let raw = UnsafeBufferPointer(rebasing: bytes[Int(entry.start)..<Int(entry.end)])
        if !entry.flag { return raw.count <= limits.maxStringLength && raw.count <= limits.maxStringBytes ? nil : limits.stringProblem(utf8: raw) }
        return JSONParser.unescape(raw).withUnsafeBufferPointer { limits.stringProblem(utf8: $0) }
    }
}

/// What a record of the multi-entity protocol (`"version": "2.0"`, the Java SDK's
/// SensorsSchemaData) is about, from its `schema` (docs/PROTOCOL.md section 2): `events` for a
/// user's event, `users` for a profile, any other schema for an item (`item_set`, `item_delete`,
/// `track`: an event on an item) or a detail (`detail_set`, `detail_delete`).
struct MultiEntity: Sendable, Equatable {
    let schema: String
    /// A `track` record of an item schema: an event that belongs to an item, not a user.
    let isItemEvent: Bool

    static let userEvents = "events"
    static let users = "users"

    /// nil for a record of the classic protocol (no `version`, or another value than `"2.0"`:
    /// unknown top-level fields are ignored, as they always were); a failure for a multi-entity
    /// record that is not one.
    static func of(_ fields: RecordFields, type: String, bridged: Bool) -> Result<MultiEntity?, RecordRefusal> {
        guard fields.version?.stringValue == "2.0" else { return .success(nil) }
        guard !bridged else { return .failure(.init("bridge: an H5 page sends no multi-entity records")) }
        // `events` and `users` are reserved as property names, and are the two schemas every project has.
        if let sent = fields.schema?.stringValue, sent != userEvents, sent != users, [userEvents, users].contains(sent.lowercased()) {
            return .failure(.init("schema '\(sent)' is not '\(sent.lowercased())': the schemas events and users are written in lower case"))
        }
        guard let schema = fields.schema?.stringValue, schema == userEvents || schema == users || RecordNormalizer.nameProblem(schema) == nil else {
            return .failure(.init("a multi-entity record (version 2.0) needs a schema named like a property"))
        }
        let isEvent = RecordTypes.isEvent(type)
        switch schema {
        case userEvents:
            guard isEvent else { return .failure(.init("schema 'events' holds events, not \(type) records")) }
            return .success(MultiEntity(schema: schema, isItemEvent: false))
        case users:
            guard RecordTypes.profiles.contains(type) else { return .failure(.init("schema 'users' holds profile records, not \(type) records")) }
            return .success(MultiEntity(schema: schema, isItemEvent: false))
        default:
            if isEvent, type != "track" { return .failure(.init("an item schema's events are track records, not \(type)")) }
            guard isEvent || RecordTypes.isItem(type) || RecordTypes.isDetail(type) else {
                return .failure(.init("schema '\(schema)' is an item or detail schema: it holds no \(type) records"))
            }
            return .success(MultiEntity(schema: schema, isItemEvent: isEvent))
        }
    }

    /// Whether records of `type` are keyed by this schema and their `id` (items and details).
    func keysItem(_ type: String) -> Bool { RecordTypes.isItem(type) || RecordTypes.isDetail(type) }
}
