import Foundation
import Testing

@testable import JSONRPC

/// `JSONValue(parsing:)` says what Foundation's JSONDecoder says of valid JSON, and refuses what the
/// strict scanner refuses, with the same reasons.
@Suite struct JSONValueParserTests {
    static let valid: [String] = [
        #"{"a":1,"b":[true,false,null],"c":{"d":"e"},"f":-12.5,"g":"","h":[]}"#,
        #"  [ 0 , -0 , 1e3 , 2.5E-2 , 9223372036854775807 , 9223372036854775808 ]  "#,
        #""escapes: \" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00""#,
        #"{"signedDate":1700000000000,"data":{"bundleId":"com.example.game","status":1,"nested":{"deep":[[[{}]]]}}}"#,
        "\"caf\u{e9} \u{1F600}\"",
        "{}", "[]", "0", "true", "null",
        #"{"signedDate":1,"signedDate":2,"inner":{"k":"first","k":"second"}}"#,  // repeated keys: the first stands in both
    ]

    @Test func agreesWithFoundationOnValidDocuments() throws {
        for text in Self.valid {
            let ours = try JSONValue(parsing: Array(text.utf8))
            let theirs = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
            // Foundation reads 1e3 as the integer 1000 and 9223372036854775808 as a double; compare numerically.
            #expect(Self.normalized(ours) == Self.normalized(theirs), "\(text)")
        }
        #expect(try JSONValue(parsing: Array(#""\ud83d\ude00""#.utf8)) == .string("\u{1F600}"))
        #expect(try JSONValue(parsing: Array("12".utf8)) == .int(12))
        #expect(try JSONValue(parsing: Array("1.5".utf8)) == .double(1.5))
    }

    static func normalized(_ v: JSONValue) -> JSONValue {
        switch v {
        case .int(let i): return .double(Double(i))
        case .array(let a): return .array(a.map(normalized))
        case .object(let o): return .object(o.mapValues(normalized))
        default: return v
        }
    }

    @Test func refusesWhatIsNotJSON() {
        let cases: [(String, JSONSyntaxError.Reason)] = [
            ("", .empty), ("{", .unexpectedEnd), ("[1,]", .unexpectedByte), (#"{"a" 1}"#, .unexpectedByte), ("01", .trailingData),
            ("1.", .invalidNumber), ("-", .unexpectedEnd), ("1e", .invalidNumber), (#""\x""#, .invalidEscape), (#""\ud83d""#, .invalidEscape),
            (#""\ude00""#, .invalidEscape), ("\"a\u{1}\"", .controlCharacter), ("tru", .unexpectedEnd), ("nul!", .unexpectedByte),
            ("{} {}", .trailingData), (#""abc"#, .unexpectedEnd), ("NaN", .unexpectedByte),
        ]
        for (text, reason) in cases {
            #expect(throws: JSONSyntaxError.self, "\(text)") { try JSONValue(parsing: Array(text.utf8)) }
            do {
                _ = try JSONValue(parsing: Array(text.utf8))
            } catch {
                #expect(error.reason == reason, "\(text): \(error)")
            }
        }
        #expect(throws: JSONSyntaxError.self) { try JSONValue(parsing: [0x22, 0xC3, 0x28, 0x22]) }  // invalid UTF-8
        let deep = String(repeating: "[", count: 200) + String(repeating: "]", count: 200)
        do {
            _ = try JSONValue(parsing: Array(deep.utf8))
            Issue.record("nesting 200 deep was accepted")
        } catch {
            #expect(error.reason == .tooDeep)
        }
    }
}
