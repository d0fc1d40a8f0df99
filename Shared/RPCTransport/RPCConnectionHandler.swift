import JSONRPC
import Logging
import NIOCore

/// Sent down a connection's pipeline when the server shuts down: stop reading, finish what is in
/// flight, then close.
package struct DrainConnectionEvent: Sendable {
    package init() {}
}

/// Serves one connection: parses each line, runs immediate methods inline and async methods as
/// tasks, and writes replies as they complete (so pipelined replies may come out of order).
///
/// Replies produced while handling one read burst are written together and flushed once at
/// `channelReadComplete`, so a client that pipelines 16 pings gets one TCP write back, not 16.
/// Flow control (the in-flight cap, held reads, draining, idle and over-long lines) is decided by a
/// `ConnectionStateMachine`; this handler performs its actions. All state is confined to the channel's
/// event loop.
package final class RPCConnectionHandler: ChannelDuplexHandler {
    package typealias InboundIn = LineFrame
    package typealias OutboundIn = ByteBuffer
    package typealias OutboundOut = ByteBuffer

    private let shared: ServerShared
    private let connectionID: Int
    private let remoteAddress: String?
    private var sequence = 0

    private var context: ChannelHandlerContext!
    private var out: ByteBuffer
    private var inReadBurst = false
    private var flushScheduled = false

    private var flow: ConnectionStateMachine<LineFrame>

    init(shared: ServerShared, connectionID: Int, remoteAddress: String?) {
        self.shared = shared
        self.connectionID = connectionID
        self.remoteAddress = remoteAddress
        self.out = ByteBufferAllocator().buffer(capacity: 0)
        self.flow = ConnectionStateMachine(maxInFlight: shared.configuration.maxInFlightPerConnection)
    }

    /// A handler for a server with this configuration and router (tests drive it on an embedded channel).
    package convenience init(configuration: RPCServerConfiguration, router: RPCRouter, logger: Logger, connectionID: Int = 1) {
        self.init(
            shared: ServerShared(configuration: configuration, router: router, logger: logger), connectionID: connectionID,
            remoteAddress: nil)
    }

    package func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    // MARK: inbound

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch flow.frameReceived(frame) {
        case .drop: return
        case .queued: inReadBurst = true
        case .process:
            inReadBurst = true
            process(frame)
        }
    }

    package func channelReadComplete(context: ChannelHandlerContext) {
        inReadBurst = false
        flushReplies()
        context.fireChannelReadComplete()
    }

    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is DrainConnectionEvent {
            if flow.drainRequested() { closeNow() }
        } else if let idle = event as? IdleStateHandler.IdleStateEvent, idle == .read {
            if flow.idleDeadlinePassed() {
                shared.logger.debug("closing idle connection", metadata: ["rpc.connection": "\(connectionID)"])
                context.close(promise: nil)
            }
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    package func channelWritabilityChanged(context: ChannelHandlerContext) {
        if flow.shouldResumeReading(writable: context.channel.isWritable) { context.read() }
        context.fireChannelWritabilityChanged()
    }

    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        shared.logger.debug("connection error", metadata: ["rpc.connection": "\(connectionID)", "error": "\(error)"])
        context.close(promise: nil)
    }

    // MARK: outbound

    package func read(context: ChannelHandlerContext) {
        if flow.readRequested(writable: context.channel.isWritable) == .read { context.read() }
    }

    // MARK: processing

    private func process(_ frame: LineFrame) {
        switch frame {
        case .tooLong:
            flow.lineTooLong()
            let limit = shared.configuration.maxLineBytes
            appendFailure(.null, .invalidRequest("line exceeds \(limit) bytes", reason: "lineTooLong"))
            let flushed = context.eventLoop.makePromise(of: Void.self)
            let bytes = out
            out = context.channel.allocator.buffer(capacity: 0)
            context.writeAndFlush(wrapOutboundOut(bytes), promise: flushed)
            let channel = context.channel
            flushed.futureResult.whenComplete { _ in channel.close(promise: nil) }
        case .line(let line):
            let inbound = line.withUnsafeReadableBytes { RPCMessageParser.parse($0, limits: shared.limits) }
            switch inbound {
            case .single(.failure(let rejection)):
                appendFailure(rejection.id, rejection.error)
            case .single(.success(let request)):
                dispatchSingle(request)
            case .batch(let items):
                dispatchBatch(items)
            }
        }
    }

    private func makeContext(_ method: String) -> RequestContext {
        sequence &+= 1
        return RequestContext(
            method: method, connectionID: connectionID, sequence: sequence,
            remoteAddress: remoteAddress, logger: shared.logger)
    }

    private func dispatchSingle(_ request: RPCRequest) {
        guard let implementation = shared.router.implementations[request.method] else {
            shared.metrics.recordUnknownMethod()
            if let id = request.id { appendFailure(id, .methodNotFound(request.method)) }
            return
        }
        let ctx = makeContext(request.method)
        if let outcome = runInline(implementation, request, ctx) {
            if let id = request.id { appendOutcome(id, outcome) }
        } else {
            flow.requestStarted()
            runDeferred(implementation, request: request, ctx: ctx) { [self] outcome in
                if let id = request.id { appendOutcome(id, outcome) }
                requestFinished()
            }
        }
    }

    /// Answers a batch as one array line once every member is done; no line if all were notifications.
    private func dispatchBatch(_ items: [Result<RPCRequest, RPCRejection>]) {
        let batch = BatchReply(count: items.count)
        var asyncCount = 0
        for (index, item) in items.enumerated() {
            switch item {
            case .failure(let rejection):
                batch.fill(index, failure(rejection.id, rejection.error))
            case .success(let request):
                guard let implementation = shared.router.implementations[request.method] else {
                    shared.metrics.recordUnknownMethod()
                    batch.fill(index, request.id.map { failure($0, .methodNotFound(request.method)) })
                    continue
                }
                let ctx = makeContext(request.method)
                if let outcome = runInline(implementation, request, ctx) {
                    batch.fill(index, request.id.map { encode($0, outcome) })
                } else {
                    asyncCount += 1
                    runDeferred(implementation, request: request, ctx: ctx) { [self] outcome in
                        batch.fill(index, request.id.map { encode($0, outcome) })
                        if batch.isComplete {
                            writeBatch(batch)
                            requestFinished()
                        }
                    }
                }
            }
        }
        if asyncCount > 0 {
            flow.requestStarted()
        } else {
            writeBatch(batch)
        }
    }

    /// Runs an immediate handler (or the inline half of an immediate-or-async one) on the event loop, timed; nil
    /// when the request must run deferred.
    private func runInline(
        _ implementation: RPCRouter.Implementation, _ request: RPCRequest, _ ctx: RequestContext
    ) -> Result<[UInt8], RPCError>? {
        let start = NIODeadline.now()
        let outcome: Result<[UInt8], RPCError>
        switch implementation {
        case .immediate(let body):
            do { outcome = .success(try body(request.params, ctx)) } catch { outcome = .failure(error) }
        case .immediateOrAsync(let fast, _), .immediateOrBlocking(let fast, _):
            do {
                guard let answer = try fast(request.params, ctx) else { return nil }
                outcome = .success(answer)
            } catch {
                outcome = .failure(error)
            }
        case .async, .blocking:
            return nil
        }
        shared.metrics.record(method: request.method, start: start, outcome: outcome)
        return outcome
    }

    /// Runs an async handler as a task, or a blocking one on the server's pool, under the per-request
    /// timeout; `completion` runs on the event loop exactly once, with the handler's outcome or the
    /// timeout error. A timed-out task is cancelled; a blocking handler can only be abandoned.
    private func runDeferred(
        _ implementation: RPCRouter.Implementation,
        request: RPCRequest,
        ctx: RequestContext,
        completion: @escaping (Result<[UInt8], RPCError>) -> Void
    ) {
        let loop = context.eventLoop
        let call = InFlightCall(completion: completion)
        let bound = NIOLoopBound(call, eventLoop: loop)
        let metrics = shared.metrics
        let start = NIODeadline.now()
        let params = request.params
        let finish: @Sendable (Result<[UInt8], RPCError>) -> Void = { outcome in
            metrics.record(method: ctx.method, start: start, outcome: outcome)
            // The blocking pool's future completes on the loop already: no second trip through its queue.
            if loop.inEventLoop { bound.value.finish(outcome) } else { loop.execute { bound.value.finish(outcome) } }
        }
        var task: Task<Void, Never>?
        switch implementation {
        case .async(let body), .immediateOrAsync(_, let body):
            task = Task {
                do throws(RPCError) { finish(.success(try await body(params, ctx))) } catch { finish(.failure(error)) }
            }
        case .blocking(let body), .immediateOrBlocking(_, let body):
            shared.blockingPool.runIfActive(eventLoop: loop) { () -> Result<[UInt8], RPCError> in
                do throws(RPCError) { return .success(try body(params, ctx)) } catch { return .failure(error) }
            }.whenComplete { result in
                finish(
                    (try? result.get())
                        ?? .failure(
                            RPCError(
                                code: .serverBusy, message: "server is shutting down",
                                reason: "shuttingDown", retryable: true)))
            }
        case .immediate:
            preconditionFailure("immediate handlers run inline")
        }
        let timeout = shared.configuration.requestTimeout
        call.timer = loop.scheduleTask(in: timeout) { [task] in
            task?.cancel()
            ctx.logger.warning("request timed out", metadata: ["timeoutMs": "\(timeout.nanoseconds / 1_000_000)"])
            bound.value.finish(
                .failure(
                    RPCError(
                        code: .requestTimeout, message: "request did not finish within \(timeout.nanoseconds / 1_000_000) ms",
                        reason: "timeout", retryable: true)))
        }
    }

    private func requestFinished() {
        flow.requestFinished()
        guard let context else { return }
        while let frame = flow.nextWaitingFrame() { process(frame) }
        if !inReadBurst { scheduleFlush() }
        if flow.shouldResumeReading(writable: context.channel.isWritable) { context.read() }
        if flow.shouldCloseNow() { closeNow() }
    }

    /// Writes what is buffered, then closes.
    private func closeNow() {
        guard let context else { return }
        flushReplies()
        context.close(promise: nil)
    }

    // MARK: replies

    private func encode(_ id: RPCID, _ outcome: Result<[UInt8], RPCError>) -> [UInt8] {
        var bytes: [UInt8] = []
        switch outcome {
        case .success(let result): JSONWriter.success(id: id, result: result, into: &bytes)
        case .failure(let error): JSONWriter.failure(id: id, error: error, into: &bytes)
        }
        return bytes
    }

    private func failure(_ id: RPCID, _ error: RPCError) -> [UInt8] {
        var bytes: [UInt8] = []
        JSONWriter.failure(id: id, error: error, into: &bytes)
        return bytes
    }

    private func appendOutcome(_ id: RPCID, _ outcome: Result<[UInt8], RPCError>) {
        switch outcome {
        case .success(let result):
            // Written piecewise into the outgoing buffer: a listing is kilobytes, copy it once.
            guard context != nil else { return }
            out.writeBytes(JSONWriter.successPrefix)
            out.writeBytes(id.rawJSON)
            out.writeBytes(JSONWriter.resultKey)
            out.writeBytes(result)
            out.writeBytes(JSONWriter.lineEnd)
            if !inReadBurst { scheduleFlush() }
        case .failure(let error):
            appendFailure(id, error)
        }
    }

    private func appendFailure(_ id: RPCID, _ error: RPCError) {
        appendLine(failure(id, error))
    }

    private func writeBatch(_ batch: BatchReply) {
        let replies = batch.replies
        guard !replies.isEmpty else { return }
        var bytes: [UInt8] = [UInt8(ascii: "[")]
        for (i, r) in replies.enumerated() {
            if i > 0 { bytes.append(UInt8(ascii: ",")) }
            bytes += r
        }
        bytes.append(UInt8(ascii: "]"))
        appendLine(bytes)
    }

    private func appendLine(_ bytes: [UInt8]) {
        guard context != nil else { return }  // the connection is gone; the reply has nowhere to go
        out.writeBytes(bytes)
        out.writeInteger(UInt8(ascii: "\n"))
        if !inReadBurst { scheduleFlush() }
    }

    /// Coalesces replies finishing in the same event-loop tick into one write.
    private func scheduleFlush() {
        guard let context, !flushScheduled, out.readableBytes > 0 else { return }
        flushScheduled = true
        context.eventLoop.execute { [bound = NIOLoopBound(self, eventLoop: context.eventLoop)] in
            bound.value.flushScheduled = false
            bound.value.flushReplies()
        }
    }

    private func flushReplies() {
        guard let context, out.readableBytes > 0 else { return }
        let bytes = out
        out = context.channel.allocator.buffer(capacity: 0)
        context.writeAndFlush(wrapOutboundOut(bytes), promise: nil)
    }
}

/// One async call in flight: finished exactly once, by its handler or by its timeout.
private final class InFlightCall {
    private var completion: ((Result<[UInt8], RPCError>) -> Void)?
    var timer: Scheduled<Void>?

    init(completion: @escaping (Result<[UInt8], RPCError>) -> Void) {
        self.completion = completion
    }

    func finish(_ outcome: Result<[UInt8], RPCError>) {
        guard let completion else { return }
        self.completion = nil
        timer?.cancel()
        timer = nil
        completion(outcome)
    }
}

/// Replies of one batch, kept in request order. Event-loop confined.
private final class BatchReply {
    private var slots: [[UInt8]?]
    private var remaining: Int

    init(count: Int) {
        slots = Array(repeating: nil, count: count)
        remaining = count
    }

    func fill(_ index: Int, _ reply: [UInt8]?) {
        slots[index] = reply
        remaining -= 1
    }

    var isComplete: Bool { remaining == 0 }
    var replies: [[UInt8]] { slots.compactMap { $0 } }
}
