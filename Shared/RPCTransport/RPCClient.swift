import JSONRPC
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Synchronization

public struct RPCClientConfiguration: Sendable {
    /// Connections kept to the peer; calls are spread over them round-robin.
    public var connections: Int = 1
    public var connectTimeout: TimeAmount = .seconds(2)
    /// Default time a call waits for its reply before failing with `unavailable` (reason `timeout`).
    public var callTimeout: TimeAmount = .seconds(10)
    /// Longest reply line accepted (content chunks can be large).
    public var maxLineBytes: Int = 32 * 1024 * 1024

    public init(connections: Int = 1, callTimeout: TimeAmount = .seconds(10)) {
        self.connections = connections
        self.callTimeout = callTimeout
    }
}

/// A JSON-RPC client for one peer address.
///
/// Many calls may be in flight at once, over one connection or a small pool; replies are matched to
/// calls by id, never by order. A connection that drops fails its outstanding calls with
/// `unavailable` (retryable) and is re-established by the next call, so a client outlives restarts
/// of its peer. Every failure is an `RPCError`.
public final class RPCClient: Sendable {
    public let host: String
    public let port: Int
    public let configuration: RPCClientConfiguration
    private let group: any EventLoopGroup
    private let slots: [ConnectionSlot]
    private let nextID = Atomic<Int64>(0)
    private let nextSlot = Atomic<Int>(0)

    public init(
        host: String,
        port: Int,
        configuration: RPCClientConfiguration = .init(),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) {
        self.host = host
        self.port = port
        self.configuration = configuration
        self.group = eventLoopGroup
        self.slots = (0..<max(1, configuration.connections)).map { _ in ConnectionSlot() }
    }

    /// `host:port` form, as in `IAP_ACCOUNTS_ADDR=127.0.0.1:7101`.
    public convenience init(address: String, configuration: RPCClientConfiguration = .init()) throws(RPCError) {
        let (host, port) = try Self.parseAddress(address)
        self.init(host: host, port: port, configuration: configuration)
    }

    public var address: String { "\(host):\(port)" }

    public static func parseAddress(_ address: String) throws(RPCError) -> (host: String, port: Int) {
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]),
            (1...65535).contains(port), colon != address.startIndex
        else {
            throw RPCError(code: .invalidParams, message: "address \"\(address)\" is not HOST:PORT", reason: "invalidAddress")
        }
        var host = String(address[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host, port)
    }

    /// Calls `method` and decodes its typed result.
    public func call<M: RPCMethod>(_ method: M.Type, _ params: M.Params, timeout: TimeAmount? = nil) async throws(RPCError) -> M.Result {
        let encoded = try JSONWriter.encodeBodyOrThrow(params)
        let result = try await callRaw(method: M.name, params: encoded, timeout: timeout)
        return try RPCCodec.decodeResult(M.Result.self, from: result)
    }

    /// Calls a method by name with raw JSON params; returns the raw JSON of the result.
    public func callRaw(method: String, params: [UInt8]?, timeout: TimeAmount? = nil) async throws(RPCError) -> [UInt8] {
        let id = nextID.wrappingAdd(1, ordering: .relaxed).newValue
        var line: [UInt8] = []
        JSONWriter.request(id: RPCID(id), method: method, params: params ?? Array("{}".utf8), into: &line)
        line.append(UInt8(ascii: "\n"))
        let channel = try await connection()
        let completion = CallCompletion(channel.eventLoop.makePromise(of: [UInt8].self))
        let deadline = NIODeadline.now() + (timeout ?? configuration.callTimeout)
        // A write to a connection that closed meanwhile never reaches the handler: fail the call here
        // (whichever side completes it first wins; the other is ignored).
        channel.writeAndFlush(OutgoingCall(id: id, line: line, deadline: deadline, completion: completion)).whenFailure { [address] error in
            completion.fail(RPCError.unavailable("call to \(address) failed: \(error)", reason: "connectionLost"))
        }
        do {
            return try await completion.promise.futureResult.get()
        } catch let error as RPCError {
            throw error
        } catch {
            throw RPCError.unavailable("call to \(address) failed: \(error)", reason: "connectionLost")
        }
    }

    /// Sends a notification: no reply, no confirmation beyond the write.
    public func notify<M: RPCMethod>(_ method: M.Type, _ params: M.Params) async throws(RPCError) {
        var line: [UInt8] = []
        JSONWriter.request(id: nil, method: M.name, params: try JSONWriter.encodeBodyOrThrow(params), into: &line)
        line.append(UInt8(ascii: "\n"))
        let channel = try await connection()
        do {
            try await channel.writeAndFlush(channel.allocator.buffer(bytes: line))
        } catch {
            throw RPCError.unavailable("write to \(address) failed: \(error)", reason: "connectionLost")
        }
    }

    /// A `health.check` probe of this peer, for the health report of a service that calls it.
    public func healthProbe(name: String) -> HealthProbe {
        HealthProbe(name: name) { [self] in
            let start = NIODeadline.now()
            do throws(RPCError) {
                _ = try await call(RPCPing.self, EmptyParams(), timeout: .seconds(2))
                return DependencyHealth(
                    name: name, address: address, status: .ok,
                    latencyMs: (NIODeadline.now() - start).nanoseconds / 1_000_000)
            } catch {
                return DependencyHealth(name: name, address: address, status: .down, error: error.message)
            }
        }
    }

    /// Closes every connection; outstanding calls fail with `unavailable`.
    public func close() async {
        for slot in slots {
            if let channel = slot.current() { try? await channel.close() }
        }
    }

    private func connection() async throws(RPCError) -> any Channel {
        let index = nextSlot.wrappingAdd(1, ordering: .relaxed).oldValue % slots.count
        let slot = slots[index]
        if let channel = slot.current(), channel.isActive { return channel }
        let future = slot.connecting { self.connect() }
        do {
            return try await future.get()
        } catch let error as RPCError {
            throw error
        } catch {
            throw RPCError.unavailable("cannot reach \(address): \(error)", reason: "connectFailed")
        }
    }

    private func connect() -> EventLoopFuture<any Channel> {
        let maxLine = configuration.maxLineBytes
        let address = self.address
        return ClientBootstrap(group: group)
            .connectTimeout(configuration.connectTimeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                do {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(ByteToMessageHandler(LineFrameDecoder(maxLineBytes: maxLine)))
                    try sync.addHandler(RPCClientHandler(peer: address))
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
            .connect(host: host, port: port)
            .flatMapErrorThrowing { error in
                throw RPCError.unavailable("cannot reach \(address): \(error)", reason: "connectFailed")
            }
    }
}

/// One pooled connection: the live channel, or the connect attempt every caller waits on.
private final class ConnectionSlot: Sendable {
    private enum State {
        case idle
        case connecting(EventLoopFuture<any Channel>)
        case connected(any Channel)
    }
    private let state = NIOLockedValueBox<State>(.idle)

    func current() -> (any Channel)? {
        state.withLockedValue { if case .connected(let c) = $0 { return c } else { return nil } }
    }

    func connecting(_ start: () -> EventLoopFuture<any Channel>) -> EventLoopFuture<any Channel> {
        let (future, started) = state.withLockedValue { state -> (EventLoopFuture<any Channel>, Bool) in
            switch state {
            case .connecting(let f): return (f, false)
            case .connected(let c) where c.isActive: return (c.eventLoop.makeSucceededFuture(c), false)
            default:
                let f = start()
                state = .connecting(f)
                return (f, true)
            }
        }
        if started {
            future.whenComplete { [state] result in
                switch result {
                case .success(let channel):
                    state.withLockedValue { $0 = .connected(channel) }
                    // Outside the lock: a channel that is already closed runs this callback at once, on
                    // this thread, and it takes the lock itself.
                    channel.closeFuture.whenComplete { [state] _ in
                        state.withLockedValue { if case .connected(let c) = $0, c === channel { $0 = .idle } }
                    }
                case .failure:
                    state.withLockedValue { $0 = .idle }
                }
            }
        }
        return future
    }
}

struct OutgoingCall {
    let id: Int64
    let line: [UInt8]
    let deadline: NIODeadline
    let completion: CallCompletion
}

/// A call's promise, completed at most once whoever gets there first (the reply, the timeout, a dropped
/// connection, or a write that failed before the handler saw the call).
final class CallCompletion: Sendable {
    let promise: EventLoopPromise<[UInt8]>
    private let done = NIOLockedValueBox(false)

    init(_ promise: EventLoopPromise<[UInt8]>) { self.promise = promise }

    private func claim() -> Bool {
        done.withLockedValue { d in
            if d { return false }
            d = true
            return true
        }
    }

    func succeed(_ bytes: [UInt8]) { if claim() { promise.succeed(bytes) } }
    func fail(_ error: any Error) { if claim() { promise.fail(error) } }
}

/// Matches replies to calls by id; fails calls on timeout or when the connection drops.
/// Event-loop confined.
final class RPCClientHandler: ChannelDuplexHandler {
    typealias InboundIn = LineFrame
    typealias OutboundIn = OutgoingCall
    typealias OutboundOut = ByteBuffer

    private let peer: String
    private var pending: [Int64: (promise: CallCompletion, timer: Scheduled<Void>)] = [:]

    init(peer: String) {
        self.peer = peer
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let call = unwrapOutboundIn(data)
        let id = call.id
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let timer = context.eventLoop.scheduleTask(deadline: call.deadline) { [peer] in
            guard let entry = bound.value.pending.removeValue(forKey: id) else { return }
            entry.promise.fail(RPCError.unavailable("no reply from \(peer) in time", reason: "timeout"))
        }
        pending[id] = (call.completion, timer)
        context.write(wrapOutboundOut(context.channel.allocator.buffer(bytes: call.line)), promise: promise)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .tooLong:
            failAll(RPCError.unavailable("reply from \(peer) exceeds the line limit", reason: "replyTooLong"))
            context.close(promise: nil)
        case .line(let line):
            guard let responses = line.withUnsafeReadableBytes({ RPCResponse.parse($0) }) else {
                failAll(
                    RPCError(
                        code: .internalError, message: "\(peer) sent a line that is not a JSON-RPC response",
                        reason: "malformedResponse", retryable: true))
                context.close(promise: nil)
                return
            }
            for response in responses {
                guard let id = response.id.integerValue, let entry = pending.removeValue(forKey: id) else {
                    // An id we did not send (or gave up on): a server-side error with id null, or a late reply.
                    if case .failure(let error) = response.outcome, response.id == .null {
                        failAll(error)
                        context.close(promise: nil)
                    }
                    continue
                }
                entry.timer.cancel()
                switch response.outcome {
                case .success(let bytes): entry.promise.succeed(bytes)
                case .failure(let error): entry.promise.fail(error)
                }
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll(RPCError.unavailable("connection to \(peer) closed", reason: "connectionLost"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failAll(RPCError.unavailable("connection to \(peer) failed: \(error)", reason: "connectionLost"))
        context.close(promise: nil)
    }

    private func failAll(_ error: RPCError) {
        let entries = pending
        pending = [:]
        for (_, entry) in entries {
            entry.timer.cancel()
            entry.promise.fail(error)
        }
    }
}
