import JSONRPC
import Logging

/// The one check for the suite's shared secrets: admin methods (`adminToken`) and service-to-service
/// methods (`internalToken`). Refuses when none is configured; compares in constant time.
public enum TokenGate: String, Sendable {
    case admin, `internal`

    public func check(_ presented: String?, configured: String?) throws(RPCError) {
        let reason = "\(rawValue)TokenRequired"
        guard let configured else {
            throw RPCError.forbidden("\(rawValue) methods are disabled: no \(rawValue) token is configured", reason: reason)
        }
        guard let presented, SecretComparison.equal(presented, configured) else {
            throw RPCError.forbidden("\(rawValue) token is missing or wrong", reason: reason)
        }
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
