/// The subset of JSON Schema (draft 7) our method descriptors need: enough to describe every
/// params and result type in `rpc.discover`, and to check replies against it in contract tests.
public indirect enum JSONSchema: Sendable, Equatable {
    case string(format: String? = nil, enumValues: [String]? = nil)
    case integer
    case number
    case boolean
    case null
    case array(JSONSchema)
    /// Properties in declaration order. Extra members are allowed (the contract may grow).
    case object(properties: [Property], additionalProperties: JSONSchema? = nil)
    case oneOf([JSONSchema])
    case any

    public struct Property: Sendable, Equatable {
        public var name: String
        public var schema: JSONSchema
        public var required: Bool
        public init(_ name: String, _ schema: JSONSchema, required: Bool) {
            self.name = name
            self.schema = schema
            self.required = required
        }
    }

    public static var string: JSONSchema { .string() }

    /// The schema as a JSON Schema document.
    public var json: JSONValue {
        switch self {
        case let .string(format, enumValues):
            var o: [String: JSONValue] = ["type": "string"]
            if let format { o["format"] = .string(format) }
            if let enumValues { o["enum"] = .array(enumValues.map { .string($0) }) }
            return .object(o)
        case .integer: return ["type": "integer"]
        case .number: return ["type": "number"]
        case .boolean: return ["type": "boolean"]
        case .null: return ["type": "null"]
        case .array(let items): return ["type": "array", "items": items.json]
        case let .object(properties, additional):
            var props: [String: JSONValue] = [:]
            for p in properties { props[p.name] = p.schema.json }
            var o: [String: JSONValue] = ["type": "object", "properties": .object(props)]
            let required = properties.filter(\.required).map { JSONValue.string($0.name) }
            if !required.isEmpty { o["required"] = .array(required) }
            if let additional { o["additionalProperties"] = additional.json }
            return .object(o)
        case .oneOf(let options): return ["oneOf": .array(options.map(\.json))]
        case .any: return .object([:])
        }
    }

    /// Reads back a schema written by `json` (as published in `rpc.discover`).
    public init(json: JSONValue) {
        guard case .object(let o) = json else { self = .any; return }
        if case .array(let options)? = o["oneOf"] { self = .oneOf(options.map(JSONSchema.init(json:))); return }
        switch o["type"]?.stringValue {
        case "string":
            self = .string(format: o["format"]?.stringValue, enumValues: o["enum"]?.arrayValue?.compactMap(\.stringValue))
        case "integer": self = .integer
        case "number": self = .number
        case "boolean": self = .boolean
        case "null": self = .null
        case "array": self = .array(o["items"].map(JSONSchema.init(json:)) ?? .any)
        case "object":
            let required = Set(o["required"]?.arrayValue?.compactMap(\.stringValue) ?? [])
            let props = (o["properties"]?.objectValue ?? [:]).sorted { $0.key < $1.key }.map {
                Property($0.key, JSONSchema(json: $0.value), required: required.contains($0.key))
            }
            self = .object(properties: props, additionalProperties: o["additionalProperties"].map(JSONSchema.init(json:)))
        default: self = .any
        }
    }

    /// Problems with `value` against this schema, each prefixed by its path; empty when it conforms.
    public func violations(of value: JSONValue, at path: String = "$") -> [String] {
        switch (self, value) {
        case (.any, _): return []
        case let (.string(_, enumValues), .string(s)):
            if let enumValues, !enumValues.contains(s) { return ["\(path): \"\(s)\" is not one of \(enumValues)"] }
            return []
        case (.integer, .int): return []
        case (.integer, .double(let d)) where d.rounded() == d: return []
        case (.number, .int), (.number, .double), (.boolean, .bool), (.null, .null): return []
        case let (.array(items), .array(elements)):
            return elements.enumerated().flatMap { items.violations(of: $0.element, at: "\(path)[\($0.offset)]") }
        case let (.object(properties, additional), .object(members)):
            var problems: [String] = []
            for p in properties {
                if let v = members[p.name] {
                    problems += p.schema.violations(of: v, at: "\(path).\(p.name)")
                } else if p.required {
                    problems.append("\(path).\(p.name): required member is missing")
                }
            }
            if let additional {
                let known = Set(properties.map(\.name))
                for (k, v) in members where !known.contains(k) {
                    problems += additional.violations(of: v, at: "\(path).\(k)")
                }
            }
            return problems
        case let (.oneOf(options), v):
            let matching = options.filter { $0.violations(of: v, at: path).isEmpty }.count
            return matching == 1 ? [] : ["\(path): matches \(matching) of \(options.count) alternatives, expected exactly 1"]
        default:
            return ["\(path): expected \(typeName), found \(value.typeName)"]
        }
    }

    private var typeName: String {
        switch self {
        case .string: return "string"
        case .integer: return "integer"
        case .number: return "number"
        case .boolean: return "boolean"
        case .null: return "null"
        case .array: return "array"
        case .object: return "object"
        case .oneOf: return "one of several shapes"
        case .any: return "anything"
        }
    }
}

/// A type that states its own schema instead of having it derived from its `init(from:)`: enums,
/// types with hand-written decoding (one-of shapes), and types like UUID whose decoding validates.
/// `schemaPlaceholder` is any valid value, used while deriving the schema of a containing type.
public protocol JSONSchemaDescribing {
    static var jsonSchema: JSONSchema { get }
    static var schemaPlaceholder: Self { get }
}

/// String-backed enums describe themselves as a string enum of their raw values.
public protocol JSONSchemaEnum: JSONSchemaDescribing, CaseIterable, RawRepresentable where RawValue == String {}

extension JSONSchemaEnum {
    public static var jsonSchema: JSONSchema { .string(enumValues: allCases.map(\.rawValue)) }
    public static var schemaPlaceholder: Self { allCases.first! }
}
