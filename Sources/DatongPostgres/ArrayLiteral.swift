/// PostgreSQL's text form of a `bigint[]` (user numbers and the like, for `= ANY($1::bigint[])`).
package func postgresBigintArray(_ values: [Int64]) -> String { "{" + values.map(String.init).joined(separator: ",") + "}" }

/// PostgreSQL's text form of a `text[]`, for sending a whole list as one parameter
/// (`… = ANY($1::text[])`, `unnest($1::text[])`). Built over UTF-8 bytes: the collector sends
/// thousands of keys per transaction this way.
package func postgresTextArray(_ values: [String]) -> String {
    var out: [UInt8] = []
    out.reserveCapacity(values.reduce(2) { $0 + $1.utf8.count + 3 })
    out.append(UInt8(ascii: "{"))
    for (index, value) in values.enumerated() {
        if index > 0 { out.append(UInt8(ascii: ",")) }
        out.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
            out.append(byte)
        }
        out.append(UInt8(ascii: "\""))
    }
    out.append(UInt8(ascii: "}"))
    return String(decoding: out, as: UTF8.self)
}
