import JSONRPC
import Logging
import Synchronization

/// The one check for the suite's shared secrets: admin methods (`adminToken`) and service-to-service
/// methods (`internalToken`). Refuses when none is configured; compares in constant time.
public enum TokenGate: String, Sendable {
    case admin, `internal`

    /// Checks `presented` against the configured token and, while a rotation is under way, the previous one
    /// (`IAP_ADMIN_TOKEN_PREVIOUS` / `IAP_INTERNAL_TOKEN_PREVIOUS`, read at start by `Environment.token`).
    public func check(_ presented: String?, configured: String?) throws(RPCError) {
        try check(presented, configured: configured, previous: Self.previous.withLock { $0[self] })
    }

    public func check(_ presented: String?, configured: String?, previous: String?) throws(RPCError) {
        let reason: RPCErrorReason = self == .admin ? .adminTokenRequired : .internalTokenRequired
        guard let configured else {
            throw RPCError.forbidden("\(rawValue) methods are disabled: no \(rawValue) token is configured", reason: reason)
        }
        guard let presented,
            SecretComparison.equal(presented, configured) || previous.map({ SecretComparison.equal(presented, $0) }) == true
        else {
            throw RPCError.forbidden("\(rawValue) token is missing or wrong", reason: reason)
        }
    }

    /// Tokens being rotated out, accepted next to the configured ones until the process restarts without them.
    private static let previous = Mutex<[TokenGate: String]>([:])

    /// Accepts `token` as well as the configured one for this gate (nil: only the configured one).
    public func acceptPrevious(_ token: String?) {
        Self.previous.withLock { $0[self] = token }
    }
}

/// Storage failures as callers see them: an `RPCError` passes through; anything else is logged here and
/// answered as a retryable internal error whose details stay in the log.
public struct StorageCalls: Sendable {
    public let logger: Logger
    /// What the caller is told, e.g. "the ledger database failed; nothing was committed, retry".
    public let detail: String
    /// Maps a service's own errors first (nil: not one of them).
    public let translate: @Sendable (any Error) -> RPCError?

    public init(
        logger: Logger, detail: String = "the server failed to process the request",
        translate: @escaping @Sendable (any Error) -> RPCError? = { _ in nil }
    ) {
        self.logger = logger
        self.detail = detail
        self.translate = translate
    }

    public func rpcError(_ error: any Error) -> RPCError {
        if let error = error as? RPCError { return error }
        if let mapped = translate(error) { return mapped }
        logger.error("storage failure", metadata: ["error": "\(error)"])
        return RPCError.internalError(detail)
    }

    public func run<T>(_ body: () async throws -> T) async throws(RPCError) -> T {
        do {
            return try await body()
        } catch {
            throw rpcError(error)
        }
    }

    public func runBlocking<T>(_ body: () throws -> T) throws(RPCError) -> T {
        do {
            return try body()
        } catch {
            throw rpcError(error)
        }
    }
}
