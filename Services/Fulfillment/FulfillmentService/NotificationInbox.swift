import Foundation
import IAPProtocol

/// App Store Server Notifications as fulfillment keeps them (docs/contract.md): each one verified, then
/// recorded by its `notificationUUID` with its signed payload BEFORE the webhook is answered, then processed
/// from here. A delivery that arrives twice finds its row; processing that fails (a dependency down) is
/// retried with backoff; one that keeps failing is parked for an administrator, never dropped.
public struct InboxEntry: Sendable, Equatable {
    public var notificationUUID: String
    public var notificationType: String
    public var subtype: String?
    /// Apple's signing time of the notification (ms), for ordering per original transaction.
    public var signedDateMs: Int64?
    /// The JWS exactly as delivered (kept for audit and re-verification).
    public var signedPayload: String
    /// The verified, decoded notification (JSON), so processing does not depend on verification again.
    public var notification: [UInt8]
    public var receivedAtMs: Int64
    public var state: NotificationState
    public var attempts: Int
    public var nextAttemptAtMs: Int64
    public var lastError: String?
    public var processedAtMs: Int64?
    /// The purchase the notification is about (its original transaction), when it names one: state moves
    /// forward only, by `signedDateMs`, per original transaction.
    public var originalTransactionId: String? = nil

    public init(
        notificationUUID: String, notificationType: String, subtype: String?, signedDateMs: Int64?, signedPayload: String,
        notification: [UInt8], receivedAtMs: Int64, state: NotificationState = .pending, attempts: Int = 0,
        nextAttemptAtMs: Int64, lastError: String? = nil, processedAtMs: Int64? = nil, originalTransactionId: String? = nil
    ) {
        self.originalTransactionId = originalTransactionId
        self.notificationUUID = notificationUUID
        self.notificationType = notificationType
        self.subtype = subtype
        self.signedDateMs = signedDateMs
        self.signedPayload = signedPayload
        self.notification = notification
        self.receivedAtMs = receivedAtMs
        self.state = state
        self.attempts = attempts
        self.nextAttemptAtMs = nextAttemptAtMs
        self.lastError = lastError
        self.processedAtMs = processedAtMs
    }

    /// The answer shape of the admin listing.
    public var summary: NotificationSummary {
        NotificationSummary(
            notificationUUID: notificationUUID, notificationType: notificationType, subtype: subtype, state: state,
            attempts: attempts, receivedAtMs: receivedAtMs, nextAttemptAtMs: state == .pending ? nextAttemptAtMs : nil,
            lastError: lastError, processedAtMs: processedAtMs)
    }
}

/// When a failed processing attempt is tried again, and when the inbox gives up and parks it.
public struct InboxRetryPolicy: Sendable {
    /// Attempts before a notification is parked.
    public var maxAttempts = 10
    public var firstDelayMs: Int64 = 5_000
    public var maxDelayMs: Int64 = 3_600_000

    public init() {}

    /// The state and next attempt after attempt number `attempts` (1-based) failed.
    public func afterFailure(attempts: Int, nowMs: Int64) -> (NotificationState, Int64) {
        guard attempts < maxAttempts else { return (.parked, nowMs) }
        let delay = min(maxDelayMs, firstDelayMs << Int64(min(attempts - 1, 30)))
        return (.pending, nowMs + delay)
    }
}

/// What the inbox needs from storage; `FulfillmentStore` keeps it in the same SQLite file as the ledger.
public protocol NotificationInboxStorage: Sendable {
    /// Records `entry` unless its UUID is already there; answers the stored row (the new one or the old).
    func recordNotification(_ entry: InboxEntry) async throws -> (entry: InboxEntry, isNew: Bool)
    /// Pending notifications whose next attempt is due by `nowMs`, oldest signed first.
    func dueNotifications(nowMs: Int64, limit: Int) async throws -> [InboxEntry]
    /// Sets the outcome of a processing attempt.
    func settleNotification(
        _ uuid: String, state: NotificationState, attempts: Int, nextAttemptAtMs: Int64, lastError: String?, nowMs: Int64
    ) async throws
    func notification(_ uuid: String) async throws -> InboxEntry?
    /// The latest `signedDateMs` among the applied notifications of `types` about this original transaction.
    func latestAppliedSignedDate(originalTransactionId: String, types: [String]) async throws -> Int64?
    /// The newest first, optionally one state only.
    func notifications(state: NotificationState?, limit: Int) async throws -> [InboxEntry]
}
