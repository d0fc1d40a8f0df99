import JSONRPC
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

public struct RPCClientConfiguration: Sendable {
    /// Connections kept to the peer; calls are spread over them round-robin.
    public var connections: Int = 1
    public var connectTimeout: TimeAmount = .seconds(2)
    /// Default time a call waits for its reply before failing with `unavailable` (reason `timeout`).
    public var callTimeout: TimeAmount = .seconds(10)
    /// Longest reply line accepted (content chunks can be large).
    public var maxLineBytes: Int = 32 * 1024 * 1024
    /// TLS to the peer (its certificate checked against the given roots); nil: plain TCP.
    public var tls: RPCClientTLS?
    /// How long an instance that could not be connected to is left out the first time (doubling while it keeps
    /// failing, at most 30 times this).
    public var ejection: TimeAmount = .seconds(1)

    public init(connections: Int = 1, callTimeout: TimeAmount = .seconds(10), tls: RPCClientTLS? = nil) {
        self.connections = connections
        self.callTimeout = callTimeout
        self.tls = tls
    }
}

/// A JSON-RPC client for one service, reached at one address or several (its instances).
///
/// Many calls may be in flight at once, over a small pool of connections per instance; replies are matched to
/// calls by id, never by order. A connection that drops fails its outstanding calls with `unavailable`
/// (retryable) and is re-established by the next call, so a client outlives restarts of its peer. Every failure
/// is an `RPCError`.
///
/// Several instances (`host:port,host:port`): calls are spread over them round-robin; a call with an affinity key
/// goes to that key's instance (`InstanceAffinity`), so calls for one customer meet the same instance's memory. An
/// instance that cannot be connected to is taken out for a while (1 s, doubling up to 30 s while it keeps failing)
/// and the call goes to the next instance (for a keyed call, the key's next choice; keyed calls also pass by, for as
/// long, an instance whose calls went unanswered: a hung instance still accepts connections). A call is only sent
/// once a connection exists, so moving it is safe. A call already sent to an instance that then dies fails with
/// `unavailable` (it may or may not have run: the caller retries with its idempotency key). A host name is resolved
/// again each time a connection to it is opened, and a name with several addresses has its connections spread over
/// them (one instance here: keyed calls to it are spread too).
public final class RPCClient: Sendable {
    /// The first instance's host and port.
    public var host: String { endpoints[0].host }
    public var port: Int { endpoints[0].port }
    public let configuration: RPCClientConfiguration
    private let group: any EventLoopGroup
    private let endpoints: [Endpoint]
    private let seeds: [UInt64]
    private let nextID = Atomic<Int64>(0)
    private let nextEndpoint = Atomic<Int>(0)

    public convenience init(
        host: String,
        port: Int,
        configuration: RPCClientConfiguration = .init(),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) {
        self.init(instances: [(host, port)], configuration: configuration, eventLoopGroup: eventLoopGroup)
    }

    /// A client of several instances of one service (at least one).
    public init(
        instances: [(host: String, port: Int)], configuration: RPCClientConfiguration = .init(),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) {
        precondition(!instances.isEmpty, "an RPCClient needs an address")
        CooperativePoolHeartbeat.start()
        self.configuration = configuration
        self.group = eventLoopGroup
        self.endpoints = instances.map {
            Endpoint(host: $0.host, port: $0.port, connections: max(1, configuration.connections), ejection: configuration.ejection)
        }
        self.seeds = endpoints.map { InstanceAffinity.seed(address: $0.address) }
    }

    /// `host:port` form, as in `IAP_ACCOUNTS_ADDR=127.0.0.1:7101`, or several separated by commas
    /// (`10.0.0.5:7101,10.0.0.6:7101`): the instances of one service.
    public convenience init(address: String, configuration: RPCClientConfiguration = .init()) throws(RPCError) {
        self.init(instances: try Self.parseAddresses(address), configuration: configuration)
    }

    /// Every instance, comma-separated.
    public var address: String { endpoints.map(\.address).joined(separator: ",") }

    /// `host:port[,host:port...]`; each part as `parseAddress`, duplicates refused.
    public static func parseAddresses(_ list: String) throws(RPCError) -> [(host: String, port: Int)] {
        var out: [(host: String, port: Int)] = []
        for part in list.split(separator: ",", omittingEmptySubsequences: false) {
            let parsed = try parseAddress(part.trimmingCharacters(in: .whitespaces))
            guard !out.contains(where: { $0.host == parsed.host && $0.port == parsed.port }) else {
                throw RPCError(code: .invalidParams, message: "address \"\(part)\" is listed twice", reason: "invalidAddress")
            }
            out.append(parsed)
        }
        return out
    }

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

    /// Calls `method` and decodes its typed result. `affinity`: calls with the same key go to the same instance
    /// while it is in service (a customer's session, say); nil: the next instance in turn.
    public func call<M: RPCMethod>(_ method: M.Type, _ params: M.Params, timeout: TimeAmount? = nil, affinity: String? = nil)
        async throws(RPCError) -> M.Result
    {
        let encoded = try JSONWriter.encodeBodyOrThrow(params)
        let result = try await callRaw(method: M.name, params: encoded, timeout: timeout, affinity: affinity)
        return try RPCCodec.decodeResult(M.Result.self, from: result)
    }

    /// Calls a method by name with raw JSON params; returns the raw JSON of the result.
    public func callRaw(method: String, params: [UInt8]?, timeout: TimeAmount? = nil, affinity: String? = nil)
        async throws(RPCError) -> [UInt8]
    {
        let (id, line) = requestLine(method: method, params: params)
        // A connection that closed before the call was written (its instance stopped): the call was never sent,
        // so it goes on another connection, possibly another instance. Once written, it is never sent again.
        var attempts = 0
        while true {
            attempts += 1
            let (endpoint, channel) = try await connection(affinity: affinity)
            do {
                let reply = try await send(id: id, line: line, timeout: timeout, on: channel).get()
                endpoint.answered()
                return reply
            } catch let error as RPCError {
                endpoint.noAnswer(error)
                throw error
            } catch ChannelError.ioOnClosedChannel where attempts <= endpoints.count * configuration.connections {
                continue
            } catch {
                throw connectionLost(error)
            }
        }
    }

    /// `callRaw` for a caller on an event loop, without a Swift task (the edge answers HTTP on its loops): the
    /// call goes on a connection already open to the next instance in turn, one on `eventLoop` when there is
    /// one (no thread hop either way); with none open, or when that connection closed before the call was
    /// written, it takes `callRaw`'s path (which connects, and sends on another connection). Completes on
    /// `eventLoop`, failing only with `RPCError`.
    public func callRaw(
        method: String, params: [UInt8]?, timeout: TimeAmount? = nil, affinity: String? = nil, on eventLoop: any EventLoop
    ) -> EventLoopFuture<[UInt8]> {
        let viaTask: @Sendable () -> EventLoopFuture<[UInt8]> = {
            eventLoop.makeFutureWithTask { try await self.callRaw(method: method, params: params, timeout: timeout, affinity: affinity) }
        }
        guard let (endpoint, channel) = openConnection(preferring: eventLoop, affinity: affinity) else { return viaTask() }
        let (id, line) = requestLine(method: method, params: params)
        return send(id: id, line: line, timeout: timeout, on: channel).hop(to: eventLoop).map { reply in
            endpoint.answered()
            return reply
        }.flatMapError { error in
            switch error {
            case let error as RPCError:
                endpoint.noAnswer(error)
                return eventLoop.makeFailedFuture(error)
            case ChannelError.ioOnClosedChannel: return viaTask()  // never written: safe to send elsewhere
            default: return eventLoop.makeFailedFuture(self.connectionLost(error))
            }
        }
    }

    /// A new call's id and its request line (newline included).
    private func requestLine(method: String, params: [UInt8]?) -> (id: Int64, line: [UInt8]) {
        let id = nextID.wrappingAdd(1, ordering: .relaxed).newValue
        var line: [UInt8] = []
        JSONWriter.request(id: RPCID(id), method: method, params: params ?? Array("{}".utf8), into: &line)
        line.append(UInt8(ascii: "\n"))
        return (id, line)
    }

    /// Writes a call on `channel`; the future is its reply (on the channel's event loop): the service's answer, its
    /// `RPCError`, a timeout or lost connection as `RPCError`, or `ChannelError.ioOnClosedChannel` when the call
    /// was never written (a write to a connection that closed meanwhile never reaches the handler: failed here;
    /// whichever side completes the call first wins).
    private func send(id: Int64, line: [UInt8], timeout: TimeAmount?, on channel: any Channel) -> EventLoopFuture<[UInt8]> {
        let completion = CallCompletion(channel.eventLoop.makePromise(of: [UInt8].self))
        let deadline = NIODeadline.now() + (timeout ?? configuration.callTimeout)
        channel.writeAndFlush(OutgoingCall(id: id, line: line, deadline: deadline, completion: completion)).whenFailure { error in
            completion.fail(error)
        }
        return completion.promise.futureResult
    }

    private func connectionLost(_ error: any Error) -> RPCError {
        RPCError.unavailable("call to \(address) failed: \(error)", reason: .connectionLost)
    }

    /// An open connection to the first instance in service for this call, preferring one on `eventLoop`; nil when
    /// that instance's next connection in turn is not open (the async path opens it).
    private func openConnection(preferring eventLoop: any EventLoop, affinity: String?) -> (Endpoint, any Channel)? {
        let now = NIODeadline.now()
        for endpoint in inTurn(affinity: affinity) where !endpoint.isEjected(at: now) {
            return endpoint.openConnection(preferring: eventLoop).map { (endpoint, $0) }
        }
        return nil
    }

    /// The instances in the order a call tries them: the key's ranking (instances whose calls lately went unanswered
    /// last: a hung instance still accepts connections), or round-robin from the next in turn.
    private func inTurn(affinity: String?) -> [Endpoint] {
        guard endpoints.count > 1 else { return endpoints }
        if let affinity {
            let ranked = InstanceAffinity.ranked(key: affinity, seeds: seeds).map { endpoints[$0] }
            let now = NIODeadline.now()
            return ranked.filter { !$0.isUnanswering(at: now) } + ranked.filter { $0.isUnanswering(at: now) }
        }
        let first = nextEndpoint.wrappingAdd(1, ordering: .relaxed).oldValue
        return endpoints.indices.map { endpoints[(first &+ $0) % endpoints.count] }
    }

    /// Sends a notification: no reply, no confirmation beyond the write.
    public func notify<M: RPCMethod>(_ method: M.Type, _ params: M.Params) async throws(RPCError) {
        var line: [UInt8] = []
        JSONWriter.request(id: nil, method: M.name, params: try JSONWriter.encodeBodyOrThrow(params), into: &line)
        line.append(UInt8(ascii: "\n"))
        let (_, channel) = try await connection(affinity: nil)
        do {
            try await channel.writeAndFlush(channel.allocator.buffer(bytes: line))
        } catch {
            throw RPCError.unavailable("write to \(address) failed: \(error)", reason: .connectionLost)
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
        for endpoint in endpoints {
            for slot in endpoint.slots {
                if let channel = slot.current() { try? await channel.close() }
            }
        }
    }

    /// Instances taken out because they could not be connected to (for logs and tests).
    public var ejectedInstances: [String] {
        let now = NIODeadline.now()
        return endpoints.filter { $0.isEjected(at: now) }.map(\.address)
    }

    /// A connection to the first instance in service for this call (`inTurn`); instances taken out are tried last,
    /// so a call fails only when no instance can be reached.
    private func connection(affinity: String?) async throws(RPCError) -> (Endpoint, any Channel) {
        let now = NIODeadline.now()
        let inTurn = inTurn(affinity: affinity)
        let order = inTurn.filter { !$0.isEjected(at: now) } + inTurn.filter { $0.isEjected(at: now) }
        var failure = RPCError.unavailable("cannot reach \(address)", reason: .connectFailed)
        for endpoint in order {
            do {
                let channel = try await endpoint.connection(opening: { self.connect(endpoint) })
                endpoint.succeeded()
                return (endpoint, channel)
            } catch {
                endpoint.failed()
                failure = error
            }
        }
        throw failure
    }

    private func connect(_ endpoint: Endpoint) -> EventLoopFuture<any Channel> {
        let maxLine = configuration.maxLineBytes
        let address = endpoint.address
        let tls = configuration.tls
        let host = endpoint.host
        let bootstrap = ClientBootstrap(group: group)
            .connectTimeout(configuration.connectTimeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                do {
                    let sync = channel.pipeline.syncOperations
                    if let tls { try sync.addHandler(try tls.handler(host: host)) }
                    try sync.addHandler(ByteToMessageHandler(LineFrameDecoder(maxLineBytes: maxLine)))
                    try sync.addHandler(RPCClientHandler(peer: address))
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
        // A host name is looked up (getaddrinfo, which may wait on DNS) on NIO's blocking pool, never on the caller's
        // thread (a cooperative one) or an event loop; an IP address needs no lookup.
        let eventLoop = group.next()
        let target: EventLoopFuture<SocketAddress?> =
            (try? SocketAddress(ipAddress: endpoint.host, port: endpoint.port)) != nil
            ? eventLoop.makeSucceededFuture(nil)
            : NIOThreadPool.singleton.runIfActive(eventLoop: eventLoop) { endpoint.nextResolvedAddress() }
        let connecting = target.flatMap { resolved -> EventLoopFuture<any Channel> in
            if let resolved { return bootstrap.connect(to: resolved) }
            return bootstrap.connect(host: endpoint.host, port: endpoint.port)
        }
        return connecting.flatMapErrorThrowing { error in
            throw RPCError.unavailable("cannot reach \(address): \(error)", reason: .connectFailed)
        }
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
    private var flushScheduled = false

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

    /// Calls written in the same turn of the event loop go out in one write: the flush waits for the end of the
    /// turn (the edge forwards many requests per turn from its loops; each had made a write of its own).
    func flush(context: ChannelHandlerContext) {
        guard !flushScheduled else { return }
        flushScheduled = true
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let (handler, context) = bound.value
            handler.flushScheduled = false
            context.flush()
        }
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
        failAll(RPCError.unavailable("connection to \(peer) closed", reason: .connectionLost))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failAll(RPCError.unavailable("connection to \(peer) failed: \(error)", reason: .connectionLost))
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
