import Foundation
import JSONRPC

/// Compares a reply with an expected JSON value in which some strings are matchers, for values a
/// server generates (ids, tokens, timestamps):
///
/// | matcher | matches |
/// |---|---|
/// | `"$any"` | anything, including absent members |
/// | `"$string"`, `"$int"`, `"$bool"`, `"$object"`, `"$array"` | any value of that type |
/// | `"$uuid"` | a UUID string |
/// | `"$nonempty"` | a non-empty string |
/// | `"$capture:NAME"` | anything present; remembers it as NAME |
/// | `"${NAME}"` | exactly the value captured as NAME |
///
/// Objects must have exactly the expected members (a member expected as `"$any"` may be absent).
public struct JSONMatcher {
    public var captures: [String: JSONValue] = [:]

    public init() {}

    /// Returns the mismatches, each with its path; empty when `actual` matches.
    public mutating func mismatches(expected: JSONValue, actual: JSONValue?, path: String = "$") -> [String] {
        if case .string(let s) = expected, s.hasPrefix("$") {
            return matchSpecial(s, actual, path)
        }
        guard let actual else { return ["\(path): missing, expected \(render(expected))"] }
        switch (expected, actual) {
        case let (.object(e), .object(a)):
            var problems: [String] = []
            for (k, v) in e {
                problems += mismatches(expected: v, actual: a[k], path: "\(path).\(k)")
            }
            for k in a.keys where e[k] == nil {
                problems.append("\(path).\(k): unexpected member \(render(a[k]!))")
            }
            return problems
        case let (.array(e), .array(a)):
            guard e.count == a.count else {
                return ["\(path): expected \(e.count) elements, got \(a.count): \(render(actual))"]
            }
            return zip(e, a).enumerated().flatMap { i, pair in
                mismatches(expected: pair.0, actual: pair.1, path: "\(path)[\(i)]")
            }
        default:
            return expected == actual ? [] : ["\(path): expected \(render(expected)), got \(render(actual))"]
        }
    }

    private mutating func matchSpecial(_ matcher: String, _ actual: JSONValue?, _ path: String) -> [String] {
        if matcher == "$any" { return [] }
        guard let actual else { return ["\(path): missing, expected \(matcher)"] }
        func ok(_ condition: Bool) -> [String] {
            condition ? [] : ["\(path): expected \(matcher), got \(render(actual))"]
        }
        switch matcher {
        case "$string": return ok(actual.stringValue != nil)
        case "$nonempty": return ok(!(actual.stringValue ?? "").isEmpty)
        case "$int": return ok(actual.intValue != nil)
        case "$bool": return ok(actual.boolValue != nil)
        case "$object": return ok(actual.objectValue != nil)
        case "$array": return ok(actual.arrayValue != nil)
        case "$uuid": return ok(actual.stringValue.flatMap(UUID.init(uuidString:)) != nil)
        default:
            if matcher.hasPrefix("$capture:") {
                captures[String(matcher.dropFirst("$capture:".count))] = actual
                return []
            }
            if matcher.hasPrefix("${"), matcher.hasSuffix("}") {
                let name = String(matcher.dropFirst(2).dropLast())
                guard let captured = captures[name] else { return ["\(path): nothing captured as \(name)"] }
                return ok(captured == actual)
            }
            return actual == .string(matcher) ? [] : ["\(path): expected \"\(matcher)\", got \(render(actual))"]
        }
    }

    /// Replaces `"${NAME}"` placeholders in a line to send with the captured JSON values.
    public func substitute(_ line: String) -> String {
        var out = line
        for (name, value) in captures {
            out = out.replacingOccurrences(of: "\"${\(name)}\"", with: render(value))
        }
        return out
    }

    public func render(_ value: JSONValue) -> String {
        (try? JSONByteEncoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "\(value)"
    }
}

extension JSONValue {
    /// Parses JSON text (tests and tools; the server uses the scanner).
    public static func parse(_ text: String) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
    }
}

/// Runs `body` and returns the RPCError it throws (nil if it succeeds).
public func rpcError<T>(_ body: () async throws -> T) async -> RPCError? {
    do {
        _ = try await body()
        return nil
    } catch let error as RPCError {
        return error
    } catch {
        return RPCError.internalError("\(error)")
    }
}
