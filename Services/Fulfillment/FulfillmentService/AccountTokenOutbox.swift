/// A purchase to tie to an account at Apple (Set App Account Token): an outbox item of kind `appAccountToken`, keyed
/// by the original transaction, whose payload is the account's token.
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

extension OutboxStorage {
    /// The due ties to make at Apple (the outbox's `appAccountToken` items), oldest due first.
    public func dueAccountTokens(nowMs: Int64, limit: Int) async throws -> [PendingAccountToken] {
        try await dueOutbox(nowMs: nowMs, limit: limit).filter { $0.kind == OutboxKind.appAccountToken.rawValue }.map {
            PendingAccountToken(originalTransactionId: $0.key, appAccountToken: $0.payload, attempts: $0.attempts)
        }
    }
}
