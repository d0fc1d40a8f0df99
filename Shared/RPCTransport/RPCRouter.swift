import JSONRPC
import Logging
import Metrics
import NIOCore

/// The methods a server offers, each registered with its typed descriptor so params decoding,
/// result encoding and the `rpc.discover` schema all come from the same types.
public struct RPCRouter: Sendable {
    typealias SyncBody = @Sendable ([UInt8]?, RequestContext) throws(RPCError) -> [UInt8]
    typealias AsyncBody = @Sendable ([UInt8]?, RequestContext) async throws(RPCError) -> [UInt8]
    /// An answer computed inline, or nil when only the async body can give it.
    typealias FastBody = @Sendable ([UInt8]?, RequestContext) throws(RPCError) -> [UInt8]?

    enum Implementation: Sendable {
        /// Runs on the connection's event loop, inline: for cheap, non-blocking work only.
        case immediate(SyncBody)
        /// Runs as a Swift task; the reply is written when it finishes (possibly out of order).
        case async(AsyncBody)
        /// Runs on the server's thread pool for blocking work (synchronous SQLite), then replies from
        /// the event loop: two thread hops, where a task that awaits a database queue takes four.
        case blocking(SyncBody)
        /// Tries the first body inline on the event loop; when it answers nil, runs the second as a task.
        case immediateOrAsync(FastBody, AsyncBody)
        /// Tries the first body inline on the event loop; when it answers nil, runs the second on the blocking pool.
        case immediateOrBlocking(FastBody, SyncBody)
    }

    struct Entry: Sendable {
        let description: OpenRPCMethodDescription
        let implementation: Implementation
    }

    private(set) var entries: [String: Entry] = [:] {
        didSet { implementations = entries.mapValues(\.implementation) }
    }
    /// What dispatch looks up: just the code, so a lookup does not copy schema descriptions.
    private(set) var implementations: [String: Implementation] = [:]

    public init() {}

    /// Registers an async handler. Thrown `RPCError`s are sent as they are; any other error is
    /// logged and answered as `-32603 internal error` without its details.
    public mutating func register<M: RPCMethod>(
        _ method: M.Type,
        handler: @escaping @Sendable (M.Params, RequestContext) async throws -> M.Result
    ) {
        add(
            M.self,
            .async { params, ctx throws(RPCError) in
                let decoded = try RPCCodec.decodeParams(M.Params.self, from: params)
                let result: M.Result
                do { result = try await handler(decoded, ctx) } catch { throw Self.wireError(error, ctx) }
                return try JSONWriter.encodeBodyOrThrow(result)
            })
    }

    /// Registers an async handler whose reply is already-encoded JSON of `M.Result` (a cached listing).
    public mutating func registerEncoded<M: RPCMethod>(
        _ method: M.Type,
        handler: @escaping @Sendable (M.Params, RequestContext) async throws -> [UInt8]
    ) {
        add(
            M.self,
            .async { params, ctx throws(RPCError) in
                let decoded = try RPCCodec.decodeParams(M.Params.self, from: params)
                do { return try await handler(decoded, ctx) } catch { throw Self.wireError(error, ctx) }
            })
    }

    /// Registers a handler that runs inline on the event loop. It must not block, wait or do I/O:
    /// use it for answers computed from memory (ping, cached documents, cache hits).
    public mutating func registerImmediate<M: RPCMethod>(
        _ method: M.Type,
        handler: @escaping @Sendable (M.Params, RequestContext) throws -> M.Result
    ) {
        add(M.self, .immediate(Self.syncBody(M.self, handler)))
    }

    /// Registers a handler that answers inline on the event loop when it can do so from memory (`immediate`:
    /// CPU work only, no waiting; nil when it cannot, e.g. a cache miss that needs I/O), and otherwise as an
    /// async handler (`handler`). CPU-bound answers (signature checks) skip the two thread hops of a task.
    public mutating func registerImmediateOrAsync<M: RPCMethod>(
        _ method: M.Type,
        immediate: @escaping @Sendable (M.Params, RequestContext) throws -> M.Result?,
        handler: @escaping @Sendable (M.Params, RequestContext) async throws -> M.Result
    ) {
        add(
            M.self,
            .immediateOrAsync(
                Self.fastBody(M.self, immediate),
                { params, ctx throws(RPCError) in
                    let decoded = try RPCCodec.decodeParams(M.Params.self, from: params)
                    let result: M.Result
                    do { result = try await handler(decoded, ctx) } catch { throw Self.wireError(error, ctx) }
                    return try JSONWriter.encodeBodyOrThrow(result)
                }))
    }

    /// Registers a handler that answers inline on the event loop when it can without waiting (`immediate`; nil when
    /// it cannot: a write to make, or storage that is a network away), and otherwise on the server's blocking pool
    /// (`handler`). For reads that are cheap in the common case: the two thread hops of the pool cost more than them.
    public mutating func registerImmediateOrBlocking<M: RPCMethod>(
        _ method: M.Type,
        immediate: @escaping @Sendable (M.Params, RequestContext) throws -> M.Result?,
        handler: @escaping @Sendable (M.Params, RequestContext) throws -> M.Result
    ) {
        add(
            M.self,
            .immediateOrBlocking(Self.fastBody(M.self, immediate), Self.syncBody(M.self, handler)))
    }

    /// Registers a handler that may block briefly (a synchronous SQLite read or write). It runs on the
    /// server's blocking pool (`RPCServerConfiguration.blockingThreads`), never on an event loop.
    public mutating func registerBlocking<M: RPCMethod>(
        _ method: M.Type,
        handler: @escaping @Sendable (M.Params, RequestContext) throws -> M.Result
    ) {
        add(M.self, .blocking(Self.syncBody(M.self, handler)))
    }

    /// Registers an immediate handler whose reply is already-encoded JSON (a cached document).
    public mutating func registerImmediateEncoded<M: RPCMethod>(
        _ method: M.Type,
        handler: @escaping @Sendable (M.Params, RequestContext) throws -> [UInt8]
    ) {
        add(
            M.self,
            .immediate { params, ctx throws(RPCError) in
                let decoded = try RPCCodec.decodeParams(M.Params.self, from: params)
                do { return try handler(decoded, ctx) } catch { throw Self.wireError(error, ctx) }
            })
    }

    private mutating func add<M: RPCMethod>(_ method: M.Type, _ implementation: Implementation) {
        entries[M.name] = Entry(description: OpenRPCMethodDescription(M.self), implementation: implementation)
    }

    /// Decode params, run inline; nil (not answered inline) stays nil, a result is encoded; errors become wire errors.
    private static func fastBody<M: RPCMethod>(
        _ method: M.Type,
        _ immediate: @escaping @Sendable (M.Params, RequestContext) throws -> M.Result?
    ) -> FastBody {
        { params, ctx throws(RPCError) in
            let decoded = try RPCCodec.decodeParams(M.Params.self, from: params)
            let result: M.Result?
            do { result = try immediate(decoded, ctx) } catch { throw Self.wireError(error, ctx) }
            return try result.map { result throws(RPCError) in try JSONWriter.encodeBodyOrThrow(result) }
        }
    }

    /// Decode params, run, encode the result; errors become wire errors.
    private static func syncBody<M: RPCMethod>(
        _ method: M.Type,
        _ handler: @escaping @Sendable (M.Params, RequestContext) throws -> M.Result
    ) -> SyncBody {
        { params, ctx throws(RPCError) in
            let decoded = try RPCCodec.decodeParams(M.Params.self, from: params)
            let result: M.Result
            do { result = try handler(decoded, ctx) } catch { throw Self.wireError(error, ctx) }
            return try JSONWriter.encodeBodyOrThrow(result)
        }
    }

    public var methodNames: [String] { entries.keys.sorted() }

    public var descriptions: [OpenRPCMethodDescription] { entries.values.map(\.description) }

    private static func wireError(_ error: any Error, _ ctx: RequestContext) -> RPCError {
        if let rpc = error as? RPCError { return rpc }
        if error is CancellationError {
            return RPCError(code: .requestTimeout, message: "request was cancelled", reason: "cancelled", retryable: true)
        }
        ctx.logger.error("handler failed", metadata: ["error": "\(String(reflecting: error))"])
        return .internalError()
    }
}
