import NIOCore
import NIOHTTPTypes

/// Closes an HTTP/1.1 connection whose next request head has not fully arrived within `timeout` of the
/// connection opening or of the previous response ending: a client sending its headers a byte at a time
/// (slowloris) holds a connection for at most that long, however often it sends, and an idle keep-alive
/// connection is closed after it too. Placed after the HTTP decoder, which only hands on a head once all of
/// its header block has arrived.
///
/// One repeating check per connection (every quarter of the timeout) reads when the wait began; requests
/// only write a timestamp when their end is written, so the deadline costs almost nothing per request (scheduling a timer per response cost
/// the edge ~3% of its CPU).
final class RequestHeadDeadline: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let timeout: TimeAmount
    /// When the wait for the next head began; nil while a request is being read or answered.
    private var waitingSince: NIODeadline?
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

    func handlerRemoved(context: ChannelHandlerContext) {
        stop()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = unwrapInboundIn(data) { waitingSince = nil }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .end = unwrapOutboundIn(data) else {
            context.write(data, promise: promise)
            return
        }
        // The wait begins once the response is out: its end is written after its body (a file body sent by
        // `sendfile` can take minutes after the end was handed down).
        let written = context.eventLoop.makePromise(of: Void.self)
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        written.futureResult.whenComplete { _ in loopBound.value.waitingSince = .now() }
        if let promise { written.futureResult.cascade(to: promise) }
        context.write(data, promise: written)
    }

    func channelInactive(context: ChannelHandlerContext) {
        stop()
        context.fireChannelInactive()
    }

    private func start(_ context: ChannelHandlerContext) {
        guard check == nil else { return }
        waitingSince = .now()
        let period = TimeAmount.nanoseconds(max(timeout.nanoseconds / 4, 1_000_000))
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        check = context.eventLoop.scheduleRepeatedTask(initialDelay: period, delay: period) { _ in
            let (handler, context) = loopBound.value
            if let since = handler.waitingSince, NIODeadline.now() - since >= handler.timeout {
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
