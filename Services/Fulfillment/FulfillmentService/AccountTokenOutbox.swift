/// A purchase to tie to an account at Apple (Set App Account Token), waiting in the outbox.
public struct PendingAccountToken: Sendable, Equatable {
    public var originalTransactionId: String
    public var appAccountToken: String
    public var attempts: Int

    public init(originalTransactionId: String, appAccountToken: String, attempts: Int = 0) {
        self.originalTransactionId = originalTransactionId
        self.appAccountToken = appAccountToken
        self.attempts = attempts
    }
}

/// Purchases granted here without an appAccountToken are tied to their account at Apple after the grant,
/// out of the request path: the grant's own transaction records them in this outbox (`FulfillmentTransaction.enqueueAccountToken`), and the worker calls Apple,
/// retrying on the inbox's schedule; one that keeps failing is dropped with an error log (the notification
/// path still finds the purchase by its owner here).
public protocol AccountTokenOutboxStorage: Sendable {
    /// Ties due by `nowMs`, oldest first.
    func dueAccountTokens(nowMs: Int64, limit: Int) async throws -> [PendingAccountToken]
    /// Done: removed. Not done: tried again at `nextAttemptAtMs` (nil: given up, removed).
    func settleAccountToken(_ item: PendingAccountToken, done: Bool, nextAttemptAtMs: Int64?, lastError: String?) async throws
}
