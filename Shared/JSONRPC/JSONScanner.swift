/// A strict, allocation-light JSON validator (RFC 8259) that also records the shallow structure the
/// JSON-RPC layer needs: the members of a top-level object, or the elements of a top-level array and
/// their members. Everything deeper is only validated, and kept as byte ranges so that params can be
/// handed to `JSONDecoder` and ids echoed byte for byte.
///
/// Why not `JSONDecoder` for the envelope: it cannot tell a missing `id` from `"id": null`, it rewrites
/// ids (`1e0` becomes `1`), and it has no configurable nesting limit. Hostile input must fail fast here:
/// nesting is bounded, invalid UTF-8 is refused, and nothing is allocated per nested level.
public enum JSONKind: Sendable, Equatable {
    case object, array, string, number, bool, null
}

public struct JSONSyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Reason: String, Sendable {
        case empty, unexpectedByte, unexpectedEnd, invalidUTF8, invalidEscape, controlCharacter
        case tooDeep, trailingData, invalidNumber
    }
    public let reason: Reason
    public let offset: Int

    public var description: String {
        switch reason {
        case .empty: return "empty input"
        case .unexpectedByte: return "unexpected byte at offset \(offset)"
        case .unexpectedEnd: return "unexpected end of input at offset \(offset)"
        case .invalidUTF8: return "invalid UTF-8 at offset \(offset)"
        case .invalidEscape: return "invalid escape sequence at offset \(offset)"
        case .controlCharacter: return "unescaped control character in string at offset \(offset)"
        case .tooDeep: return "nesting deeper than allowed at offset \(offset)"
        case .trailingData: return "data after the JSON value at offset \(offset)"
        case .invalidNumber: return "invalid number at offset \(offset)"
        }
    }
}

/// A member of a recorded object: the decoded key, and where its value sits in the input.
public struct JSONMember: Sendable {
    public let key: String
    public let value: Range<Int>
    public let kind: JSONKind
    /// For numbers: true when written without fraction or exponent.
    public let isIntegerLiteral: Bool
}

/// A recorded value: its kind and byte range, and its members when it is an object.
public struct JSONShallowValue: Sendable {
    public let kind: JSONKind
    public let range: Range<Int>
    public let members: [JSONMember]
}

public struct ScannedJSON: Sendable {
    public let root: JSONShallowValue
    /// For a top-level array: its elements, each with members if it is an object.
    public let elements: [JSONShallowValue]
}

public struct JSONScanner: ~Copyable {
    /// Hard ceiling on the configurable depth: the scanner recurses once per level.
    public static let maximumDepthCeiling = 1_000

    private let base: UnsafePointer<UInt8>
    private let count: Int
    private var pos = 0
    private let maxDepth: Int

    private init(base: UnsafePointer<UInt8>, count: Int, maxDepth: Int) {
        self.base = base
        self.count = count
        self.maxDepth = min(max(1, maxDepth), Self.maximumDepthCeiling)
    }

    /// Validates `bytes` as exactly one JSON text and records its shallow structure.
    public static func scan(_ bytes: UnsafeRawBufferPointer, maxDepth: Int = 64) throws(JSONSyntaxError) -> ScannedJSON {
        guard let raw = bytes.baseAddress, bytes.count > 0 else { throw JSONSyntaxError(reason: .empty, offset: 0) }
        var scanner = JSONScanner(base: raw.assumingMemoryBound(to: UInt8.self), count: bytes.count, maxDepth: maxDepth)
        return try scanner.scanDocument()
    }

    public static func scan(_ bytes: [UInt8], maxDepth: Int = 64) throws(JSONSyntaxError) -> ScannedJSON {
        do {
            return try bytes.withUnsafeBytes { buf in try scan(buf, maxDepth: maxDepth) }
        } catch let error as JSONSyntaxError {
            throw error
        } catch {
            fatalError("unreachable: scan throws only JSONSyntaxError")
        }
    }

    private mutating func scanDocument() throws(JSONSyntaxError) -> ScannedJSON {
        skipWhitespace()
        guard pos < count else { throw JSONSyntaxError(reason: .empty, offset: pos) }
        let start = pos
        let first = base[pos]
        var members: [JSONMember] = []
        var elements: [JSONShallowValue] = []
        let kind: JSONKind
        if first == UInt8(ascii: "{") {
            kind = .object
            try scanObject(depth: 1, record: &members)
        } else if first == UInt8(ascii: "[") {
            kind = .array
            try scanArray(depth: 1, recordElements: &elements)
        } else {
            var integer = false
            kind = try scanValue(depth: 0, isInteger: &integer)
        }
        let root = JSONShallowValue(kind: kind, range: start..<pos, members: members)
        skipWhitespace()
        if pos != count { throw JSONSyntaxError(reason: .trailingData, offset: pos) }
        return ScannedJSON(root: root, elements: elements)
    }

    @inline(__always)
    private mutating func skipWhitespace() {
        while pos < count {
            switch base[pos] {
            case 0x20, 0x09, 0x0A, 0x0D: pos += 1
            default: return
            }
        }
    }

    @inline(__always)
    private func peek() throws(JSONSyntaxError) -> UInt8 {
        guard pos < count else { throw JSONSyntaxError(reason: .unexpectedEnd, offset: pos) }
        return base[pos]
    }

    /// Scans any value at `pos`, validating it fully, recording nothing.
    private mutating func scanValue(depth: Int, isInteger: inout Bool) throws(JSONSyntaxError) -> JSONKind {
        let b = try peek()
        switch b {
        case UInt8(ascii: "{"):
            var ignored: [JSONMember]? = nil
            try scanObjectBody(depth: depth + 1, record: &ignored)
            return .object
        case UInt8(ascii: "["):
            guard depth + 1 <= maxDepth else { throw JSONSyntaxError(reason: .tooDeep, offset: pos) }
            pos += 1
            skipWhitespace()
            if try peek() == UInt8(ascii: "]") { pos += 1; return .array }
            while true {
                skipWhitespace()
                var i = false
                _ = try scanValue(depth: depth + 1, isInteger: &i)
                skipWhitespace()
                let c = try peek()
                pos += 1
                if c == UInt8(ascii: ",") { continue }
                if c == UInt8(ascii: "]") { return .array }
                throw JSONSyntaxError(reason: .unexpectedByte, offset: pos - 1)
            }
        case UInt8(ascii: "\""):
            _ = try scanString(decode: false)
            return .string
        case UInt8(ascii: "t"):
            try expectLiteral("true"); return .bool
        case UInt8(ascii: "f"):
            try expectLiteral("false"); return .bool
        case UInt8(ascii: "n"):
            try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            isInteger = try scanNumber()
            return .number
        default:
            throw JSONSyntaxError(reason: .unexpectedByte, offset: pos)
        }
    }

    private mutating func scanObject(depth: Int, record: inout [JSONMember]) throws(JSONSyntaxError) {
        var members: [JSONMember]? = []
        try scanObjectBody(depth: depth, record: &members)
        record = members ?? []
    }

    /// Scans `{...}` at `pos`. When `record` is non-nil, members are appended with decoded keys.
    private mutating func scanObjectBody(depth: Int, record: inout [JSONMember]?) throws(JSONSyntaxError) {
        guard depth <= maxDepth else { throw JSONSyntaxError(reason: .tooDeep, offset: pos) }
        pos += 1  // {
        skipWhitespace()
        if try peek() == UInt8(ascii: "}") { pos += 1; return }
        while true {
            skipWhitespace()
            guard try peek() == UInt8(ascii: "\"") else { throw JSONSyntaxError(reason: .unexpectedByte, offset: pos) }
            let key = try scanString(decode: record != nil)
            skipWhitespace()
            guard try peek() == UInt8(ascii: ":") else { throw JSONSyntaxError(reason: .unexpectedByte, offset: pos) }
            pos += 1
            skipWhitespace()
            let valueStart = pos
            var integer = false
            let kind = try scanValue(depth: depth, isInteger: &integer)
            if record != nil {
                record!.append(JSONMember(key: key ?? "", value: valueStart..<pos, kind: kind, isIntegerLiteral: integer))
            }
            skipWhitespace()
            let c = try peek()
            pos += 1
            if c == UInt8(ascii: ",") { continue }
            if c == UInt8(ascii: "}") { return }
            throw JSONSyntaxError(reason: .unexpectedByte, offset: pos - 1)
        }
    }

    /// Scans a top-level array, recording each element (and the members of object elements).
    private mutating func scanArray(depth: Int, recordElements: inout [JSONShallowValue]) throws(JSONSyntaxError) {
        pos += 1  // [
        skipWhitespace()
        if try peek() == UInt8(ascii: "]") { pos += 1; return }
        while true {
            skipWhitespace()
            let start = pos
            if try peek() == UInt8(ascii: "{") {
                var members: [JSONMember] = []
                try scanObject(depth: depth + 1, record: &members)
                recordElements.append(JSONShallowValue(kind: .object, range: start..<pos, members: members))
            } else {
                var integer = false
                let kind = try scanValue(depth: depth, isInteger: &integer)
                recordElements.append(JSONShallowValue(kind: kind, range: start..<pos, members: []))
            }
            skipWhitespace()
            let c = try peek()
            pos += 1
            if c == UInt8(ascii: ",") { continue }
            if c == UInt8(ascii: "]") { return }
            throw JSONSyntaxError(reason: .unexpectedByte, offset: pos - 1)
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(JSONSyntaxError) {
        let n = literal.utf8CodeUnitCount
        guard pos + n <= count else { throw JSONSyntaxError(reason: .unexpectedEnd, offset: pos) }
        let lit = literal.utf8Start
        for i in 0..<n where base[pos + i] != lit[i] {
            throw JSONSyntaxError(reason: .unexpectedByte, offset: pos + i)
        }
        pos += n
    }

    /// Returns true when the number has no fraction and no exponent.
    private mutating func scanNumber() throws(JSONSyntaxError) -> Bool {
        let start = pos
        var integer = true
        if base[pos] == UInt8(ascii: "-") { pos += 1 }
        guard pos < count else { throw JSONSyntaxError(reason: .invalidNumber, offset: start) }
        if base[pos] == UInt8(ascii: "0") {
            pos += 1
        } else if isDigit(base[pos]) {
            while pos < count && isDigit(base[pos]) { pos += 1 }
        } else {
            throw JSONSyntaxError(reason: .invalidNumber, offset: start)
        }
        if pos < count && base[pos] == UInt8(ascii: ".") {
            integer = false
            pos += 1
            guard pos < count && isDigit(base[pos]) else { throw JSONSyntaxError(reason: .invalidNumber, offset: start) }
            while pos < count && isDigit(base[pos]) { pos += 1 }
        }
        if pos < count && (base[pos] == UInt8(ascii: "e") || base[pos] == UInt8(ascii: "E")) {
            integer = false
            pos += 1
            if pos < count && (base[pos] == UInt8(ascii: "+") || base[pos] == UInt8(ascii: "-")) { pos += 1 }
            guard pos < count && isDigit(base[pos]) else { throw JSONSyntaxError(reason: .invalidNumber, offset: start) }
            while pos < count && isDigit(base[pos]) { pos += 1 }
        }
        return integer
    }

    @inline(__always) private func isDigit(_ b: UInt8) -> Bool { b >= 0x30 && b <= 0x39 }

    /// Scans a string at `pos` (which holds the opening quote). Validates escapes and UTF-8;
    /// returns the decoded text when `decode` is true.
    private mutating func scanString(decode: Bool) throws(JSONSyntaxError) -> String? {
        pos += 1
        let contentStart = pos
        var hasEscapes = false
        while true {
            // Eight bytes at a time while none is a quote, a backslash, a control character or non-ASCII
            // (long strings, such as base64 receipts, are mostly such runs).
            while pos + 8 <= count {
                let v = UnsafeRawPointer(base + pos).loadUnaligned(as: UInt64.self)
                if Self.hasSpecialStringByte(v) { break }
                pos += 8
            }
            guard pos < count else { throw JSONSyntaxError(reason: .unexpectedEnd, offset: pos) }
            let b = base[pos]
            if b == UInt8(ascii: "\"") { break }
            if b == UInt8(ascii: "\\") {
                hasEscapes = true
                pos += 1
                guard pos < count else { throw JSONSyntaxError(reason: .unexpectedEnd, offset: pos) }
                switch base[pos] {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                    UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    pos += 1
                case UInt8(ascii: "u"):
                    guard pos + 4 < count else { throw JSONSyntaxError(reason: .unexpectedEnd, offset: pos) }
                    for i in 1...4 where hexValue(base[pos + i]) == nil {
                        throw JSONSyntaxError(reason: .invalidEscape, offset: pos + i)
                    }
                    pos += 5
                default:
                    throw JSONSyntaxError(reason: .invalidEscape, offset: pos)
                }
                continue
            }
            if b < 0x20 { throw JSONSyntaxError(reason: .controlCharacter, offset: pos) }
            if b < 0x80 { pos += 1; continue }
            try skipUTF8Sequence()
        }
        let contentEnd = pos
        pos += 1  // closing quote
        guard decode else { return nil }
        let content = UnsafeBufferPointer(start: base + contentStart, count: contentEnd - contentStart)
        if !hasEscapes { return String(decoding: content, as: UTF8.self) }
        return JSONScanner.unescape(content)
    }

    /// Whether any of the eight bytes in `v` needs a look in a string: `"`, `\\`, below 0x20 or above 0x7F.
    /// (The classic zero-byte test, `(x - 0x01..) & ~x & 0x80..`, is exact as a yes/no answer.)
    @inline(__always)
    static func hasSpecialStringByte(_ v: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let high: UInt64 = 0x8080_8080_8080_8080
        let quote = v ^ (ones &* 0x22)
        let backslash = v ^ (ones &* 0x5C)
        let control = (v &- ones &* 0x20) & ~v
        return (v | control | ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash)) & high != 0
    }

    /// Validates one multi-byte UTF-8 sequence at `pos` (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
    @inline(__always)
    private mutating func skipUTF8Sequence() throws(JSONSyntaxError) {
        let b0 = base[pos]
        let length: Int
        var lower: UInt8 = 0x80, upper: UInt8 = 0xBF
        switch b0 {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; lower = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; upper = 0x9F
        case 0xF0: length = 4; lower = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; upper = 0x8F
        default: throw JSONSyntaxError(reason: .invalidUTF8, offset: pos)
        }
        guard pos + length <= count else { throw JSONSyntaxError(reason: .invalidUTF8, offset: pos) }
        let b1 = base[pos + 1]
        guard b1 >= lower && b1 <= upper else { throw JSONSyntaxError(reason: .invalidUTF8, offset: pos + 1) }
        for i in 2..<length where base[pos + i] & 0xC0 != 0x80 {
            throw JSONSyntaxError(reason: .invalidUTF8, offset: pos + i)
        }
        pos += length
    }

    @inline(__always)
    static func hexValue(_ b: UInt8) -> UInt32? {
        switch b {
        case 0x30...0x39: return UInt32(b - 0x30)
        case 0x41...0x46: return UInt32(b - 0x41 + 10)
        case 0x61...0x66: return UInt32(b - 0x61 + 10)
        default: return nil
        }
    }
    @inline(__always) private func hexValue(_ b: UInt8) -> UInt32? { Self.hexValue(b) }

    /// Decodes the content of an already-validated JSON string. Lone surrogates become U+FFFD.
    static func unescape(_ content: UnsafeBufferPointer<UInt8>) -> String {
        var out = [UInt8]()
        out.reserveCapacity(content.count)
        var i = 0
        func hex4(_ at: Int) -> UInt32 {
            var v: UInt32 = 0
            for k in 0..<4 { v = v << 4 | (hexValue(content[at + k]) ?? 0) }
            return v
        }
        func append(scalar: UInt32) {
            let s = Unicode.Scalar(scalar) ?? "\u{FFFD}"
            out.append(contentsOf: Array(String(Character(s)).utf8))
        }
        while i < content.count {
            let b = content[i]
            guard b == UInt8(ascii: "\\") else { out.append(b); i += 1; continue }
            let e = content[i + 1]
            i += 2
            switch e {
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = hex4(i)
                i += 4
                if (0xD800...0xDBFF).contains(scalar), i + 5 < content.count + 0,
                    content[i] == UInt8(ascii: "\\"), content[i + 1] == UInt8(ascii: "u")
                {
                    let low = hex4(i + 2)
                    if (0xDC00...0xDFFF).contains(low) {
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        i += 6
                    }
                }
                append(scalar: scalar)
            default: out.append(e)  // \" \\ \/
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
