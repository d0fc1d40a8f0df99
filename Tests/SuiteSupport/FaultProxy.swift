import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A TCP proxy in front of a real service, for dependency-fault tests: it passes bytes through, holds
/// the service's replies back (slow), or refuses and drops every connection (down). Nothing about the
/// service itself is faked; only the network between two real services misbehaves.
public final class FaultProxy: Sendable {
    public enum Mode: Sendable, Equatable {
        case pass
        /// Replies reach the client this much later.
        case slow(milliseconds: Int64)
        /// New connections are closed at once; open ones are closed when the mode is set.
        case down
    }

    private let targetPort: Int
    private let group: any EventLoopGroup
    private let state = NIOLockedValueBox<(mode: Mode, open: [ObjectIdentifier: any Channel])>((.pass, [:]))
    private let listener: NIOLockedValueBox<(any Channel)?> = NIOLockedValueBox(nil)

    public init(targetPort: Int, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) {
        self.targetPort = targetPort
        self.group = group
    }

    /// Starts listening on a free port; returns it.
    public func start() async throws -> Int {
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { inbound in self.accept(inbound) }
            .bind(host: "127.0.0.1", port: 0).get()
        listener.withLockedValue { $0 = channel }
        return channel.localAddress!.port!
    }

    public var mode: Mode {
        get { state.withLockedValue { $0.mode } }
        set {
            let toClose = state.withLockedValue { s -> [any Channel] in
                s.mode = newValue
                return newValue == .down ? Array(s.open.values) : []
            }
            for channel in toClose { channel.close(promise: nil) }
        }
    }

    public func stop() async {
        mode = .down
        try? await listener.withLockedValue { $0 }?.close()
    }

    private func accept(_ inbound: any Channel) -> EventLoopFuture<Void> {
        guard mode != .down else { return inbound.close() }
        track(inbound)
        return ClientBootstrap(group: inbound.eventLoop)
            .connect(host: "127.0.0.1", port: targetPort)
            .flatMap { outbound in
                self.track(outbound)
                return inbound.pipeline.addHandler(Forward(to: outbound, delay: { 0 })).flatMap {
                    outbound.pipeline.addHandler(
                        Forward(
                            to: inbound,
                            delay: { [weak self] in
                                if case .slow(let ms)? = self?.mode { return ms }
                                return 0
                            }))
                }
            }
            .flatMapError { _ in inbound.close() }
    }

    private func track(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        state.withLockedValue { $0.open[id] = channel }
        channel.closeFuture.whenComplete { _ in _ = self.state.withLockedValue { $0.open.removeValue(forKey: id) } }
    }

    /// Copies what one side reads to the other, optionally later; closing one side closes the other.
    private final class Forward: ChannelInboundHandler, @unchecked Sendable {
        // @unchecked: used only on its channel's event loop (NIO's handler contract); `peer` is a
        // Sendable channel and `delay` a Sendable closure.
        typealias InboundIn = ByteBuffer
        let peer: any Channel
        let delay: @Sendable () -> Int64

        init(to peer: any Channel, delay: @escaping @Sendable () -> Int64) {
            self.peer = peer
            self.delay = delay
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let bytes = unwrapInboundIn(data)
            let ms = delay()
            let peer = self.peer
            if ms > 0 {
                context.eventLoop.scheduleTask(in: .milliseconds(ms)) { peer.writeAndFlush(bytes, promise: nil) }
            } else {
                peer.writeAndFlush(bytes, promise: nil)
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            peer.close(promise: nil)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }
}
