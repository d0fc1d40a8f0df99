import CoreMetrics
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus
import ServiceLifecycle

/// The process's metrics in Prometheus's text format. Counters and timers are named after OpenTelemetry's
/// semantic conventions (`rpc.server.duration`, `http.server.request.duration`, ...); Prometheus names
/// replace the dots with underscores.
public enum PrometheusMetrics {
    /// Duration buckets from 0.5 ms: the suite's calls mostly finish in a few milliseconds.
    public static func factory(registry: PrometheusCollectorRegistry) -> PrometheusMetricsFactory {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = [
            .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
            .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500),
            .seconds(5), .seconds(10),
        ]
        return factory
    }

    private static let bootstrapped = NIOLockedValueBox<PrometheusCollectorRegistry?>(nil)

    /// Makes Prometheus the process-wide metrics backend (`MetricsSystem`), once; later calls answer the
    /// same registry. Executables only: tests give each server its own factory instead.
    public static func bootstrapProcess() -> PrometheusCollectorRegistry {
        bootstrapped.withLockedValue { registry in
            if let registry { return registry }
            let made = PrometheusCollectorRegistry()
            MetricsSystem.bootstrap(factory(registry: made))
            registry = made
            return made
        }
    }
}

/// `GET /metrics` on its own small HTTP/1.1 listener (`--metrics-port`; loopback unless `--metrics-host`
/// says otherwise), for the services whose main port speaks line-delimited JSON-RPC. Anything else is 404.
public final class MetricsServer: Service, Sendable {
    private let host: String
    private let port: Int
    private let registry: PrometheusCollectorRegistry
    private let logger: Logger
    private let bound = NIOLockedValueBox<(any Channel)?>(nil)

    public init(host: String, port: Int, registry: PrometheusCollectorRegistry, logger: Logger) {
        self.host = host
        self.port = port
        self.registry = registry
        self.logger = logger
    }

    /// The port it listens on once `start` returned (useful with port 0).
    public var localPort: Int? { bound.withLockedValue { $0?.localAddress?.port } }

    public func start() async throws {
        let registry = self.registry
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(MetricsHTTPHandler(registry: registry))
                }
            }
            .bind(host: host, port: port).get()
        bound.withLockedValue { $0 = channel }
        logger.info("metrics at http://\(host):\(channel.localAddress?.port ?? port)/metrics")
    }

    public func stop() async {
        let channel = bound.withLockedValue { $0 }
        try? await channel?.close()
    }

    public func run() async throws {
        try await start()
        try? await gracefulShutdown()
        await stop()
    }
}

/// Answers one HTTP/1.1 request at a time: `GET /metrics` with the registry's text, else 404 or 405.
private final class MetricsHTTPHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let registry: PrometheusCollectorRegistry
    private var head: HTTPRequestHead?

    init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let request): head = request
        case .body: break
        case .end:
            guard let request = head else { return }
            head = nil
            let status: HTTPResponseStatus
            var body: [UInt8] = []
            if request.method != .GET && request.method != .HEAD {
                status = .methodNotAllowed
            } else if request.uri.split(separator: "?").first == "/metrics" {
                status = .ok
                registry.emit(into: &body)
            } else {
                status = .notFound
            }
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: status == .ok ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain")
            headers.add(name: "Content-Length", value: String(request.method == .HEAD ? 0 : body.count))
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: request.version, status: status, headers: headers))), promise: nil)
            if request.method != .HEAD, !body.isEmpty {
                context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
            }
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}
