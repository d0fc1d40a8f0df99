import JSONRPC

/// What happened to a customer's money or access, named in the past tense (docs/events.md lists each with its fields).
/// Appended by fulfillment in the same transaction as the change: an event exists if and only if its change committed.
public enum FulfillmentEventType: String, Codable, Sendable, JSONSchemaEnum {
    /// Coins, a permanent unlock or a pass granted by a purchase.
    case purchaseGranted = "purchase.granted"
    /// A purchase another account held moved to this one (the `transfer` ownership policy).
    case purchaseRestored = "purchase.restored"
    /// The other side of `purchase.restored`: the account that held the purchase lost it.
    case purchaseTransferred = "purchase.transferred"
    /// Refunded by Apple: its coins taken back (what was already spent is owed, `debt`) or its access removed.
    case purchaseRefunded = "purchase.refunded"
    /// A refund Apple reversed: the coins or the access given back.
    case purchaseReinstated = "purchase.reinstated"
    /// Revoked for another reason than a refund (Family Sharing revoked, an operator's revocation).
    case purchaseRevoked = "purchase.revoked"
    /// A pass queued behind one that was refunded or revoked moved earlier (its new `entitlementEndsAtMs`).
    case purchaseRescheduled = "purchase.rescheduled"
    case subscriptionStarted = "subscription.started"
    case subscriptionRenewed = "subscription.renewed"
    /// A period of another plan of the subscription group (an upgrade now, a downgrade at its renewal).
    case subscriptionPlanChanged = "subscription.planChanged"
    /// Its end moved later by a renewal date extension (one subscriber's, or a mass extension's).
    case subscriptionExtended = "subscription.extended"
    /// Apple said it expired (its renewal info now names why: `expirationIntent`).
    case subscriptionExpired = "subscription.expired"
    case subscriptionAutoRenewDisabled = "subscription.autoRenewDisabled"
    case subscriptionAutoRenewEnabled = "subscription.autoRenewEnabled"
    /// A renewal charge failed and Apple's billing grace period keeps access until `gracePeriodEndsAtMs`.
    case subscriptionGracePeriodEntered = "subscription.gracePeriodEntered"
    /// A renewal charge failed without a grace period: Apple retries the charge, access has ended meanwhile.
    case subscriptionBillingRetryEntered = "subscription.billingRetryEntered"
    /// A charge Apple was retrying went through.
    case subscriptionRecovered = "subscription.recovered"
    case coinsSpent = "coins.spent"
    /// An operator gave coins (`delta` > 0) or took them back (`delta` < 0) as a ledger adjustment, with the `reason`.
    case coinsAdjusted = "coins.adjusted"
    /// A grant repaid coins a refund left owed.
    case debtRecovered = "debt.recovered"
    /// An operator's audited action about this account (`action`, `reason`); its effects have their own events.
    case supportActionTaken = "support.actionTaken"
}

/// One event of the feed, the same object `fulfillment.listEvents` answers and a webhook delivers. The state after the
/// change is at the top level (`balance`, `owed`, and `entitlementEndsAtMs` for events about an entitlement), so a
/// receiver can act without calling back.
public struct FulfillmentEvent: Codable, Sendable, Equatable {
    /// Stable: the same event always has the same id (a webhook's `webhook-id`).
    public var id: String
    /// Where it is in the feed: pass it as `after` to read what follows.
    public var cursor: String
    public var accountId: String
    /// 1, 2, 3, ... per account, in the order the account's changes committed.
    public var sequence: Int64
    public var type: FulfillmentEventType
    public var occurredAtMs: Int64
    /// The purchase's store, `appStore` or `googlePlay`; `appStore` for events about no purchase (spends, adjustments).
    public var store: String
    /// The purchase's environment (`Production`, `Sandbox`, `Xcode`); for spends, the scope's.
    public var environment: String
    /// The account's wallet and entitlements this event is about.
    public var scope: AccountScope
    /// The scope's coins after the change.
    public var balance: Int64
    /// Coins the scope owes after the change (refunds of coins already spent).
    public var owed: Int64
    /// Events about an entitlement: its name, and when access to it ends after the change (absent: never; a refund or
    /// revocation ends it at once).
    public var entitlement: String?
    public var entitlementEndsAtMs: Int64?
    public var productId: String?
    public var transactionId: String?
    public var originalTransactionId: String?
    /// Coins the change moved (negative: taken).
    public var delta: Int64?
    /// Coins the change added to what is owed (a refund of spent coins).
    public var debt: Int64?
    /// Owed coins the change repaid or forgave.
    public var recovered: Int64?
    /// Why: a revocation's reason, a spend's memo, an operator's reason.
    public var reason: String?
    /// `purchase.restored`: the account it came from; `purchase.transferred`: the account it went to.
    public var otherAccountId: String?
    /// `support.actionTaken`: the audited action (`grantOrder`, `extendSubscription`, ...).
    public var action: String?
    /// Renewal events: whether it will renew, and the end of a billing grace period.
    public var willRenew: Bool?
    public var gracePeriodEndsAtMs: Int64?
    /// `subscription.expired`: Apple's expirationIntent (1 cancelled, 2 billing error, 3 price increase declined, 4 product unavailable).
    public var expirationIntent: Int?

    public init(
        id: String, cursor: String, accountId: String, sequence: Int64, type: FulfillmentEventType, occurredAtMs: Int64,
        store: String = "appStore", environment: String, scope: AccountScope, balance: Int64, owed: Int64
    ) {
        self.id = id
        self.cursor = cursor
        self.accountId = accountId
        self.sequence = sequence
        self.type = type
        self.occurredAtMs = occurredAtMs
        self.store = store
        self.environment = environment
        self.scope = scope
        self.balance = balance
        self.owed = owed
    }
}

public enum FulfillmentListEvents: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        /// A cursor from an earlier answer (`next`, or an event's `cursor`); absent or "0": from the first event kept.
        public var after: String?
        /// 1-1000 (default 100).
        public var limit: Int?
        public var accountId: String?
        public var types: [FulfillmentEventType]?
        public init(adminToken: String, after: String? = nil, limit: Int? = nil, accountId: String? = nil, types: [FulfillmentEventType]? = nil) {
            self.adminToken = adminToken
            self.after = after
            self.limit = limit
            self.accountId = accountId
            self.types = types
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// In commit order; a full page (`limit` events) means more may follow.
        public var events: [FulfillmentEvent]
        /// Pass as `after` to read on: the last event's cursor, or `after` itself when nothing new committed.
        public var next: String
        public init(events: [FulfillmentEvent], next: String) {
            self.events = events
            self.next = next
        }
    }
    public static let name = "fulfillment.listEvents"
    public static let access = RPCAccess.admin
    public static let summary = "The event feed: every change of a customer's money or access, in commit order, after a cursor."
}

// MARK: webhooks

/// A webhook endpoint as operators see it (its secret never: shown once, by `addWebhook` and `rotateWebhookSecret`).
public struct WebhookEndpoint: Codable, Sendable, Equatable {
    public var id: String
    public var url: String
    /// Only these types (absent: all).
    public var types: [FulfillmentEventType]?
    /// Only these environments (absent: all).
    public var environments: [String]?
    public var allowPrivateAddress: Bool
    /// `active`, `paused` (by an operator), or `failing` (a delivery failed for three days: nothing is sent until an
    /// operator redelivers).
    public var state: String
    public var createdAtMs: Int64
    /// Until when the secret before the last rotation still signs beside the new one.
    public var previousSecretValidUntilMs: Int64?
    /// Accounts whose events wait for this endpoint, and since when the oldest waits.
    public var backlog: Int
    public var oldestWaitingSinceMs: Int64?
    public var lastError: String?
    public init(
        id: String, url: String, types: [FulfillmentEventType]?, environments: [String]?, allowPrivateAddress: Bool, state: String,
        createdAtMs: Int64, previousSecretValidUntilMs: Int64? = nil, backlog: Int = 0, oldestWaitingSinceMs: Int64? = nil,
        lastError: String? = nil
    ) {
        self.id = id
        self.url = url
        self.types = types
        self.environments = environments
        self.allowPrivateAddress = allowPrivateAddress
        self.state = state
        self.createdAtMs = createdAtMs
        self.previousSecretValidUntilMs = previousSecretValidUntilMs
        self.backlog = backlog
        self.oldestWaitingSinceMs = oldestWaitingSinceMs
        self.lastError = lastError
    }
}

public enum FulfillmentAddWebhook: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        /// `https://` (or `http://`); its host may not be a private, loopback or link-local address unless
        /// `allowPrivateAddress`.
        public var url: String
        public var types: [FulfillmentEventType]?
        /// `Production`, `Sandbox`, `Xcode`.
        public var environments: [String]?
        public var allowPrivateAddress: Bool?
        public init(
            adminToken: String, url: String, types: [FulfillmentEventType]? = nil, environments: [String]? = nil, allowPrivateAddress: Bool? = nil
        ) {
            self.adminToken = adminToken
            self.url = url
            self.types = types
            self.environments = environments
            self.allowPrivateAddress = allowPrivateAddress
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var id: String
        /// `whsec_` and base64 (Standard Webhooks): shown this once, never again.
        public var secret: String
        public init(id: String, secret: String) {
            self.id = id
            self.secret = secret
        }
    }
    public static let name = "fulfillment.addWebhook"
    public static let access = RPCAccess.admin
    public static let summary = "Adds a webhook endpoint: events from now on are delivered to it, signed; answers its secret once."
}

/// `{adminToken, id}`: the params of the methods about one endpoint.
public struct WebhookParams: Codable, Sendable, Equatable {
    public var adminToken: String
    public var id: String
    public init(adminToken: String, id: String) {
        self.adminToken = adminToken
        self.id = id
    }
}

public enum FulfillmentRotateWebhookSecret: RPCMethod {
    public typealias Params = WebhookParams
    public struct Result: Codable, Sendable, Equatable {
        public var secret: String
        /// Until then the old secret signs too (24 hours).
        public var previousSecretValidUntilMs: Int64
        public init(secret: String, previousSecretValidUntilMs: Int64) {
            self.secret = secret
            self.previousSecretValidUntilMs = previousSecretValidUntilMs
        }
    }
    public static let name = "fulfillment.rotateWebhookSecret"
    public static let access = RPCAccess.admin
    public static let summary = "A new secret for an endpoint, shown once; the old one keeps signing beside it for 24 hours."
}

public enum FulfillmentListWebhooks: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public init(adminToken: String) { self.adminToken = adminToken }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var webhooks: [WebhookEndpoint]
        public init(webhooks: [WebhookEndpoint]) { self.webhooks = webhooks }
    }
    public static let name = "fulfillment.listWebhooks"
    public static let access = RPCAccess.admin
    public static let summary = "The webhook endpoints, with their state and backlog (never their secrets)."
}

public enum FulfillmentPauseWebhook: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var id: String
        /// false: resume (default true).
        public var paused: Bool?
        public init(adminToken: String, id: String, paused: Bool? = nil) {
            self.adminToken = adminToken
            self.id = id
            self.paused = paused
        }
    }
    public typealias Result = WebhookEndpoint
    public static let name = "fulfillment.pauseWebhook"
    public static let access = RPCAccess.admin
    public static let summary = "Pauses an endpoint's deliveries (its events wait), or resumes them with paused: false."
}

public enum FulfillmentDeleteWebhook: RPCMethod {
    public typealias Params = WebhookParams
    public typealias Result = EmptyResult
    public static let name = "fulfillment.deleteWebhook"
    public static let access = RPCAccess.admin
    public static let summary = "Deletes an endpoint, what it was owed and its delivery log."
}

public enum FulfillmentRedeliverWebhook: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var id: String
        /// Every event after this cursor is delivered again ("0": everything kept).
        public var after: String
        public init(adminToken: String, id: String, after: String) {
            self.adminToken = adminToken
            self.id = id
            self.after = after
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// Accounts whose events after the cursor are owed again.
        public var accounts: Int
        public init(accounts: Int) { self.accounts = accounts }
    }
    public static let name = "fulfillment.redeliverWebhook"
    public static let access = RPCAccess.admin
    public static let summary = "Delivers every event after a cursor again, and makes a failing or paused endpoint active."
}

/// One delivery attempt of one event to one endpoint.
public struct WebhookDelivery: Codable, Sendable, Equatable {
    public var eventId: String
    public var accountId: String
    public var sequence: Int64
    public var attemptedAtMs: Int64
    /// The HTTP status answered; absent when none came (refused address, timeout, connection failure).
    public var status: Int?
    public var latencyMs: Int64
    public var error: String?
    public init(
        eventId: String, accountId: String, sequence: Int64, attemptedAtMs: Int64, status: Int?, latencyMs: Int64, error: String?
    ) {
        self.eventId = eventId
        self.accountId = accountId
        self.sequence = sequence
        self.attemptedAtMs = attemptedAtMs
        self.status = status
        self.latencyMs = latencyMs
        self.error = error
    }
}

public enum FulfillmentListDeliveries: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var id: String
        /// 1-1000 (default 100).
        public var limit: Int?
        public init(adminToken: String, id: String, limit: Int? = nil) {
            self.adminToken = adminToken
            self.id = id
            self.limit = limit
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// Newest first.
        public var deliveries: [WebhookDelivery]
        public init(deliveries: [WebhookDelivery]) { self.deliveries = deliveries }
    }
    public static let name = "fulfillment.listDeliveries"
    public static let access = RPCAccess.admin
    public static let summary = "An endpoint's delivery attempts, newest first: each event's status and latency."
}
