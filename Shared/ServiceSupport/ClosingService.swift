import Logging
import ServiceLifecycle

/// A resource (a database, a thread pool, RPC clients) as a member of the executable's `ServiceGroup`:
/// listed BEFORE the server that uses it, it is started first and, since the group shuts services down
/// in reverse order, closed only after the server has drained. It is closed however the group ends:
/// graceful shutdown, a signal, or another service throwing (cancellation), never skipped.
public struct ClosingService: Service {
    public let name: String
    private let close: @Sendable () async throws -> Void
    private let logger: Logger

    public init(_ name: String, logger: Logger, close: @escaping @Sendable () async throws -> Void) {
        self.name = name
        self.logger = logger
        self.close = close
    }

    public func run() async throws {
        // Returns at graceful shutdown; throws CancellationError when the group is cancelled. Either way: close.
        try? await gracefulShutdown()
        do {
            try await close()
            logger.debug("closed", metadata: ["resource": "\(name)"])
        } catch {
            logger.error("closing failed", metadata: ["resource": "\(name)", "error": "\(error)"])
        }
    }
}
