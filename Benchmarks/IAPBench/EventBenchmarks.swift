import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import RPCTransport

/// A webhook receiver in the benchmark's process on 127.0.0.1: answers 204, counts what arrives and checks each
/// account's events come in order (a repeat of an event already seen is counted apart: deliveries are at least once).
final class BenchReceiver: Sendable {
    private struct State {
        var received = 0
        var repeats = 0
        var outOfOrder = 0
        var last: [String: Int64] = [:]
        var firstAt: ContinuousClock.Instant?
        var lastAt: ContinuousClock.Instant?
    }
    private let state = NIOLockedValueBox(State())
    private let server = NIOLockedValueBox<(port: Int, channel: (any Channel)?)>((0, nil))
    var port: Int { server.withLockedValue { $0.port } }

    var url: String { "http://127.0.0.1:\(port)/hooks" }
    var counts: (received: Int, repeats: Int, outOfOrder: Int) { state.withLockedValue { ($0.received, $0.repeats, $0.outOfOrder) } }
    /// From the first event's arrival to the last's.
    var span: Duration { state.withLockedValue { s in s.firstAt.flatMap { f in s.lastAt.map { $0 - f } } ?? .zero } }

    struct Event: Decodable {
        var accountId: String
        var sequence: Int64
    }

    /// Counts one arrived event: false when the body is not one.
    func record(_ body: ByteBuffer) -> Bool {
        guard let e = try? JSONDecoder().decode(Event.self, from: Data(body.readableBytesView)) else { return false }
        state.withLockedValue { s in
            let now = ContinuousClock.now
            if s.firstAt == nil { s.firstAt = now }
            s.lastAt = now
            let last = s.last[e.accountId] ?? 0
            if e.sequence <= last {
                s.repeats += 1
            } else {
                if last > 0 && e.sequence != last + 1 { s.outOfOrder += 1 }
                s.last[e.accountId] = e.sequence
                s.received += 1
            }
        }
        return true
    }

    /// A plain SwiftNIO HTTP/1.1 server, answered on the event loop: the receiver stands in for the team's own backend,
    /// which runs on another machine, so it should take as little of the suite's cores as it can (measured in
    /// Benchmarks/README.md against the Hummingbird receiver it replaced).
    static func start() async throws -> BenchReceiver {
        let receiver = BenchReceiver()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(ReceiverHandler(receiver: receiver))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        receiver.server.withLockedValue { $0 = (channel.localAddress?.port ?? 0, channel) }
        return receiver
    }

    func stop() { server.withLockedValue { $0.channel?.close(promise: nil) } }

    /// One connection's requests: the body gathered, counted at its end, answered 204 (400 when it is not an event).
    private final class ReceiverHandler: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        let receiver: BenchReceiver
        var body = ByteBuffer()

        init(receiver: BenchReceiver) { self.receiver = receiver }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head: body.clear()
            case .body(var part): body.writeBuffer(&part)
            case .end:
                let status: HTTPResponseStatus = receiver.record(body) ? .noContent : .badRequest
                let head = HTTPResponseHead(version: .http1_1, status: status, headers: ["content-length": "0"])
                context.write(wrapOutboundOut(.head(head)), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            }
        }
    }

    /// Waits until `count` distinct events arrived, or `timeout` passed; true when they did.
    func waitFor(_ count: Int, timeout: Duration) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while counts.received < count {
            guard ContinuousClock.now < deadline else { return false }
            try? await Task.sleep(for: .milliseconds(20))  // polling the count, bounded by the deadline
        }
        return true
    }
}

/// The admin token as the CLI resolves it.
struct AdminTokenOptions: ParsableArguments {
    @Option(name: .customLong("admin-token"), help: "Admin token (default: IAP_ADMIN_TOKEN, else $IAP_DATA_DIR/admin-token, else data/admin-token).")
    var adminToken: String?
    var resolved: String {
        get throws {
            let environment = ProcessInfo.processInfo.environment
            let file = (environment["IAP_DATA_DIR"] ?? "data") + "/admin-token"
            guard
                let token = adminToken ?? environment["IAP_ADMIN_TOKEN"]
                    ?? (try? String(contentsOfFile: file, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
            else { throw ValidationError("no admin token: pass --admin-token or set IAP_ADMIN_TOKEN") }
            return token
        }
    }
}

/// Webhook deliveries per second to a receiver on this machine, the events spread over many accounts: the endpoint is
/// paused while the events are made (a grant and then spends per account), then resumed and timed until every event
/// arrived.
struct WebhookDeliveryBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webhook-delivery",
        abstract: "Events delivered per second to a local webhook receiver, spread over many accounts (needs the running suite).")
    @OptionGroup var suite: SuiteAddresses
    @OptionGroup var admin: AdminTokenOptions
    @Option(help: "Events to deliver (a grant per account, the rest spends).") var events = 20_000

    func run() async throws {
        let token = try admin.resolved
        let accounts = suite.users
        guard events >= accounts * 2 else { throw ValidationError("--events must be at least twice --users") }
        let receiver = try await BenchReceiver.start()
        defer { receiver.stop() }
        let fulfillment = try RPCClient(address: suite.fulfillment, configuration: .init(connections: 8, callTimeout: .seconds(120)))
        defer { Task { await fulfillment.close() } }
        let hook = try await fulfillment.call(
            FulfillmentAddWebhook.self, .init(adminToken: token, url: receiver.url, allowPrivateAddress: true))
        _ = try await fulfillment.call(FulfillmentPauseWebhook.self, .init(adminToken: token, id: hook.id))
        let runId = String(UUID().uuidString.prefix(8)).lowercased()
        FileHandle.standardError.write(Data("signing in \(accounts) accounts and making \(events) events (the endpoint paused)...\n".utf8))
        try await suite.silenceSimulatorNotifications()
        // In chunks of 50: accounts refuses a thousand password hashes at once ("busy checking passwords").
        var signedIn: [String] = []
        for chunk in 0..<((accounts + 49) / 50) {
            var some = suite
            some.users = min(50, accounts - chunk * 50)
            signedIn += try await some.signIn(run: "\(runId)-\(chunk)")
        }
        let sessions = signedIn
        let funding = try await suite.mint(count: accounts, productId: "coins.1000", type: .consumable, quantity: 10, run: runId)
        let spendsEach = events / accounts - 1
        try await withThrowingTaskGroup(of: Void.self) { group in
            let next = NIOLockedValueBox(0)
            for _ in 0..<32 {
                group.addTask {
                    while true {
                        let i = next.withLockedValue { v in
                            defer { v += 1 }; return v
                        }
                        guard i < accounts else { return }
                        _ = try await fulfillment.call(
                            FulfillmentRedeem.self, .init(session: sessions[i], receiptData: funding[i].receiptData), affinity: sessions[i])
                        for k in 0..<spendsEach {
                            _ = try await fulfillment.call(
                                FulfillmentSpendCoins.self, .init(session: sessions[i], amount: 1, idempotencyKey: "\(runId)-\(k)"))
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let total = accounts * (spendsEach + 1)
        FileHandle.standardError.write(Data("resuming the endpoint: \(total) events over \(accounts) accounts...\n".utf8))
        let started = ContinuousClock.now
        _ = try await fulfillment.call(FulfillmentPauseWebhook.self, .init(adminToken: token, id: hook.id, paused: false))
        let complete = await receiver.waitFor(total, timeout: .seconds(600))
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let counts = receiver.counts
        print(
            """
            webhook-delivery: \(counts.received) of \(total) events over \(accounts) accounts in \(String(format: "%.2f", seconds)) s \
            = \(String(format: "%.0f", Double(counts.received) / seconds)) events/s (first to last arrival \(receiver.span)); \
            repeats \(counts.repeats), out of order \(counts.outOfOrder)\(complete ? "" : "; INCOMPLETE")
            """)
        _ = try await fulfillment.call(FulfillmentDeleteWebhook.self, .init(adminToken: token, id: hook.id))
    }
}

/// A backend following the feed while load runs elsewhere (`iap-bench redeem` in another shell, against any number of
/// instances): reads `listEvents` from the head for `--duration` seconds, then catches up, and checks it saw every event
/// that committed after it started, once each, every account's sequences without a gap.
struct EventTailBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "events-tail", abstract: "Follows the event feed during a load run and checks it saw every event (needs the running suite).")
    @OptionGroup var suite: SuiteAddresses
    @OptionGroup var admin: AdminTokenOptions
    @Option(help: "Seconds to follow.") var duration = 12.0

    func run() async throws {
        let token = try admin.resolved
        let client = try RPCClient(address: suite.fulfillment, configuration: .init(connections: 1, callTimeout: .seconds(60)))
        defer { Task { await client.close() } }
        func page(_ after: String) async throws -> FulfillmentListEvents.Result {
            try await client.call(FulfillmentListEvents.self, .init(adminToken: token, after: after, limit: 1000))
        }
        // The head: everything already readable.
        var start = "0"
        while true {
            let p = try await page(start)
            start = p.next
            if p.events.count < 1000 { break }
        }
        var cursor = start, seen: [FulfillmentEvent] = [], reads = 0
        let end = ContinuousClock.now + .milliseconds(Int64(duration * 1000))
        while ContinuousClock.now < end {
            let p = try await page(cursor)
            reads += 1
            seen += p.events
            cursor = p.next
            if p.events.isEmpty { try await Task.sleep(for: .milliseconds(50)) }  // a follower's poll interval
        }
        // The load has stopped: catch up until two reads in a row bring nothing.
        var quiet = 0
        while quiet < 2 {
            let p = try await page(cursor)
            seen += p.events
            cursor = p.next
            quiet = p.events.isEmpty ? quiet + 1 : 0
            if p.events.isEmpty { try await Task.sleep(for: .milliseconds(500)) }
        }
        // Everything after the start, read again in one go: the follower must have seen exactly this.
        var all: [FulfillmentEvent] = [], after = start
        while true {
            let p = try await page(after)
            all += p.events
            after = p.next
            if p.events.count < 1000 { break }
        }
        let seenIds = seen.map(\.id), allIds = Set(all.map(\.id))
        let missed = allIds.subtracting(seenIds).count, twice = seenIds.count - Set(seenIds).count
        var gaps = 0
        for (_, events) in Dictionary(grouping: all, by: \.accountId) {
            let sequences = events.map(\.sequence).sorted()
            gaps += zip(sequences, sequences.dropFirst()).filter { $1 != $0 + 1 }.count
        }
        print(
            "events-tail: followed \(seen.count) events in \(reads) reads; after the start \(all.count) committed; missed \(missed), "
                + "seen twice \(twice), sequence gaps \(gaps)")
        if missed > 0 || twice > 0 { throw ExitCode(1) }
    }
}
