import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PostgresNIO
import ServiceLifecycle

/// What a `PostgresListener` reports, in order: `.listening`, any `.notified`, `.lost`, and again from `.listening`
/// after a reconnection.
public enum PostgresListenerEvent: Sendable, Equatable {
    /// Listening (the first time, or again after a gap): a notification sent while nobody listened is gone, so
    /// anything may have changed.
    case listening
    /// A `NOTIFY` on the channel, with its payload.
    case notified(String)
    /// Not listening any more (the connection was lost, or the listener stopped) until the next `.listening`.
    case lost
}

/// Hears `NOTIFY <channel>` from the other instances of a service, on a connection of its own (a pooled
/// connection cannot listen: it goes back to the pool between transactions).
///
/// `onEvent` hears `.listening` each time the listener (re)connects, `.notified` for every notification and
/// `.lost` when a connection ends. A lost connection is opened again after a short, growing pause (0.1 s up to
/// 5 s). It listens while `run` runs (a service group runs it, and stops it at graceful shutdown) and until
/// `stop`.
public final class PostgresListener: Service, Sendable {
    private let pool: PostgresPool
    public let channel: String
    private let onEvent: @Sendable (PostgresListenerEvent) async -> Void
    private let state = NIOLockedValueBox(State())

    private struct State {
        var stopped = false
        var connection: PostgresConnection?
    }

    /// `channel` is lowercase letters and underscores. Nothing is heard before `run`.
    public init(pool: PostgresPool, channel: String, onEvent: @escaping @Sendable (PostgresListenerEvent) async -> Void) throws {
        guard !channel.isEmpty, channel.allSatisfy({ ("a"..."z").contains($0) || $0 == "_" }) else {
            throw PostgresURL.Invalid(description: "a channel name is lowercase letters and underscores")
        }
        self.pool = pool
        self.channel = channel
        self.onEvent = onEvent
    }

    /// `onChange` runs for every notification and each time the listener (re)connects: after a gap, the caller
    /// re-reads what it caches.
    public convenience init(pool: PostgresPool, channel: String, onChange: @escaping @Sendable () async -> Void) throws {
        try self.init(pool: pool, channel: channel) { event in
            if event != .lost { await onChange() }
        }
    }

    /// Listens until graceful shutdown, cancellation or `stop`.
    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await withTaskCancellationHandler {
                await self.listen()
            } onCancel: {
                self.stop()
            }
        }
    }

    /// Stops listening and closes the connection. `onEvent` may still hear a notification already received, then
    /// hears `.lost` (if it was listening), after this returns; nothing after that.
    public func stop() {
        let connection = state.withLockedValue { s in
            s.stopped = true
            defer { s.connection = nil }
            return s.connection
        }
        if let connection { pool.discard(connection) }
    }

    private var stopped: Bool { state.withLockedValue { $0.stopped } }

    private func listen() async {
        var pause = Duration.milliseconds(100)
        var listening = false
        while !stopped {
            do {
                let id = pool.ids.withLockedValue { id in
                    id += 1
                    return id
                }
                let connection = try await PostgresConnection.connect(
                    on: MultiThreadedEventLoopGroup.singleton.any(), configuration: pool.configuration, id: id,
                    logger: pool.logger)
                let kept = state.withLockedValue { s in
                    guard !s.stopped else { return false }
                    s.connection = connection
                    return true
                }
                guard kept else {
                    pool.discard(connection)
                    return
                }
                try await connection.listen(on: channel) { notifications in
                    pause = .milliseconds(100)
                    listening = true
                    await onEvent(.listening)  // whatever changed while nobody listened
                    // Every notification heard is delivered, also while stopping: `.lost` comes after it.
                    for try await notification in notifications {
                        await onEvent(.notified(notification.payload))
                        guard !stopped else { return }
                    }
                }
            } catch {
                if !stopped {
                    pool.logger.warning(
                        "lost the database listener; re-reading when it is back",
                        metadata: ["channel": "\(channel)", "error": "\(PostgresPool.describe(error))"])
                }
            }
            let lost = state.withLockedValue { s in
                defer { s.connection = nil }
                return s.connection
            }
            if let lost { pool.discard(lost) }
            if listening {
                listening = false
                await onEvent(.lost)
            }
            guard !stopped else { return }
            try? await Task.sleep(for: pause)
            pause = min(pause * 2, .seconds(5))
        }
    }
}
