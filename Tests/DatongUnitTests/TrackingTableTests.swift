import DatongContracts
import Foundation
import Testing

@testable import ConfigService

/// Tracking tables are checked on publish; every problem is reported at its JSON Pointer.
@Suite("config-service: tracking-table validation")
struct TrackingTableTests {
    /// The table of docs/ARCHITECTURE.md, as an app team would publish it.
    static let valid = #"""
        { "ACTION":    { "ViewController/jumpSecond": {
                           "userDefined": {"eventid": "201803074|93", "target": "", "pageid": "234", "pagename": "首页"},
                           "pagePara": {"testKey9": {"propertyName": "testPara", "propertyPath": "", "containIn": "0"}}},
                         "Shop.CartViewController/buy:/3": {"userDefined": {}, "pagePara": {}}},
          "PAGEPV":    { "ViewController": {"userDefined": {"pageid": "234", "pagename": "首页"}, "pagePara": {}}},
          "TABLEVIEW": { "ViewController/UITableView/0": {"userDefined": {"pageid": "1"},
                           "pagePara": {"user_grade": {"propertyName": "grade", "propertyPath": "", "containIn": "1"},
                                        "age": {"propertyName": "", "propertyPath": "person/age", "containIn": 0}}}},
          "GESTURE":   { "ViewController/controllerclicked:": {"userDefined": {}, "pagePara": {}}} }
        """#

    private func problems(_ json: String) throws -> [DocumentProblem] {
        switch DocumentValidator.canonicalize(Array(json.utf8), kind: .trackingTable) {
        case .success: return []
        case .failure(let problems): return problems.list
        }
    }

    @Test("the documented table is accepted")
    func validTable() throws {
        let found = try problems(Self.valid)
        #expect(found == [], "\(found)")
    }

    @Test(
        "each kind of mistake is reported where it is",
        arguments: [
            (#"{"BUTTONS": {}}"#, "/BUTTONS", "unknown section"),
            (#"{"ACTION": {"ViewController": {"userDefined": {}, "pagePara": {}}}}"#, "/ACTION/ViewController", "not a ACTION identifier"),
            (#"{"PAGEPV": {"A/b": {"userDefined": {}, "pagePara": {}}}}"#, "/PAGEPV/A~1b", "not a PAGEPV identifier"),
            (#"{"TABLEVIEW": {"A/UITableView/x": {"userDefined": {}, "pagePara": {}}}}"#, "/TABLEVIEW/A~1UITableView~1x", "not a TABLEVIEW identifier"),
            (#"{"GESTURE": {"A/tap": {"userDefined": {}, "pagePara": {}}}}"#, "/GESTURE/A~1tap", "not a GESTURE identifier"),
            (#"{"PAGEPV": {"A": {"pagePara": {}}}}"#, "/PAGEPV/A/userDefined", "missing"),
            (#"{"PAGEPV": {"A": {"userDefined": {"n": 1}, "pagePara": {}}}}"#, "/PAGEPV/A/userDefined/n", "must be a string"),
            (
                #"{"PAGEPV": {"A": {"userDefined": {}, "pagePara": {"k": {"propertyName": "p", "propertyPath": "", "containIn": "2"}}}}}"#,
                "/PAGEPV/A/pagePara/k/containIn", "must be 0"
            ),
            (
                #"{"PAGEPV": {"A": {"userDefined": {}, "pagePara": {"k": {"propertyName": "p", "propertyPath": "", "containIn": true}}}}}"#,
                "/PAGEPV/A/pagePara/k/containIn", "must be 0"
            ),
            (
                #"{"PAGEPV": {"A": {"userDefined": {}, "pagePara": {"k": {"propertyName": "", "propertyPath": "person//age", "containIn": "0"}}}}}"#,
                "/PAGEPV/A/pagePara/k/propertyPath", "empty segment"
            ),
            (
                #"{"PAGEPV": {"A": {"userDefined": {}, "pagePara": {"k": {"propertyPath": "a", "containIn": "0"}}}}}"#,
                "/PAGEPV/A/pagePara/k/propertyName", "missing"
            ),
            (
                #"{"PAGEPV": {"A": {"userDefined": {}, "pagePara": {"k": {"propertyName": 3, "propertyPath": "", "containIn": "0"}}}}}"#,
                "/PAGEPV/A/pagePara/k/propertyName", "must be a string"
            ),
            (#"[]"#, "", "JSON object of sections"),
            (#"{"PAGEPV": {"A": {"userDefined": {}, "pagePara": {}, "x": 1e400}}}"#, "", "too large"),
            (String(repeating: "[", count: 65) + String(repeating: "]", count: 65), "", "nested too deeply"),
            (#"{"PAGEPV": {}} {}"#, "", "not valid JSON (at byte 15)"),
        ])
    func mistakes(json: String, path: String, message: String) throws {
        let found = try problems(json)
        #expect(found.contains { $0.path == path && $0.message.contains(message) }, "\(found)")
    }

    @Test("a published table is stored canonical: keys sorted, slashes and Unicode as they are, numbers exact")
    func canonicalForm() throws {
        let json =
            #"{"PAGEPV": {"Shop.Home": {"userDefined": {"名": "首页", "url": "https://a.example/x"}, "pagePara": {"k": {"propertyPath": "a/b", "propertyName": "", "containIn": 1}}}}, "ACTION": {}}"#
        guard case .success(let canonical) = DocumentValidator.canonicalize(Array(json.utf8), kind: .trackingTable) else {
            Issue.record("refused: \(try problems(json))")
            return
        }
        #expect(
            canonical
                == #"{"ACTION":{},"PAGEPV":{"Shop.Home":{"pagePara":{"k":{"containIn":1,"propertyName":"","propertyPath":"a/b"}},"userDefined":{"url":"https://a.example/x","名":"首页"}}}}"#
        )
    }

    @Test("every problem of a table is reported at once")
    func allProblems() throws {
        let json = #"{"BUTTONS": {}, "PAGEPV": {"a/b": {"userDefined": {"x": 1}}}}"#
        #expect(try problems(json).map(\.path) == ["/BUTTONS", "/PAGEPV/a~1b", "/PAGEPV/a~1b/userDefined/x", "/PAGEPV/a~1b/pagePara"])
    }
}
