import Foundation
import Hummingbird
import IAPProtocol
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// A webhook receiver on a real port (127.0.0.1): records every request it is sent, answers 500 for the accounts told
/// to fail, and holds every request while `hold` is on (a receiver that answers slowly).
public final class WebhookReceiver: Sendable {
    public struct Received: Sendable {
        public var id: String
        public var timestamp: String
        public var signature: String
        public var body: [UInt8]
        public var event: FulfillmentEvent
    }

    private struct State {
        var received: [Received] = []
        /// Account -> the first of its sequences answered 500 (1: all of them).
        var failing: [String: Int64] = [:]
        var held: [CheckedContinuation<Void, Never>] = []
        var holding = false
    }

    private let state: NIOLockedValueBox<State>
    public let port: Int
    private let app: Task<Void, any Error>

    public var url: String { "http://127.0.0.1:\(port)/hooks" }

    private init(port: Int, app: Task<Void, any Error>, state: NIOLockedValueBox<State>) {
        self.port = port
        self.app = app
        self.state = state
    }

    public static func start() async throws -> WebhookReceiver {
        let state = NIOLockedValueBox(State())
        let router = Router()
        router.post("hooks") { request, _ -> Response in
            let body = Array(buffer: try await request.body.collect(upTo: 1 << 20))
            guard let event = try? JSONDecoder().decode(FulfillmentEvent.self, from: Data(body)) else { return Response(status: .badRequest) }
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let now = state.withLockedValue { s -> Bool in
                    if s.holding { s.held.append(c) }
                    return !s.holding
                }
                if now { c.resume() }
            }
            let fail = state.withLockedValue { s -> Bool in
                if let from = s.failing[event.accountId], event.sequence >= from { return true }
                s.received.append(
                    Received(
                        id: request.headers[.init("webhook-id")!] ?? "", timestamp: request.headers[.init("webhook-timestamp")!] ?? "",
                        signature: request.headers[.init("webhook-signature")!] ?? "", body: body, event: event))
                return false
            }
            return Response(status: fail ? .internalServerError : .noContent)
        }
        var quiet = Logger(label: "webhook-receiver")
        quiet.logLevel = .critical
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let application = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) }, logger: quiet)
        let task = Task { try await application.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else { throw CancellationError() }
        return WebhookReceiver(port: port, app: task, state: state)
    }

    public var received: [Received] { state.withLockedValue { $0.received } }
    public var events: [FulfillmentEvent] { received.map(\.event) }
    public var waiting: Int { state.withLockedValue { $0.held.count } }

    public func fail(_ accounts: Set<String>) { state.withLockedValue { $0.failing = Dictionary(uniqueKeysWithValues: accounts.map { ($0, 1) }) } }

    /// Answers 500 for `account`'s events from `sequence` on (and for no other account's).
    public func fail(_ account: String, from sequence: Int64) { state.withLockedValue { $0.failing = [account: sequence] } }

    public func hold(_ on: Bool) {
        let release = state.withLockedValue { s -> [CheckedContinuation<Void, Never>] in
            s.holding = on
            defer { if !on { s.held = [] } }
            return on ? [] : s.held
        }
        for c in release { c.resume() }
    }

    public func stop() {
        hold(false)
        app.cancel()
    }
}
