import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

@testable import FulfillmentService

/// A webhook request ends within its time, the answer's body included: a receiver that sends its head at once and then
/// trickles the body must not keep a delivery past its lease (another instance would claim the account's events and
/// send them again beside it, out of order). Before, the client's deadline covered the head only and the body could
/// take as long as the receiver liked, a byte within each read timeout.
@Suite struct WebhookSenderTests {
    /// Answers every request with a head promising 64 KiB, then one byte every `every`.
    final class TricklingReceiver: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let every: TimeAmount
        init(every: TimeAmount) { self.every = every }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let channel = context.channel
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 65536\r\n\r\nx"
            channel.writeAndFlush(channel.allocator.buffer(string: head), promise: nil)
            channel.eventLoop.scheduleRepeatedTask(initialDelay: every, delay: every) { task in
                guard channel.isActive else { return task.cancel() }
                channel.writeAndFlush(channel.allocator.buffer(string: "x"), promise: nil)
            }
        }
    }

    /// A `TricklingReceiver` (a byte every 100 ms) on a loopback port.
    static func tricklingServer() async throws -> any Channel {
        try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { $0.pipeline.addHandler(TricklingReceiver(every: .milliseconds(100))) }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    /// The endpoint record a sender is given for `url`.
    static func endpoint(_ id: String, _ url: String) -> WebhookRecord {
        WebhookRecord(
            id: id, url: url, types: nil, environments: nil, allowPrivateAddress: true, secret: WebhookSender.newSecret(), state: "active",
            createdAtMs: 0, dispatched: EventPosition(txOrder: 0, id: 0))
    }

    @Test(.timeLimit(.minutes(1))) func aReceiverTricklingItsAnswerIsCutOffAtTheRequestsTime() async throws {
        let server = try await Self.tricklingServer()
        defer { server.close(promise: nil) }
        let port = try #require(server.localAddress?.port)
        let sender = WebhookSender(timeout: .seconds(1))
        let endpoint = Self.endpoint("trickle", "http://127.0.0.1:\(port)/hooks")
        let started = ContinuousClock.now
        // Its status decides (a 2xx head is an acceptance); the body it promised would take almost two hours.
        #expect(try await sender.send(endpoint, eventId: "evt", body: Array("{}".utf8), secrets: [endpoint.secret]) == 200)
        let took = ContinuousClock.now - started
        #expect(took < .seconds(10), "the request ended at its time (1 s), not when the body did: \(took)")
        await sender.shutdown()
    }

    /// The request's time counts from before its host is resolved: a resolver that takes the whole of it leaves none for
    /// the request (until 2026-11-30 the request had its full time after the resolver's, so a round could outlive its
    /// lease and an account's events be sent twice at once).
    @Test(.timeLimit(.minutes(1))) func resolvingTheHostCountsAgainstTheRequestsTime() async throws {
        let server = try await Self.tricklingServer()
        defer { server.close(promise: nil) }
        let port = try #require(server.localAddress?.port)
        let sender = WebhookSender(timeout: .seconds(1)) { _ in
            try await Task.sleep(for: .milliseconds(1_500))
            return try SocketAddress(ipAddress: "127.0.0.1", port: port)
        }
        let endpoint = Self.endpoint("slow-dns", "http://receiver.example:\(port)/hooks")
        await #expect(throws: (any Error).self) {
            try await sender.send(endpoint, eventId: "evt", body: Array("{}".utf8), secrets: [endpoint.secret])
        }
        await sender.shutdown()
    }

    /// A client replaced (its name resolved elsewhere) or forgotten (its endpoint deleted, here or by another instance) is
    /// shut down once no request can still be on it: until 2026-11-30 every one was kept until the service stopped, one
    /// more for each new address of a round-robin name.
    @Test(.timeLimit(.minutes(1))) func replacedAndForgottenClientsAreShutDownOnceNoRequestCanBeOnThem() async throws {
        let resolutions = NIOLockedValueBox(0)
        let sender = WebhookSender(timeout: .seconds(1), resolveEvery: .zero) { url in
            // A round-robin name: another address at each look (no receiver on either: the sends fail, the clients stay).
            let n = resolutions.withLockedValue { n in
                n += 1
                return n
            }
            return try SocketAddress(ipAddress: n % 2 == 0 ? "127.0.0.2" : "127.0.0.3", port: url.port)
        }
        let endpoint = Self.endpoint("round-robin", "http://hooks.example:9/hooks")
        for _ in 0..<3 { _ = try? await sender.send(endpoint, eventId: "evt", body: Array("{}".utf8), secrets: [endpoint.secret]) }
        #expect(sender.clientCounts == (1, 2), "one client in use, the two it replaced retired")
        await sender.shutDownRetired()
        #expect(sender.clientCounts == (1, 2), "a request started on them may still be running")
        await sender.shutDownRetired(now: .now + .seconds(7))
        #expect(sender.clientCounts == (1, 0), "past a request's time (1 s) and 5 s, shut down")
        // Another instance deleted the endpoint: the worker's next round no longer lists it.
        await sender.keep(only: ["another"])
        #expect(sender.clientCounts == (0, 1))
        await sender.keep(only: ["another"], now: .now + .seconds(7))
        #expect(sender.clientCounts == (0, 0))
        await sender.shutdown()
    }
}
