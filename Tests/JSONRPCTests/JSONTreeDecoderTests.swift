import Foundation
import Testing

@testable import JSONRPC

/// `RPCCodec.quickly` may decode a value only when Foundation's `JSONDecoder` decodes the same one; every
/// other case must fall through to `JSONDecoder` (nil), which also words the errors.
@Suite struct JSONTreeDecoderTests {
    enum Kind: String, Codable, Equatable { case coins, subscription }

    struct Inner: Codable, Equatable {
        var id: String
        var amount: Int64
    }

    struct Sample: Codable, Equatable {
        var name: String
        var count: Int
        var small: Int32?
        var byte: UInt8?
        var flag: Bool
        var kind: Kind?
        var inner: Inner?
        var items: [Inner]?
        var totals: [String: Int]?
        var extra: JSONValue?
        var tags: [String]?
    }

    struct WithDouble: Codable, Equatable {
        var price: Double
    }

    static let valid = [
        #"{"name":"a","count":1,"flag":true}"#,
        #"{"name":"é\n\u00e9\ud834\udd1e","count":-9223372036854775808,"flag":false,"small":-2147483648,"byte":255}"#,
        #"{"name":"a","count":1,"flag":true,"kind":"coins","inner":{"id":"x","amount":5},"items":[{"id":"y","amount":0}]}"#,
        #"{"name":"a","count":1,"flag":true,"totals":{"a":1,"b":2},"extra":{"k":[1,"s",null,true,{"z":{}}]},"tags":[]}"#,
        #"{"name":"a","count":1,"flag":true,"small":null,"kind":null,"extra":null,"unknown":[1,2,{"q":1.5}]}"#,
        #" { "name" : "a" , "count" : 0 , "flag" : true } "#,
    ]

    static let doubtful = [
        #"{"name":"a","count":1.0,"flag":true}"#, #"{"name":"a","count":1e2,"flag":true}"#,
        #"{"name":"a","count":9223372036854775808,"flag":true}"#, #"{"name":"a","count":1,"flag":true,"byte":256}"#,
        #"{"name":"a","count":1,"flag":true,"small":2147483648}"#, #"{"name":"a","count":1,"flag":1}"#,
        #"{"name":1,"count":1,"flag":true}"#, #"{"name":null,"count":1,"flag":true}"#, #"{"count":1,"flag":true}"#,
        #"{"name":"a","count":1,"flag":true,"kind":"gems"}"#, #"{"name":"a","count":1,"flag":true,"extra":{"p":0.5}}"#,
        #"{"name":"a","count":1,"flag":true,"items":{}}"#, #"{"name":"a","count":1,"flag":true,"totals":[]}"#,
        #"{"name":"first","name":"last","count":1,"flag":true}"#, #"{"name":"a","count":1,"flag":true,"inner":{"id":"x","id":"y","amount":1}}"#,
        #"[]"#, #"null"#, #"{"name":"a","count":1,"flag":true"#, #"{"name":"a","count":"1","flag":true}"#,
    ]

    static func same<T: Codable & Equatable>(_ type: T.Type, _ text: String) -> (quick: T?, foundation: T?) {
        let bytes = Array(text.utf8)
        return (RPCCodec.quickly(T.self, from: bytes), try? JSONDecoder().decode(T.self, from: Data(bytes)))
    }

    @Test func decodesWhatFoundationDecodesTheSameWay() throws {
        for text in Self.valid {
            let (quick, foundation) = Self.same(Sample.self, text)
            #expect(quick != nil, "\(text)")
            #expect(quick == foundation, "\(text)")
        }
    }

    @Test func leavesEveryDoubtfulCaseToFoundation() {
        for text in Self.doubtful {
            let (quick, foundation) = Self.same(Sample.self, text)
            #expect(quick == nil, "\(text)")
            _ = foundation  // whatever JSONDecoder makes of it is the answer
        }
        #expect(Self.same(WithDouble.self, #"{"price":1}"#).quick == nil)
        #expect(Self.same(WithDouble.self, #"{"price":1}"#).foundation == WithDouble(price: 1))
    }

    @Test func aRepeatedKeyInParamsCountsWithItsFirstValue() throws {
        // What docs/architecture.md promises for params, through the codec every service uses.
        let bytes = Array(#"{"name":"first","count":1,"name":"second","flag":true,"inner":{"id":"a","amount":1,"id":"b"}}"#.utf8)
        let decoded = try RPCCodec.decodeParams(Sample.self, from: bytes)
        #expect(decoded.name == "first")
        #expect(decoded.inner?.id == "a")
        #expect(try JSONValue(parsing: bytes)["name"]?.stringValue == "first")
    }

    @Test func mutatedTextIsNeverDecodedDifferently() {
        var rng = SystemRandomNumberGenerator()
        let alphabet = Array(#"{}[]":,0123456789.-eEtrufalsn \"#.utf8) + [0xC3, 0xA9, 0xFF]
        var quickCount = 0
        for _ in 0..<4_000 {
            var bytes = Array(Self.valid.randomElement(using: &rng)!.utf8)
            for _ in 0..<Int.random(in: 1...3, using: &rng) {
                let i = Int.random(in: 0..<bytes.count, using: &rng)
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: bytes[i] = alphabet.randomElement(using: &rng)!
                case 1: bytes.remove(at: i)
                default: bytes.insert(alphabet.randomElement(using: &rng)!, at: i)
                }
                if bytes.isEmpty { bytes = [0x7B] }
            }
            let quick = RPCCodec.quickly(Sample.self, from: bytes)
            if let quick {
                quickCount += 1
                #expect(quick == (try? JSONDecoder().decode(Sample.self, from: Data(bytes))), "\(String(decoding: bytes, as: UTF8.self))")
            }
        }
        #expect(quickCount > 100)  // the comparison above ran on many decodable mutants
    }
}
