import DatongContracts
import DatongCtl
import DatongJSON
import DatongPostgres
import DatongTestSupport
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import Collector
@testable import Gateway

/// The catalog: which events and properties each project sends, typed as Sensors types
/// them, kept while storing, from the official SDKs' own traffic.
@Suite("the catalog of events and properties")
struct CatalogTests {
    @Test("the JS and Java SDKs' traffic makes a catalog with the types they meant, counts each stored event once, and shows a second type")
    func fromSDKTraffic() async throws {
        try await RunningServices.run(limits: RecordMeaningTests.limits) { services in
            let db = services.databaseURL
            // The JS SDK: bridged through the app (three scenarios) and sent directly (five).
            for (number, scenario) in ["ios", "ios_old", "android"].enumerated() {
                let response = try await GatewayTests.relay(
                    try Fixtures.bridgeMessages(scenario), app: Fixtures.relayApp(anonymousID: "app-anon-\(number)", idfv: "IDFV-\(number)"),
                    to: services.gateway)
                #expect(response.status == .ok, "\(response.text)")
            }
            for emission in try Fixtures.javascript() where !["ios", "ios_old", "android"].contains(emission.scenario) {
                #expect(try await GatewayTests.sendDirect(emission, prefix: "", to: services.gateway).status == .ok)
            }
            // The Java SDK: its BatchConsumer's two lists.
            let java = try RecordMeaningTests.capture("java-sdk-3.6.8.jsonl")
            _ = try await RecordMeaningTests.sendAll([java[0], java[2]], to: services)

            // `track('BuyProduct', {price, tags, paid_at})`: a number, a list, a JS Date.
            let js = try await TestDatabase.rows(
                db,
                """
                SELECT name, type, kind FROM analytics.catalog_properties
                WHERE project = 'production' AND name IN ('price', 'tags', 'paid_at', 'name', '$lib', '$is_first_day') ORDER BY kind, name
                """)
            #expect(
                js == [
                    ["$is_first_day", "BOOL", "event"], ["$lib", "STRING", "event"], ["paid_at", "DATETIME", "event"], ["price", "NUMBER", "event"],
                    ["tags", "LIST", "event"], ["name", "STRING", "profile"],
                ])
            // Java: `List<String>` is a LIST, its cut text a STRING, increments NUMBER, appends LIST.
            let javaTypes = try await TestDatabase.rows(
                db,
                """
                SELECT name, type, kind FROM analytics.catalog_properties
                WHERE project = 'default' AND name IN ('tags', 'long', 'clicks', 'l') ORDER BY kind, name
                """)
            #expect(javaTypes == [["long", "STRING", "event"], ["tags", "LIST", "event"], ["clicks", "NUMBER", "profile"], ["l", "LIST", "profile"]])
            let long = try await TestDatabase.rows(db, "SELECT events::text FROM analytics.catalog_properties WHERE project = 'default' AND name = 'long'")
            #expect(long == [["{DebugNote,Note}"]], "\(long)")

            // Every stored event counted once: the catalog's counts are the table's.
            let counted = """
                SELECT c.project, c.event, c.count::text, (SELECT count(*) FROM analytics.events e WHERE e.project = c.project AND e.event = c.event)::text
                FROM analytics.catalog_events c WHERE c.event IN ('BuyProduct', 'Buy', 'Note') ORDER BY c.project, c.event
                """
            var counts = try await TestDatabase.rows(db, counted)
            #expect(counts == [["default", "Buy", "2", "2"], ["default", "Note", "1", "1"], ["production", "BuyProduct", "8", "8"]])
            #expect(
                try await TestDatabase.rows(db, "SELECT libs::text FROM analytics.catalog_events WHERE project = 'default' AND event = 'Buy'")
                    == [["{Java}"]])
            // The Java SDK's retry stores nothing and counts nothing.
            _ = try await RecordMeaningTests.sendAll([java[0]], to: services)
            counts = try await TestDatabase.rows(db, counted)
            #expect(counts == [["default", "Buy", "2", "2"], ["default", "Note", "1", "1"], ["production", "BuyProduct", "8", "8"]])

            // Another client sends the price as text: refused with the reason, the record kept; a
            // number for its own text property is stored as text; the good record of the upload is stored.
            let now = Int(Date().timeIntervalSince1970 * 1000)
            func python(_ distinctID: String, _ properties: [String: Any]) -> [String: Any] {
                [
                    "type": "track", "event": "BuyProduct", "distinct_id": distinctID, "time": now, "lib": ["$lib": "python"],
                    "properties": properties.merging(["$lib": "python"]) { a, _ in a },
                ]
            }
            let answer = try await CompatibilityTests.upload(
                [
                    python("server-1", ["price": "9.90"]), python("server-2", ["price": 19.9, "order_id": "A-1001"]),
                    python("server-3", ["price": 5, "order_id": 1002]),
                ], to: services.gateway)
            #expect(answer["stored"] as? Int == 2 && answer["rejected"] as? Int == 1, "\(answer)")
            let refusal = #"PROPERTY_WITH_WRONG_TYPE: property 'price' is NUMBER; the value "9.90" is STRING"#
            // The SDK's answer names the record and the reason.
            let problems = try #require(answer["problems"] as? [[String: Any]])
            #expect(problems.count == 1 && problems[0]["index"] as? Int == 0 && problems[0]["reason"] as? String == refusal, "\(problems)")
            #expect(try await TestDatabase.rows(db, "SELECT reason FROM analytics.rejected WHERE project = 'production'") == [[refusal]])
            #expect(
                try await TestDatabase.rows(db, "SELECT property, type, sent_type, records::text FROM analytics.type_refusals")
                    == [["price", "NUMBER", "STRING", "1"]])
            #expect(
                try await TestDatabase.rows(
                    db, "SELECT properties ->> 'order_id', jsonb_typeof(properties -> 'order_id') FROM analytics.events WHERE distinct_id = 'server-3'")
                    == [["1002", "string"]])

            // The admin API (config-service passes it on) and datongctl say the same.
            let read = try await services.config.execute(uri: "/v1/projects/production/metadata", method: .get, headers: ErasureTests.admin)
            #expect(read.status == .ok, "\(read.text)")
            var metadata = try JSONDecoder().decode(ProjectMetadata.self, from: Data(read.text.utf8))
            var buy = try #require(metadata.events.first { $0.name == "BuyProduct" })
            #expect(buy.count == 10 && buy.libs == ["js", "python"])
            let orderID = try #require(metadata.properties.first { $0.name == "order_id" })
            #expect(orderID.type == .string && orderID.conflicts == [.init(name: "BuyProduct", type: .number)], "\(orderID)")
            let paidAt = try #require(metadata.properties.first { $0.name == "paid_at" })
            #expect(paidAt.type == .datetime && paidAt.sample.wholeMatch(of: /\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}/) != nil, "\(paidAt.sample)")
            let environment = ["DATONG_CONFIG_URL": "http://127.0.0.1:\(services.config.port!)", "DATONG_ADMIN_TOKEN": RunningServices.adminToken]
            let show = await Datongctl.run(["metadata", "production"], environment: environment)
            #expect(show.exitCode == 0 && show.output.contains("order_id\tevent\tSTRING\t1\tNUMBER in BuyProduct"), "\(show.output)")

            // The team decides the price is a text: the preview says what the stored rows become,
            // the change is made, and the refused record replays.
            let preview = await Datongctl.run(["metadata", "type", "production", "event", "price", "string", "--preview"], environment: environment)
            #expect(
                preview.exitCode == 0
                    && preview.output.contains("would be STRING (was NUMBER); 10 stored rows carry it, 0 of them do not read as STRING; nothing changed"),
                "\(preview.output)")
            let asBool = await Datongctl.run(["metadata", "type", "production", "event", "price", "BOOL", "--preview"], environment: environment)
            #expect(asBool.output.contains("10 stored rows carry it, 10 of them do not read as BOOL"), "\(asBool.output)")
            let typed = await Datongctl.run(["metadata", "type", "production", "event", "price", "STRING"], environment: environment)
            #expect(typed.exitCode == 0 && typed.output.contains("event property price is STRING (was NUMBER)"), "\(typed.output)")
            let replayed = await Datongctl.run(["metadata", "replay", "production"], environment: environment)
            #expect(replayed.exitCode == 0 && replayed.output.contains("1 records replayed: 1 stored, 0 stored before, 0 refused again"), "\(replayed.output)")
            #expect(try await TestDatabase.rows(db, "SELECT count(*)::text FROM analytics.rejected WHERE project = 'production'") == [["0"]])
            #expect(
                try await TestDatabase.rows(db, "SELECT properties ->> 'price' FROM analytics.events WHERE distinct_id = 'server-1'") == [["9.90"]])
            // Later numbers for it are stored as their text.
            _ = try await CompatibilityTests.upload([python("server-4", ["price": 7])], to: services.gateway)
            #expect(
                try await TestDatabase.rows(
                    db, "SELECT properties -> 'price' #>> '{}', jsonb_typeof(properties -> 'price') FROM analytics.events WHERE distinct_id = 'server-4'")
                    == [["7", "string"]])
            let trail = try await services.config.execute(uri: "/v1/audit?project=production", method: .get, headers: ErasureTests.admin)
            #expect(
                trail.text.contains("metadata.typed") && trail.text.contains("event property price is STRING") && trail.text.contains("rejected.replayed"),
                "\(trail.text)")
            let badType = try await services.config.execute(
                uri: "/v1/projects/production/metadata/types", method: .put, headers: ErasureTests.admin,
                body: ByteBuffer(string: #"{"kind":"item","name":"price","type":"STRING"}"#))
            #expect(badType.status == .badRequest && badType.text.contains("kind 'item'"), "\(badType.text)")

            metadata = try JSONDecoder().decode(
                ProjectMetadata.self,
                from: Data(try await services.config.execute(uri: "/v1/projects/production/metadata", method: .get, headers: ErasureTests.admin).text.utf8))
            buy = try #require(metadata.events.first { $0.name == "BuyProduct" })
            #expect(
                buy.count == 12 && buy.properties.filter { $0.name == "price" } == [.init(name: "price", type: .number), .init(name: "price", type: .string)])
            let priceEntry = try #require(metadata.properties.first { $0.name == "price" && $0.kind == "event" })
            #expect(priceEntry.type == .string && priceEntry.conflicts == [.init(name: "BuyProduct", type: .number)] && priceEntry.events == ["BuyProduct"])
            let export = await Datongctl.run(["metadata", "export", "production"], environment: environment)
            #expect(export.exitCode == 0)
            #expect(try JSONDecoder().decode(ProjectMetadata.self, from: Data(export.output.utf8)) == metadata)

            // Display names and descriptions, edited into the export and imported.
            var edited = metadata
            let buyIndex = try #require(edited.events.firstIndex { $0.name == "BuyProduct" })
            edited.events[buyIndex].displayName = "购买商品"
            edited.events[buyIndex].description = "A purchase, from the product page"
            let priceIndex = try #require(edited.properties.firstIndex { $0.name == "price" })
            edited.properties[priceIndex].displayName = "Price (CNY)"
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("metadata-\(UUID().uuidString).json")
            defer { try? FileManager.default.removeItem(at: file) }
            try JSONEncoder().encode(edited).write(to: file)
            let imported = await Datongctl.run(["metadata", "import", "production", file.path], environment: environment)
            #expect(imported.exitCode == 0 && imported.output.contains("2 notes kept, 0 removed"), "\(imported.output)")
            let noted = try JSONDecoder().decode(
                ProjectMetadata.self,
                from: Data(try await services.config.execute(uri: "/v1/projects/production/metadata", method: .get, headers: ErasureTests.admin).text.utf8))
            #expect(noted == edited)
            #expect(
                try await TestDatabase.rows(
                    db,
                    """
                    SELECT (SELECT display_name FROM analytics.catalog_events WHERE project = 'production' AND event = 'BuyProduct'),
                           (SELECT display_name FROM analytics.catalog_properties WHERE project = 'production' AND name = 'price' AND kind = 'event')
                    """) == [["购买商品", "Price (CNY)"]])
            let notedTrail = try await services.config.execute(uri: "/v1/audit?project=production", method: .get, headers: ErasureTests.admin)
            #expect(notedTrail.text.contains("metadata.noted") && notedTrail.text.contains("2 notes"), "\(notedTrail.text)")
            // Hidden from analysts, not erased: the $SignUp rows leave analytics.events, paid_at
            // leaves its properties; the display name given above stays; shown again, they return.
            let visible = """
                SELECT (SELECT count(*) FROM analytics.events WHERE project = 'production' AND event = '$SignUp')::text,
                       (SELECT count(*) FROM analytics.events WHERE project = 'production' AND properties ? 'paid_at')::text,
                       (SELECT count(*) FROM collector.events WHERE project = 'production' AND event = '$SignUp')::text
                """
            // An item and a user's detail (the multi-entity protocol) carrying paid_at too.
            let multiEntity: [[String: Any]] = [
                [
                    "type": "item_set", "version": "2.0", "schema": "orders_items", "id": "o-1", "time": now,
                    "properties": ["paid_at": "2026-11-01 10:00:00.000", "sku": "pen"],
                ],
                [
                    "type": "detail_set", "version": "2.0", "schema": "orders", "id": "d-1", "time": now,
                    "properties": ["identities": ["$identity_login_id": "server-1"], "distinct_id": "server-1", "paid_at": "2026-11-01 10:00:00.000"],
                ],
            ]
            #expect(try await CompatibilityTests.upload(multiEntity, to: services.gateway)["stored"] as? Int == 2)
            let elsewhere = """
                SELECT (SELECT count(*) FROM analytics.items WHERE project = 'production' AND properties ? 'paid_at')::text,
                       (SELECT count(*) FROM analytics.details WHERE project = 'production' AND properties ? 'paid_at')::text,
                       (SELECT count(*) FROM analytics.catalog_properties WHERE project = 'production' AND name = 'paid_at' AND sample IS NOT NULL)::text
                """
            #expect(try await TestDatabase.rows(db, elsewhere) == [["1", "1", "1"]])
            let liveBefore = try await services.config.execute(uri: "/v1/projects/production/events?limit=200", method: .get, headers: ErasureTests.admin)
            #expect(liveBefore.text.contains(#""paid_at""#) && liveBefore.text.contains(#""$SignUp""#), "the console's live view shows them")
            let before = try await TestDatabase.rows(db, visible)
            #expect(before[0][0] != "0" && before[0][1] != "0" && before[0][0] == before[0][2], "\(before)")
            for (kind, name) in [("event", "$SignUp"), ("event_property", "paid_at"), ("event", "BuyProduct")] {
                let hidden = await Datongctl.run(["metadata", "hide", "production", kind, name], environment: environment)
                #expect(hidden.exitCode == 0 && hidden.output.contains("\(kind) \(name) hidden from analysts"), "\(hidden.output)")
            }
            #expect(try await TestDatabase.rows(db, visible) == [["0", "0", before[0][2]]])
            // Hidden wherever analysts or the console read: items, details, the catalog's sample, the live view.
            #expect(try await TestDatabase.rows(db, elsewhere) == [["0", "0", "0"]])
            let liveHidden = try await services.config.execute(uri: "/v1/projects/production/events?limit=200", method: .get, headers: ErasureTests.admin)
            #expect(liveHidden.status == .ok && liveHidden.text.contains(#""events""#), "\(liveHidden.text)")
            #expect(!liveHidden.text.contains(#""paid_at""#) && !liveHidden.text.contains(#""$SignUp""#) && !liveHidden.text.contains(#""BuyProduct""#))
            let hiddenEntries = try JSONDecoder().decode(
                ProjectMetadata.self,
                from: Data(try await services.config.execute(uri: "/v1/projects/production/metadata", method: .get, headers: ErasureTests.admin).text.utf8))
            let hiddenBuy = try #require(hiddenEntries.events.first { $0.name == "BuyProduct" })
            #expect(hiddenBuy.hidden == true && hiddenBuy.displayName == "购买商品")
            #expect(hiddenEntries.properties.first { $0.name == "paid_at" }?.hidden == true)
            #expect(MetadataNote.notes(of: hiddenEntries).filter { $0.hidden == true }.count == 3)
            for (kind, name) in [("event", "$SignUp"), ("event_property", "paid_at"), ("event", "BuyProduct")] {
                #expect(await Datongctl.run(["metadata", "hide", "production", kind, name, "--show"], environment: environment).exitCode == 0)
            }
            #expect(try await TestDatabase.rows(db, visible) == before)
            #expect(try await TestDatabase.rows(db, elsewhere) == [["1", "1", "1"]])
            #expect(
                try await TestDatabase.rows(
                    db, "SELECT display_name, hidden::text FROM analytics.catalog_events WHERE project = 'production' AND event = 'BuyProduct'")
                    == [["购买商品", "false"]])
            // Empty texts remove a note; a note of no known kind is refused with the reason.
            let removal = try await services.config.execute(
                uri: "/v1/projects/production/metadata/notes", method: .put, headers: ErasureTests.admin,
                body: ByteBuffer(string: #"[{"kind":"event_property","name":"price","displayName":"","description":""}]"#))
            #expect(removal.text == #"{"kept":0,"removed":1}"#, "\(removal.text)")
            let refused = try await services.config.execute(
                uri: "/v1/projects/production/metadata/notes", method: .put, headers: ErasureTests.admin,
                body: ByteBuffer(string: #"[{"kind":"metric","name":"price","displayName":"x","description":""}]"#))
            #expect(refused.status == .badRequest && refused.text.contains("notes[0]: kind 'metric'"), "\(refused.text)")
            let unknownProject = try await services.config.execute(
                uri: "/v1/projects/nope/metadata/notes", method: .put, headers: ErasureTests.admin, body: ByteBuffer(string: "[]"))
            #expect(unknownProject.status == .notFound)
        }
    }

    @Test("a name hashes alike read word by word or with its tail loaded back from its end; lengths and bytes tell names apart")
    func shapeHasher() {
        let document = Array(#"{"a":1,"price":2,"$screen_width":3,"abcdefgh":4,"abcdefg":5}"#.utf8)
        document.withUnsafeBufferPointer { buffer in
            func hashes(_ name: String) -> (UInt64, UInt64) {
                let start = document.firstIndex(of: name)
                let range = start..<(start + name.utf8.count)
                var loaded = ShapeHasher()
                loaded.combine(range, in: buffer)
                var looped = ShapeHasher()
                looped.combine(UnsafeBufferPointer(rebasing: buffer[range]))
                return (loaded.value, looped.value)
            }
            var seen = Set<UInt64>()
            for name in ["a", "price", "$screen_width", "abcdefgh", "abcdefg"] {
                let (loaded, looped) = hashes(name)
                #expect(loaded == looped, "\(name)")
                seen.insert(loaded)
            }
            #expect(seen.count == 5)
        }
    }

    @Test(
        "strict validation refuses an undeclared event through /sa, /v1/bridge and encrypted uploads alike, drops undeclared properties, and replays once declared"
    )
    func strictValidation() async throws {
        try await RunningServices.run(limits: RecordMeaningTests.limits) { services in
            let db = services.databaseURL
            try await EncryptedUploadTests.installTestKeys(db)
            let environment = ["DATONG_CONFIG_URL": "http://127.0.0.1:\(services.config.port!)", "DATONG_ADMIN_TOKEN": RunningServices.adminToken]
            let now = Int(Date().timeIntervalSince1970 * 1000)
            func buy(_ distinctID: String, _ properties: [String: Any]) -> [String: Any] {
                ["type": "track", "event": "Buy", "distinct_id": distinctID, "time": now, "lib": ["$lib": "python"], "properties": properties]
            }
            // What the project sends so far, declared as seen; then strict.
            #expect(try await CompatibilityTests.upload([buy("s-1", ["price": 9.9])], to: services.gateway)["stored"] as? Int == 1)
            let declared = await Datongctl.run(["metadata", "declare", "production", "--seen"], environment: environment)
            #expect(declared.exitCode == 0 && declared.output.contains("1 events and 1 properties declared"), "\(declared.output)")
            let strict = await Datongctl.run(["metadata", "rules", "production", "--strict", "on"], environment: environment)
            #expect(strict.exitCode == 0 && strict.output.contains("strict on; a value of another type refuses the record"), "\(strict.output)")

            // The Android SDK's encrypted upload: four records of an undeclared event.
            let encrypted = try await EncryptedUploadTests.post(try EncryptionTests.captures()[0].body, to: services.gateway)
            #expect(try encrypted.json()["rejected"] as? Int == 4, "\(encrypted.text)")
            // The JS SDK bridged through the app: its BuyProduct is refused, its $SignUp taken, and
            // its profile's undeclared property left out.
            let bridged = try await GatewayTests.relay(
                try Fixtures.bridgeMessages("ios"), app: Fixtures.relayApp(anonymousID: "app-anon", idfv: "IDFV-1"), to: services.gateway)
            #expect(try GatewayTests.statuses(bridged) == ["rejected", "stored", "stored"], "\(bridged.text)")
            #expect(bridged.text.contains("EVENT_NOT_DECLARED: event 'BuyProduct' is not declared"), "\(bridged.text)")
            // A server SDK: a declared event with an undeclared property, stored without it.
            #expect(try await CompatibilityTests.upload([buy("s-2", ["price": 5, "coupon": "X"])], to: services.gateway)["stored"] as? Int == 1)
            #expect(try await TestDatabase.rows(db, "SELECT properties::text FROM analytics.events WHERE distinct_id = 's-2'") == [[#"{"price": 5}"#]])
            let refusals = try await TestDatabase.rows(
                db,
                """
                SELECT substring(reason from '^EVENT_NOT_DECLARED: event ''([^'']*)'''), count(*)::text
                FROM analytics.rejected GROUP BY 1 ORDER BY 1
                """)
            #expect(refusals == [["BuyProduct", "1"], ["Encrypted9", "4"]])
            // Never stored, so not in the catalog: the events to declare are listed apart.
            let undeclared = try JSONDecoder().decode(
                ProjectMetadata.self,
                from: Data(try await services.config.execute(uri: "/v1/projects/production/metadata", method: .get, headers: ErasureTests.admin).text.utf8))
            #expect(undeclared.undeclaredEvents?.map { "\($0.event):\($0.records)" } == ["Encrypted9:4", "BuyProduct:1"])
            #expect(
                try await TestDatabase.rows(db, "SELECT kind, name, reason, count::text FROM analytics.dropped_properties ORDER BY kind, name")
                    == [["event", "coupon", "undeclared", "1"], ["profile", "name", "undeclared", "1"]])

            // Declared, the refused records replay, each once.
            let more = await Datongctl.run(["metadata", "declare", "production", "BuyProduct", "Encrypted9"], environment: environment)
            #expect(more.exitCode == 0 && more.output.contains("2 events and 0 properties declared"), "\(more.output)")
            let replayed = await Datongctl.run(["metadata", "replay", "production"], environment: environment)
            #expect(replayed.output.contains("5 records replayed: 5 stored, 0 stored before, 0 refused again"), "\(replayed.output)")
            #expect(
                try await TestDatabase.rows(
                    db, "SELECT event, count(*)::text FROM analytics.events WHERE event IN ('BuyProduct', 'Encrypted9') GROUP BY 1 ORDER BY 1")
                    == [["BuyProduct", "1"], ["Encrypted9", "4"]])

            // A project that drops only the property: a text price is left out, the record stored.
            let drop = await Datongctl.run(["metadata", "rules", "production", "--wrong-type", "drop-property"], environment: environment)
            #expect(drop.output.contains("strict on; a value of another type drops only the property"), "\(drop.output)")
            #expect(try await CompatibilityTests.upload([buy("s-3", ["price": "n/a"])], to: services.gateway)["stored"] as? Int == 1)
            #expect(try await TestDatabase.rows(db, "SELECT properties::text FROM analytics.events WHERE distinct_id = 's-3'") == [["{}"]])
            let metadata = try JSONDecoder().decode(
                ProjectMetadata.self,
                from: Data(try await services.config.execute(uri: "/v1/projects/production/metadata", method: .get, headers: ErasureTests.admin).text.utf8))
            #expect(metadata.settings == ProjectCatalogSettings(strict: true, wrongType: .dropProperty))
            #expect(metadata.declaredEvents == ["Buy", "BuyProduct", "Encrypted9"])
            // The replayed records kept to the rules too: their undeclared properties were left out.
            #expect(
                metadata.drops?.map { "\($0.property):\($0.reason):\($0.count)" }.sorted() == [
                    "coupon:undeclared:1", "n:undeclared:4", "name:undeclared:1", "paid_at:undeclared:1", "price:wrong_type:1", "secret:undeclared:4",
                    "tags:undeclared:1",
                ])
            #expect(metadata.properties.first { $0.name == "price" }?.declared == true)
            let trail = try await services.config.execute(uri: "/v1/audit?project=production", method: .get, headers: ErasureTests.admin)
            #expect(trail.text.contains("metadata.settings_set") && trail.text.contains("metadata.declared"), "\(trail.text)")
        }
    }

    @Test("two collectors storing the same batches at once, retries included, count each event once and write each catalog row once")
    func twoReplicas() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: TestDatabase.logger)
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            func batch(_ number: Int) -> CollectBatch {
                let records = (0..<20).map { index in
                    var record = CollectorTests.event(index % 3 == 0 ? "Pay" : "View", time: now - Int64(number * 100 + index))
                    record.distinctId = "device-\(number)-\(index)"
                    record.properties = index % 2 == 0 ? #"{"amount": 3, "when": "2026-11-27 10:00:00.000"}"# : #"{"amount": 3, "tags": ["a"]}"#
                    return record
                }
                return CollectBatch(receivedAt: now, records: records)
            }
            let firstCatalog = Catalog()
            let secondCatalog = Catalog()
            let first = PostgresEventStore(pool: pool, catalog: firstCatalog)
            let second = PostgresEventStore(pool: pool, catalog: secondCatalog)
            // Each batch goes to both replicas at once (a gateway's retry after a lost answer).
            try await withThrowingTaskGroup(of: Void.self) { group in
                for number in 0..<10 {
                    for store in [first, second] { group.addTask { _ = try await store.write(batch(number)) } }
                }
                try await group.waitForAll()
            }
            let counts = try await TestDatabase.rows(
                url,
                """
                SELECT event, sum(count)::text, (SELECT count(*) FROM analytics.events e WHERE e.event = d.event)::text
                FROM analytics.catalog_event_days d GROUP BY event ORDER BY event
                """)
            #expect(counts == [["Pay", "70", "70"], ["View", "130", "130"]])
            // A name sent with an escape is the same name: counted under it, in one statement.
            var escaped = CollectorTests.event("Pay", time: now - 1)
            escaped.distinctId = "escaped"
            var plain = CollectorTests.event("Pay", time: now - 2)
            plain.distinctId = "plain"
            let text = String(decoding: CollectBatch(receivedAt: now, records: [escaped, plain]).jsonBytes, as: UTF8.self)
            let name = try #require(text.range(of: #""Pay""#))
            let body = Array(text.replacingCharacters(in: name, with: #""P\u0061y""#).utf8)
            #expect(try await second.write(try IncomingBatch(jsonBytes: body)).stored == 2)
            #expect(
                try await TestDatabase.rows(url, "SELECT event, count::text FROM analytics.catalog_events WHERE event LIKE 'P%'") == [["Pay", "72"]])
            let properties = try await TestDatabase.rows(
                url, "SELECT event, name, type FROM analytics.catalog_event_properties ORDER BY event, name")
            #expect(
                properties == [
                    ["Pay", "amount", "NUMBER"], ["Pay", "tags", "LIST"], ["Pay", "when", "DATETIME"],
                    ["View", "amount", "NUMBER"], ["View", "tags", "LIST"], ["View", "when", "DATETIME"],
                ])
            // A known event, lib and property names, but one property of another type: a shape of
            // its own, which the collector that knew the others checks, and refuses.
            var text3 = CollectorTests.event("Pay", time: now - 3)
            text3.distinctId = "text-amount"
            text3.properties = #"{"amount": "3", "tags": ["a"]}"#
            let textResult = try await first.write(CollectBatch(receivedAt: now, records: [text3]))
            #expect(textResult.stored == 0 && textResult.rejected == 1 && textResult.rejectedIndexes == [0])
            // A new property, typed at once by two replicas with values of two types: the one
            // committed first sets the type, and the other replica refuses its record, though it
            // had read the project's types before the property existed.
            var fresh = CollectorTests.event("Pay", time: now - 4)
            fresh.distinctId = "fresh-number"
            fresh.properties = #"{"fresh": 1}"#
            var freshText = CollectorTests.event("Pay", time: now - 5)
            freshText.distinctId = "fresh-text"
            freshText.properties = #"{"fresh": "one", "more": true}"#
            #expect(try await first.write(CollectBatch(receivedAt: now, records: [fresh])).stored == 1)
            let raced = try await second.write(CollectBatch(receivedAt: now, records: [freshText]))
            #expect(raced.stored == 0 && raced.rejected == 1, "\(raced)")
            #expect(
                try await TestDatabase.rows(url, "SELECT reason FROM analytics.rejected ORDER BY received_at, reason")
                    == [
                        [#"PROPERTY_WITH_WRONG_TYPE: property 'amount' is NUMBER; the value "3" is STRING"#],
                        [#"PROPERTY_WITH_WRONG_TYPE: property 'fresh' is NUMBER; the value "one" is STRING"#],
                    ])
            #expect(try await TestDatabase.rows(url, "SELECT type FROM analytics.catalog_properties WHERE name = 'fresh'") == [["NUMBER"]])
            // A type set through one replica reaches the other at its next watch: a text `fresh`,
            // refused above, is stored once the first made it a STRING.
            _ = try await TypeSettings(pool: pool, catalog: firstCatalog).change(
                project: "default", PropertyTypeChange(kind: "event", name: "fresh", type: .string), apply: true)
            try await TypeChangeWatch(pool: pool, catalog: secondCatalog, logger: TestDatabase.logger).poll()
            freshText.distinctId = "fresh-text-later"
            #expect(try await second.write(CollectBatch(receivedAt: now, records: [freshText])).stored == 1)
            // The next day, the same shape is written again: the catalog's last day moves.
            var tomorrow = batch(10)
            tomorrow.receivedAt = now + 86_400_000
            #expect(try await first.write(tomorrow).stored == 20)
            #expect(
                try await TestDatabase.rows(url, "SELECT (last_day - first_day)::text FROM analytics.catalog_events ORDER BY event")
                    == [["1"], ["1"]])
        }
    }

    @Test("a client inventing property names fills its project's catalog to the bound and no further; its events are stored all the same")
    func boundedByProject() async throws {
        let url = try await TestDatabase.create()
        try await TestDatabase.withPool(url) { pool in
            try await Migrator.migrate(schema: CollectorSchema.name, migrations: CollectorSchema.migrations, pool: pool, logger: TestDatabase.logger)
            let store = PostgresEventStore(pool: pool)
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            // 11 records of 1,000 made-up names each: 11,000 names, 1,000 past the bound.
            for number in 0..<11 {
                var record = CollectorTests.event("Spam", time: now - Int64(number))
                let names = (0..<1_000).map { #""p\#(number)_\#($0)": 1"# }
                record.properties = PropertiesText("{" + names.joined(separator: ",") + "}")
                #expect(try await store.write(CollectBatch(receivedAt: now, records: [record])).stored == 1)
            }
            let sizes = try await TestDatabase.rows(
                url,
                """
                SELECT (SELECT count(*) FROM analytics.catalog_properties)::text, (SELECT count(*) FROM analytics.events)::text,
                       (SELECT count FROM analytics.catalog_events WHERE event = 'Spam')::text
                """)
            #expect(sizes == [[String(CatalogChanges.maxProperties), "11", "11"]])
        }
    }
}

extension Array where Element == UInt8 {
    /// Where `text`'s bytes first occur (the test's names all occur).
    fileprivate func firstIndex(of text: String) -> Int {
        let needle = Array(text.utf8)
        return (0...(count - needle.count)).first { self[$0..<($0 + needle.count)].elementsEqual(needle) }!
    }
}

extension CatalogTests {
    @Test("a strict project's dropped properties are counted under their names up to a bound, then under one name")
    func droppedNamesBounded() {
        let catalog = Catalog()
        let names = (0...Catalog.maxDroppedNames).map { catalog.countedName(dropped: "p\($0)", project: "shop") }
        #expect(Set(names.dropLast()).count == Catalog.maxDroppedNames && names.last == Catalog.otherDroppedNames)
        #expect(catalog.countedName(dropped: "p0", project: "shop") == "p0")
        #expect(catalog.countedName(dropped: "p0", project: "news") == "p0")
    }
}

extension CatalogTests {
    @Test("each value meets its property's type as docs/ANALYTICS.md's table says: kept, stored as text, left out or refusing the record")
    func typeRules() throws {
        func verdict(_ properties: String, types: [String: SensorsType] = [:], strict: Bool = false, drops: Bool = false) -> String {
            var rules = Catalog.ProjectTypes(version: 0, types: [:])
            for (name, type) in types { rules.types[Catalog.TypedName(kind: "event", name: name)] = type }
            rules.declared = Set(rules.types.keys)
            rules.strict = strict
            rules.events = ["Buy"]
            rules.dropsWrongType = drops
            var assumed: [Catalog.TypedName: SensorsType] = [:]
            let record = #"{"project":"p","type":"track","event":"Buy","properties":\#(properties)}"#
            switch TypeCheck.verdict(of: Array(record.utf8)[...], kind: "event", rules: rules, assumed: &assumed) {
            case nil: return "kept"
            case .refused(let reason): return reason
            case .rewritten(let json, let dropped):
                return String(decoding: json, as: UTF8.self) + dropped.map { " -\($0.name):\($0.reason.rawValue)" }.joined()
            }
        }
        #expect(verdict(#"{"a":"x","n":1.5}"#, types: ["a": .string, "n": .number]) == "kept")
        #expect(
            verdict(#"{"a":9.90,"b":true,"c":"2026-02-28"}"#, types: ["a": .string, "b": .string, "c": .string]) == #"{"a":"9.90","b":"true","c":"2026-02-28"}"#
        )
        #expect(verdict(#"{"d":"2026-02-28","t":"2026-02-28 10:00:00.000"}"#, types: ["d": .datetime, "t": .date]) == "kept")
        #expect(verdict(#"{"n":"9.90"}"#, types: ["n": .number]) == #"PROPERTY_WITH_WRONG_TYPE: property 'n' is NUMBER; the value "9.90" is STRING"#)
        #expect(verdict(#"{"l":1}"#, types: ["l": .list]) == "PROPERTY_WITH_WRONG_TYPE: property 'l' is LIST; the value 1 is NUMBER")
        #expect(verdict(#"{"d":"2026-02-30"}"#, types: ["d": .date]) == #"PROPERTY_WITH_WRONG_TYPE: property 'd' is DATE; the value "2026-02-30" is STRING"#)
        #expect(verdict(#"{"b":null,"o":{"x":1}}"#, types: ["b": .bool, "o": .number]) == "kept")
        // Preset properties have Sensors' types before any value came.
        #expect(verdict(#"{"$screen_width":"393"}"#) == #"PROPERTY_WITH_WRONG_TYPE: property '$screen_width' is NUMBER; the value "393" is STRING"#)
        // A project that drops only the property; a strict one, which drops undeclared ones but the SDKs'.
        #expect(verdict(#"{"n":"x","k":2}"#, types: ["n": .number, "k": .number], drops: true) == #"{"k":2} -n:wrong_type"#)
        #expect(verdict(#"{"k":2,"extra":1,"$title":"t"}"#, types: ["k": .number], strict: true) == #"{"k":2,"$title":"t"} -extra:undeclared"#)
    }
}

extension CatalogTests {
    @Test("a strict project keeps the SDKs' own $ names undeclared, and refuses or drops made-up ones")
    func strictDollarNames() throws {
        var rules = Catalog.ProjectTypes(version: 0, types: [:])
        rules.strict = true
        rules.events = ["Buy"]
        func verdict(event: String, properties: String) -> String {
            var assumed: [Catalog.TypedName: SensorsType] = [:]
            let record = #"{"project":"p","type":"track","event":"\#(event)","properties":\#(properties)}"#
            switch TypeCheck.verdict(of: Array(record.utf8)[...], kind: "event", rules: rules, assumed: &assumed) {
            case nil: return "kept"
            case .refused(let reason): return reason
            case .rewritten(let json, let dropped):
                return String(decoding: json, as: UTF8.self) + dropped.map { " -\($0.name):\($0.reason.rawValue)" }.joined()
            }
        }
        #expect(verdict(event: "$FakeEvent", properties: "{}").hasPrefix("EVENT_NOT_DECLARED"), "\(verdict(event: "$FakeEvent", properties: "{}"))")
        #expect(verdict(event: "$appstart", properties: "{}").hasPrefix("EVENT_NOT_DECLARED"))
        for event in ["$AppStart", "$pageview", "$WebClick", "$MPShow", "$SignUp", "Buy"] {
            #expect(verdict(event: event, properties: "{}") == "kept", "\(event)")
        }
        #expect(
            verdict(event: "Buy", properties: #"{"$my_price":1,"$os":"iOS","$latest_utm_source":"x","$url_host":"h","$carrier":"c"}"#)
                == #"{"$os":"iOS","$latest_utm_source":"x","$url_host":"h","$carrier":"c"} -$my_price:undeclared"#)
    }

    @Test("every $ name the captured SDKs sent is one a strict project keeps")
    func capturedDollarNamesAreSDKNames() throws {
        var events: Set<String> = []
        var properties: Set<String> = []
        for file in [
            "python-sdk-1.11.0.jsonl", "ruby-sdk-1.6.3.jsonl", "go-sdk-2.1.6.jsonl", "java-sdk-3.6.8.jsonl", "miniprogram-sdk-1.22.8.jsonl",
            "php-sdk-2.0.4.jsonl", "cpp-sdk-1.0.3.jsonl",
        ] {
            for request in try Fixtures.requests(file) {
                let form = FormParameters(query: request.query, body: Array((request.body ?? "").utf8))
                guard let records = try? UploadPayload.records(from: form, limits: UploadLimits()) else { continue }
                for record in records {
                    if let event = record["event"]?.stringValue { events.insert(event) }
                    guard let members = record["properties"]?.members else { continue }
                    for member in members {
                        if let name = member.key.stringValue { properties.insert(name) }
                    }
                }
            }
        }
        #expect(events.contains("$SignUp") && properties.contains("$lib") && properties.count > 30, "\(properties.sorted())")
        #expect(events.filter { $0.hasPrefix("$") && !SDKNames.isSDKEvent($0) }.isEmpty)
        #expect(properties.filter { $0.hasPrefix("$") && !SDKNames.isSDKProperty($0) }.sorted() == [])
    }
}
