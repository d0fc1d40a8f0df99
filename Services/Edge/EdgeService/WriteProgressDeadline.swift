import HummingbirdCore
import Logging
import NIOCore

/// Closes a connection whose pending writes make no progress for `timeout`: a client that asks for a download and
/// stops reading would otherwise hold the connection, its buffers and its open file for ever (and a flood of such
/// clients, each within its address's rate limit, would pile them up). Placed next to the socket (below TLS), so
/// every chunk the kernel takes counts as progress: a slow client that keeps reading is never cut, and a connection
/// with nothing to write is not this handler's business (`RequestHeadDeadline` closes idle ones).
///
/// One repeating check per connection (every quarter of the timeout), as `RequestHeadDeadline`.
final class WriteProgressDeadline: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    typealias OutboundIn = NIOAny

    private let timeout: TimeAmount
    private var pending = 0
    /// When the oldest pending write began to wait, or the last write completed since.
    private var lastProgress = NIODeadline.now()
    private var check: RepeatedTask?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        start(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        stop()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stop()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if pending == 0 { lastProgress = .now() }
        pending += 1
        let written = promise ?? context.eventLoop.makePromise()
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        written.futureResult.whenComplete { _ in
            let handler = loopBound.value
            handler.pending -= 1
            handler.lastProgress = .now()
        }
        context.write(data, promise: written)
    }

    private func start(_ context: ChannelHandlerContext) {
        guard check == nil else { return }
        let period = TimeAmount.nanoseconds(max(timeout.nanoseconds / 4, 1_000_000))
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        check = context.eventLoop.scheduleRepeatedTask(initialDelay: period, delay: period) { _ in
            let (handler, context) = loopBound.value
            if handler.pending > 0, NIODeadline.now() - handler.lastProgress >= handler.timeout {
                handler.stop()
                context.close(promise: nil)
            }
        }
    }

    private func stop() {
        check?.cancel()
        check = nil
    }
}

/// A server child channel with `WriteProgressDeadline` first in its pipeline (next to the socket, below TLS and HTTP).
struct WriteProgressDeadlineChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value
    let base: Base
    let timeout: TimeAmount

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        do {
            try channel.pipeline.syncOperations.addHandler(WriteProgressDeadline(timeout: timeout), position: .first)
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        return base.setup(channel: channel, logger: logger)
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}
