import Foundation
import JSONRPC
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RPCTransport

/// A raw TCP client for tests: sends bytes exactly as given and reads reply lines one at a time,
/// so tests see the wire as a client does (nothing in between, no correlation help).
public final class LineClient: Sendable {
    public enum Event: Sendable, Equatable {
        case line(String)
        case closed
    }

    private let channel: any Channel
    private let events: EventQueue

    /// `from`: the local address to connect from (another loopback address, e.g. 127.0.0.2, is another
    /// client host as far as per-address limits go).
    public static func connect(host: String = "127.0.0.1", port: Int, from source: String? = nil) async throws -> LineClient {
        CooperativePoolHeartbeat.start()
        let events = EventQueue()
        var bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        if let source { bootstrap = bootstrap.bind(to: try SocketAddress(ipAddress: source, port: 0)) }
        let channel =
            try await bootstrap
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        ByteToMessageHandler(LineFrameDecoder(maxLineBytes: 64 * 1024 * 1024)))
                    try channel.pipeline.syncOperations.addHandler(Collector(events: events))
                }
            }
            .connect(host: host, port: port).get()
        return LineClient(channel: channel, events: events)
    }

    private init(channel: any Channel, events: EventQueue) {
        self.channel = channel
        self.events = events
    }

    /// Sends `text` followed by a newline.
    public func send(line text: String) async throws {
        try await send(bytes: Array(text.utf8) + [UInt8(ascii: "\n")])
    }

    public func send(bytes: [UInt8]) async throws {
        try await channel.writeAndFlush(ByteBuffer(bytes: bytes))
    }

    /// The next reply line, or `.closed` once the server closed the connection.
    /// `within` only bounds how long a broken server can hang a test; it never orders events.
    public func next(within seconds: Double = 60) async throws -> Event {
        try await events.next(within: seconds)
    }

    public func close() async {
        try? await channel.close()
    }

    private final class Collector: ChannelInboundHandler {
        typealias InboundIn = LineFrame
        let events: EventQueue
        init(events: EventQueue) { self.events = events }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .line(let buffer): events.push(.line(String(buffer: buffer)))
            case .tooLong: events.push(.line("<line too long>"))
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            events.push(.closed)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }
}

public struct NoReplyInTime: Error, CustomStringConvertible {
    public let seconds: Double
    public var description: String { "no reply line within \(seconds) s" }
}

/// Events in arrival order; `closed` repeats forever once seen.
final class EventQueue: Sendable {
    private struct State {
        var events: [LineClient.Event] = []
        var waiter: (id: Int, continuation: CheckedContinuation<LineClient.Event?, Never>)?
        var nextWaiter = 0
    }
    private let state = NIOLockedValueBox(State())

    func push(_ event: LineClient.Event) {
        let waiter: CheckedContinuation<LineClient.Event?, Never>? = state.withLockedValue { s in
            if let w = s.waiter {
                s.waiter = nil
                if event == .closed { s.events.append(.closed) }
                return w.continuation
            }
            s.events.append(event)
            return nil
        }
        waiter?.resume(returning: event)
    }

    func next(within seconds: Double) async throws -> LineClient.Event {
        let id = state.withLockedValue { s in
            s.nextWaiter += 1; return s.nextWaiter
        }
        let timer = Task {
            try await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
            let w: CheckedContinuation<LineClient.Event?, Never>? = state.withLockedValue { s in
                guard let w = s.waiter, w.id == id else { return nil }
                s.waiter = nil
                return w.continuation
            }
            w?.resume(returning: nil)
        }
        defer { timer.cancel() }
        let event: LineClient.Event? = await withCheckedContinuation { continuation in
            let ready: LineClient.Event? = state.withLockedValue { s in
                guard let first = s.events.first else {
                    s.waiter = (id, continuation)
                    return nil
                }
                if first != .closed { s.events.removeFirst() }
                return first
            }
            if let ready { continuation.resume(returning: ready) }
        }
        guard let event else { throw NoReplyInTime(seconds: seconds) }
        return event
    }
}
