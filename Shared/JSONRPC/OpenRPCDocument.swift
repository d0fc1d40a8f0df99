/// An OpenRPC 1.x service description, generated from the registered method descriptors
/// (answered by `rpc.discover` on every server).
public struct OpenRPCMethodDescription: Sendable {
    public var name: String
    public var summary: String
    public var access: RPCAccess
    public var params: JSONSchema
    public var result: JSONSchema

    public init(name: String, summary: String, access: RPCAccess, params: JSONSchema, result: JSONSchema) {
        self.name = name
        self.summary = summary
        self.access = access
        self.params = params
        self.result = result
    }

    public init<M: RPCMethod>(_ method: M.Type) {
        self.init(
            name: M.name, summary: M.summary, access: M.access,
            params: SchemaRecorder.schema(for: M.Params.self), result: SchemaRecorder.schema(for: M.Result.self))
    }
}

public enum OpenRPCDocument {
    public static let version = "1.3.2"

    /// The document for a service named `title` offering `methods`.
    public static func make(title: String, version serviceVersion: String, methods: [OpenRPCMethodDescription]) -> JSONValue {
        let described: [JSONValue] = methods.sorted { $0.name < $1.name }.map { m in
            var params: [JSONValue] = []
            if case let .object(properties, _) = m.params {
                params = properties.map { p in
                    ["name": .string(p.name), "required": .bool(p.required), "schema": p.schema.json]
                }
            }
            return [
                "name": .string(m.name),
                "summary": .string(m.summary),
                "paramStructure": "by-name",
                "params": .array(params),
                "result": ["name": .string(resultName(m.name)), "schema": m.result.json],
                "x-access": .string(m.access.rawValue),
            ]
        }
        return [
            "openrpc": .string(version),
            "info": ["title": .string(title), "version": .string(serviceVersion)],
            "methods": .array(described),
        ]
    }

    private static func resultName(_ method: String) -> String {
        (method.split(separator: ".").last.map(String.init) ?? method) + "Result"
    }

    /// The params and result schemas of `method` as published in a discovery document.
    public static func schemas(of method: String, in document: JSONValue) -> (params: JSONSchema, result: JSONSchema)? {
        guard let methods = document["methods"]?.arrayValue,
            let m = methods.first(where: { $0["name"]?.stringValue == method })
        else { return nil }
        var props: [JSONSchema.Property] = []
        for p in m["params"]?.arrayValue ?? [] {
            guard let name = p["name"]?.stringValue else { continue }
            props.append(.init(name, JSONSchema(json: p["schema"] ?? [:]), required: p["required"]?.boolValue ?? false))
        }
        return (.object(properties: props), JSONSchema(json: m["result"]?["schema"] ?? [:]))
    }
}
