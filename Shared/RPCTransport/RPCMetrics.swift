import CoreMetrics
import JSONRPC
import Metrics
import NIOConcurrencyHelpers
import NIOCore

/// Server metrics named after OpenTelemetry's RPC semantic conventions:
/// `rpc.server.duration` (a timer per method) and `rpc.server.errors` (per method and
/// `rpc.jsonrpc.error_code`), with `rpc.system = jsonrpc` and `rpc.service`.
/// Handles are created once per method and reused; without a metrics backend they cost nothing.
final class RPCServerMetrics: Sendable {
    private let service: String
    private let timers: [String: Timer]
    private let errors: NIOLockedValueBox<[String: Counter]> = .init([:])
    private let unknownMethods: Counter
    private let factory: any MetricsFactory

    init(service: String, methods: [String], factory: (any MetricsFactory)?) {
        self.service = service
        let factory = factory ?? MetricsSystem.factory
        self.factory = factory
        var timers: [String: Timer] = [:]
        for m in methods {
            timers[m] = Timer(
                label: "rpc.server.duration",
                dimensions: [
                    ("rpc.system", "jsonrpc"), ("rpc.service", service), ("rpc.method", m),
                ], factory: factory)
        }
        self.timers = timers
        self.unknownMethods = Counter(
            label: "rpc.server.errors",
            dimensions: [
                ("rpc.system", "jsonrpc"), ("rpc.service", service), ("rpc.method", "_OTHER"),
                ("rpc.jsonrpc.error_code", "\(RPCErrorCode.methodNotFound.rawValue)"),
            ], factory: factory)
    }

    func record(method: String, start: NIODeadline, outcome: Result<[UInt8], RPCError>) {
        timers[method]?.recordNanoseconds((NIODeadline.now() - start).nanoseconds)
        if case .failure(let error) = outcome { errorCounter(method: method, code: error.code).increment() }
    }

    func recordUnknownMethod() { unknownMethods.increment() }

    private func errorCounter(method: String, code: Int) -> Counter {
        let key = "\(method)|\(code)"
        return errors.withLockedValue { cache in
            if let c = cache[key] { return c }
            let c = Counter(
                label: "rpc.server.errors",
                dimensions: [
                    ("rpc.system", "jsonrpc"), ("rpc.service", service), ("rpc.method", method),
                    ("rpc.jsonrpc.error_code", "\(code)"),
                ], factory: factory)
            cache[key] = c
            return c
        }
    }
}
