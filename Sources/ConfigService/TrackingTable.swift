import DatongJSON
import Foundation

/// The checks a codeless-tracking table passes before it is published (docs/ARCHITECTURE.md, tracking
/// tables). Every problem is reported, each at its JSON Pointer (RFC 6901: `/` in an identifier is
/// written `~1`), so an operator can fix the whole table in one go.
enum TrackingTable {
    /// The four sections, and what an identifier in each looks like.
    enum Section: String, CaseIterable {
        case action = "ACTION"
        case pagePV = "PAGEPV"
        case tableView = "TABLEVIEW"
        case gesture = "GESTURE"

        var identifierForm: String {
            switch self {
            case .action: return "TargetClass/selector or TargetClass/selector/tag"
            case .pagePV: return "the view controller's class name"
            case .tableView: return "DelegateClass/TableViewClass/tag"
            case .gesture: return "TargetClass/selector: (the selector ends with ':')"
            }
        }

        func accepts(_ identifier: String) -> Bool {
            let parts = identifier.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
            switch self {
            case .action:
                return (parts.count == 2 || parts.count == 3) && TrackingTable.isClassName(parts[0])
                    && TrackingTable.isSelector(parts[1]) && (parts.count == 2 || TrackingTable.isTag(parts[2]))
            case .pagePV:
                return parts.count == 1 && TrackingTable.isClassName(parts[0])
            case .tableView:
                return parts.count == 3 && TrackingTable.isClassName(parts[0]) && TrackingTable.isClassName(parts[1])
                    && TrackingTable.isTag(parts[2])
            case .gesture:
                return parts.count == 2 && TrackingTable.isClassName(parts[0]) && TrackingTable.isSelector(parts[1])
                    && parts[1].hasSuffix(":")
            }
        }
    }

    /// Every problem of `value` as a tracking table; empty when it can be published.
    static func problems(_ value: JSONValue) -> [DocumentProblem] {
        guard let table = value.objectValue else {
            return [DocumentProblem(path: "", message: "a tracking table is a JSON object of sections: \(sectionNames)")]
        }
        var problems: [DocumentProblem] = []
        for (name, content) in table.sorted(by: { $0.key < $1.key }) {
            let sectionPath = "/" + DocumentProblem.token(name)
            guard let section = Section(rawValue: name) else {
                problems.append(.init(path: sectionPath, message: "unknown section '\(name.prefix(64))'; sections are \(sectionNames)"))
                continue
            }
            guard let entries = content.objectValue else {
                problems.append(.init(path: sectionPath, message: "a section is an object of identifier → entry"))
                continue
            }
            for (identifier, entry) in entries.sorted(by: { $0.key < $1.key }) {
                let entryPath = sectionPath + "/" + DocumentProblem.token(identifier)
                if !section.accepts(identifier) {
                    problems.append(
                        .init(path: entryPath, message: "'\(identifier.prefix(200))' is not a \(name) identifier: expected \(section.identifierForm)"))
                }
                problems += entryProblems(entry, at: entryPath)
            }
        }
        return problems
    }

    private static func entryProblems(_ entry: JSONValue, at path: String) -> [DocumentProblem] {
        guard let fields = entry.objectValue else {
            return [.init(path: path, message: "an entry is an object with userDefined and pagePara")]
        }
        var problems: [DocumentProblem] = []
        switch fields["userDefined"] {
        case nil:
            problems.append(.init(path: path + "/userDefined", message: "missing: the fixed values reported with the event (may be {})"))
        case .object(let values):
            for (key, value) in values.sorted(by: { $0.key < $1.key }) where value.stringValue == nil {
                problems.append(.init(path: path + "/userDefined/" + DocumentProblem.token(key), message: "must be a string"))
            }
        default:
            problems.append(.init(path: path + "/userDefined", message: "must be an object of string values"))
        }
        switch fields["pagePara"] {
        case nil:
            problems.append(.init(path: path + "/pagePara", message: "missing: the values read at run time (may be {})"))
        case .object(let parameters):
            for (key, parameter) in parameters.sorted(by: { $0.key < $1.key }) {
                problems += parameterProblems(parameter, at: path + "/pagePara/" + DocumentProblem.token(key))
            }
        default:
            problems.append(.init(path: path + "/pagePara", message: "must be an object of upload key → {propertyName, propertyPath, containIn}"))
        }
        for key in fields.keys.sorted() where key != "userDefined" && key != "pagePara" {
            problems.append(.init(path: path + "/" + DocumentProblem.token(key), message: "unknown field; an entry has userDefined and pagePara"))
        }
        return problems
    }

    private static func parameterProblems(_ parameter: JSONValue, at path: String) -> [DocumentProblem] {
        guard let fields = parameter.objectValue else {
            return [.init(path: path, message: "must be an object with propertyName, propertyPath and containIn")]
        }
        var problems: [DocumentProblem] = []
        var name = ""
        var propertyPath = ""
        for field in ["propertyName", "propertyPath"] {
            switch fields[field] {
            case nil: problems.append(.init(path: path + "/" + field, message: "missing (use \"\" when unused)"))
            case .string(let text): if field == "propertyName" { name = text } else { propertyPath = text }
            default: problems.append(.init(path: path + "/" + field, message: "must be a string"))
            }
        }
        if name.isEmpty, propertyPath.isEmpty, fields["propertyName"]?.stringValue != nil, fields["propertyPath"]?.stringValue != nil {
            problems.append(.init(path: path, message: "one of propertyName or propertyPath must say where the value is read"))
        }
        if !propertyPath.isEmpty, propertyPath.split(separator: "/", omittingEmptySubsequences: false).contains(where: \.isEmpty) {
            problems.append(.init(path: path + "/propertyPath", message: "'\(propertyPath.prefix(200))' has an empty segment; write it as person/age"))
        }
        switch fields["containIn"] {
        case nil:
            problems.append(.init(path: path + "/containIn", message: "missing: 0 reads from the target, 1 from the tapped cell"))
        case .string(let text) where text == "0" || text == "1":
            break
        case let number? where number.integerValue == 0 || number.integerValue == 1:
            break
        default:
            problems.append(.init(path: path + "/containIn", message: "must be 0 (the target) or 1 (the tapped cell)"))
        }
        for key in fields.keys.sorted() where !["propertyName", "propertyPath", "containIn"].contains(key) {
            problems.append(
                .init(path: path + "/" + DocumentProblem.token(key), message: "unknown field; a parameter has propertyName, propertyPath and containIn"))
        }
        return problems
    }

    private static let sectionNames = Section.allCases.map(\.rawValue).joined(separator: ", ")

    /// A JSON Pointer reference token: `~` is `~0` and `/` is `~1`.
    /// An Objective-C or Swift class name, possibly module-qualified (`Shop.CartViewController`).
    static func isClassName(_ text: String) -> Bool {
        guard let first = text.unicodeScalars.first, first == "_" || first.properties.isAlphabetic else { return false }
        return text.unicodeScalars.allSatisfy { $0 == "_" || $0 == "." || $0.properties.isAlphabetic || ("0"..."9").contains($0) }
            && !text.hasSuffix(".") && !text.contains("..")
    }

    /// An Objective-C selector (`jumpSecond`, `controllerclicked:`, `tap:with:`).
    static func isSelector(_ text: String) -> Bool {
        guard let first = text.unicodeScalars.first, first == "_" || first.properties.isAlphabetic else { return false }
        return text.unicodeScalars.allSatisfy { $0 == "_" || $0 == ":" || $0.properties.isAlphabetic || ("0"..."9").contains($0) }
    }

    /// A view tag: an integer.
    static func isTag(_ text: String) -> Bool { Int(text) != nil }
}
