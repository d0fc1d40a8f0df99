import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import Testing

@Suite struct DiscoveryTests {
    /// The OpenRPC meta-schema is JSON Schema draft 7; it is checked with Python's `jsonschema`
    /// (installed by .ci/run), the reference validator, rather than a partial one written here.
    /// The meta-schema `$ref`s json-schema.tools' meta-schema for the embedded schemas; with no network
    /// that reference is served by a permissive local stand-in, and every embedded schema is checked
    /// against JSON Schema draft 7 itself instead.
    static func validateAgainstMetaSchema(_ document: JSONValue) async throws -> String? {
        let metaSchema = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Schemas/openrpc-meta-schema.json")
        let docFile = FileManager.default.temporaryDirectory.appendingPathComponent("openrpc-\(UUID().uuidString).json")
        try Data(JSONByteEncoder.encode(document)).write(to: docFile)
        defer { try? FileManager.default.removeItem(at: docFile) }
        let run = try await Subprocess.run(
            Judges.pythonOrSystem,
            [
                "-c",
                """
                import json, sys, jsonschema
                from referencing import Registry
                from referencing.jsonschema import DRAFT7
                schema = json.load(open(sys.argv[1]))
                doc = json.load(open(sys.argv[2]))
                tools = DRAFT7.create_resource({"definitions": {"JSONSchemaObject": {"type": "object",
                    "properties": {"$ref": {"type": "string"}}}}, "type": ["object", "boolean"]})
                registry = Registry().with_resources([("https://meta.json-schema.tools", tools),
                                                      ("https://meta.json-schema.tools/", tools)])
                errors = [f"{list(e.path)}: {e.message}" for e in jsonschema.Draft7Validator(schema, registry=registry).iter_errors(doc)]
                for m in doc.get("methods", []):
                    for s in [p["schema"] for p in m.get("params", [])] + [m["result"]["schema"]]:
                        try: jsonschema.Draft7Validator.check_schema(s)
                        except jsonschema.SchemaError as e: errors.append(f"{m['name']}: {e.message}")
                print("\\n".join(errors[:10])); sys.exit(1 if errors else 0)
                """, metaSchema.path, docFile.path,
            ])
        return run.termination == .exited(0) ? nil : run.stdout + run.stderr
    }

    @Test func discoverIsAValidOpenRPCDocumentListingEveryMethod() async throws {
        let server = try await TestServer.start()
        defer { Task { await server.shutdown() } }
        let client = RPCClient(host: "127.0.0.1", port: server.localPort!, configuration: .patient)
        let document = try await client.call(RPCDiscover.self, EmptyParams())
        let names = Set(document["methods"]?.arrayValue?.compactMap { $0["name"]?.stringValue } ?? [])
        #expect(names == Set(server.methodNames))
        #expect(names.isSuperset(of: ["rpc.ping", "rpc.discover", "health.check", "typed.add"]))
        let problems = try await Self.validateAgainstMetaSchema(document)
        #expect(problems == nil, "\(problems ?? "")")
        // Params come from the Params type: required `a`, `b`, optional `label`.
        let typed = OpenRPCDocument.schemas(of: "typed.add", in: document)
        #expect(
            typed?.params
                == .object(properties: [
                    .init("a", .integer, required: true), .init("b", .integer, required: true),
                    .init("label", .string, required: false),
                ]))
    }

    @Test func aDocumentOfTheWholeV1ContractIsValidOpenRPC() async throws {
        let document = OpenRPCDocument.make(title: "v1", version: "1", methods: ContractMethods.all + ContractMethods.builtin)
        let problems = try await Self.validateAgainstMetaSchema(document)
        #expect(problems == nil, "\(problems ?? "")")
    }

    @Test func healthCheckReportsDependencies() async throws {
        let up = try await TestServer.start()
        defer { Task { await up.shutdown() } }
        // A port nothing listens on and no server of this process can be given (a released port-0 port could be
        // bound again by a test running beside this one, which then answered the "down" probe: seen in CI).
        let downPort = try LoopbackPort.free()
        let server = try await TestServer.start(router: RPCRouter()) { config in
            config.healthProbes = [
                RPCClient(host: "127.0.0.1", port: up.localPort!).healthProbe(name: "up"),
                RPCClient(host: "127.0.0.1", port: downPort).healthProbe(name: "down"),
            ]
        }
        defer { Task { await server.shutdown() } }
        let report = try await RPCClient(host: "127.0.0.1", port: server.localPort!, configuration: .patient).call(HealthCheck.self, EmptyParams())
        #expect(report.status == .degraded)
        #expect(report.service == "test")
        #expect(report.dependencies.map(\.name) == ["up", "down"])
        #expect(report.dependencies.map(\.status) == [.ok, .down])
    }
}
