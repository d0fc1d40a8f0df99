import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import Testing

/// A real catalog-service started with `--seed FILE` (the development stack's, at every start): the file is applied as it
/// stands, a product's grant changed in it included; the check that refuses such a change to an import would otherwise
/// stop the catalog from starting, with no way to import past it.
@Suite struct CatalogSeedTests {
    @Test func aSeedIsAppliedAsItStandsAtEveryStart() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("seed-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let seed = root.appendingPathComponent("catalog.json")
        func write(_ grant: String) throws {
            let product =
                #"{"productId":"pass.gold","type":"nonConsumable","referenceName":"Gold","localizations":{"en-US":{"title":"Gold","description":""}},"defaultLocale":"en-US","grant":\#(grant)}"#
            try Data(#"{"products":[\#(product)]}"#.utf8).write(to: seed)
        }
        func start() async throws -> (Subprocess, RPCClient) {
            let port = try LoopbackPort.free()
            let process = try Subprocess.spawn(
                BuiltExecutables.url("catalog-service").path,
                ["--port", "\(port)", "--data-dir", root.appendingPathComponent("data").path, "--seed", seed.path],
                environment: BuiltExecutables.environment())
            let client = RPCClient(host: "127.0.0.1", port: port, configuration: .init(connections: 1))
            let deadline = Date().addingTimeInterval(180)  // generous: CI starts many processes at once on two cores
            while (try? await client.call(RPCPing.self, EmptyParams())) == nil {
                try #require(process.isRunning && Date() < deadline, "catalog-service did not start")
                try await Task.sleep(nanoseconds: 20_000_000)  // polling a process's readiness, bounded by the deadline
            }
            return (process, client)
        }
        func grant(_ client: RPCClient) async throws -> Grant? {
            try await client.call(CatalogGetProducts.self, .init(productIds: ["pass.gold"])).products.first?.grant
        }
        try write(#"{"entitlement":"gold","content":[]}"#)
        var (process, client) = try await start()
        #expect(try await grant(client) == .content(entitlement: "gold", contentIds: []))
        process.kill(SIGKILL)
        await client.close()
        try write(#"{"entitlement":"golden","content":["pack-1"]}"#)
        (process, client) = try await start()
        defer { process.kill(SIGKILL) }
        #expect(try await grant(client) == .content(entitlement: "golden", contentIds: ["pack-1"]))
        await client.close()
    }
}
