import AsyncHTTPClient
import Foundation
import JSONRPC
import NIOCore
import NIOSSL
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

@testable import EdgeService

/// What an attacker's HTTP client does to the edge, over a raw TCP socket: headers a byte at a time,
/// connections opened and left silent, header blocks past the limit. Each costs the attacker the
/// connection and leaves the edge answering everyone else.
@Suite struct HostileHTTPTests {
    static let request =
        "POST /v1/rpc HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 56\r\n\r\n"
        + #"{"jsonrpc":"2.0","id":1,"method":"catalog.listProducts"}"#

    /// Reads reply lines until the server closes; returns the first line (the status line) if any.
    static func statusThenClose(_ client: LineClient, within seconds: Double = 30) async throws -> (status: String?, closed: Bool) {
        var status: String?
        while true {
            switch try await client.next(within: seconds) {
            case .line(let line): if status == nil { status = line.trimmingCharacters(in: .whitespacesAndNewlines) }
            case .closed: return (status, true)
            }
        }
    }

    static func statusLine(_ client: LineClient) async throws -> String? {
        guard case .line(let line) = try await client.next() else { return nil }
        return line.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// An edge with a short request deadline (2 s: short enough for the tests to see it act, long enough that a
    /// well-behaved client on a loaded CI machine gets its request in; 500 ms once closed a fresh connection before
    /// its request was written, in CI's PostgreSQL pass).
    static func withHostileEdge(_ body: (Int) async throws -> Void) async throws {
        try await EdgeTests.withEdge(configure: {
            $0.requestTimeout = .seconds(2)
            $0.maxHeaderBytes = 8 * 1024
        }) { _, base in
            try await body(Int(base.split(separator: ":").last!)!)
        }
    }

    /// Sends `opening` on a raw connection, then `drop(i)` every 50 ms for 20 s: the edge must close it without an
    /// answer well before the drip ends (its deadline, not the drip).
    static func expectCutByTheDeadline(port: Int, opening: String, drop: @escaping @Sendable (Int) -> [UInt8]) async throws {
        let slow = try await LineClient.connect(port: port)
        let drip = Task {
            try await slow.send(bytes: Array(opening.utf8))
            for i in 0..<400 {
                try await Task.sleep(for: .milliseconds(50))
                try await slow.send(bytes: drop(i))
            }
        }
        defer { drip.cancel() }
        let started = ContinuousClock.now
        let outcome = try await statusThenClose(slow)
        #expect(outcome.closed && outcome.status == nil, "closed without an answer")
        #expect(ContinuousClock.now - started < .seconds(15), "closed by the deadline, not by the drip ending")
    }

    /// A well-behaved client on a new connection is answered.
    static func expectAnswered(port: Int) async throws {
        let fine = try await LineClient.connect(port: port)
        try await fine.send(bytes: Array(request.utf8))
        #expect(try await statusLine(fine) == "HTTP/1.1 200 OK")
        await fine.close()
    }

    @Test func headersSentAByteAtATimeLoseTheConnectionAtTheDeadline() async throws {
        try await Self.withHostileEdge { port in
            // The attack: a header line every 50 ms, for ever; only the deadline can end it.
            try await Self.expectCutByTheDeadline(port: port, opening: "POST /v1/rpc HTTP/1.1\r\nHost: localhost\r\n") {
                Array("X-Drip-\($0): a\r\n".utf8)
            }
            // Everyone else is answered.
            try await Self.expectAnswered(port: port)
        }
    }

    /// The same deadline covers the body: a request whose body trickles in a byte at a time is cut without an answer
    /// (nothing of it forwarded), and a connection answered 413 before its body ended is still closed when it idles.
    @Test func bodiesSentAByteAtATimeLoseTheConnectionAtTheDeadline() async throws {
        try await Self.withHostileEdge { port in
            try await Self.expectCutByTheDeadline(
                port: port,
                opening: "POST /v1/rpc HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
            ) { _ in [UInt8(ascii: " ")] }

            // Answered 413 from its Content-Length (past the 2 MiB cap), its body sent whole after, then silent: the wait
            // for the next request runs from that answer, not from the refused request's end.
            let early = try await LineClient.connect(port: port)
            let size = 2_100_000
            try await early.send(
                bytes: Array("POST /v1/rpc HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: \(size)\r\n\r\n".utf8)
                    + [UInt8](repeating: UInt8(ascii: " "), count: size))
            let refused = try await Self.statusThenClose(early)
            #expect(refused.status?.hasPrefix("HTTP/1.1 413") == true && refused.closed, "\(refused.status ?? "")")

            try await Self.expectAnswered(port: port)
        }
    }

    /// Over HTTP/2 each stream has the same deadline for its body: a body trickled a byte at a time loses its
    /// stream (reset), not the whole connection, and other requests on that connection are answered.
    @Test func http2BodiesSentAByteAtATimeLoseTheirStreamAtTheDeadline() async throws {
        try await EdgeTests.withTLSEdge(configure: { $0.requestTimeout = .seconds(2) }) { _, _, port, client in
            let url = "https://localhost:\(port)/v1/rpc"
            func rpc() -> HTTPClientRequest {
                var request = HTTPClientRequest(url: url)
                request.method = .POST
                request.headers.add(name: "Content-Type", value: "application/json")
                return request
            }
            var first = rpc()
            first.body = .bytes(ByteBuffer(string: #"{"jsonrpc":"2.0","id":1,"method":"rpc.ping"}"#))
            let answered = try await client.execute(first, timeout: .seconds(30))
            #expect(answered.version == .http2 && answered.status == .ok)

            var slow = rpc()
            let drip = AsyncStream<ByteBuffer> { continuation in
                let task = Task {
                    continuation.yield(ByteBuffer(string: "{"))
                    for _ in 0..<400 {
                        try? await Task.sleep(for: .milliseconds(50))
                        continuation.yield(ByteBuffer(string: " "))
                    }
                    continuation.finish()
                }
                continuation.onTermination = { _ in task.cancel() }
            }
            slow.body = .stream(drip, length: .known(Int64(100_000)))
            let started = ContinuousClock.now
            await #expect(throws: (any Error).self, "the stream is reset at the deadline") {
                let response = try await client.execute(slow, timeout: .seconds(30))
                _ = try await response.body.collect(upTo: 1 << 20)
            }
            #expect(ContinuousClock.now - started < .seconds(15), "ended by the deadline, not by the drip ending")

            var after = rpc()
            after.body = .bytes(ByteBuffer(string: #"{"jsonrpc":"2.0","id":2,"method":"rpc.ping"}"#))
            let again = try await client.execute(after, timeout: .seconds(30))
            #expect(again.version == .http2 && again.status == .ok)
        }
    }

    /// One address holds at most `maxConnectionsPerAddress` connections: the next is closed at once, unanswered,
    /// while the ones it holds are served; one closing makes room again.
    @Test func connectionsPastTheCapForOneAddressAreClosedAtOnce() async throws {
        try await SuiteFixture.with { suite in
            var config = EdgeConfiguration()
            config.internalToken = SuiteFixture.internalToken  // the webhook presents it to fulfillment
            config.maxConnectionsPerAddress = 4
            let edge = EdgeService(
                accounts: suite.accounts, catalog: suite.catalog, fulfillment: suite.fulfillment, configuration: config,
                logger: EdgeTests.quiet)
            try await EdgeTests.serving(edge) { port in
                // Each answered once: accepted and counted.
                var held: [LineClient] = []
                for _ in 0..<4 {
                    let client = try await LineClient.connect(port: port)
                    try await client.send(bytes: Array(Self.request.utf8))
                    #expect(try await Self.statusLine(client) == "HTTP/1.1 200 OK")
                    held.append(client)
                }
                #expect(edge.connections.open("127.0.0.1") == 4, "\(edge.connections.debugDescription)")

                let over = try await LineClient.connect(port: port)
                try? await over.send(bytes: Array(Self.request.utf8))  // may find it closed already
                let refused = try await Self.statusThenClose(over)
                #expect(refused.closed && refused.status == nil, "closed without an answer")
                #expect(edge.connections.refused >= 1)
                var exposition: [UInt8] = []
                edge.metricsRegistry.emit(into: &exposition)  // what GET /metrics shows
                let refusedLine = String(decoding: exposition, as: UTF8.self).split(separator: "\n")
                    .first { $0.hasPrefix("edge_connections_refused") }
                #expect(refusedLine.map { !$0.hasSuffix(" 0") } == true, "refusals counted: \(refusedLine ?? "no line")")

                // The first answer's body has no newline: the next status line follows it on the same line.
                try await held[0].send(bytes: Array(Self.request.utf8))
                var served = false
                while !served, case .line(let line) = try await held[0].next() { served = line.contains("HTTP/1.1 200 OK") }
                #expect(served, "the held ones are still served")

                // The edge learns of a close asynchronously: connect until admitted (bounded).
                await held[1].close()
                var admitted = false
                for _ in 0..<200 where !admitted {
                    let again = try await LineClient.connect(port: port)
                    if (try? await again.send(bytes: Array(Self.request.utf8))) != nil, try await Self.statusLine(again) == "HTTP/1.1 200 OK" {
                        admitted = true
                    }
                    await again.close()
                    await Task.yield()
                }
                #expect(admitted, "a connection closing makes room")
                for client in held { await client.close() }
            }
        }
    }

    /// The counting rule alone: up to the cap per address, each address on its own, a trusted proxy never counted.
    @Test func theConnectionCapCountsEachAddressAndExemptsTrustedProxies() {
        let connections = ConnectionsPerAddress(cap: 2, exempt: ["10.0.0.1"])
        #expect(connections.admit("192.0.2.1") && connections.admit("192.0.2.1"))
        #expect(!connections.admit("192.0.2.1"), "the third from one address")
        #expect(connections.admit("192.0.2.2"), "another address has its own count")
        #expect((0..<10).allSatisfy { _ in connections.admit("10.0.0.1") }, "a trusted proxy is not counted")
        connections.release("192.0.2.1")
        #expect(connections.open("192.0.2.1") == 1 && connections.admit("192.0.2.1"))
        connections.release("192.0.2.2")
        connections.release("192.0.2.2")
        #expect(connections.open("192.0.2.2") == 0 && connections.refused == 1)
        // An IPv6 /64 is one address (a host has all of it), an IPv6 trusted proxy is exempt by its own address.
        let six = ConnectionsPerAddress(cap: 2, exempt: ["2001:db8:9::1"])
        #expect(six.admit("2001:db8:1:2::1") && six.admit("2001:db8:1:2::2"))
        #expect(!six.admit("2001:db8:1:2:ffff::3"), "the third from one /64")
        #expect(six.admit("2001:db8:1:3::1"), "the next /64 is another subscriber")
        #expect((0..<5).allSatisfy { _ in six.admit("2001:db8:9::1") })
        six.release("2001:db8:1:2::1")
        #expect(six.open("2001:db8:1:2::77") == 1)
    }

    /// The edge's buckets and the address it forwards to accounts count an IPv6 client by its /64, through a trusted
    /// proxy too.
    @Test func theEdgeCountsAnIPv6ClientByItsSlash64() throws {
        var config = EdgeConfiguration()
        config.trustedProxies = ["2001:db8:9::1"]
        let dead = try RPCClient(address: "127.0.0.1:1")
        let edge = EdgeService(accounts: dead, catalog: dead, fulfillment: dead, configuration: config, logger: EdgeFixture.quiet)
        #expect(edge.clientAddress(peer: "2001:db8:1:2::5", forwardedFor: nil) == "2001:db8:1:2::/64")
        #expect(edge.clientAddress(peer: "2001:db8:9::1", forwardedFor: "203.0.113.4, 2001:db8:7:8::9") == "2001:db8:7:8::/64")
        #expect(edge.clientAddress(peer: "198.51.100.7", forwardedFor: "2001:db8:7:8::9") == "198.51.100.7", "an untrusted peer's header")
    }

    @Test func silentConnectionsAreClosedAndTheEdgeKeepsAnswering() async throws {
        try await Self.withHostileEdge { port in
            var silent: [LineClient] = []
            for _ in 0..<200 { silent.append(try await LineClient.connect(port: port)) }
            for client in silent { #expect(try await client.next(within: 30) == .closed) }
            // A keep-alive connection that goes quiet after its answer is closed as well.
            let kept = try await LineClient.connect(port: port)
            try await kept.send(bytes: Array(Self.request.utf8))
            let answered = try await Self.statusThenClose(kept)
            #expect(answered.status == "HTTP/1.1 200 OK" && answered.closed)
        }
    }

    @Test func aHeaderBlockPastTheLimitIsRefused() async throws {
        try await Self.withHostileEdge { port in
            let big = try await LineClient.connect(port: port)
            let header = "X-Big: " + String(repeating: "a", count: 64 * 1024) + "\r\n"
            // The edge may close before all 64 KiB are written (that is the refusal): a failed write is
            // not the test's failure; the connection must end either way.
            do {
                try await big.send(bytes: Array("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\(header)\r\n".utf8))
            } catch ChannelError.ioOnClosedChannel {
            } catch let error as IOError where [EPIPE, ECONNRESET].contains(error.errnoCode) {
            }
            let outcome = try await Self.statusThenClose(big)
            #expect(outcome.closed)
            #expect(outcome.status == nil || outcome.status?.hasPrefix("HTTP/1.1 4") == true, "\(outcome.status ?? "")")
            let fine = try await LineClient.connect(port: port)
            try await fine.send(bytes: Array("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8))
            #expect(try await Self.statusLine(fine) == "HTTP/1.1 200 OK")
            await fine.close()
        }
    }
}
