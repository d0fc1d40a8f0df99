import JSONRPC
import MetricsTestKit
import RPCTestSupport
import RPCTransport
import Testing

/// Metrics named after OpenTelemetry's RPC conventions, recorded into a test factory (not the global
/// MetricsSystem, so parallel tests do not interfere).
@Suite struct MetricsTests {
    @Test func everyCallIsTimedAndEveryErrorCountedByCode() async throws {
        let metrics = TestMetrics()
        let server = try await TestServer.start { $0.metricsFactory = metrics }
        defer { Task { await server.shutdown() } }
        // Patient: this checks what is recorded, not speed, and every suite starts at once on two cores.
        let client = RPCClient(host: "127.0.0.1", port: server.localPort!, configuration: .patient)
        defer { Task { await client.close() } }
        _ = try await client.call(TypedAdd.self, .init(a: 1, b: 2, label: nil))
        _ = await rpcError { try await client.callRaw(method: "typed.add", params: Array(#"{"a":"x","b":1}"#.utf8)) }
        _ = try await client.call(EchoAsync.self, ["n": 1])
        _ = await rpcError { try await client.callRaw(method: "no.such.method", params: nil) }

        let base = [("rpc.system", "jsonrpc"), ("rpc.service", "test")]
        let typed = try metrics.expectTimer("rpc.server.duration", base + [("rpc.method", "typed.add")])
        #expect(typed.values.count == 2)
        #expect(typed.values.allSatisfy { $0 >= 0 })
        #expect(try metrics.expectTimer("rpc.server.duration", base + [("rpc.method", "echo.async")]).values.count == 1)
        let invalid = try metrics.expectCounter(
            "rpc.server.errors",
            base + [("rpc.method", "typed.add"), ("rpc.jsonrpc.error_code", "-32602")])
        #expect(invalid.totalValue == 1)
        let unknown = try metrics.expectCounter(
            "rpc.server.errors",
            base + [("rpc.method", "_OTHER"), ("rpc.jsonrpc.error_code", "-32601")])
        #expect(unknown.totalValue == 1)
    }
}
