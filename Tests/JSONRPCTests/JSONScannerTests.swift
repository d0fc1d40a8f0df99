import Testing

@testable import JSONRPC

@Suite struct JSONScannerTests {
    private func scan(_ s: String, depth: Int = 64) -> Result<ScannedJSON, JSONSyntaxError> {
        do { return .success(try JSONScanner.scan(Array(s.utf8), maxDepth: depth)) } catch { return .failure(error) }
    }

    private func reason(_ s: String, depth: Int = 64) -> JSONSyntaxError.Reason? {
        if case .failure(let e) = scan(s, depth: depth) { return e.reason }
        return nil
    }

    @Test(arguments: [
        "{}", "[]", "0", "-0", "1.5e-3", "\"a\\u00e9\\n\"", "true", "null", " { \"a\" : [ 1 , { } ] } ",
        "{\"a\":\"\u{1D11E}\"}", "[1E+2,2e2,-3.25]", "\"\\ud834\\udd1e\"",
    ])
    func acceptsValidJSON(_ text: String) {
        #expect(reason(text) == nil)
    }

    @Test func refusesMalformedJSON() {
        #expect(reason("") == .empty)
        #expect(reason("   ") == .empty)
        #expect(reason("{") == .unexpectedEnd)
        #expect(reason("{\"a\"}") == .unexpectedByte)
        #expect(reason("[1,]") == .unexpectedByte)
        #expect(reason("{\"a\":1,}") == .unexpectedByte)
        #expect(reason("01") == .trailingData)
        #expect(reason("1.") == .invalidNumber)
        #expect(reason("-") == .invalidNumber)
        #expect(reason("+1") == .unexpectedByte)
        #expect(reason("\"\\x\"") == .invalidEscape)
        #expect(reason("\"\\u12G4\"") == .invalidEscape)
        #expect(reason("\"a\tb\"") == .controlCharacter)
        #expect(reason("{} {}") == .trailingData)
        #expect(reason("tru") == .unexpectedEnd)
        #expect(reason("nul1") == .unexpectedByte)
    }

    @Test func refusesInvalidUTF8() throws {
        for bad: [UInt8] in [
            [0x22, 0xFF, 0x22], [0x22, 0xC0, 0xAF, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22],
            [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22], [0x22, 0xE2, 0x82, 0x22], [0xC3, 0xA9],
        ] {
            var caught: JSONSyntaxError.Reason?
            do { _ = try JSONScanner.scan(bad) } catch { caught = error.reason }
            #expect(caught == .invalidUTF8 || (bad.first != 0x22 && caught == .unexpectedByte))
        }
    }

    @Test func boundsNesting() {
        #expect(reason("[[[1]]]", depth: 3) == nil)
        #expect(reason("[[[[1]]]]", depth: 3) == .tooDeep)
        #expect(reason("{\"a\":{\"b\":{\"c\":{}}}}", depth: 3) == .tooDeep)
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(reason(deep, depth: 10_000_000) == .tooDeep)  // clamped to the ceiling, never a stack overflow
    }

    @Test func recordsTopLevelMembersWithTheirExactBytes() throws {
        let text = #"{"id": 12 , "method":"a\"b", "params":{"x":[1,2]}}"#
        let bytes = Array(text.utf8)
        let scanned = try JSONScanner.scan(bytes)
        #expect(scanned.root.kind == .object)
        #expect(scanned.root.members.map(\.key) == ["id", "method", "params"])
        let params = scanned.root.members[2]
        #expect(String(decoding: bytes[params.value], as: UTF8.self) == #"{"x":[1,2]}"#)
        #expect(scanned.root.members[0].isIntegerLiteral)
    }

    @Test func theEightByteStepFlagsExactlyTheBytesAStringMustLookAt() {
        let plain = Array(repeating: UInt8(ascii: "a"), count: 8)
        for lane in 0..<8 {
            for b in 0...255 {
                var bytes = plain
                bytes[lane] = UInt8(b)
                let v = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
                let special = b == 0x22 || b == 0x5C || b < 0x20 || b >= 0x80
                #expect(JSONScanner.hasSpecialStringByte(v) == special, "byte \(b) in lane \(lane)")
            }
        }
    }

    @Test func everySpecialByteIsFoundWhereverItSitsInALongString() throws {
        for at in 0..<40 {
            func string(_ special: [UInt8]) -> [UInt8] {
                [0x22] + Array(repeating: UInt8(ascii: "a"), count: at) + special + Array(repeating: UInt8(ascii: "b"), count: 40) + [0x22]
            }
            let offset = 1 + at
            for (special, reason) in [([UInt8(0x01)], JSONSyntaxError.Reason.controlCharacter), ([0xFF], .invalidUTF8)] {
                #expect(throws: JSONSyntaxError(reason: reason, offset: offset)) { try JSONScanner.scan(string(special)) }
            }
            #expect(throws: JSONSyntaxError(reason: .invalidEscape, offset: offset + 1)) { try JSONScanner.scan(string([0x5C, 0x78])) }
            #expect(throws: JSONSyntaxError.self) { try JSONScanner.scan(string([0x22])) }  // the string ends early
            // Keys are decoded: escapes and non-ASCII text at every position come back as written.
            let key = String(repeating: "k", count: at) + "\u{e9}\"" + String(repeating: "z", count: 17)
            let json = "{\"" + String(repeating: "k", count: at) + "\u{e9}\\\"" + String(repeating: "z", count: 17) + "\":1}"
            #expect(try JSONScanner.scan(Array(json.utf8)).root.members.map(\.key) == [key])
        }
    }
}
