/// JSON text (RFC 8259) straight into a `JSONValue`, without Codable.
///
/// Why: `JSONValue`'s `Decodable` conformance has to guess each value's kind by trying one type after
/// another, and every wrong guess throws a `DecodingError` (with its coding path and message). On the
/// notification path (every JWS payload verified, every stored notification processed) that guessing was
/// a fifth of verification's CPU. This parser reads each value once. It is as strict as `JSONScanner`:
/// valid UTF-8 only, no trailing data, nesting bounded, numbers by the RFC's grammar.
extension JSONValue {
    /// The deepest nesting accepted (arrays and objects).
    public static let parsingDepthLimit = 128

    /// Parses a whole JSON document. Integers that fit in 64 bits become `.int`; other numbers `.double`.
    public init(parsing bytes: [UInt8]) throws(JSONSyntaxError) {
        try self.init(parsing: bytes, refusingRepeatedKeys: false)
    }

    /// `refusingRepeatedKeys`: an object that names a key twice is an error (`unexpectedByte` at the second),
    /// for callers that must not guess which one a reader would take.
    init(parsing bytes: [UInt8], refusingRepeatedKeys: Bool) throws(JSONSyntaxError) {
        let result: Result<JSONValue, JSONSyntaxError> = bytes.withUnsafeBufferPointer { buffer in
            var parser = JSONValueParser(bytes: buffer)
            parser.refuseRepeatedKeys = refusingRepeatedKeys
            return Result { () throws(JSONSyntaxError) -> JSONValue in
                parser.skipWhitespace()
                let value = try parser.value(depth: 0)
                parser.skipWhitespace()
                guard parser.position == buffer.count else { throw parser.failure(.trailingData) }
                return value
            }
        }
        self = try result.get()
    }
}

private struct JSONValueParser {
    let bytes: UnsafeBufferPointer<UInt8>
    var position = 0
    var refuseRepeatedKeys = false

    init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    func failure(_ reason: JSONSyntaxError.Reason) -> JSONSyntaxError { JSONSyntaxError(reason: reason, offset: position) }

    mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    mutating func value(depth: Int) throws(JSONSyntaxError) -> JSONValue {
        guard position < bytes.count else { throw failure(position == 0 ? .empty : .unexpectedEnd) }
        switch bytes[position] {
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "t"):
            try literal("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try literal("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw failure(.unexpectedByte)
        }
    }

    mutating func literal(_ word: StaticString) throws(JSONSyntaxError) {
        let count = word.utf8CodeUnitCount
        guard position + count <= bytes.count else { throw failure(.unexpectedEnd) }
        for i in 0..<count where bytes[position + i] != word.utf8Start[i] {
            position += i
            throw failure(.unexpectedByte)
        }
        position += count
    }

    mutating func object(depth: Int) throws(JSONSyntaxError) -> JSONValue {
        guard depth <= JSONValue.parsingDepthLimit else { throw failure(.tooDeep) }
        position += 1  // {
        var members: [String: JSONValue] = [:]
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
            position += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard position < bytes.count else { throw failure(.unexpectedEnd) }
            guard bytes[position] == UInt8(ascii: "\"") else { throw failure(.unexpectedByte) }
            let key = try string()
            skipWhitespace()
            guard position < bytes.count else { throw failure(.unexpectedEnd) }
            guard bytes[position] == UInt8(ascii: ":") else { throw failure(.unexpectedByte) }
            position += 1
            skipWhitespace()
            let keyAt = position
            let member = try value(depth: depth)
            // A repeated key: the first one stands, as Foundation's JSONDecoder reads it (so a payload read both
            // ways says the same), unless repeats are refused.
            if members[key] == nil {
                members[key] = member
            } else if refuseRepeatedKeys {
                position = keyAt
                throw failure(.unexpectedByte)
            }
            skipWhitespace()
            guard position < bytes.count else { throw failure(.unexpectedEnd) }
            switch bytes[position] {
            case UInt8(ascii: ","): position += 1
            case UInt8(ascii: "}"):
                position += 1
                return .object(members)
            default: throw failure(.unexpectedByte)
            }
        }
    }

    mutating func array(depth: Int) throws(JSONSyntaxError) -> JSONValue {
        guard depth <= JSONValue.parsingDepthLimit else { throw failure(.tooDeep) }
        position += 1  // [
        var elements: [JSONValue] = []
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
            position += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try value(depth: depth))
            skipWhitespace()
            guard position < bytes.count else { throw failure(.unexpectedEnd) }
            switch bytes[position] {
            case UInt8(ascii: ","): position += 1
            case UInt8(ascii: "]"):
                position += 1
                return .array(elements)
            default: throw failure(.unexpectedByte)
            }
        }
    }

    /// A string at `position` (its opening quote); escapes decoded, UTF-8 validated.
    mutating func string() throws(JSONSyntaxError) -> String {
        position += 1  // "
        let start = position
        // The common case: no escapes; the bytes between the quotes are the string.
        while position < bytes.count {
            // Plain ASCII runs eight bytes at a time (non-ASCII is validated with the whole string below).
            while position + 8 <= bytes.count,
                !JSONScanner.hasSpecialStringByte(UnsafeRawPointer(bytes.baseAddress! + position).loadUnaligned(as: UInt64.self))
            {
                position += 8
            }
            guard position < bytes.count else { break }
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                let raw = UnsafeBufferPointer(rebasing: bytes[start..<position])
                guard let text = String(validating: raw, as: UTF8.self) else {
                    position = start
                    throw failure(.invalidUTF8)
                }
                position += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            guard byte >= 0x20 else { throw failure(.controlCharacter) }
            position += 1
        }
        var decoded = Array(bytes[start..<position])
        while position < bytes.count {
            let byte = bytes[position]
            switch byte {
            case UInt8(ascii: "\""):
                guard let text = String(validating: decoded, as: UTF8.self) else {
                    position = start
                    throw failure(.invalidUTF8)
                }
                position += 1
                return text
            case UInt8(ascii: "\\"):
                position += 1
                guard position < bytes.count else { throw failure(.unexpectedEnd) }
                let escape = bytes[position]
                position += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(escape)
                case UInt8(ascii: "b"): decoded.append(0x08)
                case UInt8(ascii: "f"): decoded.append(0x0C)
                case UInt8(ascii: "n"): decoded.append(0x0A)
                case UInt8(ascii: "r"): decoded.append(0x0D)
                case UInt8(ascii: "t"): decoded.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        // A high surrogate must be followed by an escaped low one.
                        guard position + 1 < bytes.count, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u")
                        else { throw failure(.invalidEscape) }
                        position += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw failure(.invalidEscape) }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw failure(.invalidEscape)
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw failure(.invalidEscape) }
                    decoded.append(contentsOf: UTF8.encode(unicode)!)
                default:
                    position -= 1
                    throw failure(.invalidEscape)
                }
            default:
                guard byte >= 0x20 else { throw failure(.controlCharacter) }
                decoded.append(byte)
                position += 1
            }
        }
        throw failure(.unexpectedEnd)
    }

    mutating func hex4() throws(JSONSyntaxError) -> UInt32 {
        guard position + 4 <= bytes.count else { throw failure(.unexpectedEnd) }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = JSONScanner.hexValue(bytes[position]) else { throw failure(.invalidEscape) }
            value = value << 4 | digit
            position += 1
        }
        return value
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    mutating func number() throws(JSONSyntaxError) -> JSONValue {
        let start = position
        func digits(_ p: inout Self) -> Int {
            let from = p.position
            while p.position < p.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(p.bytes[p.position]) { p.position += 1 }
            return p.position - from
        }
        if bytes[position] == UInt8(ascii: "-") { position += 1 }
        guard position < bytes.count else { throw failure(.unexpectedEnd) }
        if bytes[position] == UInt8(ascii: "0") {
            position += 1
        } else {
            guard digits(&self) > 0 else { throw failure(.invalidNumber) }
        }
        var integral = true
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            integral = false
            position += 1
            guard digits(&self) > 0 else { throw failure(.invalidNumber) }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            integral = false
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") { position += 1 }
            guard digits(&self) > 0 else { throw failure(.invalidNumber) }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
        if integral, let int = Int64(text) { return .int(int) }
        guard let double = Double(text), double.isFinite else { throw failure(.invalidNumber) }
        return .double(double)
    }
}
