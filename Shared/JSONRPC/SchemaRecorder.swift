import Foundation

/// Derives a JSON Schema from a type's own `Decodable` implementation by running its `init(from:)`
/// against a decoder that records what is asked for: every `decode` is a required property, every
/// `decodeIfPresent` an optional one. The schema published by `rpc.discover` therefore comes from the
/// very code that decodes the wire, and cannot drift from it.
///
/// Types whose decoding validates values (enums, UUIDs, one-of shapes) conform to
/// `JSONSchemaDescribing` and state their schema instead.
public enum SchemaRecorder {
    public static func schema<T: Decodable>(for type: T.Type) -> JSONSchema {
        (try? record(type, depth: 0).schema) ?? .any
    }

    struct TooDeep: Error {}

    static func record<T: Decodable>(_ type: T.Type, depth: Int) throws -> (value: T, schema: JSONSchema) {
        if let describing = T.self as? any JSONSchemaDescribing.Type {
            return (describing.schemaPlaceholder as! T, describing.jsonSchema)
        }
        if let primitive = primitive(T.self) { return primitive }
        guard depth < 32 else { throw TooDeep() }
        let node = RecordingNode()
        let value = try T(from: RecordingDecoder(node: node, depth: depth + 1))
        return (value, node.schema)
    }

    static func primitive<T>(_ type: T.Type) -> (value: T, schema: JSONSchema)? {
        switch type {
        case is String.Type: return ("" as! T, .string)
        case is Bool.Type: return (false as! T, .boolean)
        case is Int.Type: return (0 as Int as! T, .integer)
        case is Int64.Type: return (0 as Int64 as! T, .integer)
        case is Int32.Type: return (0 as Int32 as! T, .integer)
        case is Int16.Type: return (0 as Int16 as! T, .integer)
        case is Int8.Type: return (0 as Int8 as! T, .integer)
        case is UInt.Type: return (0 as UInt as! T, .integer)
        case is UInt64.Type: return (0 as UInt64 as! T, .integer)
        case is UInt32.Type: return (0 as UInt32 as! T, .integer)
        case is UInt16.Type: return (0 as UInt16 as! T, .integer)
        case is UInt8.Type: return (0 as UInt8 as! T, .integer)
        case is Double.Type: return (0 as Double as! T, .number)
        case is Float.Type: return (0 as Float as! T, .number)
        default: return nil
        }
    }
}

extension Array: JSONSchemaDescribing where Element: Decodable {
    public static var jsonSchema: JSONSchema { .array(SchemaRecorder.schema(for: Element.self)) }
    public static var schemaPlaceholder: [Element] { [] }
}

extension Dictionary: JSONSchemaDescribing where Key == String, Value: Decodable {
    public static var jsonSchema: JSONSchema {
        .object(properties: [], additionalProperties: SchemaRecorder.schema(for: Value.self))
    }
    public static var schemaPlaceholder: [String: Value] { [:] }
}

extension UUID: JSONSchemaDescribing {
    public static var jsonSchema: JSONSchema { .string(format: "uuid") }
    public static var schemaPlaceholder: UUID { UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)) }
}

extension JSONValue: JSONSchemaDescribing {
    public static var jsonSchema: JSONSchema { .any }
    public static var schemaPlaceholder: JSONValue { .null }
}

extension EmptyParams: JSONSchemaDescribing {
    public static var jsonSchema: JSONSchema { .object(properties: []) }
    public static var schemaPlaceholder: EmptyParams { EmptyParams() }
}

extension EmptyResult: JSONSchemaDescribing {
    public static var jsonSchema: JSONSchema { .object(properties: []) }
    public static var schemaPlaceholder: EmptyResult { EmptyResult() }
}

/// What one decoder (or container) was asked for. Reference type: containers are structs that
/// share it with the decoder that made them.
final class RecordingNode {
    enum Shape {
        case unknown
        case keyed([(name: String, required: Bool, schema: () -> JSONSchema)])
        case unkeyed(() -> JSONSchema)
        case single(JSONSchema)
    }
    var shape: Shape = .unknown

    var schema: JSONSchema {
        switch shape {
        case .unknown: return .object(properties: [])
        case .keyed(let props):
            return .object(properties: props.map { JSONSchema.Property($0.name, $0.schema(), required: $0.required) })
        case .unkeyed(let element): return .array(element())
        case .single(let s): return s
        }
    }

    func addProperty(_ name: String, required: Bool, _ schema: @escaping () -> JSONSchema) {
        var props: [(name: String, required: Bool, schema: () -> JSONSchema)] = []
        if case .keyed(let existing) = shape { props = existing }
        if let i = props.firstIndex(where: { $0.name == name }) {
            // A key probed with decodeIfPresent then decoded is still optional.
            props[i] = (name, props[i].required && required, schema)
        } else {
            props.append((name, required, schema))
        }
        shape = .keyed(props)
    }
}

struct RecordingDecoder: Decoder {
    let node: RecordingNode
    let depth: Int
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        if case .keyed = node.shape {} else { node.shape = .keyed([]) }
        return KeyedDecodingContainer(RecordingKeyedContainer<Key>(node: node, depth: depth))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        RecordingUnkeyedContainer(node: node, depth: depth)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        RecordingSingleValueContainer(node: node, depth: depth)
    }
}

struct RecordingKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let node: RecordingNode
    let depth: Int
    var codingPath: [any CodingKey] { [] }
    var allKeys: [Key] { [] }

    func contains(_ key: Key) -> Bool { true }
    func decodeNil(forKey key: Key) throws -> Bool { false }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        let (value, schema) = try SchemaRecorder.record(T.self, depth: depth)
        node.addProperty(key.stringValue, required: true) { schema }
        return value
    }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        let (value, schema) = try SchemaRecorder.record(T.self, depth: depth)
        node.addProperty(key.stringValue, required: false) { schema }
        return value
    }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try decode(Wrapped<Bool>.self, forKey: key).v }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try decode(Wrapped<String>.self, forKey: key).v }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try decode(Wrapped<Double>.self, forKey: key).v }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try decode(Wrapped<Float>.self, forKey: key).v }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try decode(Wrapped<Int>.self, forKey: key).v }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try decode(Wrapped<Int8>.self, forKey: key).v }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try decode(Wrapped<Int16>.self, forKey: key).v }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try decode(Wrapped<Int32>.self, forKey: key).v }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try decode(Wrapped<Int64>.self, forKey: key).v }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try decode(Wrapped<UInt>.self, forKey: key).v }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try decode(Wrapped<UInt8>.self, forKey: key).v }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try decode(Wrapped<UInt16>.self, forKey: key).v }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try decode(Wrapped<UInt32>.self, forKey: key).v }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try decode(Wrapped<UInt64>.self, forKey: key).v }

    func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? { try decodeIfPresent(Wrapped<Bool>.self, forKey: key)?.v }
    func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? { try decodeIfPresent(Wrapped<String>.self, forKey: key)?.v }
    func decodeIfPresent(_ type: Double.Type, forKey key: Key) throws -> Double? { try decodeIfPresent(Wrapped<Double>.self, forKey: key)?.v }
    func decodeIfPresent(_ type: Float.Type, forKey key: Key) throws -> Float? { try decodeIfPresent(Wrapped<Float>.self, forKey: key)?.v }
    func decodeIfPresent(_ type: Int.Type, forKey key: Key) throws -> Int? { try decodeIfPresent(Wrapped<Int>.self, forKey: key)?.v }
    func decodeIfPresent(_ type: Int8.Type, forKey key: Key) throws -> Int8? { try decodeIfPresent(Wrapped<Int8>.self, forKey: key)?.v }
    func decodeIfPresent(_ type: Int16.Type, forKey key: Key) throws -> Int16? { try decodeIfPresent(Wrapped<Int16>.self, forKey: key)?.v }
    func decodeIfPresent(_ type: Int32.Type, forKey key: Key) throws -> Int32? { try decodeIfPresent(Wrapped<Int32>.self, forKey: key)?.v }
    func decodeIfPresent(_ type: Int64.Type, forKey key: Key) throws -> Int64? { try decodeIfPresent(Wrapped<Int64>.self, forKey: key)?.v }
    func decodeIfPresent(_ type: UInt.Type, forKey key: Key) throws -> UInt? { try decodeIfPresent(Wrapped<UInt>.self, forKey: key)?.v }
    func decodeIfPresent(_ type: UInt8.Type, forKey key: Key) throws -> UInt8? { try decodeIfPresent(Wrapped<UInt8>.self, forKey: key)?.v }
    func decodeIfPresent(_ type: UInt16.Type, forKey key: Key) throws -> UInt16? { try decodeIfPresent(Wrapped<UInt16>.self, forKey: key)?.v }
    func decodeIfPresent(_ type: UInt32.Type, forKey key: Key) throws -> UInt32? { try decodeIfPresent(Wrapped<UInt32>.self, forKey: key)?.v }
    func decodeIfPresent(_ type: UInt64.Type, forKey key: Key) throws -> UInt64? { try decodeIfPresent(Wrapped<UInt64>.self, forKey: key)?.v }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        let child = RecordingNode()
        child.shape = .keyed([])
        node.addProperty(key.stringValue, required: true) { child.schema }
        return KeyedDecodingContainer(RecordingKeyedContainer<NestedKey>(node: child, depth: depth + 1))
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        let child = RecordingNode()
        node.addProperty(key.stringValue, required: true) { child.schema }
        return RecordingUnkeyedContainer(node: child, depth: depth + 1)
    }

    func superDecoder() throws -> any Decoder { RecordingDecoder(node: node, depth: depth) }
    func superDecoder(forKey key: Key) throws -> any Decoder {
        let child = RecordingNode()
        node.addProperty(key.stringValue, required: true) { child.schema }
        return RecordingDecoder(node: child, depth: depth + 1)
    }
}

/// Routes primitive `decode` overloads through the generic path, which records the schema.
private struct Wrapped<T>: Decodable {
    let v: T
    init(from decoder: any Decoder) throws {
        guard let (value, schema) = SchemaRecorder.primitive(T.self) else { throw SchemaRecorder.TooDeep() }
        (decoder as? RecordingDecoder)?.node.shape = .single(schema)
        v = value
    }
}

extension Wrapped: JSONSchemaDescribing {
    static var jsonSchema: JSONSchema { SchemaRecorder.primitive(T.self)?.schema ?? .any }
    static var schemaPlaceholder: Wrapped<T> { Wrapped(v: SchemaRecorder.primitive(T.self)!.value) }
    private init(v: T) { self.v = v }
}

struct RecordingUnkeyedContainer: UnkeyedDecodingContainer {
    let node: RecordingNode
    let depth: Int
    var codingPath: [any CodingKey] { [] }
    var count: Int? { nil }
    var currentIndex = 0
    var isAtEnd: Bool { currentIndex > 0 }

    init(node: RecordingNode, depth: Int) {
        self.node = node
        self.depth = depth
        if case .unkeyed = node.shape {} else { node.shape = .unkeyed { .any } }
    }

    mutating func decodeNil() throws -> Bool { false }
    mutating func decode(_ type: Bool.Type) throws -> Bool { try decode(Wrapped<Bool>.self).v }
    mutating func decode(_ type: String.Type) throws -> String { try decode(Wrapped<String>.self).v }
    mutating func decode(_ type: Double.Type) throws -> Double { try decode(Wrapped<Double>.self).v }
    mutating func decode(_ type: Float.Type) throws -> Float { try decode(Wrapped<Float>.self).v }
    mutating func decode(_ type: Int.Type) throws -> Int { try decode(Wrapped<Int>.self).v }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try decode(Wrapped<Int8>.self).v }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try decode(Wrapped<Int16>.self).v }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try decode(Wrapped<Int32>.self).v }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try decode(Wrapped<Int64>.self).v }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try decode(Wrapped<UInt>.self).v }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try decode(Wrapped<UInt8>.self).v }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try decode(Wrapped<UInt16>.self).v }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try decode(Wrapped<UInt32>.self).v }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try decode(Wrapped<UInt64>.self).v }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let (value, schema) = try SchemaRecorder.record(T.self, depth: depth)
        node.shape = .unkeyed { schema }
        currentIndex += 1
        return value
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        let child = RecordingNode()
        child.shape = .keyed([])
        node.shape = .unkeyed { child.schema }
        currentIndex += 1
        return KeyedDecodingContainer(RecordingKeyedContainer<NestedKey>(node: child, depth: depth + 1))
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let child = RecordingNode()
        node.shape = .unkeyed { child.schema }
        currentIndex += 1
        return RecordingUnkeyedContainer(node: child, depth: depth + 1)
    }

    mutating func superDecoder() throws -> any Decoder {
        let child = RecordingNode()
        node.shape = .unkeyed { child.schema }
        currentIndex += 1
        return RecordingDecoder(node: child, depth: depth + 1)
    }
}

struct RecordingSingleValueContainer: SingleValueDecodingContainer {
    let node: RecordingNode
    let depth: Int
    var codingPath: [any CodingKey] { [] }

    func decodeNil() -> Bool { false }
    func decode(_ type: Bool.Type) throws -> Bool { try decode(Wrapped<Bool>.self).v }
    func decode(_ type: String.Type) throws -> String { try decode(Wrapped<String>.self).v }
    func decode(_ type: Double.Type) throws -> Double { try decode(Wrapped<Double>.self).v }
    func decode(_ type: Float.Type) throws -> Float { try decode(Wrapped<Float>.self).v }
    func decode(_ type: Int.Type) throws -> Int { try decode(Wrapped<Int>.self).v }
    func decode(_ type: Int8.Type) throws -> Int8 { try decode(Wrapped<Int8>.self).v }
    func decode(_ type: Int16.Type) throws -> Int16 { try decode(Wrapped<Int16>.self).v }
    func decode(_ type: Int32.Type) throws -> Int32 { try decode(Wrapped<Int32>.self).v }
    func decode(_ type: Int64.Type) throws -> Int64 { try decode(Wrapped<Int64>.self).v }
    func decode(_ type: UInt.Type) throws -> UInt { try decode(Wrapped<UInt>.self).v }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try decode(Wrapped<UInt8>.self).v }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try decode(Wrapped<UInt16>.self).v }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try decode(Wrapped<UInt32>.self).v }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try decode(Wrapped<UInt64>.self).v }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let (value, schema) = try SchemaRecorder.record(T.self, depth: depth)
        node.shape = .single(schema)
        return value
    }
}
