import JSONRPC

// fulfillment.* — exactly-once grants, the coin ledger, entitlements, content (docs/contract.md).

public enum RedeemOutcome: String, Codable, Sendable, JSONSchemaEnum {
    case granted, alreadyGranted, restored, ownedByAnotherAccount, unknownProduct, revoked, rejected
    /// The purchase's environment is not accepted here (`--sandbox-policy refuse` and a Sandbox or Xcode
    /// purchase). Nothing is granted and it is not finishable: a server configured to accept it can still grant it.
    case wrongEnvironment
}

/// Which of an account's two scopes a call reads or spends (docs/security.md). Production is real
/// money; under the default sandbox policy (`isolate`) Sandbox, TestFlight, App Review and Xcode
/// purchases grant into the account's Sandbox scope, with its own balance, ledger and entitlements.
public enum AccountScope: String, Codable, Sendable, JSONSchemaEnum, CaseIterable {
    case production = "Production"
    case sandbox = "Sandbox"
}

/// A session and, optionally, the scope to read (default Production).
public struct ScopedSessionParams: Codable, Sendable, Equatable {
    public var session: String
    public var environment: AccountScope?
    public init(session: String, environment: AccountScope? = nil) { self.session = session; self.environment = environment }
}

public struct RedeemParams: Codable, Sendable, Equatable {
    public var session: String
    public var receiptData: String?
    public var signedTransactions: [String]?
    public var deviceIdentifier: String?
    /// The scope whose balance and entitlements the answer shows; default: the scope the purchases
    /// went to (Production when there were none).
    public var environment: AccountScope?
    /// `redeem` only: StoreKit 2 transaction ids; the server fetches each from Apple (App Store Server API).
    public var transactionIds: [String]?
    /// `restore` only: any transaction id of the customer; the server reads their whole history from Apple,
    /// so a new device restores without a receipt.
    public var transactionId: String?
    /// Google Play purchases (the product or subscription id and the purchase token the Play Billing Library gave the
    /// app); the server asks Google about each.
    public var googlePlay: [GooglePlayPurchase]?
    public init(
        session: String, receiptData: String? = nil, signedTransactions: [String]? = nil, deviceIdentifier: String? = nil,
        environment: AccountScope? = nil, transactionIds: [String]? = nil, transactionId: String? = nil, googlePlay: [GooglePlayPurchase]? = nil
    ) {
        self.googlePlay = googlePlay
        self.session = session
        self.receiptData = receiptData
        self.signedTransactions = signedTransactions
        self.deviceIdentifier = deviceIdentifier
        self.environment = environment
        self.transactionIds = transactionIds
        self.transactionId = transactionId
    }
}

/// A Google Play purchase as the app has it (`Purchase.getProducts()` and `getPurchaseToken()`).
public struct GooglePlayPurchase: Codable, Sendable, Equatable {
    /// The one-time product's id or the subscription's, as in Play Console (the catalog product of the same id).
    public var productId: String
    public var purchaseToken: String
    /// The app's package name; needed only when the server accepts several (`--package-name` on verification).
    public var packageName: String?
    public init(productId: String, purchaseToken: String, packageName: String? = nil) {
        self.productId = productId
        self.purchaseToken = purchaseToken
        self.packageName = packageName
    }
}

public struct TransactionResult: Codable, Sendable, Equatable {
    public var transactionId: String
    public var originalTransactionId: String
    public var productId: String
    public var outcome: RedeemOutcome
    /// True once the grant is durably committed: the app may call finishTransaction.
    public var finishable: Bool
    public init(transactionId: String, originalTransactionId: String, productId: String, outcome: RedeemOutcome, finishable: Bool) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.outcome = outcome
        self.finishable = finishable
    }
}

public struct Entitlement: Codable, Sendable, Equatable {
    public var entitlement: String
    public var productId: String
    public var expiresAtMs: Int64?
    public var originalTransactionId: String
    /// Subscriptions, once Apple sent their renewal state: whether it renews at `expiresAtMs`.
    public var willRenew: Bool?
    /// The renewal charge failed and Apple is retrying it (the app can ask the customer to fix their payment).
    public var inBillingRetry: Bool?
    /// In billing retry with a grace period: access continues until then although `expiresAtMs` has passed.
    public var gracePeriodExpiresAtMs: Int64?
    public init(
        entitlement: String, productId: String, expiresAtMs: Int64? = nil, originalTransactionId: String, willRenew: Bool? = nil,
        inBillingRetry: Bool? = nil, gracePeriodExpiresAtMs: Int64? = nil
    ) {
        self.entitlement = entitlement
        self.productId = productId
        self.expiresAtMs = expiresAtMs
        self.originalTransactionId = originalTransactionId
        self.willRenew = willRenew
        self.inBillingRetry = inBillingRetry
        self.gracePeriodExpiresAtMs = gracePeriodExpiresAtMs
    }
}

public struct RedeemResult: Codable, Sendable, Equatable {
    public var accountId: String
    public var results: [TransactionResult]
    public var balance: Int64
    public var entitlements: [Entitlement]
    /// Coins owed for refunds of spent coins (repaid by later grants before anything can be spent).
    public var owed: Int64
    /// The scope `balance`, `owed` and `entitlements` belong to.
    public var environment: AccountScope
    public init(
        accountId: String, results: [TransactionResult], balance: Int64, entitlements: [Entitlement], owed: Int64 = 0,
        environment: AccountScope = .production
    ) {
        self.accountId = accountId
        self.results = results
        self.balance = balance
        self.entitlements = entitlements
        self.owed = owed
        self.environment = environment
    }
}

public enum FulfillmentRedeem: RPCMethod {
    public typealias Params = RedeemParams
    public typealias Result = RedeemResult
    public static let name = "fulfillment.redeem"
    public static let summary = "Verify a receipt or signed transactions and grant each purchase exactly once."
}

public enum FulfillmentRestore: RPCMethod {
    public typealias Params = RedeemParams
    public typealias Result = RedeemResult
    public static let name = "fulfillment.restore"
    public static let summary = "Re-derive entitlements from a receipt for the signed-in account; never grants consumables."
}

public enum FulfillmentGetEntitlements: RPCMethod {
    public typealias Params = ScopedSessionParams
    public struct Result: Codable, Sendable, Equatable {
        public var entitlements: [Entitlement]
        public var balance: Int64
        public var owed: Int64
        public var environment: AccountScope
        public init(entitlements: [Entitlement], balance: Int64, owed: Int64 = 0, environment: AccountScope = .production) {
            self.entitlements = entitlements
            self.balance = balance
            self.owed = owed
            self.environment = environment
        }
    }
    public static let name = "fulfillment.getEntitlements"
    public static let summary = "The account's active entitlements and coin balance."
}

public struct BalanceResult: Codable, Sendable, Equatable {
    public var balance: Int64
    /// Coins owed for refunds of spent coins; spends are refused while this is above zero.
    public var owed: Int64
    public var environment: AccountScope
    public init(balance: Int64, owed: Int64 = 0, environment: AccountScope = .production) {
        self.balance = balance
        self.owed = owed
        self.environment = environment
    }
}

public enum FulfillmentGetBalance: RPCMethod {
    public typealias Params = ScopedSessionParams
    public typealias Result = BalanceResult
    public static let name = "fulfillment.getBalance"
    public static let summary = "The account's coin balance."
}

public enum FulfillmentSpendCoins: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var session: String
        public var amount: Int64
        /// Applied at most once; reused with other params it is a conflict (1004).
        public var idempotencyKey: String
        public var memo: String?
        public var environment: AccountScope?
        public init(session: String, amount: Int64, idempotencyKey: String, memo: String? = nil, environment: AccountScope? = nil) {
            self.session = session
            self.amount = amount
            self.idempotencyKey = idempotencyKey
            self.memo = memo
            self.environment = environment
        }
    }
    public typealias Result = BalanceResult
    public static let name = "fulfillment.spendCoins"
    public static let summary = "Spend coins once per idempotency key; never below zero."
}

public enum LedgerKind: String, Codable, Sendable, JSONSchemaEnum {
    case grant, spend, reversal
    /// Part of a grant that repaid owed coins (its own row, right after the grant).
    case recovery
    /// A refund Apple reversed: the coins back (the debt the refund made that is still owed forgiven instead).
    case reinstatement
    /// Coins an operator gave or took back (`fulfillment.adjustCoins`), with the reason as its memo; audited.
    case adjustment
}

public struct LedgerEntry: Codable, Sendable, Equatable {
    public var id: Int64
    public var delta: Int64
    public var balance: Int64
    public var kind: LedgerKind
    public var transactionId: String?
    public var memo: String?
    /// Reversals only: coins the refund could not take back because they were already spent (now owed).
    public var shortfall: Int64?
    /// Recoveries only: owed coins this row repaid.
    public var recovered: Int64?
    /// Coins owed after this row (present when above zero or when this row changed it).
    public var owed: Int64?
    public var createdAtMs: Int64
    public init(id: Int64, delta: Int64, balance: Int64, kind: LedgerKind, transactionId: String? = nil, memo: String? = nil, createdAtMs: Int64) {
        self.id = id
        self.delta = delta
        self.balance = balance
        self.kind = kind
        self.transactionId = transactionId
        self.memo = memo
        self.createdAtMs = createdAtMs
    }
}

public enum FulfillmentListLedger: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var session: String
        public var after: Int64?
        public var limit: Int?
        public var environment: AccountScope?
        public init(session: String, after: Int64? = nil, limit: Int? = nil, environment: AccountScope? = nil) {
            self.session = session
            self.after = after
            self.limit = limit
            self.environment = environment
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var entries: [LedgerEntry]
        public var next: Int64?
        public init(entries: [LedgerEntry], next: Int64? = nil) { self.entries = entries; self.next = next }
    }
    public static let name = "fulfillment.listLedger"
    public static let summary = "The account's coin ledger, oldest first, paged by entry id."
}

public struct ContentItem: Codable, Sendable, Equatable {
    public var contentId: String
    public var productId: String
    public var size: Int64
    public var sha256: String
    public init(contentId: String, productId: String, size: Int64, sha256: String) {
        self.contentId = contentId
        self.productId = productId
        self.size = size
        self.sha256 = sha256
    }
}

public enum FulfillmentListContent: RPCMethod {
    public typealias Params = ScopedSessionParams
    public struct Result: Codable, Sendable, Equatable {
        public var content: [ContentItem]
        public init(content: [ContentItem]) { self.content = content }
    }
    public static let name = "fulfillment.listContent"
    public static let summary = "Downloadable content the account is entitled to."
}

public enum FulfillmentReadContent: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var session: String
        public var contentId: String
        public var offset: Int64
        public var length: Int
        public var environment: AccountScope?
        public init(session: String, contentId: String, offset: Int64, length: Int, environment: AccountScope? = nil) {
            self.session = session
            self.contentId = contentId
            self.offset = offset
            self.length = length
            self.environment = environment
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// Base64 of the bytes read.
        public var data: String
        public var offset: Int64
        public var size: Int64
        public var sha256: String
        public init(data: String, offset: Int64, size: Int64, sha256: String) {
            self.data = data
            self.offset = offset
            self.size = size
            self.sha256 = sha256
        }
    }
    public static let name = "fulfillment.readContent"
    public static let summary = "A chunk of an entitled content file (resumable downloads)."
}

public enum FulfillmentContentURL: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var session: String
        public var contentId: String
        public var environment: AccountScope?
        public init(session: String, contentId: String, environment: AccountScope? = nil) {
            self.session = session
            self.contentId = contentId
            self.environment = environment
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// Where the edge serves the file: absolute when fulfillment knows the edge's public URL
        /// (`--content-url-base`), else a path to resolve against the edge's address.
        public var url: String
        /// The URL is refused after this instant (it is signed, not stored: a refund stops new URLs, and
        /// one already issued lives until here).
        public var expiresAtMs: Int64
        public var size: Int64
        public var sha256: String
        public init(url: String, expiresAtMs: Int64, size: Int64, sha256: String) {
            self.url = url
            self.expiresAtMs = expiresAtMs
            self.size = size
            self.sha256 = sha256
        }
    }
    public static let name = "fulfillment.contentURL"
    public static let summary = "A short-lived signed URL that downloads an entitled content file from the edge (HTTP ranges)."
}

public enum FulfillmentApplyNotification: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var signedPayload: String
        /// `receiveNotification` only: answer as soon as the notification is recorded (`pending`) and process it
        /// right after, off the answer's path (the edge's webhook: Apple's sender is not kept waiting).
        public var processLater: Bool?
        /// The suite's internal token: the edge's webhook (and operators) present it; an open port answers nobody else.
        public var internalToken: String?
        public init(signedPayload: String, processLater: Bool? = nil, internalToken: String?) {
            self.signedPayload = signedPayload
            self.processLater = processLater
            self.internalToken = internalToken
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var applied: Bool
        public init(applied: Bool) { self.applied = applied }
    }
    public static let name = "fulfillment.applyNotification"
    /// Apple's notifications reach it through the edge's webhook route, never from apps.
    public static let access = RPCAccess.internal
    public static let summary = "Apply an App Store Server Notification v2 (refunds, revocations, renewals)."
}

public enum FulfillmentRevokeTransaction: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var transactionId: String
        public var reason: String
        /// Who acted (a support console operator's name), kept in the audit log beside the credential.
        public var operatorName: String?
        public init(adminToken: String, transactionId: String, reason: String, operatorName: String? = nil) {
            self.adminToken = adminToken
            self.transactionId = transactionId
            self.reason = reason
            self.operatorName = operatorName
        }
    }
    public typealias Result = EmptyResult
    public static let name = "fulfillment.revokeTransaction"
    public static let summary = "Admin: revoke a transaction's grant (a reversal ledger entry; entitlement removed)."
    public static let access = RPCAccess.admin
}

/// Bounds on coin amounts: every balance change is checked against them, so no arithmetic traps or wraps.
public enum CoinLimits {
    /// The most coins one purchase may grant (coins per unit x quantity). The catalog refuses products
    /// granting more per unit than `maxPerUnit`.
    public static let maxGrant: Int64 = 10_000_000_000
    public static let maxPerUnit: Int64 = 1_000_000_000
    /// The most a wallet may hold.
    public static let maxBalance: Int64 = 1_000_000_000_000_000
}

/// Where a recorded App Store notification is: waiting to be processed (`pending`), done (`applied`),
/// nothing to do (`ignored`: a type this server does not act on, or a purchase whose account is unknown),
/// or given up on after repeated failures (`parked`: listed for administrators, retried by them).
public enum NotificationState: String, Codable, Sendable, JSONSchemaEnum, CaseIterable {
    case pending, applied, ignored, parked
}

public struct NotificationSummary: Codable, Sendable, Equatable {
    public var notificationUUID: String
    public var notificationType: String
    public var subtype: String?
    public var state: NotificationState
    public var attempts: Int
    public var receivedAtMs: Int64
    public var nextAttemptAtMs: Int64?
    public var lastError: String?
    public var processedAtMs: Int64?
    public init(
        notificationUUID: String, notificationType: String, subtype: String?, state: NotificationState, attempts: Int,
        receivedAtMs: Int64, nextAttemptAtMs: Int64?, lastError: String?, processedAtMs: Int64?
    ) {
        self.notificationUUID = notificationUUID
        self.notificationType = notificationType
        self.subtype = subtype
        self.state = state
        self.attempts = attempts
        self.receivedAtMs = receivedAtMs
        self.nextAttemptAtMs = nextAttemptAtMs
        self.lastError = lastError
        self.processedAtMs = processedAtMs
    }
}

public enum FulfillmentReceiveNotification: RPCMethod {
    public typealias Params = FulfillmentApplyNotification.Params
    public struct Result: Codable, Sendable, Equatable {
        public var notificationUUID: String
        /// Recorded durably before this answer; `pending` is processed later (with retries).
        public var state: NotificationState
        /// False when this UUID was already recorded (a redelivery): nothing was done again.
        public var firstDelivery: Bool
        public init(notificationUUID: String, state: NotificationState, firstDelivery: Bool) {
            self.notificationUUID = notificationUUID
            self.state = state
            self.firstDelivery = firstDelivery
        }
    }
    public static let name = "fulfillment.receiveNotification"
    /// The edge's webhook calls it; apps never do.
    public static let access = RPCAccess.internal
    public static let summary = "Verify an App Store Server Notification v2 and record it durably (by notificationUUID), then process it."
}

public enum FulfillmentReceivePlayNotification: RPCMethod {
    public typealias Params = PlayPushDelivery
    public typealias Result = FulfillmentReceiveNotification.Result
    public static let name = "fulfillment.receivePlayNotification"
    /// The edge's Google Play route calls it; apps never do.
    public static let access = RPCAccess.internal
    public static let summary =
        "Verify a Google Play real-time developer notification's push and record it durably (by messageId), then bring the purchase to Google's state."
}

public enum FulfillmentListNotifications: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var state: NotificationState?
        public var limit: Int?
        public init(adminToken: String, state: NotificationState? = nil, limit: Int? = nil) {
            self.adminToken = adminToken
            self.state = state
            self.limit = limit
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var notifications: [NotificationSummary]
        public init(notifications: [NotificationSummary]) { self.notifications = notifications }
    }
    public static let name = "fulfillment.listNotifications"
    public static let access = RPCAccess.admin
    public static let summary = "Recorded App Store notifications, newest first (e.g. the parked ones)."
}

public enum FulfillmentRetryNotification: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var notificationUUID: String
        /// Who retried it, for the audit log (the console passes its operator).
        public var operatorName: String?
        public init(adminToken: String, notificationUUID: String, operatorName: String? = nil) {
            self.adminToken = adminToken
            self.notificationUUID = notificationUUID
            self.operatorName = operatorName
        }
    }
    public typealias Result = NotificationSummary
    public static let name = "fulfillment.retryNotification"
    public static let access = RPCAccess.admin
    public static let summary = "Process a parked (or pending) notification again now; answers where it ended; audited."
}
