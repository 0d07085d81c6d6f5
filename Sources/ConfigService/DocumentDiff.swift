import DatongJSON

/// What changed between two versions of a document: one change per added, removed or replaced
/// value, at its JSON Pointer (RFC 6901), in document order (object keys sorted).
enum DocumentDiff {
    /// One change: `{"op": "add"|"remove"|"replace", "path": …, "from": old, "to": new}` (only the
    /// sides that exist).
    struct Change: Encodable, Equatable, Sendable {
        enum Operation: String, Encodable, Sendable { case add, remove, replace }
        let op: Operation
        let path: String
        var from: JSONValue? = nil
        var to: JSONValue? = nil
    }

    /// The diff endpoint's answer.
    struct Answer: Encodable, Sendable {
        let from: Int
        let to: Int
        let changes: [Change]
    }

    static func changes(from old: JSONValue, to new: JSONValue, path: String = "") -> [Change] {
        switch (old, new) {
        case (.object(let before), .object(let after)):
            var changes: [Change] = []
            for key in Set(before.keys).union(after.keys).sorted() {
                let child = path + "/" + DocumentProblem.token(key)
                switch (before[key], after[key]) {
                case (let removed?, nil): changes.append(Change(op: .remove, path: child, from: removed))
                case (nil, let added?): changes.append(Change(op: .add, path: child, to: added))
                case (let a?, let b?): changes += Self.changes(from: a, to: b, path: child)
                case (nil, nil): break
                }
            }
            return changes
        case (.array(let before), .array(let after)):
            var changes: [Change] = []
            for index in 0..<max(before.count, after.count) {
                let child = path + "/\(index)"
                if index >= after.count {
                    changes.append(Change(op: .remove, path: child, from: before[index]))
                } else if index >= before.count {
                    changes.append(Change(op: .add, path: child, to: after[index]))
                } else {
                    changes += Self.changes(from: before[index], to: after[index], path: child)
                }
            }
            return changes
        default:
            return old == new ? [] : [Change(op: .replace, path: path, from: old, to: new)]
        }
    }
}
