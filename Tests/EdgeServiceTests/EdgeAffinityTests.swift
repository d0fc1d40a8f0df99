import AsyncHTTPClient
import EdgeService
import JSONRPC
import NIOCore
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

/// Stands in for `fulfillment.getBalance` on instances that answer with their own name.
private enum WhoAnswers: RPCMethod {
    struct Params: Codable, Sendable { var session: String? }
    typealias Result = String
    static let name = "fulfillment.getBalance"
    static let summary = "The instance's name."
}

/// The edge in front of several fulfillment instances: each session's calls reach one instance, whether the session
/// comes as the bearer or in the params, and sessions spread over the instances.
@Suite struct EdgeAffinityTests {
    @Test func aSessionsCallsThroughTheEdgeReachOneInstance() async throws {
        var servers: [RPCServer] = []
        for name in ["a", "b", "c"] {
            var router = RPCRouter()
            router.registerImmediate(WhoAnswers.self) { _, _ in name }
            let server = RPCServer(configuration: RPCServerConfiguration(serviceName: name), router: router, logger: EdgeFixture.quiet)
            try await server.start()
            servers.append(server)
        }
        let instances = servers
        defer { Task { for server in instances { await server.shutdown() } } }
        let fulfillment = try RPCClient(
            address: instances.map { "127.0.0.1:\($0.localPort!)" }.joined(separator: ","), configuration: .init(connections: 2))
        let elsewhere = try RPCClient(address: "127.0.0.1:\(try LoopbackPort.free())")
        defer {
            Task {
                await fulfillment.close(); await elsewhere.close()
            }
        }
        var configuration = EdgeConfiguration()
        configuration.burst = 1_000  // every call from one address
        let edge = EdgeService(
            accounts: elsewhere, catalog: elsewhere, fulfillment: fulfillment, configuration: configuration,
            logger: EdgeFixture.quiet)
        try await EdgeFixture.serving(edge) { port in
            func answer(_ params: String, bearer: String?) async throws -> String {
                var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/rpc")
                request.method = .POST
                request.headers.add(name: "Content-Type", value: "application/json")
                if let bearer { request.headers.add(name: "Authorization", value: "Bearer \(bearer)") }
                request.body = .bytes(
                    ByteBuffer(string: #"{"jsonrpc":"2.0","id":1,"method":"fulfillment.getBalance","params":\#(params)}"#))
                let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
                let body = String(buffer: try await response.body.collect(upTo: 1 << 20))
                guard case .object(let reply)? = try? JSONValue.parse(body), case .string(let name)? = reply["result"] else {
                    return "HTTP \(response.status.code) \(body)"
                }
                return name
            }
            var firsts: Set<String> = []
            for n in 0..<30 {
                let session = String(repeating: "A", count: 40) + String(1000 + n).suffix(3)
                var seen: Set<String> = []
                for _ in 0..<4 {
                    seen.insert(try await answer("{}", bearer: session))
                    seen.insert(try await answer(#"{"session":"\#(session)"}"#, bearer: nil))
                }
                #expect(seen.count == 1, "\(session): \(seen)")
                firsts.formUnion(seen)
            }
            #expect(firsts == ["a", "b", "c"])
        }
    }
}
