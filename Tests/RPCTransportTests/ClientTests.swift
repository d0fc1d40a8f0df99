import Foundation
import JSONRPC
import NIOCore
import RPCTestSupport
import RPCTransport
import Testing

@Suite struct ClientTests {
    @Test func repliesAreMatchedByIdUnderConcurrency() async throws {
        let server = try await TestServer.start()
        defer { Task { await server.shutdown() } }
        let client = RPCClient(host: "127.0.0.1", port: server.localPort!)
        defer { Task { await client.close() } }
        // 500 concurrent calls over one connection, immediate and async handlers mixed so replies
        // interleave; each must get its own answer.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<500 {
                group.addTask {
                    let sent: JSONValue = ["n": .int(Int64(i))]
                    let got =
                        i % 2 == 0
                        ? try await client.call(Echo.self, sent)
                        : try await client.call(EchoAsync.self, sent)
                    #expect(got == sent)
                }
            }
            try await group.waitForAll()
        }
    }

    @Test func outOfOrderRepliesReachTheRightCaller() async throws {
        let gates = Gates()
        let server = try await TestServer.start(router: TestServer.router(gates: gates))
        defer { Task { await server.shutdown() } }
        let client = RPCClient(host: "127.0.0.1", port: server.localPort!)
        defer { Task { await client.close() } }
        let slow = Task { try await client.call(GateWait.self, .init(key: "first")) }
        // The second call, sent later, is answered first.
        #expect(try await client.call(Echo.self, ["s": "second"]) == ["s": "second"])
        await gates.release("first")
        #expect(try await slow.value == "first")
    }

    @Test func typedErrorsComeBackAsRPCError() async throws {
        let server = try await TestServer.start()
        defer { Task { await server.shutdown() } }
        let client = RPCClient(host: "127.0.0.1", port: server.localPort!)
        defer { Task { await client.close() } }
        do {
            _ = try await client.call(TypedAdd.self, .init(a: 1, b: 2, label: nil))
            _ = try await client.callRaw(method: "typed.add", params: Array(#"{"a":"x","b":1}"#.utf8))
            Issue.record("expected an error")
        } catch {
            #expect(error.knownCode == .invalidParams)
            #expect(error.data.extra["field"] == "a")
        }
        do {
            _ = try await client.callRaw(method: "no.such.method", params: nil)
            Issue.record("expected an error")
        } catch {
            #expect(error.knownCode == .methodNotFound)
        }
    }

    @Test func aCallThatOutlivesItsTimeoutFailsRetryably() async throws {
        let server = try await TestServer.start()
        defer { Task { await server.shutdown() } }
        let client = RPCClient(host: "127.0.0.1", port: server.localPort!)
        defer { Task { await client.close() } }
        do {
            _ = try await client.call(NeverEnds.self, EmptyParams(), timeout: .milliseconds(100))
            Issue.record("expected a timeout")
        } catch {
            #expect(error.knownCode == .unavailable)
            #expect(error.reason == "timeout")
            #expect(error.retryable)
        }
        // The connection is still good for other calls.
        #expect(try await client.call(RPCPing.self, EmptyParams()) == "pong")
    }

    @Test func anUnreachablePeerIsUnavailable() async throws {
        // A port nothing listens on and that no server of this process can be given (a released port-0 port can
        // be bound again by a test running beside this one).
        let port = try LoopbackPort.free()
        let client = RPCClient(host: "127.0.0.1", port: port)
        do {
            _ = try await client.call(RPCPing.self, EmptyParams())
            Issue.record("expected unavailable")
        } catch {
            #expect(error.knownCode == .unavailable)
            #expect(error.reason == "connectFailed")
            #expect(error.retryable)
        }
    }

    @Test func theClientReconnectsAfterThePeerRestarts() async throws {
        let first = try await TestServer.start { $0.drainTimeout = .milliseconds(100) }
        let port = first.localPort!
        let client = RPCClient(host: "127.0.0.1", port: port)
        defer { Task { await client.close() } }
        #expect(try await client.call(RPCPing.self, EmptyParams()) == "pong")

        // A call in flight when the peer goes away fails as unavailable, not hangs.
        let pending = Task { try await client.call(NeverEnds.self, EmptyParams(), timeout: .seconds(30)) }
        await first.shutdown()  // NeverEnds never finishes: the drain timeout closes the connection
        do {
            _ = try await pending.value
            Issue.record("expected the in-flight call to fail")
        } catch let error as RPCError {
            #expect(error.knownCode == .unavailable || error.knownCode == .requestTimeout)
            #expect(error.retryable)
        }

        var restarted = RPCServerConfiguration(serviceName: "test", port: port)
        restarted.requestTimeout = .seconds(5)
        let second = RPCServer(configuration: restarted, router: TestServer.router(), logger: TestServer.logger)
        try await second.start()
        defer { Task { await second.shutdown() } }
        #expect(try await client.call(RPCPing.self, EmptyParams()) == "pong")
    }

    @Test func addressesParseAsHostPort() throws {
        #expect(try RPCClient.parseAddress("127.0.0.1:7101") == ("127.0.0.1", 7101))
        #expect(try RPCClient.parseAddress("[::1]:7102") == ("::1", 7102))
        #expect(throws: RPCError.self) { try RPCClient.parseAddress("localhost") }
        #expect(throws: RPCError.self) { try RPCClient.parseAddress("host:99999") }
    }
}
