import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import Testing

/// A real service given its admin token as a file (`IAP_ADMIN_TOKEN_FILE`, as a Docker or Compose secret is mounted), so the
/// token is in no process's environment: the file's token opens the admin methods, another does not.
@Suite struct TokenFileServiceTests {
    @Test func aServiceTakesItsAdminTokenFromTheFileItsVariableNames() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("token-file-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let token = String(repeating: "f", count: 40)
        let file = root.appendingPathComponent("admin_token")
        try Data((token + "\n").utf8).write(to: file)
        let port = try LoopbackPort.free()
        let process = try Subprocess.spawn(
            BuiltExecutables.url("catalog-service").path, ["--port", "\(port)", "--data-dir", root.appendingPathComponent("data").path],
            environment: BuiltExecutables.environment(["IAP_ADMIN_TOKEN_FILE": file.path]))
        defer { process.kill(SIGKILL) }
        let client = RPCClient(host: "127.0.0.1", port: port, configuration: .init(connections: 1))
        defer { Task { await client.close() } }
        let deadline = Date().addingTimeInterval(180)  // generous: CI starts many processes at once on two cores
        while (try? await client.call(RPCPing.self, EmptyParams())) == nil {
            try #require(process.isRunning && Date() < deadline, "catalog-service did not start")
            try await Task.sleep(nanoseconds: 20_000_000)  // polling a process's readiness, bounded by the deadline
        }
        func retire(_ adminToken: String) async -> String? {
            do {
                try await client.call(CatalogRetireProduct.self, .init(adminToken: adminToken, productId: "no.such.product"))
                return nil
            } catch { return error.data.reason }
        }
        #expect(await retire(token) == "unknownProduct", "the file's token is the admin token")
        #expect(await retire(String(repeating: "x", count: 40)) == "adminTokenRequired")
        // The CLI reads the same file: its call gets past the admin check to the unknown product.
        let cli = try await BuiltExecutables.run(
            "iap", ["catalog", "retire", "no.such.product", "--addr", "127.0.0.1:\(port)"],
            env: ["IAP_ADMIN_TOKEN_FILE": file.path, "IAP_DATA_DIR": root.path])
        #expect(cli.status == 1 && cli.stderr.contains("error 1003"), "\(cli.stdout)\(cli.stderr)")
    }
}
