import HummingbirdCore
import Logging
import NIOCore

/// Closes a connection whose pending writes make no progress for `timeout`: a client that asks for a download and
/// stops reading would otherwise hold the connection, its buffers and its open file for ever (and a flood of such
/// clients, each within its address's rate limit, would pile them up). Placed next to the socket (below TLS), so
/// every chunk the kernel takes counts as progress: a slow client that keeps reading is never cut, and a connection
/// with nothing to write is not this handler's business (`RequestDeadline` closes idle ones).
///
/// A `ConnectionDeadline`, as `RequestDeadline`.
final class WriteProgressDeadline: ConnectionDeadline {
    typealias InboundIn = NIOAny
    typealias OutboundIn = NIOAny

    let timeout: TimeAmount
    private var pending = 0
    /// When the oldest pending write began to wait, or the last write completed since.
    private var lastProgress = NIODeadline.now()
    var check: RepeatedTask?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func expired() -> Bool {
        pending > 0 && NIODeadline.now() - lastProgress >= timeout
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
