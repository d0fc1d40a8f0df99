import NIOCore
import NIOHTTPTypes

/// Closes an HTTP/1.1 connection whose next request head has not fully arrived within `timeout` of the
/// connection opening or of the previous response ending: a client sending its headers a byte at a time
/// (slowloris) holds a connection for at most that long, however often it sends, and an idle keep-alive
/// connection is closed after it too. Placed after the HTTP decoder, which only hands on a head once all of
/// its header block has arrived.
///
/// A `ConnectionDeadline`: responses only write when the wait began, once their end is written out.
final class RequestHeadDeadline: ConnectionDeadline {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    let timeout: TimeAmount
    /// When the wait for the next head began (the connection opening, a response's end); nil while a request is
    /// being read or answered.
    private var waitingSince: NIODeadline? = .now()
    var check: RepeatedTask?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func expired() -> Bool {
        guard let since = waitingSince else { return false }
        return NIODeadline.now() - since >= timeout
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
}
