import JSONRPC
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceLifecycle

/// Everything a connection handler needs, shared read-only by all connections of one server.
final class ServerShared: Sendable {
    let configuration: RPCServerConfiguration
    let router: RPCRouter
    let logger: Logger
    let metrics: RPCServerMetrics
    let limits: RPCMessageLimits
    /// Threads for `registerBlocking` handlers; started with the server, stopped after it drains.
    let blockingPool: NIOThreadPool

    init(configuration: RPCServerConfiguration, router: RPCRouter, logger: Logger) {
        self.configuration = configuration
        self.router = router
        self.logger = logger
        self.metrics = RPCServerMetrics(
            service: configuration.serviceName, methods: router.methodNames,
            factory: configuration.metricsFactory)
        self.limits = RPCMessageLimits(
            maxNestingDepth: configuration.maxNestingDepth,
            maxBatchSize: configuration.maxBatchSize)
        self.blockingPool = NIOThreadPool(numberOfThreads: max(1, configuration.blockingThreads))
    }
}

/// A line-delimited JSON-RPC 2.0 server over TCP, run as a ServiceLifecycle service.
///
/// `run()` binds, serves until graceful shutdown (or cancellation), then stops accepting, lets every
/// connection finish its in-flight requests (up to `drainTimeout`), and closes them.
/// Every server answers `rpc.ping`, `rpc.discover` and `health.check` besides its own methods.
public final class RPCServer: Service, Sendable {
    private enum State {
        case idle
        case listening(any Channel)
        case stopped
    }

    private let shared: ServerShared
    private let group: any EventLoopGroup
    private let state = NIOLockedValueBox<State>(.idle)
    private let connections = NIOLockedValueBox<(nextID: Int, open: [Int: any Channel], perAddress: [String: Int])>((0, [:], [:]))
    private let startedAt = NIODeadline.now()

    public init(
        configuration: RPCServerConfiguration,
        router: RPCRouter,
        logger: Logger,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) {
        var router = router
        Self.registerBuiltins(into: &router, configuration: configuration, startedAt: startedAt)
        var logger = logger
        logger[metadataKey: "service"] = "\(configuration.serviceName)"
        self.shared = ServerShared(configuration: configuration, router: router, logger: logger)
        self.group = eventLoopGroup
    }

    /// The bound port once listening (useful with port 0).
    public var localPort: Int? {
        state.withLockedValue { state in
            if case .listening(let channel) = state { return channel.localAddress?.port }
            return nil
        }
    }

    /// The methods this server answers, built-ins included.
    public var methodNames: [String] { shared.router.methodNames }

    public func run() async throws {
        let listener = try await bind()
        await withGracefulShutdownHandler {
            await withTaskCancellationHandler {
                try? await listener.closeFuture.get()
            } onCancel: {
                listener.close(promise: nil)
            }
        } onGracefulShutdown: {
            listener.close(promise: nil)
        }
        await drainConnections()
    }

    /// Binds and starts accepting; returns the bound port. Pair with `shutdown()`.
    /// (`run()` does both, for use in a ServiceGroup.)
    @discardableResult
    public func start() async throws -> Int {
        CooperativePoolHeartbeat.start()
        let listener = try await bind()
        return listener.localAddress?.port ?? shared.configuration.port
    }

    /// Stops accepting, drains open connections, and returns when they are closed.
    public func shutdown() async {
        let listener: (any Channel)? = state.withLockedValue { state in
            if case .listening(let channel) = state { return channel }
            return nil
        }
        try? await listener?.close()
        await drainConnections()
    }

    private func bind() async throws -> any Channel {
        shared.blockingPool.start()
        let config = shared.configuration
        let shared = self.shared
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 512)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelOption(.autoRead, value: true)
            .childChannelOption(.maxMessagesPerRead, value: 4)
            .childChannelInitializer { [self] channel in
                let address = channel.remoteAddress?.ipAddress
                let connectionID: Int
                switch self.admit(channel, address: address) {
                case .admitted(let id): connectionID = id
                case .refused(let error): return self.refuse(channel, error)
                }
                channel.closeFuture.whenComplete { _ in self.forget(connectionID, address: address) }
                do {
                    let sync = channel.pipeline.syncOperations
                    if let tls = config.tls { try sync.addHandler(tls.handler()) }
                    try sync.addHandler(IdleStateHandler(readTimeout: config.idleTimeout))
                    try sync.addHandler(PartialLineDeadlineHandler(deadline: config.partialLineTimeout, logger: shared.logger))
                    try sync.addHandler(ByteToMessageHandler(LineFrameDecoder(maxLineBytes: config.maxLineBytes)))
                    try sync.addHandler(
                        RPCConnectionHandler(
                            shared: shared, connectionID: connectionID, remoteAddress: channel.remoteAddress?.ipAddress))
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
        let channel = try await bootstrap.bind(host: config.host, port: config.port).get()
        state.withLockedValue { $0 = .listening(channel) }
        shared.logger.info(
            "listening",
            metadata: [
                "address": "\(config.host):\(channel.localAddress?.port ?? config.port)",
                "tls": "\(config.tls == nil ? "off" : config.tls!.requiresClientCertificate ? "mutual" : "on")",
                "methods": "\(shared.router.methodNames.count)",
            ])
        return channel
    }

    private enum Admission {
        case admitted(Int)
        case refused(RPCError)
    }

    private func admit(_ channel: any Channel, address: String?) -> Admission {
        let config = shared.configuration
        return connections.withLockedValue { c in
            guard c.open.count < config.maxConnections else {
                return .refused(
                    RPCError(
                        code: .serverBusy, message: "server is at its limit of \(config.maxConnections) connections",
                        reason: "tooManyConnections", retryable: true))
            }
            if let address {
                guard c.perAddress[address, default: 0] < config.maxConnectionsPerAddress else {
                    return .refused(
                        RPCError(
                            code: .serverBusy,
                            message: "this address has \(config.maxConnectionsPerAddress) connections open, the most allowed",
                            reason: "tooManyConnectionsFromAddress", retryable: true))
                }
                c.perAddress[address, default: 0] += 1
            }
            c.nextID += 1
            c.open[c.nextID] = channel
            return .admitted(c.nextID)
        }
    }

    private func forget(_ id: Int, address: String?) {
        connections.withLockedValue { c in
            c.open.removeValue(forKey: id)
            if let address, let count = c.perAddress[address] {
                c.perAddress[address] = count > 1 ? count - 1 : nil
            }
        }
    }

    private func refuse(_ channel: any Channel, _ error: RPCError) -> EventLoopFuture<Void> {
        shared.logger.warning(
            "connection refused", metadata: ["reason": "\(error.data.reason)", "peer": "\(channel.remoteAddress?.ipAddress ?? "?")"])
        var bytes: [UInt8] = []
        JSONWriter.failure(id: .null, error: error, into: &bytes)
        bytes.append(UInt8(ascii: "\n"))
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(RefusalHandler(reply: bytes))
        }
    }

    private func drainConnections() async {
        let open = connections.withLockedValue { Array($0.open.values) }
        guard !open.isEmpty else {
            try? await shared.blockingPool.shutdownGracefully()
            return
        }
        shared.logger.info("draining connections", metadata: ["count": "\(open.count)"])
        for channel in open {
            channel.pipeline.fireUserInboundEventTriggered(DrainConnectionEvent())
        }
        let deadline = shared.configuration.drainTimeout
        let forced = group.next().scheduleTask(in: deadline) {
            for channel in open where channel.isActive { channel.close(promise: nil) }
        }
        for channel in open {
            try? await channel.closeFuture.get()
        }
        forced.cancel()
        state.withLockedValue { $0 = .stopped }
        try? await shared.blockingPool.shutdownGracefully()
    }

    private static func registerBuiltins(into router: inout RPCRouter, configuration: RPCServerConfiguration, startedAt: NIODeadline) {
        router.registerImmediate(RPCPing.self) { _, _ in "pong" }
        router.register(HealthCheck.self) { _, _ in
            let probes = configuration.healthProbes
            let results = await withTaskGroup(of: (Int, DependencyHealth).self) { group in
                for (i, probe) in probes.enumerated() {
                    group.addTask { (i, await probe.check()) }
                }
                var out: [(Int, DependencyHealth)] = []
                for await r in group { out.append(r) }
                return out.sorted { $0.0 < $1.0 }.map(\.1)
            }
            return HealthReport(
                status: results.allSatisfy { $0.status == .ok } ? .ok : .degraded,
                service: configuration.serviceName,
                version: configuration.serviceVersion,
                uptimeMs: (NIODeadline.now() - startedAt).nanoseconds / 1_000_000,
                dependencies: results)
        }
        // The document is built once, from the descriptors of every method including itself.
        router.registerImmediateEncoded(RPCDiscover.self) { _, _ in [] }
        let document = OpenRPCDocument.make(
            title: "\(configuration.serviceName) service",
            version: configuration.serviceVersion,
            methods: router.descriptions)
        let encoded = JSONWriter.encodeBody(document) ?? Array("{}".utf8)
        router.registerImmediateEncoded(RPCDiscover.self) { _, _ in encoded }
    }
}

/// Tells a connection over the limit why, once it is active, then closes it.
private final class RefusalHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    private let reply: [UInt8]

    init(reply: [UInt8]) {
        self.reply = reply
    }

    func channelActive(context: ChannelHandlerContext) {
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(bytes: reply))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
}
