import IAPProtocol

// The fulfillment domain, apart from any storage: who holds what, and the records the grant rules read
// and write through a `FulfillmentTransaction`.

/// Redeem grants what is new; restore re-derives entitlements and never grants consumables.
public enum FulfillmentMode: Sendable { case redeem, restore }

/// What happens when a purchase's original transaction is bound to another account.
public enum OwnershipPolicy: String, Sendable, CaseIterable {
    /// The purchase stays with the first account (`ownedByAnotherAccount`).
    case refuse
    /// The entitlement moves to the presenting account (never coins); the move is recorded.
    case transfer
}

/// Whose wallet, ledger and entitlements a write touches: one account's Production or Sandbox scope.
public struct Holder: Sendable, Hashable {
    public var accountId: String
    public var scope: AccountScope
    public init(accountId: String, scope: AccountScope) { self.accountId = accountId; self.scope = scope }
}

/// A purchase to process, with the catalog's rule for its product (nil: unknown product) and the
/// account scope it grants into (from its environment and the sandbox policy).
public struct PlannedPurchase: Sendable {
    public var purchase: VerifiedPurchase
    public var rule: GrantRule?
    public var scope: AccountScope
    public init(purchase: VerifiedPurchase, rule: GrantRule?, scope: AccountScope = .production) {
        self.purchase = purchase
        self.rule = rule
        self.scope = scope
    }
}

/// What one `apply` committed, with the balance and entitlements of the scope the caller asked to see.
public struct AppliedPurchases: Sendable {
    public var results: [TransactionResult]
    public var balance: Int64
    public var owed: Int64
    public var entitlements: [Entitlement]
    public var transfers: [(originalTransactionId: String, from: String)]
    /// Something was written to the outbox for Apple (`AppleFollowUps`): its first attempt is due now.
    public var owesApple = false
}

public enum RevokeOutcome: Sendable, Equatable { case revoked, alreadyRevoked, notFound }

public enum SpendOutcome: Sendable, Equatable {
    case spent(balance: Int64)
    case replayed(balance: Int64)
    case keyConflict
    case insufficient(balance: Int64)
    /// Refunded coins are owed: nothing can be spent until later grants repay them.
    case owes(owed: Int64, balance: Int64)
}

/// A holder's coins: what it has and what it owes (refunds of coins already spent).
public struct Wallet: Sendable, Equatable {
    public var balance: Int64
    public var owed: Int64
    public init(balance: Int64 = 0, owed: Int64 = 0) { self.balance = balance; self.owed = owed }
}

/// One processed transaction as the rules need it back.
public struct ProcessedTransaction: Sendable, Equatable {
    public var environment: String
    public var holder: Holder
    public var originalTransactionId: String
    public var productId: String
    public var grantKind: String
    public var coinsGranted: Int64
    public var revokedAtMs: Int64?
    /// Why it was revoked: a store's `refunded` or `revoked` (`GrantRules.storeRevocationReasons`), or an administrator's
    /// own words.
    public var revokeReason: String?
    /// The end of the period it paid for (a subscription's).
    public var expiresDateMs: Int64?
    public init(
        environment: String, holder: Holder, originalTransactionId: String, productId: String, grantKind: String,
        coinsGranted: Int64, revokedAtMs: Int64?, revokeReason: String? = nil, expiresDateMs: Int64? = nil
    ) {
        self.environment = environment
        self.holder = holder
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.grantKind = grantKind
        self.coinsGranted = coinsGranted
        self.revokedAtMs = revokedAtMs
        self.revokeReason = revokeReason
        self.expiresDateMs = expiresDateMs
    }

    /// Revoked by an administrator (`fulfillment.revokeTransaction`), not by a store's refund or revocation: only an
    /// administrator gives that back, never a store's later word about the purchase.
    public var revokedByAdministrator: Bool {
        revokedAtMs != nil && revokeReason.map { !GrantRules.storeRevocationReasons.contains($0) } ?? false
    }
}

/// An append-only ledger row. `debt` adds to what is owed (reversals), `recovered` repays it
/// (recoveries); `balance` and `owed` are the holder's after the row.
public struct LedgerRow: Sendable, Equatable {
    public var holder: Holder
    public var delta: Int64
    public var balance: Int64
    public var owed: Int64
    public var kind: LedgerKind
    public var environment: String?
    public var transactionId: String?
    public var idempotencyKey: String?
    public var memo: String?
    public var debt: Int64 = 0
    public var recovered: Int64 = 0
    public var createdAtMs: Int64
    public init(
        holder: Holder, delta: Int64, balance: Int64, owed: Int64, kind: LedgerKind, environment: String? = nil,
        transactionId: String? = nil, idempotencyKey: String? = nil, memo: String? = nil, debt: Int64 = 0, recovered: Int64 = 0,
        createdAtMs: Int64
    ) {
        self.holder = holder
        self.delta = delta
        self.balance = balance
        self.owed = owed
        self.kind = kind
        self.environment = environment
        self.transactionId = transactionId
        self.idempotencyKey = idempotencyKey
        self.memo = memo
        self.debt = debt
        self.recovered = recovered
        self.createdAtMs = createdAtMs
    }
}

/// An entitlement row: one per original transaction that grants one.
public struct EntitlementRecord: Sendable, Equatable {
    public var environment: String
    public var originalTransactionId: String
    public var holder: Holder
    public var entitlement: String
    public var productId: String
    public var startsAtMs: Int64
    /// nil: permanent.
    public var expiresAtMs: Int64?
    public var revokedAtMs: Int64?
    public init(
        environment: String, originalTransactionId: String, holder: Holder, entitlement: String, productId: String,
        startsAtMs: Int64, expiresAtMs: Int64?, revokedAtMs: Int64? = nil
    ) {
        self.environment = environment
        self.originalTransactionId = originalTransactionId
        self.holder = holder
        self.entitlement = entitlement
        self.productId = productId
        self.startsAtMs = startsAtMs
        self.expiresAtMs = expiresAtMs
        self.revokedAtMs = revokedAtMs
    }
}

/// A spend already made with an idempotency key.
public struct RecordedSpend: Sendable, Equatable {
    public var delta: Int64
    public var balance: Int64
    public var memo: String?
    public init(delta: Int64, balance: Int64, memo: String?) { self.delta = delta; self.balance = balance; self.memo = memo }
}

/// A value read from the database that the schema should never have admitted: the read fails rather than guess.
public struct StoredValueInvalid: Error, Sendable, CustomStringConvertible {
    public let column: String
    public let value: String
    public var description: String { "stored \(column) \(value.debugDescription) is not one this version knows" }
}

/// A write refused because an amount is outside `CoinLimits`' bounds; nothing was committed.
public enum LedgerLimit: Error, Sendable {
    case grantTooLarge
    case balanceOutOfRange
}

/// What `FulfillmentTransaction.stored` answers about one purchase.
public struct StoredPurchase: Sendable {
    public var owner: Holder?
    public var processed: ProcessedTransaction?
    public var earlyRevocation: String?
    /// Whether its transaction id is claimed (`FulfillmentTransaction.claim`): by default, when it is processed or early
    /// revoked, as the rules keep it.
    public var claimed: Bool
    /// When Apple last signed that the transaction stands (`FulfillmentTransaction.recordStandsSigned`): a copy signed
    /// before it that carries a refund carries one Apple reversed.
    public var standsSignedMs: Int64?
    public init(
        owner: Holder?, processed: ProcessedTransaction?, earlyRevocation: String?, claimed: Bool? = nil, standsSignedMs: Int64? = nil
    ) {
        self.standsSignedMs = standsSignedMs
        self.owner = owner
        self.processed = processed
        self.earlyRevocation = earlyRevocation
        self.claimed = claimed ?? (processed != nil || earlyRevocation != nil)
    }
}

extension FulfillmentTransaction {
    /// The three reads one after another.
    public func stored(_ purchase: VerifiedPurchase, accountId: String) throws -> StoredPurchase {
        StoredPurchase(
            owner: try owner(original: purchase.originalTransactionId), processed: try processed(purchase.transactionId),
            earlyRevocation: try earlyRevocation(purchase.transactionId), standsSignedMs: try standsSignedMs(purchase.transactionId))
    }
}
