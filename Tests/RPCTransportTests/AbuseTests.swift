import Foundation
import JSONRPC
import NIOCore
import RPCTestSupport
import RPCTransport
import Testing

/// Per-address connection caps and the partial-line deadline (docs/security.md): one host cannot
/// take every connection, and a client that trickles bytes is closed, while another host is served.
@Suite struct AbuseTests {
    static let ping = #"{"jsonrpc":"2.0","method":"rpc.ping","id":1}"#

    @Test func oneAddressCannotTakeEveryConnection() async throws {
        let server = try await TestServer.start(settings: ["maxConnectionsPerAddress": "3"])
        defer { Task { await server.shutdown() } }
        var held: [LineClient] = []
        for _ in 0..<3 {
            let c = try await LineClient.connect(port: server.localPort!)
            try await c.send(line: Self.ping)
            #expect(try await c.next() == .line(#"{"jsonrpc":"2.0","id":1,"result":"pong"}"#))
            held.append(c)
        }
        let fourth = try await LineClient.connect(port: server.localPort!)
        guard case .line(let refusal) = try await fourth.next() else { Issue.record("no refusal"); return }
        let value = try JSONValue.parse(refusal)
        #expect(value["error"]?["data"]?["reason"] == "tooManyConnectionsFromAddress")
        #expect(value["error"]?["data"]?["retryable"] == true)
        #expect(try await fourth.next() == .closed)
        // Another address is served.
        let other = try await LineClient.connect(port: server.localPort!, from: "127.0.0.2")
        try await other.send(line: Self.ping)
        #expect(try await other.next() == .line(#"{"jsonrpc":"2.0","id":1,"result":"pong"}"#))
        // Closing one frees its slot.
        await held.removeLast().close()
        var admitted = false
        for _ in 0..<200 where !admitted {  // the close is seen by the server asynchronously: retry connecting
            let again = try await LineClient.connect(port: server.localPort!)
            // Still over the cap: the server answers the refusal and closes, possibly before this send.
            if (try? await again.send(line: Self.ping)) != nil {
                admitted = (try? await again.next()) == .line(#"{"jsonrpc":"2.0","id":1,"result":"pong"}"#)
            }
            await again.close()
        }
        #expect(admitted)
        for c in held { await c.close() }
        await other.close()
    }

    @Test func aClientTricklingBytesIsClosedAtThePartialLineDeadline() async throws {
        let server = try await TestServer.start(settings: ["partialLineTimeoutMs": "2000", "idleTimeoutMs": "60000"])
        defer { Task { await server.shutdown() } }
        let loris = try await LineClient.connect(port: server.localPort!)
        let started = ContinuousClock.now
        var closed = false
        // One byte every 20 ms keeps the idle timer from ever firing; only the line deadline can close it.
        for byte in Array(#"{"jsonrpc":"2.0","method":"rpc.ping","params":{"pad":""#.utf8) + Array(repeating: UInt8(ascii: "x"), count: 1_500) {
            if (try? await loris.send(bytes: [byte])) == nil { closed = true; break }
            if case .closed? = try? await loris.next(within: 0.02) { closed = true; break }
        }
        #expect(closed, "the trickling client was never closed")
        #expect(ContinuousClock.now - started < .seconds(30))
        // A client that finishes its lines is not affected, however long it stays.
        let good = try await LineClient.connect(port: server.localPort!)
        for _ in 0..<3 {
            try await good.send(line: Self.ping)
            #expect(try await good.next() == .line(#"{"jsonrpc":"2.0","id":1,"result":"pong"}"#))
        }
        await good.close()
    }

    /// The issue's attack: thousands of trickling connections from one address while another address keeps
    /// being answered. Here every ping is answered; `IAP_TRICKLE_CONNECTIONS=4000` runs the long version, which
    /// also bounds p99 at 100 ms (run alone: in CI every suite shares two cores and no latency bound holds).
    @Test func thousandsOfTricklersFromOneAddressDoNotStarveAnother() async throws {
        let environment = ProcessInfo.processInfo.environment
        let count = Int(environment["IAP_TRICKLE_CONNECTIONS"] ?? "") ?? 600
        let server = try await TestServer.start(settings: ["partialLineTimeoutMs": "2000"])
        defer { Task { await server.shutdown() } }
        var tricklers: [LineClient] = []
        var refused = 0
        for _ in 0..<count {
            let c = try await LineClient.connect(port: server.localPort!)
            if (try? await c.send(bytes: Array(#"{"jsonrpc":"2.0","#.utf8))) == nil { refused += 1 }
            tricklers.append(c)
        }
        let good = try await LineClient.connect(port: server.localPort!, from: "127.0.0.2")
        var latencies: [Double] = []
        for round in 0..<200 {
            if round % 10 == 0 {  // keep trickling: a byte on every held connection
                for c in tricklers { _ = try? await c.send(bytes: [UInt8(ascii: " ")]) }
            }
            let start = ContinuousClock.now
            try await good.send(line: Self.ping)
            #expect(try await good.next() == .line(#"{"jsonrpc":"2.0","id":1,"result":"pong"}"#))
            let d = ContinuousClock.now - start
            latencies.append(Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15)
        }
        latencies.sort()
        let p99 = latencies[Int(Double(latencies.count) * 0.99) - 1]
        #expect(count < 4000 || p99 < 100, "p99 \(p99) ms with \(count) trickling connections (\(refused) refused at the per-address cap)")
        // Every trickler is eventually closed by the deadline or was refused at the cap.
        var open = 0
        for c in tricklers {
            var event = try await c.next(within: 30)
            while case .line(let text) = event {  // those refused at the cap got one error line first
                #expect(text.contains("tooManyConnectionsFromAddress"))
                event = try await c.next(within: 30)
            }
            if event != .closed { open += 1 }
            await c.close()
        }
        #expect(open == 0)
        await good.close()
        print("trickle: \(count) connections from 127.0.0.1, pings from 127.0.0.2 p99 \(String(format: "%.2f", p99)) ms")
    }
}
