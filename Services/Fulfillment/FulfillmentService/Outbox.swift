import NIOConcurrencyHelpers

/// What fulfillment owes an outside party after a commit. New kinds (Apple's Finish Transaction, Google's
/// acknowledgements, webhook deliveries) join here.
public enum OutboxKind: String, Sendable, CaseIterable {
    /// Set App Account Token at Apple: key the original transaction id, payload the account's token.
    case appAccountToken
    /// Finish Transaction at Apple: key the transaction id, payload empty.
    case finishTransaction
    /// Send Consumption Information at Apple (a CONSUMPTION_REQUEST answered): key the transaction id, payload Apple's
    /// ConsumptionRequest (JSON).
    case consumptionInformation
    /// Acknowledge (or consume) a Google Play purchase at Google, which refunds what is not acknowledged within three days:
    /// key the purchase token, payload `PlayFacts.Owed` (JSON).
    case playAcknowledge
    /// Events owed to a webhook endpoint (`WebhookRecords`): key `"<endpoint> <account>"`, payload the last sequence
    /// owed. Delivered by `WebhookDelivery`, not with Apple's kinds.
    case webhook
}

/// One thing owed, written in the same transaction as the change that owes it, removed only once delivered. One
/// live item per (kind, key): owing the same thing again replaces its payload and starts its attempts over.
public struct OutboxItem: Sendable, Equatable {
    public var id: Int64
    /// `OutboxKind`'s raw value; a kind this version does not know stays in the outbox (never dropped).
    public var kind: String
    public var key: String
    public var payload: String
    public var attempts: Int
    public var createdAtMs: Int64
    public var nextAttemptAtMs: Int64
    public var lastError: String?

    public init(
        id: Int64, kind: String, key: String, payload: String, attempts: Int, createdAtMs: Int64, nextAttemptAtMs: Int64,
        lastError: String?
    ) {
        self.id = id
        self.kind = kind
        self.key = key
        self.payload = payload
        self.attempts = attempts
        self.createdAtMs = createdAtMs
        self.nextAttemptAtMs = nextAttemptAtMs
        self.lastError = lastError
    }
}

/// The outbox on a storage engine (both keep it beside the ledger, written by `FulfillmentTransaction`).
public protocol OutboxStorage: Sendable {
    /// Items due by `nowMs` (the longest due), claimed for `OutboxRetry.leaseMs`: another worker (another instance on
    /// PostgreSQL) skips them meanwhile, and a worker that dies mid-delivery leaves them due again after the lease.
    func dueOutbox(nowMs: Int64, limit: Int) async throws -> [OutboxItem]
    /// Delivered: removed, unless it was owed again meanwhile (another payload). Not delivered: tried again at
    /// `nextAttemptAtMs`, with its attempts counted and `lastError` kept.
    func settleOutbox(_ item: OutboxItem, delivered: Bool, nextAttemptAtMs: Int64, lastError: String?) async throws
    /// Claimed items this worker will not start within its lease: due again at `nowMs`, no attempt counted.
    func releaseOutbox(_ items: [OutboxItem], nowMs: Int64) async throws
    /// The items, oldest first (at most `limit`); how many are owed to Apple, and when the oldest of those was written
    /// (webhook deliveries are listed, but counted by their endpoints' backlog).
    func outbox(limit: Int) async throws -> (items: [OutboxItem], total: Int, oldestCreatedAtMs: Int64?)
    /// Google Play acknowledgements still owed that were written before `createdBeforeMs`: how many, and the oldest's time.
    func playAcknowledgementsOwed(createdBeforeMs: Int64) async throws -> (count: Int, oldestCreatedAtMs: Int64?)
}

/// When a failed delivery is tried again: 5 s, doubling, then every hour for as long as it takes. Nothing is given up.
public enum OutboxRetry {
    public static let firstDelayMs: Int64 = 5_000
    public static let maxDelayMs: Int64 = 3_600_000
    /// How long a claimed item is left to the worker that claimed it.
    public static let leaseMs: Int64 = 60_000
    /// A batch starts no item later than this before its lease ends (one item is at most a few calls of seconds each):
    /// the rest are released, so another instance never claims an item still in flight here and sends it again.
    public static let startMarginMs: Int64 = 20_000

    /// Whether a worker whose claim began at `claimedAtMs` may start another of its items now.
    public static func startsAnother(claimedAtMs: Int64, nowMs: Int64) -> Bool { nowMs < claimedAtMs + leaseMs - startMarginMs }
    /// How long the ties wait while the App Store Server API is not configured (asked again then).
    public static let whileNotConfiguredMs: Int64 = 600_000

    /// `failures`: this one included (1 after the first failed attempt).
    public static func nextAttemptAtMs(failures: Int, nowMs: Int64) -> Int64 {
        nowMs + min(maxDelayMs, firstDelayMs << Int64(min(max(failures, 1) - 1, 30)))
    }
}

/// Wakes the background worker early (an item was just committed to the outbox) instead of at its next interval.
/// One waiter at a time: the worker.
public final class Wakeup: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = NIOLockedValueBox(State())

    public init() {}

    public func signal() {
        let waiter = state.withLockedValue { s -> CheckedContinuation<Void, Never>? in
            guard let waiter = s.waiter else {
                s.pending = true
                return nil
            }
            s.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns at a signal (one sent while nobody waited counts), after `timeout`, or when the task is cancelled.
    public func wait(upTo timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await Task.sleep(for: timeout) }
            group.addTask { await self.untilSignalled() }
            await group.next()
            group.cancelAll()
        }
    }

    private func untilSignalled() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLockedValue { s -> Bool in
                    if s.pending || Task.isCancelled {
                        s.pending = false
                        return true
                    }
                    s.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLockedValue { s -> CheckedContinuation<Void, Never>? in
                defer { s.waiter = nil }
                return s.waiter
            }
            waiter?.resume()
        }
    }
}
