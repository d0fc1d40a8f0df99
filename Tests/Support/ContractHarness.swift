import Foundation
import JSONRPC
import RPCTransport

/// Runs a service's contract files (`Tests/Contracts/<service>/<method>.contract`, in the
/// `WireScript` format) over real TCP against a live server, and checks that the protocol module,
/// the server and the contract files agree:
///
/// 1. every method the protocol module declares for the service is in the server's `rpc.discover`
///    document with the same params and result schemas;
/// 2. every method in that document has a contract file;
/// 3. every script passes;
/// 4. every successful reply matches the published result schema, and the params of the request
///    that produced it match the published params schema.
/// A server a contract script runs against, started fresh for it.
public struct ContractTarget: Sendable {
    public let port: Int
    public let stop: @Sendable () async -> Void

    public init(port: Int, stop: @escaping @Sendable () async -> Void) {
        self.port = port
        self.stop = stop
    }
}

public enum ContractHarness {
    /// `Tests/Contracts` of this checkout.
    public static var contractsRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Contracts")
    }

    /// Runs every script against one server (scripts must not depend on each other's changes).
    public static func run(
        service: String,
        port: Int,
        host: String = "127.0.0.1",
        declared: [OpenRPCMethodDescription],
        requireContractFor builtins: Bool = false,
        variables: [String: JSONValue] = [:]
    ) async throws -> [String] {
        try await run(service: service, declared: declared, requireContractFor: builtins, variables: variables) {
            ContractTarget(port: port, stop: {})
        }
    }

    /// Runs each script against a fresh server from `start` (for services whose scripts change state).
    public static func run(
        service: String,
        declared: [OpenRPCMethodDescription],
        requireContractFor builtins: Bool = false,
        variables: [String: JSONValue] = [:],
        start: @Sendable () async throws -> ContractTarget
    ) async throws -> [String] {
        let host = "127.0.0.1"
        var failures: [String] = []
        let first = try await start()
        let client = RPCClient(host: host, port: first.port, configuration: .patient)
        let document = try await client.call(RPCDiscover.self, EmptyParams())
        await client.close()
        await first.stop()

        // 1. Protocol module vs server.
        for method in declared {
            guard let published = OpenRPCDocument.schemas(of: method.name, in: document) else {
                failures.append("\(method.name): declared by the protocol module but not served by \(service)")
                continue
            }
            // Both sides through their JSON form: property order carries no meaning.
            if JSONSchema(json: published.params.json) != JSONSchema(json: method.params.json) {
                failures.append("\(method.name): params schema differs from the protocol module's")
            }
            if JSONSchema(json: published.result.json) != JSONSchema(json: method.result.json) {
                failures.append("\(method.name): result schema differs from the protocol module's")
            }
        }

        // 2. A contract per served method.
        let builtinNames: Set = [RPCPing.name, RPCDiscover.name, HealthCheck.name]
        let folder = contractsRoot.appendingPathComponent(service)
        let scripts = try WireScript.loadAll(in: folder, extension: "contract")
        let covered = Set(scripts.map { $0.name.replacingOccurrences(of: ".contract", with: "") })
        let served = (document["methods"]?.arrayValue ?? []).compactMap { $0["name"]?.stringValue }
        for name in served where !covered.contains(name) && (builtins || !builtinNames.contains(name)) {
            failures.append("\(name): served by \(service) but has no \(service)/\(name).contract")
        }
        if scripts.isEmpty { failures.append("no contract files in \(folder.path)") }

        // 3 and 4. Run each script; check replies and params against the published schemas.
        for script in scripts {
            let target = try await start()
            let (scriptFailures, exchanges) = try await WireScriptRunner.run(script, port: target.port, host: host, variables: variables)
            await target.stop()
            failures += scriptFailures
            for exchange in exchanges {
                guard let request = exchange.request, let method = request["method"]?.stringValue,
                    let result = exchange.reply["result"],
                    let schemas = OpenRPCDocument.schemas(of: method, in: document)
                else { continue }
                failures += schemas.result.violations(of: result, at: "result").map {
                    "\(script.name): \(method) reply breaks its published result schema: \($0)"
                }
                failures += schemas.params.violations(of: request["params"] ?? .object([:]), at: "params").map {
                    "\(script.name): \(method) succeeded with params outside its published schema: \($0)"
                }
            }
        }
        return failures
    }
}
