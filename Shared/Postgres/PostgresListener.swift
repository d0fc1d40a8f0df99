import Foundation
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
/// `onEvent` hears `.listening` each time the listener (re)connects and its first probe came back, `.notified` for
/// every notification and `.lost` when a connection ends. A lost connection is opened again after a short, growing
/// pause (0.1 s up to 5 s). It listens while `run` runs (a service group runs it, and stops it at graceful shutdown)
/// and until `stop`.
///
/// Hearing is checked, not assumed: every `probeEvery` the listener sends a NOTIFY of its own on a connection of its
/// own, the way the other instances send theirs. It reports `.listening` only once the first came back,
/// and drops the connection (`.lost`, then a new one) when one has not come back within a period: a connection that
/// died without a word is found within two periods, and a LISTEN that hears nothing (through a pooler in transaction
/// mode) is never taken for listening. Probes (this listener's and other instances') are never reported.
public final class PostgresListener: Service, Sendable {
    private let pool: PostgresPool
    public let channel: String
    private let probeEvery: Duration
    private let onEvent: @Sendable (PostgresListenerEvent) async -> Void
    private let state = NIOLockedValueBox(State())
    /// Tests: where the probes go instead of `channel` (a listener that cannot hear them).
    package let probeChannel = NIOLockedValueBox<String?>(nil)
    /// How many connections have listened so far.
    package let connectionsListened = NIOLockedValueBox(0)
    static let probePrefix = "iap-listener-probe:"

    private struct State {
        var stopped = false
        var connection: PostgresConnection?
    }

    /// `channel` is lowercase letters and underscores. Nothing is heard before `run`.
    public init(
        pool: PostgresPool, channel: String, probeEvery: Duration = .seconds(2),
        onEvent: @escaping @Sendable (PostgresListenerEvent) async -> Void
    ) throws {
        precondition(probeEvery > .zero, "a probe period is positive")
        guard !channel.isEmpty, channel.allSatisfy({ ("a"..."z").contains($0) || $0 == "_" }) else {
            throw PostgresURL.Invalid(description: "a channel name is lowercase letters and underscores")
        }
        self.pool = pool
        self.channel = channel
        self.probeEvery = probeEvery
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
        let listening = NIOLockedValueBox(false)
        while !stopped {
            do {
                let connection = try await connect()
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
                    connectionsListened.withLockedValue { $0 += 1 }
                    try await hear(notifications, on: connection, listening: listening)
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
            let wasListening = listening.withLockedValue { l in
                defer { l = false }
                return l
            }
            if wasListening {
                pause = .milliseconds(100)  // it did hear: try again soon
                await onEvent(.lost)
            }
            guard !stopped else { return }
            try? await Task.sleep(for: pause)
            pause = min(pause * 2, .seconds(5))
        }
    }

    struct ProbeUnheard: Error, CustomStringConvertible {
        var description: String {
            "it did not hear its own NOTIFY within a probe period (a connection that died without a word, a pooler in transaction mode, or a probe that could not be sent)"
        }
    }

    /// A connection outside the pool, to the pool's server.
    private func connect() async throws -> PostgresConnection {
        let id = pool.ids.withLockedValue { id in
            id += 1
            return id
        }
        return try await PostgresConnection.connect(
            on: MultiThreadedEventLoopGroup.singleton.any(), configuration: pool.configuration, id: id, logger: pool.logger)
    }

    /// The notifications of one connection: `.listening` once the first probe is heard (nothing is
    /// reported before: `.listening` says anything may have changed); the connection dropped (the sequence then ends
    /// with an error) when a probe is not heard within a period.
    private func hear(
        _ notifications: PostgresNotificationSequence, on connection: PostgresConnection, listening: NIOLockedValueBox<Bool>
    ) async throws {
        let every = probeEvery
        let mine = Self.probePrefix + UUID().uuidString + ":"
        let heard = NIOLockedValueBox(0)  // the last probe of this connection heard
        let (pool, channel, onEvent) = (self.pool, self.channel, self.onEvent)
        // The probes go out on a connection of their own, to the same server the same way (through a pooler too), so
        // they wait behind nothing in the pool and count in none of its metrics.
        let sender = try await connect()
        defer { pool.discard(sender) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for try await notification in notifications {
                    let payload = notification.payload
                    if payload.hasPrefix(Self.probePrefix) {
                        guard payload.hasPrefix(mine), let n = Int(payload.dropFirst(mine.count)) else { continue }
                        let first = heard.withLockedValue { last in
                            defer { last = max(last, n) }
                            return last == 0
                        }
                        if first {
                            listening.withLockedValue { $0 = true }
                            await onEvent(.listening)
                        }
                        continue
                    }
                    guard heard.withLockedValue({ $0 }) > 0 else { continue }
                    await onEvent(.notified(payload))
                    guard !self.stopped else { return }
                }
            }
            group.addTask {
                var n = 0
                while true {
                    n += 1
                    let payload = mine + String(n)
                    let target = self.probeChannel.withLockedValue { $0 } ?? channel
                    let sending = Task {
                        do {
                            try await sender.query("SELECT pg_notify(\(target), \(payload))", logger: pool.logger)
                        } catch {
                            guard !Task.isCancelled else { return }
                            pool.logger.warning(
                                "the database listener's probe could not be sent",
                                metadata: ["channel": "\(channel)", "error": "\(PostgresPool.describe(error))"])
                        }
                    }
                    try await Task.sleep(for: every)
                    guard heard.withLockedValue({ $0 }) >= n else {
                        sending.cancel()
                        pool.discard(connection)  // ends the notifications' sequence
                        throw ProbeUnheard()
                    }
                }
            }
            try await group.next()
            group.cancelAll()
        }
    }
}
