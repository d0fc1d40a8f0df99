import NIOCore
import NIOHTTPTypes

/// Closes an HTTP/1.1 connection whose next request (head and body) has not fully arrived within `timeout` of the
/// connection opening or of the previous response ending: a client sending its headers or its body a byte at a
/// time (slowloris) holds a connection, and the body buffered so far, for at most that long, however often it
/// sends, and an idle keep-alive connection is closed after it too. Placed after the HTTP decoder, which hands on
/// a request's parts as they arrive; the wait ends with the request's end. On an HTTP/2 stream (a channel of its
/// own) the same rule resets that stream alone.
///
/// A `ConnectionDeadline`: responses only write when the wait began, once their end is written out.
final class RequestDeadline: ConnectionDeadline {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    let timeout: TimeAmount
    /// When the wait for the next request began (the connection opening, a response's end); nil once a request has
    /// fully arrived, while it is answered.
    private var waitingSince: NIODeadline? = .now()
    /// Requests fully arrived and responses written out: while every arrived request is answered, the connection
    /// waits for the next (an answer written before its request's end, a 413, leaves the wait running).
    private var requestsArrived = 0
    private var responsesWritten = 0
    var check: RepeatedTask?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func expired() -> Bool {
        guard let since = waitingSince else { return false }
        return NIODeadline.now() - since >= timeout
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .end = unwrapInboundIn(data) {
            requestsArrived += 1
            if requestsArrived > responsesWritten { waitingSince = nil }
        }
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
        written.futureResult.whenComplete { _ in
            let handler = loopBound.value
            handler.responsesWritten += 1
            if handler.responsesWritten >= handler.requestsArrived { handler.waitingSince = .now() }
        }
        if let promise { written.futureResult.cascade(to: promise) }
        context.write(data, promise: written)
    }
}
