import Foundation
import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// `POST /v1/rpc`, Apple's webhook (`POST /v1/notifications/appstore[/sandbox]`) and Google Play's pushes
/// (`POST /v1/notifications/googleplay`) answered on the connection's
/// event loop, without Hummingbird's per-request Swift task: the request's parts are collected here, forwarded with
/// `RPCClient.callRaw(on:)` (a connection on the same event loop when there is one) and the answer written back from
/// the reply's callback. Through Hummingbird each call cost four thread hops (event loop to task, task to the client's
/// loop, the reply back to the task, the answer back to the loop); these are the edge's busiest routes. The steps are
/// the router's (`EdgeService.rpcAdmission`/`rpcAnswer`, `webhookAdmission`/`webhookAnswer`, the same metrics), so
/// both paths answer alike.
///
/// Sits after the HTTP codec, before Hummingbird's connection handler, on HTTP/1.1 connections (plain and TLS)
/// and on HTTP/2 streams. Everything else goes on to Hummingbird untouched, and so does a request of these routes
/// that must wait behind one Hummingbird has not answered yet (HTTP/1.1 answers in order), asks `Expect:` or
/// `Connection: close`. While an answer is being made, parts that arrive after the request (a pipelined
/// request), reads and inbound events (input closed, quiesce) wait here, then go on in order: nothing
/// overtakes the answer and nothing closes the connection under it.
final class EventLoopRoutes: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private enum State {
        case idle
        /// Hummingbird has this request (its body parts follow it there).
        case passing
        /// An admitted request whose body arrives into `body`.
        case collecting(route: Route, head: HTTPRequest, address: String, started: ContinuousClock.Instant)
        case answering
        /// Answered early (413): the rest of the request's body is read and dropped.
        case discarding
    }

    /// The routes answered here: JSON-RPC, Apple's webhook (production or sandbox URL), Google Play's pushes.
    enum Route: Equatable {
        case rpc
        case webhook(sandbox: Bool)
        case googlePlay

        init?(_ head: HTTPRequest) {
            guard head.method == .post else { return nil }
            switch head.path {
            case "/v1/rpc": self = .rpc
            case "/v1/notifications/appstore": self = .webhook(sandbox: false)
            case "/v1/notifications/appstore/sandbox": self = .webhook(sandbox: true)
            case "/v1/notifications/googleplay": self = .googlePlay
            default: return nil
            }
        }

        var path: String {
            switch self {
            case .rpc: "/v1/rpc"
            case .webhook(let sandbox): sandbox ? "/v1/notifications/appstore/sandbox" : "/v1/notifications/appstore"
            case .googlePlay: "/v1/notifications/googleplay"
            }
        }
    }

    private enum Held {
        case part(HTTPRequestPart)
        case event(Any)
    }

    private let edge: EdgeService
    private let maxBodyBytes: Int
    private let maxWebhookBodyBytes: Int
    private var state = State.idle
    /// Requests handed to Hummingbird whose answer has not been written yet.
    private var unansweredByHummingbird = 0
    private var held: [Held] = []
    private var readHeld = false
    /// Inbound events (input closed, quiesce) while a request's body arrives: they go on after its answer.
    private var eventsWhileCollecting: [Any] = []
    private var body = ByteBuffer()

    init(edge: EdgeService, maxBodyBytes: Int, maxWebhookBodyBytes: Int) {
        self.edge = edge
        self.maxBodyBytes = maxBodyBytes
        self.maxWebhookBodyBytes = maxWebhookBodyBytes
    }

    private func cap(_ route: Route) -> Int {
        route == .rpc ? maxBodyBytes : maxWebhookBodyBytes
    }

    private var isAnswering: Bool {
        if case .answering = state { return true }
        return false
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if isAnswering || !held.isEmpty {
            held.append(.part(part))
            return
        }
        take(part, context: context)
    }

    private func take(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        switch (state, part) {
        case (.idle, .head(let head)):
            guard unansweredByHummingbird == 0, let route = Route(head), head.headerFields[.expect] == nil,
                !(head.headerFields[.connection] ?? "").lowercased().contains("close")
            else {
                unansweredByHummingbird += 1
                state = .passing
                context.fireChannelRead(wrapInboundOut(part))
                return
            }
            let started = ContinuousClock.now
            edge.requestMetrics.active.increment()
            let peer = context.channel.remoteAddress?.ipAddress ?? context.channel.parent?.remoteAddress?.ipAddress
            let (address, refusal) =
                route == .rpc
                ? edge.rpcAdmission(headers: head.headerFields, peer: peer)
                : ("", edge.webhookAdmission(headers: head.headerFields, peer: peer))
            if let refusal {
                answer(refusal, route: route, to: head, started: started, requestEnded: false, context: context)
            } else if let length = head.headerFields[.contentLength].flatMap(Int.init), length > cap(route) {
                answer(.init(status: .contentTooLarge), route: route, to: head, started: started, requestEnded: false, context: context)
            } else {
                body.clear()
                state = .collecting(route: route, head: head, address: address, started: started)
            }
        case (.collecting(let route, let head, _, let started), .body(var chunk)):
            if body.readableBytes + chunk.readableBytes > cap(route) {
                body = ByteBuffer()
                answer(.init(status: .contentTooLarge), route: route, to: head, started: started, requestEnded: false, context: context)
                return
            }
            body.writeBuffer(&chunk)
        case (.collecting(let route, let head, let address, let started), .end):
            state = .answering
            let bytes = Array(buffer: body)
            body = ByteBuffer()
            let eventLoop = context.eventLoop
            let loopBound = NIOLoopBound((self, context), eventLoop: eventLoop)
            let answering: EventLoopFuture<EdgeService.HTTPAnswer>
            switch route {
            case .rpc: answering = edge.rpcAnswer(headers: head.headerFields, address: address, body: bytes, on: eventLoop)
            case .webhook(let sandbox):
                answering = edge.webhookAnswer(body: bytes, sandbox: sandbox, on: eventLoop).map { EdgeService.HTTPAnswer(status: $0) }
            case .googlePlay:
                answering = edge.playNotificationAnswer(authorization: head.headerFields[.authorization], body: bytes, on: eventLoop)
                    .map { EdgeService.HTTPAnswer(status: $0) }
            }
            answering.whenSuccess { answer in
                let (handler, context) = loopBound.value
                handler.answer(answer, route: route, to: head, started: started, requestEnded: true, context: context)
            }
        case (.discarding, .body):
            break
        case (.discarding, .end):
            state = .idle
        case (.passing, .end):
            state = .idle
            context.fireChannelRead(wrapInboundOut(part))
        default:
            // Hummingbird's parts, and any part out of order (the codec does not make them): Hummingbird decides.
            context.fireChannelRead(wrapInboundOut(part))
        }
    }

    /// Writes `answer` and goes on with what waited behind it.
    private func answer(
        _ answer: EdgeService.HTTPAnswer, route: Route, to head: HTTPRequest, started: ContinuousClock.Instant, requestEnded: Bool,
        context: ChannelHandlerContext
    ) {
        // Counted before the answer is written: a client that has read it finds it in the metrics and counts.
        edge.requestMetrics.record(method: head.method, route: route.path, status: Int(answer.status.code), since: started)
        edge.requestMetrics.active.decrement()
        edge.answeredOnTheEventLoop.add(1, ordering: .relaxed)
        var fields = answer.headers
        fields[.contentLength] = String(answer.body.count)
        fields[.date] = HTTPDate.now()
        fields[.server] = EdgeService.serverName
        context.write(wrapOutboundOut(.head(HTTPResponse(status: answer.status, headerFields: fields))), promise: nil)
        if !answer.body.isEmpty { context.write(wrapOutboundOut(.body(context.channel.allocator.buffer(bytes: answer.body))), promise: nil) }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        state = requestEnded ? .idle : .discarding
        held.insert(contentsOf: eventsWhileCollecting.map(Held.event), at: 0)
        eventsWhileCollecting = []
        releaseHeld(context: context)
    }

    private func releaseHeld(context: ChannelHandlerContext) {
        guard !held.isEmpty else { return releaseRead(context: context) }
        while !isAnswering, !held.isEmpty {
            switch held.removeFirst() {
            case .part(let part): take(part, context: context)
            case .event(let event): context.fireUserInboundEventTriggered(event)
            }
        }
        // Outside a socket read: the handlers after this one (NIO's async channel) pass reads on at a read's end.
        context.fireChannelReadComplete()
        releaseRead(context: context)
    }

    private func releaseRead(context: ChannelHandlerContext) {
        if !isAnswering, readHeld {
            readHeld = false
            context.read()
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if isAnswering || !held.isEmpty {
            held.append(.event(event))
        } else if case .collecting = state {
            eventsWhileCollecting.append(event)  // after the answer: the body's parts must still come in
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    /// A client that leaves while its body arrives: the request is counted as no longer active (nothing was
    /// forwarded; an answer in progress decrements when its reply comes, written or not).
    func channelInactive(context: ChannelHandlerContext) {
        if case .collecting = state {
            edge.requestMetrics.active.decrement()
            state = .idle
            body = ByteBuffer()
        }
        context.fireChannelInactive()
    }

    func read(context: ChannelHandlerContext) {
        if isAnswering { readHeld = true } else { context.read() }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data), unansweredByHummingbird > 0 { unansweredByHummingbird -= 1 }
        context.write(data, promise: promise)
    }
}
