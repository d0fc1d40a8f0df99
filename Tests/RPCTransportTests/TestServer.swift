import Foundation
import JSONRPC
import Logging
import NIOCore
import NIOPosix
import RPCTestSupport
import RPCTransport

/// Methods of the JSON-RPC 2.0 specification's examples, plus a few that exercise the transport
/// (gates for ordering, a method that never ends for timeouts).
enum Subtract: RPCMethod {
    /// Positional `[minuend, subtrahend]` or named `{minuend, subtrahend}`, as in the spec.
    struct Params: Codable, Sendable {
        var minuend: Int64
        var subtrahend: Int64
        init(from decoder: any Decoder) throws {
            if var list = try? decoder.unkeyedContainer() {
                minuend = try list.decode(Int64.self)
                subtrahend = try list.decode(Int64.self)
            } else {
                let c = try decoder.container(keyedBy: CodingKeys.self)
                minuend = try c.decode(Int64.self, forKey: .minuend)
                subtrahend = try c.decode(Int64.self, forKey: .subtrahend)
            }
        }
    }
    typealias Result = Int64
    static let name = "subtract"
    static let summary = "minuend - subtrahend"
}

enum Sum: RPCMethod {
    typealias Params = [Int64]
    typealias Result = Int64
    static let name = "sum"
    static let summary = "Sum of the positional params."
}

enum Update: RPCMethod {
    typealias Params = JSONValue
    typealias Result = EmptyResult
    static let name = "update"
    static let summary = "Accepts anything (spec notification example)."
}

enum NotifyHello: RPCMethod {
    typealias Params = JSONValue
    typealias Result = EmptyResult
    static let name = "notify_hello"
    static let summary = "Accepts anything (spec notification example)."
}

enum NotifySum: RPCMethod {
    typealias Params = JSONValue
    typealias Result = EmptyResult
    static let name = "notify_sum"
    static let summary = "Accepts anything (spec notification example)."
}

enum GetData: RPCMethod {
    typealias Params = EmptyParams
    typealias Result = JSONValue
    static let name = "get_data"
    static let summary = "[\"hello\", 5]"
}

enum Echo: RPCMethod {
    typealias Params = JSONValue
    typealias Result = JSONValue
    static let name = "echo"
    static let summary = "Answers its params."
}

enum EchoAsync: RPCMethod {
    typealias Params = JSONValue
    typealias Result = JSONValue
    static let name = "echo.async"
    static let summary = "Answers its params, from a task."
}

enum EchoFast: RPCMethod {
    typealias Params = JSONValue
    typealias Result = JSONValue
    static let name = "echo.fast"
    static let summary = "Answers inline when params.fast is true, from a task otherwise; fails inline when params.fail is."
}

enum EchoFastOrBlocking: RPCMethod {
    typealias Params = JSONValue
    typealias Result = JSONValue
    static let name = "echo.fastOrBlocking"
    static let summary = "Answers inline when params.fast is true, from the blocking pool otherwise; fails inline when params.fail is."
}

enum TypedAdd: RPCMethod {
    struct Params: Codable, Sendable {
        var a: Int64
        var b: Int64
        var label: String?
    }
    struct Result: Codable, Sendable {
        var total: Int64
        var label: String?
    }
    static let name = "typed.add"
    static let summary = "a + b, to exercise typed params errors."
}

enum GateWait: RPCMethod {
    struct Params: Codable, Sendable { var key: String }
    typealias Result = String
    static let name = "gate.wait"
    static let summary = "Answers the key once gate.open is called with it."
}

enum GateOpen: RPCMethod {
    struct Params: Codable, Sendable { var key: String }
    typealias Result = EmptyResult
    static let name = "gate.open"
    static let summary = "Releases gate.wait calls for the key (and future ones)."
}

enum BlockingRelease: RPCMethod {
    struct Params: Codable, Sendable { var key: String }
    typealias Result = EmptyResult
    static let name = "blocking.release"
    static let summary = "Releases blocking.wait calls for the key, from the event loop (so a busy task pool cannot delay it)."
}

enum EchoBlocking: RPCMethod {
    typealias Params = JSONValue
    typealias Result = JSONValue
    static let name = "echo.blocking"
    static let summary = "Answers its params, from the blocking pool."
}

enum BlockingWait: RPCMethod {
    struct Params: Codable, Sendable { var key: String }
    typealias Result = String
    static let name = "blocking.wait"
    static let summary = "Blocks a pool thread until gate.open is called with the key."
}

enum NeverEnds: RPCMethod {
    typealias Params = EmptyParams
    typealias Result = EmptyResult
    static let name = "never.ends"
    static let summary = "Waits until cancelled."
}

enum FailsInternally: RPCMethod {
    typealias Params = EmptyParams
    typealias Result = EmptyResult
    static let name = "fails.internally"
    static let summary = "Throws a non-RPC error (its details must not leak)."
}

/// Keys released by gate.open; waiters resume when theirs is.
actor Gates {
    private var open: Set<String> = []
    private var waiters: [String: [CheckedContinuation<Void, Never>]] = [:]

    func wait(_ key: String) async {
        if open.contains(key) { return }
        await withCheckedContinuation { waiters[key, default: []].append($0) }
    }

    func release(_ key: String) {
        open.insert(key)
        for w in waiters.removeValue(forKey: key) ?? [] { w.resume() }
    }
}

/// Keys released by gate.open, for handlers that block a thread instead of awaiting.
final class BlockingGates: Sendable {
    private let condition = NSCondition()
    private nonisolated(unsafe) var open: Set<String> = []  // guarded by `condition`

    func wait(_ key: String) {
        condition.lock()
        while !open.contains(key) { condition.wait() }
        condition.unlock()
    }

    func release(_ key: String) {
        condition.lock()
        open.insert(key)
        condition.broadcast()
        condition.unlock()
    }
}

struct SecretFailure: Error { let detail = "database password is hunter2" }

enum TestServer {
    static func router(gates: Gates = Gates(), blockingGates: BlockingGates = BlockingGates()) -> RPCRouter {
        var r = RPCRouter()
        r.registerBlocking(EchoBlocking.self) { p, _ in p }
        r.registerBlocking(BlockingWait.self) { p, _ in
            blockingGates.wait(p.key)
            return p.key
        }
        r.registerImmediate(Subtract.self) { p, _ in p.minuend - p.subtrahend }
        r.registerImmediate(Sum.self) { p, _ in p.reduce(0, +) }
        r.registerImmediate(Update.self) { _, _ in EmptyResult() }
        r.registerImmediate(NotifyHello.self) { _, _ in EmptyResult() }
        r.registerImmediate(NotifySum.self) { _, _ in EmptyResult() }
        r.registerImmediate(GetData.self) { _, _ in ["hello", 5] }
        r.registerImmediate(Echo.self) { p, _ in p }
        r.register(EchoAsync.self) { p, _ in p }
        r.registerImmediateOrAsync(EchoFast.self) { p, _ in
            if p["fail"] == .bool(true) { throw RPCError.invalidParams("asked to fail", field: "fail", reason: "failed") }
            guard p["fast"] == .bool(true) else { return nil }
            return ["path": "inline", "onEventLoop": .bool(MultiThreadedEventLoopGroup.currentEventLoop != nil)]
        } handler: { _, _ in
            ["path": "task", "onEventLoop": .bool(MultiThreadedEventLoopGroup.currentEventLoop != nil)]
        }
        r.registerImmediateOrBlocking(EchoFastOrBlocking.self) { p, _ in
            if p["fail"] == .bool(true) { throw RPCError.invalidParams("asked to fail", field: "fail", reason: "failed") }
            guard p["fast"] == .bool(true) else { return nil }
            return ["path": "inline", "onEventLoop": .bool(MultiThreadedEventLoopGroup.currentEventLoop != nil)]
        } handler: { _, _ in
            ["path": "pool", "onEventLoop": .bool(MultiThreadedEventLoopGroup.currentEventLoop != nil)]
        }
        r.registerImmediate(TypedAdd.self) { p, _ in .init(total: p.a + p.b, label: p.label) }
        r.register(GateWait.self) { p, _ in
            await gates.wait(p.key)
            return p.key
        }
        r.registerImmediate(BlockingRelease.self) { p, _ in
            blockingGates.release(p.key)
            return EmptyResult()
        }
        r.register(GateOpen.self) { p, _ in
            blockingGates.release(p.key)
            await gates.release(p.key)
            return EmptyResult()
        }
        r.register(NeverEnds.self) { _, _ in
            try await Task.sleep(nanoseconds: 3_600_000_000_000)  // ends only by cancellation
            return EmptyResult()
        }
        r.register(FailsInternally.self) { _, _ in throw SecretFailure() }
        return r
    }

    static var logger: Logger {
        var l = Logger(label: "test")
        l.logLevel = .critical
        return l
    }

    /// A started server on a free port, configured by a script's `#!` settings.
    static func start(
        settings: [String: String] = [:], router: RPCRouter? = nil,
        configure: (inout RPCServerConfiguration) -> Void = { _ in }
    ) async throws -> RPCServer {
        var config = RPCServerConfiguration(serviceName: "test")
        for (k, v) in settings {
            guard let n = Int(v) else { continue }
            switch k {
            case "maxLineBytes": config.maxLineBytes = n
            case "maxBatchSize": config.maxBatchSize = n
            case "maxInFlight": config.maxInFlightPerConnection = n
            case "maxNestingDepth": config.maxNestingDepth = n
            case "requestTimeoutMs": config.requestTimeout = .milliseconds(Int64(n))
            case "idleTimeoutMs": config.idleTimeout = .milliseconds(Int64(n))
            case "maxConnections": config.maxConnections = n
            case "maxConnectionsPerAddress": config.maxConnectionsPerAddress = n
            case "partialLineTimeoutMs": config.partialLineTimeout = .milliseconds(Int64(n))
            default: continue
            }
        }
        configure(&config)
        let server = RPCServer(configuration: config, router: router ?? self.router(), logger: logger)
        try await server.start()
        return server
    }
}
