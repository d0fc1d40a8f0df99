/// A purchase to tie to an account at Apple (Set App Account Token): written to the outbox as an item of kind
/// `appAccountToken`, keyed by the original transaction, whose payload is the account's token.
public struct PendingAccountToken: Sendable, Equatable {
    public var originalTransactionId: String
    public var appAccountToken: String

    public init(originalTransactionId: String, appAccountToken: String) {
        self.originalTransactionId = originalTransactionId
        self.appAccountToken = appAccountToken
    }
}
