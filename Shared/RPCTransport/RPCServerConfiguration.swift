import CoreMetrics
import NIOCore

/// How a server listens and what it will put up with. The defaults suit a service on a laptop or
/// a small VM; every limit exists so one misbehaving client cannot starve the others.
public struct RPCServerConfiguration: Sendable {
    /// Interface to bind. Loopback by default: exposing a service is a deliberate choice.
    public var host: String = "127.0.0.1"
    /// Port to bind; 0 picks a free one (see `RPCServer.localPort`).
    public var port: Int = 0
    /// Service name in `health.check`, `rpc.discover` and metrics (`accounts`, `catalog`, ...).
    public var serviceName: String
    public var serviceVersion: String = "0.1.0"
    /// Longest accepted line. A longer one gets one error reply with `id: null`, then the connection closes.
    public var maxLineBytes: Int = 4 * 1024 * 1024
    /// Deepest JSON nesting accepted in a message.
    public var maxNestingDepth: Int = 64
    /// Most requests in one batch; a larger batch is refused whole.
    public var maxBatchSize: Int = 256
    /// Requests (or batches) worked on at once per connection; reading pauses beyond it.
    public var maxInFlightPerConnection: Int = 64
    /// Open connections at once; more are answered with a `serverBusy` error and closed.
    public var maxConnections: Int = 4096
    /// Open connections at once from one client address (so one host cannot take them all); more are
    /// answered with a `serverBusy` error and closed. Service-to-service clients hold a few each.
    public var maxConnectionsPerAddress: Int = 512
    /// A line must be finished within this long of its first byte, or the connection is closed (a
    /// client trickling bytes resets the idle timer, not this one). 4 MiB at 1 Mbit/s takes 32 s.
    public var partialLineTimeout: TimeAmount = .seconds(60)
    /// A connection with nothing in flight that sends nothing for this long is closed.
    public var idleTimeout: TimeAmount = .seconds(300)
    /// A request still running after this long is answered with `requestTimeout` and cancelled.
    public var requestTimeout: TimeAmount = .seconds(30)
    /// How long a graceful shutdown waits for in-flight requests before closing connections anyway.
    public var drainTimeout: TimeAmount = .seconds(10)
    /// Threads of the pool that runs `registerBlocking` handlers. Half the cores (at least one): on
    /// the 2-core reference VM one thread served `accounts.authenticate` at 24k/s against 19k/s with
    /// two and 19k/s with four (fewer sleeps and wake-ups). Raise it for handlers that wait on fsync.
    public var blockingThreads: Int = max(1, System.coreCount / 2)
    /// Where metrics go; nil uses the process-wide `MetricsSystem` (what a deployment bootstraps).
    public var metricsFactory: (any MetricsFactory)?
    /// TLS on the listener (and mutual TLS when it has a client CA); nil: plain TCP.
    public var tls: RPCServerTLS?
    /// Probes of the services this one calls, reported by `health.check`.
    public var healthProbes: [HealthProbe] = []

    public init(serviceName: String, host: String = "127.0.0.1", port: Int = 0) {
        self.serviceName = serviceName
        self.host = host
        self.port = port
    }
}
