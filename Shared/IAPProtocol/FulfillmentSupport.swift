import JSONRPC

// fulfillment.* for operators: orders, grants and extensions by support, reconciliation with Apple, the audit log.

/// One transaction of an order, with what this server knows of it.
public struct OrderLine: Codable, Sendable, Equatable {
    public var transactionId: String
    public var originalTransactionId: String
    public var productId: String
    public var environment: String
    /// The account the purchase (its original transaction) is bound to here; nil: never redeemed here.
    public var ownerAccountId: String?
    public init(transactionId: String, originalTransactionId: String, productId: String, environment: String, ownerAccountId: String?) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.environment = environment
        self.ownerAccountId = ownerAccountId
    }
}

/// Support (admin): the order id on a customer's emailed receipt, looked up at Apple, with who owns each
/// of its purchases here.
public enum FulfillmentLookUpOrder: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var orderId: String
        public init(adminToken: String, orderId: String) {
            self.adminToken = adminToken
            self.orderId = orderId
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var orderId: String
        /// Empty when Apple has no such order for this app.
        public var lines: [OrderLine]
        public init(orderId: String, lines: [OrderLine]) {
            self.orderId = orderId
            self.lines = lines
        }
    }
    public static let name = "fulfillment.lookUpOrder"
    public static let access = RPCAccess.admin
    public static let summary = "Support: an order's purchases (from Apple) and the account each is bound to here."
}

/// Support (admin): binds an order's purchases (looked up at Apple) to the account of `username` and
/// grants them, as a redeem by that account would; a purchase bound to another account stays there unless
/// the ownership policy is `transfer`. Audited; the purchases are tied to the account at Apple too.
public enum FulfillmentGrantOrder: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var orderId: String
        public var username: String
        /// Why (kept in the audit log), e.g. the support ticket.
        public var reason: String
        /// Who acted (the support console's operator), kept in the audit log.
        public var operatorName: String?
        public init(adminToken: String, orderId: String, username: String, reason: String, operatorName: String? = nil) {
            self.adminToken = adminToken
            self.orderId = orderId
            self.username = username
            self.reason = reason
            self.operatorName = operatorName
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var orderId: String
        public var accountId: String
        /// One per purchase in the order, with the redeem outcomes (`granted`, `alreadyGranted`, `ownedByAnotherAccount`, ...).
        public var results: [TransactionResult]
        public init(orderId: String, accountId: String, results: [TransactionResult]) {
            self.orderId = orderId
            self.accountId = accountId
            self.results = results
        }
    }
    public static let name = "fulfillment.grantOrder"
    public static let access = RPCAccess.admin
    public static let summary = "Support: grant an order's purchases (from Apple) to an account by username; audited."
}

/// Support (admin): moves a subscription's renewal date later at Apple (Extend a Subscription Renewal
/// Date) and here; audited.
public enum FulfillmentExtendSubscription: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        /// Any transaction of the subscription: its original transaction id.
        public var originalTransactionId: String
        /// 1-90.
        public var days: Int
        /// Apple's extendReasonCode: 0 undeclared, 1 customer satisfaction, 2 other, 3 service issue or outage.
        public var reasonCode: Int
        /// Why (kept in the audit log).
        public var reason: String
        /// Makes a retry safe: the same id is not extended twice (a new one per call when absent).
        public var requestId: String?
        /// Who acted (the support console's operator), kept in the audit log.
        public var operatorName: String?
        public init(
            adminToken: String, originalTransactionId: String, days: Int, reasonCode: Int, reason: String, requestId: String? = nil,
            operatorName: String? = nil
        ) {
            self.adminToken = adminToken
            self.originalTransactionId = originalTransactionId
            self.days = days
            self.reasonCode = reasonCode
            self.reason = reason
            self.requestId = requestId
            self.operatorName = operatorName
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var originalTransactionId: String
        /// The new end of the subscription.
        public var expiresAtMs: Int64
        /// The account it is bound to here, if any.
        public var accountId: String?
        public init(originalTransactionId: String, expiresAtMs: Int64, accountId: String?) {
            self.originalTransactionId = originalTransactionId
            self.expiresAtMs = expiresAtMs
            self.accountId = accountId
        }
    }
    public static let name = "fulfillment.extendSubscription"
    public static let access = RPCAccess.admin
    public static let summary = "Support: extend a subscription's renewal date at Apple and here; audited."
}

/// Reconciliation (admin; also run by the service on an interval): takes in what Apple sent that the inbox
/// lacks (Get Notification History from a stored checkpoint, with an overlap), and asks Apple for the status
/// of subscriptions whose period ended without news or that are in billing retry (Get All Subscription
/// Statuses). Answers what it changed.
public enum FulfillmentReconcile: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        /// Read Notification History (default true).
        public var notificationHistory: Bool?
        /// Sweep subscription statuses (default true).
        public var subscriptionStatuses: Bool?
        /// Read Google Play's voided purchases and sweep its subscriptions (default true; nothing when verification has no Play
        /// service account).
        public var googlePlay: Bool?
        public init(adminToken: String, notificationHistory: Bool? = nil, subscriptionStatuses: Bool? = nil, googlePlay: Bool? = nil) {
            self.adminToken = adminToken
            self.notificationHistory = notificationHistory
            self.subscriptionStatuses = subscriptionStatuses
            self.googlePlay = googlePlay
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// Notifications Apple listed in the window read.
        public var notificationsSeen: Int
        /// Of those, the ones the inbox did not have (now recorded and processed).
        public var notificationsTakenIn: Int
        public var subscriptionsChecked: Int
        /// Subscriptions whose entitlement or renewal state changed from what Apple answered.
        public var subscriptionsUpdated: Int
        /// Google Play purchases Google lists as voided in the window read.
        public var playVoidsSeen: Int
        /// Of those, the ones not yet taken back here (now recorded in the inbox and processed).
        public var playVoidsTakenIn: Int
        /// Google Play subscriptions whose access ended here without news, asked of Google (once per end).
        public var playSubscriptionsChecked: Int
        /// Of those, the ones Google's answer changed here (a renewal granted).
        public var playSubscriptionsUpdated: Int
        public init(
            notificationsSeen: Int, notificationsTakenIn: Int, subscriptionsChecked: Int, subscriptionsUpdated: Int, playVoidsSeen: Int = 0,
            playVoidsTakenIn: Int = 0, playSubscriptionsChecked: Int = 0, playSubscriptionsUpdated: Int = 0
        ) {
            self.notificationsSeen = notificationsSeen
            self.notificationsTakenIn = notificationsTakenIn
            self.subscriptionsChecked = subscriptionsChecked
            self.subscriptionsUpdated = subscriptionsUpdated
            self.playVoidsSeen = playVoidsSeen
            self.playVoidsTakenIn = playVoidsTakenIn
            self.playSubscriptionsChecked = playSubscriptionsChecked
            self.playSubscriptionsUpdated = playSubscriptionsUpdated
        }
    }
    public static let name = "fulfillment.reconcile"
    public static let access = RPCAccess.admin
    public static let summary =
        "Take in notifications the inbox missed (Apple's Notification History, Google Play's voided purchases) and check stale subscriptions at Apple and Google."
}

/// One administrator action, as the audit log keeps it.
public struct AuditEntry: Codable, Sendable, Equatable {
    public var id: Int64
    public var atMs: Int64
    /// `revoke`, `grantOrder`, `extendSubscription`.
    public var action: String
    public var accountId: String?
    public var transactionId: String?
    public var reason: String
    /// Which admin credential acted: the first 12 hex digits of its SHA-256, never the token.
    public var credential: String
    /// Who acted, when the caller named them (the support console's operator).
    public var operatorName: String?
    public init(
        id: Int64, atMs: Int64, action: String, accountId: String?, transactionId: String?, reason: String, credential: String,
        operatorName: String? = nil
    ) {
        self.id = id
        self.atMs = atMs
        self.action = action
        self.accountId = accountId
        self.transactionId = transactionId
        self.reason = reason
        self.credential = credential
        self.operatorName = operatorName
    }
}

public enum FulfillmentListAudit: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var limit: Int?
        /// Only the entries about this account.
        public var accountId: String?
        public init(adminToken: String, limit: Int? = nil, accountId: String? = nil) {
            self.adminToken = adminToken
            self.limit = limit
            self.accountId = accountId
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// Newest first.
        public var entries: [AuditEntry]
        public init(entries: [AuditEntry]) { self.entries = entries }
    }
    public static let name = "fulfillment.listAudit"
    public static let access = RPCAccess.admin
    public static let summary = "The administrators' audit log, newest first: when, what, which account and transaction, why, which credential."
}

/// One thing fulfillment owes an outside party after a commit (an appAccountToken to set at Apple, ...), kept until
/// delivered.
public struct OutboxEntry: Codable, Sendable, Equatable {
    /// `appAccountToken`, and the kinds later versions add.
    public var kind: String
    /// What it is about (for `appAccountToken`, the original transaction id).
    public var key: String
    /// Failed attempts so far.
    public var attempts: Int
    public var createdAtMs: Int64
    public var nextAttemptAtMs: Int64
    public var lastError: String?
    public init(kind: String, key: String, attempts: Int, createdAtMs: Int64, nextAttemptAtMs: Int64, lastError: String? = nil) {
        self.kind = kind
        self.key = key
        self.attempts = attempts
        self.createdAtMs = createdAtMs
        self.nextAttemptAtMs = nextAttemptAtMs
        self.lastError = lastError
    }
}

public enum FulfillmentListOutbox: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var limit: Int?
        public init(adminToken: String, limit: Int? = nil) {
            self.adminToken = adminToken
            self.limit = limit
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// Oldest first.
        public var items: [OutboxEntry]
        /// How many items are owed to Apple (webhook deliveries are listed too, but counted per endpoint by listWebhooks).
        public var total: Int
        /// How long the oldest item owed to Apple has waited; absent when none is.
        public var oldestAgeMs: Int64?
        public init(items: [OutboxEntry], total: Int, oldestAgeMs: Int64? = nil) {
            self.items = items
            self.total = total
            self.oldestAgeMs = oldestAgeMs
        }
    }
    public static let name = "fulfillment.listOutbox"
    public static let access = RPCAccess.admin
    public static let summary = "What is owed to outside parties after commits (ties at Apple, ...), oldest first, with attempts and last error."
}
