import Foundation

/// What changed between two versions of a document: one change per added, removed or replaced
/// value, at its JSON Pointer (RFC 6901), in document order (object keys sorted).
enum DocumentDiff {
    /// Each change is `{"op": "add"|"remove"|"replace", "path": …, "from": old, "to": new}` (only
    /// the sides that exist).
    static func changes(from old: Any, to new: Any, path: String = "") -> [[String: Any]] {
        if let before = old as? [String: Any], let after = new as? [String: Any] {
            var changes: [[String: Any]] = []
            for key in Set(before.keys).union(after.keys).sorted() {
                let child = path + "/" + TrackingTable.pointerToken(key)
                switch (before[key], after[key]) {
                case (let removed?, nil): changes.append(["op": "remove", "path": child, "from": removed])
                case (nil, let added?): changes.append(["op": "add", "path": child, "to": added])
                case (let a?, let b?): changes += Self.changes(from: a, to: b, path: child)
                case (nil, nil): break
                }
            }
            return changes
        }
        if let before = old as? [Any], let after = new as? [Any] {
            var changes: [[String: Any]] = []
            for index in 0..<max(before.count, after.count) {
                let child = path + "/\(index)"
                if index >= after.count {
                    changes.append(["op": "remove", "path": child, "from": before[index]])
                } else if index >= before.count {
                    changes.append(["op": "add", "path": child, "to": after[index]])
                } else {
                    changes += Self.changes(from: before[index], to: after[index], path: child)
                }
            }
            return changes
        }
        return same(old, new) ? [] : [["op": "replace", "path": path, "from": old, "to": new]]
    }

    /// Equal JSON values: the same canonical text.
    private static func same(_ a: Any, _ b: Any) -> Bool {
        let options: JSONSerialization.WritingOptions = [.sortedKeys, .fragmentsAllowed]
        return (try? JSONSerialization.data(withJSONObject: a, options: options)) == (try? JSONSerialization.data(withJSONObject: b, options: options))
    }
}
