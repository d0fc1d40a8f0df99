import CoreMetrics
import HummingbirdCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import ServiceSupport

/// Open connections per client address, capped (`EdgeConfiguration.maxConnectionsPerAddress`): the per-address
/// request buckets bound what an address may ask, not how many connections it may hold, and each connection holds
/// a file descriptor and its buffers (TLS, HTTP/2, a request body being read). Counted as a connection is accepted,
/// before TLS; one over the cap is closed at once. A trusted proxy's connections are not counted: every app behind
/// it shares its address.
final class ConnectionsPerAddress: Sendable {
    let cap: Int
    let exempt: Set<String>
    private let state = NIOLockedValueBox(State())
    /// `edge.connections.refused` (Prometheus: `edge_connections_refused`): connections closed for the cap.
    private let refusedMetric: Counter?

    private struct State {
        var open: [String: Int] = [:]
        var refused = 0
    }

    init(cap: Int, exempt: Set<String>, metrics: (any MetricsFactory)? = nil) {
        self.cap = cap
        self.exempt = exempt
        self.refusedMetric = metrics.map { Counter(label: "edge.connections.refused", dimensions: [], factory: $0) }
    }

    /// Counts a new connection from `address`; false (nothing counted) when the address is at the cap. An IPv6 address
    /// counts by its /64 (`ClientAddress.limitKey`), a trusted proxy's by its own address.
    func admit(_ address: String) -> Bool {
        if exempt.contains(address) { return true }
        let address = ClientAddress.limitKey(address)
        let admitted = state.withLockedValue { s in
            let open = s.open[address, default: 0]
            guard open < cap else {
                s.refused += 1
                return false
            }
            s.open[address] = open + 1
            return true
        }
        if !admitted { refusedMetric?.increment() }
        return admitted
    }

    /// A counted connection from `address` closed.
    func release(_ address: String) {
        if exempt.contains(address) { return }
        let address = ClientAddress.limitKey(address)
        state.withLockedValue { s in
            let left = s.open[address, default: 1] - 1
            s.open[address] = left > 0 ? left : nil
        }
    }

    /// Connections open from `address` now (tests).
    func open(_ address: String) -> Int { state.withLockedValue { $0.open[ClientAddress.limitKey(address), default: 0] } }

    /// Connections refused since start (tests).
    var refused: Int { state.withLockedValue { $0.refused } }

    var debugDescription: String { state.withLockedValue { "\($0.open) refused \($0.refused)" } }
}

/// A server child channel admitted by `ConnectionsPerAddress` first: over the cap, closed before anything else is
/// set up on it (no TLS handshake, no buffers).
struct ConnectionCapChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value
    let base: Base
    let connections: ConnectionsPerAddress

    struct OverTheCap: Error {}

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        guard let address = channel.remoteAddress?.ipAddress else { return base.setup(channel: channel, logger: logger) }
        guard connections.admit(address) else {
            logger.debug("connection refused: too many open from this address", metadata: ["address": "\(address)"])
            channel.close(promise: nil)
            return channel.eventLoop.makeFailedFuture(OverTheCap())
        }
        let connections = self.connections
        channel.closeFuture.whenComplete { _ in connections.release(address) }
        return base.setup(channel: channel, logger: logger)
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}
