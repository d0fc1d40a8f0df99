import Logging
import NIOCore

/// Closes a connection whose current line stays unfinished for longer than `deadline`: a slow-loris
/// client that trickles bytes (each byte resets the idle timer) cannot hold a connection forever.
/// Sits before the line decoder and only looks at where lines end; it never changes the bytes.
final class PartialLineDeadlineHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let deadline: TimeAmount
    private let logger: Logger
    private var timer: Scheduled<Void>?

    init(deadline: TimeAmount, logger: Logger) {
        self.deadline = deadline
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        let view = buffer.readableBytesView
        if let lastNewline = view.lastIndex(of: UInt8(ascii: "\n")) {
            // A line was finished; bytes after the last newline begin the next one, and its clock starts now.
            timer?.cancel()
            timer = nil
            if lastNewline < view.endIndex - 1 { arm(context) }
        } else if !view.isEmpty && timer == nil {
            arm(context)  // the first bytes of a line: its clock starts; later bytes do not reset it
        }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
    }

    private func arm(_ context: ChannelHandlerContext) {
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        let logger = self.logger
        let deadline = self.deadline
        timer = context.eventLoop.scheduleTask(in: deadline) {
            logger.notice(
                "closing a connection whose line stayed unfinished past the deadline",
                metadata: [
                    "deadlineMs": "\(deadline.nanoseconds / 1_000_000)",
                    "peer": "\(bound.value.channel.remoteAddress?.ipAddress ?? "?")",
                ])
            bound.value.close(promise: nil)
        }
    }
}
