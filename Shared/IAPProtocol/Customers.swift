import JSONRPC

// What the support console reads and does about one customer: the account at accounts, everything fulfillment holds
// about it, and coin adjustments (the ledger kind `adjustment`).

/// Internal: an account by its id (the support console shows who a customer is).
public enum AccountsGetAccount: RPCMethod {
    /// `{accountId, internalToken}`.
    public typealias Params = AccountsConsumptionProfile.Params
    public struct Result: Codable, Sendable, Equatable {
        public var accountId: String
        public var username: String
        public var appAccountToken: String
        public var createdAtMs: Int64
        public init(accountId: String, username: String, appAccountToken: String, createdAtMs: Int64) {
            self.accountId = accountId
            self.username = username
            self.appAccountToken = appAccountToken
            self.createdAtMs = createdAtMs
        }
    }
    public static let name = "accounts.getAccount"
    public static let summary = "Internal: an account's username, appAccountToken and creation time by its id."
    public static let access = RPCAccess.internal
}

/// Where one purchase stands here.
public enum PurchaseState: String, Codable, Sendable, JSONSchemaEnum {
    /// Granted and in force.
    case granted
    /// Refunded by Apple: its grant taken back.
    case refunded
    /// Refunded, then the refund reversed: its grant given back.
    case reinstated
    /// Revoked for another reason (Family Sharing, an operator).
    case revoked
}

/// One purchase (a processed transaction) of a customer, with what it granted and where it stands.
public struct CustomerPurchase: Codable, Sendable, Equatable {
    public var transactionId: String
    public var originalTransactionId: String
    public var productId: String
    /// The purchase's environment (`Production`, `Sandbox`, `Xcode`).
    public var environment: String
    /// The account scope it granted into.
    public var scope: AccountScope
    /// The catalog's grant kind when it was processed (`coins`, `permanent`, `pass`, `subscription`).
    public var grantKind: String
    public var coinsGranted: Int64
    public var purchaseDateMs: Int64
    public var expiresAtMs: Int64?
    public var processedAtMs: Int64
    public var state: PurchaseState
    public var revokedAtMs: Int64?
    public var revokeReason: String?
    /// What was paid, in milliunits of `currency`, from the signed transaction; nil: unpriced (receipts carry none).
    public var price: Int64?
    public var currency: String?
    public init(
        transactionId: String, originalTransactionId: String, productId: String, environment: String, scope: AccountScope,
        grantKind: String, coinsGranted: Int64, purchaseDateMs: Int64, expiresAtMs: Int64?, processedAtMs: Int64, state: PurchaseState,
        revokedAtMs: Int64?, revokeReason: String?, price: Int64? = nil, currency: String? = nil
    ) {
        self.price = price
        self.currency = currency
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.environment = environment
        self.scope = scope
        self.grantKind = grantKind
        self.coinsGranted = coinsGranted
        self.purchaseDateMs = purchaseDateMs
        self.expiresAtMs = expiresAtMs
        self.processedAtMs = processedAtMs
        self.state = state
        self.revokedAtMs = revokedAtMs
        self.revokeReason = revokeReason
    }
}

/// A customer's coins and access in one scope (Production or Sandbox), with the newest ledger rows.
public struct CustomerScope: Codable, Sendable, Equatable {
    public var environment: AccountScope
    public var balance: Int64
    public var owed: Int64
    /// In force now, with the renewal state of subscriptions.
    public var entitlements: [Entitlement]
    /// Newest first; each row carries the balance after it.
    public var ledger: [LedgerEntry]
    public init(environment: AccountScope, balance: Int64, owed: Int64, entitlements: [Entitlement], ledger: [LedgerEntry]) {
        self.environment = environment
        self.balance = balance
        self.owed = owed
        self.entitlements = entitlements
        self.ledger = ledger
    }
}

/// One recorded App Store notification about a customer's purchase.
public struct CustomerNotification: Codable, Sendable, Equatable {
    public var originalTransactionId: String
    public var notification: NotificationSummary
    public init(originalTransactionId: String, notification: NotificationSummary) {
        self.originalTransactionId = originalTransactionId
        self.notification = notification
    }
}

/// Support (admin): everything fulfillment holds about one customer, found by account id or by any of its purchases'
/// transaction or original transaction ids.
public enum FulfillmentGetCustomer: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        /// Exactly one of `accountId` and `transactionId`.
        public var accountId: String?
        /// A transaction id or original transaction id of one of the customer's purchases.
        public var transactionId: String?
        /// Ledger rows per scope, newest first (default 100, at most 500).
        public var ledgerLimit: Int?
        public init(adminToken: String, accountId: String? = nil, transactionId: String? = nil, ledgerLimit: Int? = nil) {
            self.adminToken = adminToken
            self.accountId = accountId
            self.transactionId = transactionId
            self.ledgerLimit = ledgerLimit
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var accountId: String
        /// Production, then Sandbox.
        public var scopes: [CustomerScope]
        /// Newest first.
        public var purchases: [CustomerPurchase]
        /// The notifications recorded about the customer's purchases, newest first (at most 200).
        public var notifications: [CustomerNotification]
        public init(accountId: String, scopes: [CustomerScope], purchases: [CustomerPurchase], notifications: [CustomerNotification]) {
            self.accountId = accountId
            self.scopes = scopes
            self.purchases = purchases
            self.notifications = notifications
        }
    }
    public static let name = "fulfillment.getCustomer"
    public static let access = RPCAccess.admin
    public static let summary = "Support: a customer's wallets, entitlements, purchases, ledger and notifications, by account or transaction id."
}

/// Support (admin): gives coins (`delta` > 0) or takes them back (`delta` < 0) as one ledger row of kind `adjustment`,
/// never an edit of the balance; audited with the reason and the operator. Once per idempotency key.
public enum FulfillmentAdjustCoins: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var accountId: String
        public var environment: AccountScope?
        /// Not 0; a take-back is refused past the balance (`insufficientFunds`).
        public var delta: Int64
        /// Why (the ledger row's memo and the audit entry's reason).
        public var reason: String
        public var idempotencyKey: String
        /// Who acted (the support console's operator).
        public var operatorName: String?
        public init(
            adminToken: String, accountId: String, environment: AccountScope? = nil, delta: Int64, reason: String, idempotencyKey: String,
            operatorName: String? = nil
        ) {
            self.adminToken = adminToken
            self.accountId = accountId
            self.environment = environment
            self.delta = delta
            self.reason = reason
            self.idempotencyKey = idempotencyKey
            self.operatorName = operatorName
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// The adjustment's ledger row (the first one's, for a repeated key).
        public var entry: LedgerEntry
        public var balance: Int64
        public var owed: Int64
        public var environment: AccountScope
        /// False when the idempotency key had already adjusted this account: nothing was done again.
        public var applied: Bool
        public init(entry: LedgerEntry, balance: Int64, owed: Int64, environment: AccountScope, applied: Bool) {
            self.entry = entry
            self.balance = balance
            self.owed = owed
            self.environment = environment
            self.applied = applied
        }
    }
    public static let name = "fulfillment.adjustCoins"
    public static let access = RPCAccess.admin
    public static let summary = "Support: give or take back coins as an audited ledger adjustment, once per idempotency key."
}

/// Internal: ends every session of an account (support signs a customer out of all devices).
public enum AccountsRevokeSessions: RPCMethod {
    /// `{accountId, internalToken}`.
    public typealias Params = AccountsConsumptionProfile.Params
    public struct Result: Codable, Sendable, Equatable {
        /// How many sessions ended.
        public var ended: Int
        public init(ended: Int) { self.ended = ended }
    }
    public static let name = "accounts.revokeSessions"
    public static let summary = "Internal: end every session of an account (signed out of all devices)."
    public static let access = RPCAccess.internal
}

/// Support (admin): signs a customer out of every device (through accounts); audited with the reason and operator.
public enum FulfillmentSignOutCustomer: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var accountId: String
        public var reason: String
        public var operatorName: String?
        public init(adminToken: String, accountId: String, reason: String, operatorName: String? = nil) {
            self.adminToken = adminToken
            self.accountId = accountId
            self.reason = reason
            self.operatorName = operatorName
        }
    }
    public typealias Result = AccountsRevokeSessions.Result
    public static let name = "fulfillment.signOutCustomer"
    public static let access = RPCAccess.admin
    public static let summary = "Support: sign a customer out of all devices (accounts ends every session); audited."
}

/// Support (admin): sets a parked notification aside for good (`ignored`, the reason as its last error); audited. Only
/// a parked one: a pending one is still being tried.
public enum FulfillmentDismissNotification: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var notificationUUID: String
        public var reason: String
        public var operatorName: String?
        public init(adminToken: String, notificationUUID: String, reason: String, operatorName: String? = nil) {
            self.adminToken = adminToken
            self.notificationUUID = notificationUUID
            self.reason = reason
            self.operatorName = operatorName
        }
    }
    public typealias Result = NotificationSummary
    public static let name = "fulfillment.dismissNotification"
    public static let access = RPCAccess.admin
    public static let summary = "Support: set a parked notification aside (ignored, with the reason); audited."
}

/// A support operator's name as it travels into fulfillment's audit log (`operatorName`) and as the console keeps it:
/// 1-64 letters, digits, `.`, `_`, `-`, `@`.
public enum OperatorName {
    public static func isValid(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count)
            && name.utf8.allSatisfy { c in
                (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || [0x2E, 0x5F, 0x2D, 0x40].contains(c)
            }
    }
}
