import Foundation

/// Decodes a `Decodable` from a parsed `JSONValue`, for the wire's params and results: the quick path in
/// front of Foundation's `JSONDecoder` (which scanned every long string byte by byte and was the largest
/// cost after the signature in verification).
///
/// It only ever says yes when `JSONDecoder` would decode the same value: anything it is not sure of
/// (numbers with a fraction or exponent, integers out of range, floating-point targets, Foundation's own
/// `Data`/`Date`/`URL`/`Decimal` strategies, `superDecoder`) throws `Unsure`, and so does every mismatch;
/// `RPCCodec` then asks `JSONDecoder`, whose answer (and error message) stands. Errors here carry no detail,
/// and `codingPath` is always empty (nothing reads it but error messages, which come from `JSONDecoder`).
///
/// One rule for wire types: an `init(from:)` must not catch a decoding error to try another shape (`try?
/// c.decode(Double.self)` then a string, say). This decoder refuses more than `JSONDecoder` does, so such a
/// type could take another branch here and decode to a different value. None does today (`Grant`,
/// `RPCErrorData` and `JSONValue` were checked; `JSONValue` is answered from the tree directly).
enum JSONTreeDecoder {
    struct Unsure: Error {}

    static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        try TreeDecoder(value: value).decodeValue(T.self)
    }
}

private struct TreeDecoder: Decoder {
    let value: JSONValue
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else { throw JSONTreeDecoder.Unsure() }
        return KeyedDecodingContainer(TreeKeyedContainer<Key>(members: members))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let items) = value else { throw JSONTreeDecoder.Unsure() }
        return TreeUnkeyedContainer(items: items)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        TreeSingleValueContainer(decoder: self)
    }

    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        switch type {
        case is String.Type:
            guard case .string(let s) = value else { throw JSONTreeDecoder.Unsure() }
            return s as! T
        case is Bool.Type:
            guard case .bool(let b) = value else { throw JSONTreeDecoder.Unsure() }
            return b as! T
        case is Int.Type: return try integer(Int.self) as! T
        case is Int64.Type: return try integer(Int64.self) as! T
        case is Int32.Type: return try integer(Int32.self) as! T
        case is Int16.Type: return try integer(Int16.self) as! T
        case is Int8.Type: return try integer(Int8.self) as! T
        case is UInt.Type: return try integer(UInt.self) as! T
        case is UInt64.Type: return try integer(UInt64.self) as! T
        case is UInt32.Type: return try integer(UInt32.self) as! T
        case is UInt16.Type: return try integer(UInt16.self) as! T
        case is UInt8.Type: return try integer(UInt8.self) as! T
        case is JSONValue.Type:
            // What JSONDecoder builds through JSONValue's guesses, as long as no number has a fraction.
            guard !Self.holdsDouble(value) else { throw JSONTreeDecoder.Unsure() }
            return value as! T
        case is Double.Type, is Float.Type, is Data.Type, is Date.Type, is URL.Type, is Decimal.Type:
            throw JSONTreeDecoder.Unsure()
        default:
            return try T(from: self)
        }
    }

    private func integer<I: FixedWidthInteger>(_ type: I.Type) throws -> I {
        guard case .int(let i) = value, let exact = I(exactly: i) else { throw JSONTreeDecoder.Unsure() }
        return exact
    }

    private static func holdsDouble(_ value: JSONValue) -> Bool {
        switch value {
        case .double: return true
        case .array(let items): return items.contains(where: holdsDouble)
        case .object(let members): return members.values.contains(where: holdsDouble)
        case .null, .bool, .int, .string: return false
        }
    }
}

private struct TreeKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let members: [String: JSONValue]
    var codingPath: [any CodingKey] { [] }

    var allKeys: [Key] { members.keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { members[key.stringValue] != nil }

    private func member(_ key: Key) throws -> TreeDecoder {
        guard let value = members[key.stringValue] else { throw JSONTreeDecoder.Unsure() }
        return TreeDecoder(value: value)
    }

    func decodeNil(forKey key: Key) throws -> Bool {
        guard let value = members[key.stringValue] else { throw JSONTreeDecoder.Unsure() }
        return value == .null
    }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try member(key).decodeValue(type) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try member(key).decodeValue(type) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try member(key).decodeValue(type) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try member(key).decodeValue(type) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try member(key).decodeValue(type) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try member(key).decodeValue(type) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try member(key).decodeValue(type) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try member(key).decodeValue(type) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try member(key).decodeValue(type) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try member(key).decodeValue(type) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try member(key).decodeValue(type) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try member(key).decodeValue(type) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try member(key).decodeValue(type) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try member(key).decodeValue(type) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try member(key).decodeValue(type) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        try member(key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer { try member(key).unkeyedContainer() }
    func superDecoder() throws -> any Decoder { throw JSONTreeDecoder.Unsure() }
    func superDecoder(forKey key: Key) throws -> any Decoder { throw JSONTreeDecoder.Unsure() }
}

private struct TreeUnkeyedContainer: UnkeyedDecodingContainer {
    let items: [JSONValue]
    var codingPath: [any CodingKey] { [] }
    var currentIndex = 0

    init(items: [JSONValue]) {
        self.items = items
    }

    var count: Int? { items.count }
    var isAtEnd: Bool { currentIndex >= items.count }

    private mutating func next() throws -> TreeDecoder {
        guard !isAtEnd else { throw JSONTreeDecoder.Unsure() }
        defer { currentIndex += 1 }
        return TreeDecoder(value: items[currentIndex])
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd else { throw JSONTreeDecoder.Unsure() }
        guard items[currentIndex] == .null else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next().decodeValue(type) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next().container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next().unkeyedContainer() }
    mutating func superDecoder() throws -> any Decoder { throw JSONTreeDecoder.Unsure() }
}

private struct TreeSingleValueContainer: SingleValueDecodingContainer {
    let decoder: TreeDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }

    func decodeNil() -> Bool { decoder.value == .null }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.decodeValue(type) }
}
