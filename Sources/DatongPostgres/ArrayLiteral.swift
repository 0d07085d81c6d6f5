/// PostgreSQL's text form of a `text[]`, for sending a whole list as one parameter
/// (`… = ANY($1::text[])`, `unnest($1::text[])`).
public func postgresTextArray(_ values: [String]) -> String {
    var out = "{"
    for (index, value) in values.enumerated() {
        if index > 0 { out += "," }
        out += "\""
        for character in value.unicodeScalars {
            if character == "\"" || character == "\\" { out += "\\" }
            out.unicodeScalars.append(character)
        }
        out += "\""
    }
    return out + "}"
}
