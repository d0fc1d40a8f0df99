import JSONRPC

// play.* — the local Google Play simulator (development and tests only; docs/services/play-sim.md).

/// The service-account key the simulator issues, as Google's key file is.
public enum PlayServiceAccountKey: RPCMethod {
    public typealias Params = EmptyParams
    public struct Result: Codable, Sendable, Equatable {
        /// The key file's JSON text (`type`, `client_email`, `private_key`, `token_uri` naming the simulator, ...): write it
        /// to a file readable only by its owner.
        public var keyFile: String
        public var clientEmail: String
        public init(keyFile: String, clientEmail: String) {
            self.keyFile = keyFile
            self.clientEmail = clientEmail
        }
    }
    public static let name = "play.serviceAccountKey"
    public static let summary = "The service-account key file the simulator's OAuth token endpoint accepts (JSON, with the private key)."
}

/// A subscription base plan's billing period (ISO 8601, as Play Console writes them).
public enum PlayBillingPeriod: String, Codable, Sendable, JSONSchemaEnum {
    case P1W, P1M, P3M, P6M, P1Y
}

/// How a plan change replaces the plan it links (BillingClient's SubscriptionProductReplacementParams.ReplacementMode):
/// `CHARGE_FULL_PRICE` takes effect now with a full period of the new plan; `DEFERRED` issues the new purchase now, and the
/// new plan takes effect when the old item expires.
public enum PlayReplacementMode: String, Codable, Sendable, JSONSchemaEnum {
    case CHARGE_FULL_PRICE, DEFERRED
}

/// Google's two kinds of product (BillingClient.ProductType).
public enum PlayProductType: String, Codable, Sendable, JSONSchemaEnum {
    case inapp, subs
}

public enum PlayPurchaseProduct: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var packageName: String
        /// The one-time product's id, or the subscription's (with `basePlanId`).
        public var productId: String
        /// Present: a subscription of this base plan.
        public var basePlanId: String?
        public var offerId: String?
        /// The base plan's period (default P1M; the simulator counts a month as 30 days).
        public var billingPeriod: PlayBillingPeriod?
        /// What the app passed to BillingFlowParams (the suite: the account's appAccountToken). At most 64 characters.
        public var obfuscatedExternalAccountId: String?
        public var obfuscatedExternalProfileId: String?
        /// One-time products: 1-10 (default 1).
        public var quantity: Int?
        /// `inapp` (a one-time product) or `subs` (a subscription, which needs `basePlanId`); absent: `subs` when a base
        /// plan is named.
        public var productType: PlayProductType?
        /// A license tester's purchase: test card, accelerated periods, the five-minute acknowledgement window.
        public var testPurchase: Bool?
        /// A subscription replacing (upgrading, downgrading, re-signing up to) this purchase token of the same package.
        public var linkedPurchaseToken: String?
        /// With `linkedPurchaseToken`: when the new plan takes effect (default CHARGE_FULL_PRICE, at once).
        public var replacementMode: PlayReplacementMode?
        /// ISO 3166-1 alpha-2 (default US).
        public var regionCode: String?
        /// Price in micros of `currency` (defaults 990000 and USD).
        public var priceMicros: Int64?
        public var currency: String?
        /// Subscriptions: the base plan's grace period (default 7 days; tests: 5 minutes) and account hold (default 30
        /// days; tests: 10 minutes); 0 turns either off.
        public var gracePeriodDays: Int?
        public var accountHoldDays: Int?
        public init(
            packageName: String, productId: String, basePlanId: String? = nil, offerId: String? = nil, billingPeriod: PlayBillingPeriod? = nil,
            obfuscatedExternalAccountId: String? = nil, obfuscatedExternalProfileId: String? = nil, quantity: Int? = nil,
            testPurchase: Bool? = nil, productType: PlayProductType? = nil,
            linkedPurchaseToken: String? = nil, regionCode: String? = nil, priceMicros: Int64? = nil, currency: String? = nil,
            gracePeriodDays: Int? = nil, accountHoldDays: Int? = nil, replacementMode: PlayReplacementMode? = nil
        ) {
            self.packageName = packageName
            self.productId = productId
            self.basePlanId = basePlanId
            self.offerId = offerId
            self.billingPeriod = billingPeriod
            self.obfuscatedExternalAccountId = obfuscatedExternalAccountId
            self.obfuscatedExternalProfileId = obfuscatedExternalProfileId
            self.quantity = quantity
            self.testPurchase = testPurchase
            self.productType = productType
            self.linkedPurchaseToken = linkedPurchaseToken
            self.regionCode = regionCode
            self.priceMicros = priceMicros
            self.currency = currency
            self.gracePeriodDays = gracePeriodDays
            self.accountHoldDays = accountHoldDays
            self.replacementMode = replacementMode
        }
    }
    public typealias Result = PlayPurchaseState
    public static let name = "play.purchase"
    public static let summary = "Buy a one-time product or subscribe to a base plan, as a Play customer; returns the purchase token."
}

/// A purchase as the simulator sees it (what `play.*` methods answer).
public struct PlayPurchaseState: Codable, Sendable, Equatable {
    public var purchaseToken: String
    public var packageName: String
    public var productId: String
    public var basePlanId: String?
    /// Every order, oldest first (a subscription's renewals each have one).
    public var orderIds: [String]
    /// The latest order (the purchase's only one, for one-time products).
    public var orderId: String?
    /// `purchased` or `canceled` for one-time products; for subscriptions `active`, `canceled`, `inGracePeriod`, `onHold`,
    /// `paused` or `expired`.
    public var state: String
    public var acknowledged: Bool
    public var consumed: Bool
    public var quantity: Int
    public var refundableQuantity: Int
    public var expiryTimeMs: Int64?
    public var autoRenewing: Bool?
    public var test: Bool
    public var acknowledgementDeadlineMs: Int64?
    public init(
        purchaseToken: String, packageName: String, productId: String, basePlanId: String?, orderIds: [String], state: String,
        acknowledged: Bool, consumed: Bool, quantity: Int, refundableQuantity: Int, expiryTimeMs: Int64?, autoRenewing: Bool?, test: Bool,
        acknowledgementDeadlineMs: Int64?
    ) {
        self.purchaseToken = purchaseToken
        self.packageName = packageName
        self.productId = productId
        self.basePlanId = basePlanId
        self.orderIds = orderIds
        self.orderId = orderIds.last
        self.state = state
        self.acknowledged = acknowledged
        self.consumed = consumed
        self.quantity = quantity
        self.refundableQuantity = refundableQuantity
        self.expiryTimeMs = expiryTimeMs
        self.autoRenewing = autoRenewing
        self.test = test
        self.acknowledgementDeadlineMs = acknowledgementDeadlineMs
    }
}

public struct PlayPurchaseToken: Codable, Sendable, Equatable {
    public var purchaseToken: String
    public init(purchaseToken: String) { self.purchaseToken = purchaseToken }
}

public enum PlayGetPurchase: RPCMethod {
    public typealias Params = PlayPurchaseToken
    public typealias Result = PlayPurchaseState
    public static let name = "play.getPurchase"
    public static let summary = "A purchase's state as the simulator keeps it (acknowledged, consumed, orders, expiry)."
}

/// Something the customer (or their bank) does to a subscription.
public enum PlaySubscriptionAction: String, Codable, Sendable, JSONSchemaEnum {
    /// Turns auto-renew off (SUBSCRIPTION_CANCELED); access lasts to the expiry.
    case cancel
    /// Turns it back on before the expiry (SUBSCRIPTION_RESTARTED).
    case restart
    /// The payment method fails from the next renewal on: grace period, then account hold, then expiry.
    case declinePayment
    /// The payment method works again; in grace or on hold the subscription recovers now (SUBSCRIPTION_RECOVERED).
    case fixPayment
    /// Pauses from the next renewal for `pauseDays` (SUBSCRIPTION_PAUSE_SCHEDULE_CHANGED, then SUBSCRIPTION_PAUSED).
    case pause
    /// Ends a pause now (SUBSCRIPTION_RECOVERED), or drops a pause not yet started.
    case resume
}

public enum PlaySubscriptionEvent: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var purchaseToken: String
        public var action: PlaySubscriptionAction
        /// For `pause`: 7-90 days.
        public var pauseDays: Int?
        public init(purchaseToken: String, action: PlaySubscriptionAction, pauseDays: Int? = nil) {
            self.purchaseToken = purchaseToken
            self.action = action
            self.pauseDays = pauseDays
        }
    }
    public typealias Result = PlayPurchaseState
    public static let name = "play.subscriptionEvent"
    public static let summary = "Cancel, restart, pause or resume a subscription, or make its payments fail or work again."
}

/// Who voided a purchase (VoidedPurchase.voidedSource).
public enum PlayVoidSource: String, Codable, Sendable, JSONSchemaEnum {
    case user, developer, google
}

/// Why (VoidedPurchase.voidedReason; `unacknowledgedPurchase` is Google's own, after three days).
public enum PlayVoidReason: String, Codable, Sendable, JSONSchemaEnum {
    case other, remorse, notReceived, defective, accidentalPurchase, fraud, friendlyFraud, chargeback
}

public enum PlayRefund: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var purchaseToken: String
        /// Default `user`.
        public var source: PlayVoidSource?
        /// Default `remorse` (`chargeback`: a chargeback).
        public var reason: PlayVoidReason?
        /// One-time products bought in a quantity: refund only this many (a quantity-based partial refund); absent: all.
        public var quantity: Int?
        public init(purchaseToken: String, source: PlayVoidSource? = nil, reason: PlayVoidReason? = nil, quantity: Int? = nil) {
            self.purchaseToken = purchaseToken
            self.source = source
            self.reason = reason
            self.quantity = quantity
        }
    }
    public typealias Result = PlayPurchaseState
    public static let name = "play.refund"
    public static let summary = "Refund and revoke a purchase outside the app (a refund, a chargeback): a voided purchase and its notification."
}

public enum PlayAdvanceClock: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var seconds: Int64
        public init(seconds: Int64) { self.seconds = seconds }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var nowMs: Int64
        /// Real-time developer notifications the move recorded (renewals, expiries, revocations of unacknowledged purchases).
        public var notifications: Int
        public init(nowMs: Int64, notifications: Int) {
            self.nowMs = nowMs
            self.notifications = notifications
        }
    }
    public static let name = "play.advanceClock"
    public static let summary = "Move the simulator's clock forward: renewals, grace, hold, expiries and the three-day refunds fall due."
}

public enum PlaySetPushEndpoint: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        /// Where real-time developer notifications are POSTed as a Pub/Sub push subscription would (absent: nowhere).
        public var url: String?
        /// The OIDC token's `aud` (default: the URL, as Pub/Sub's).
        public var audience: String?
        /// The service account the pushes authenticate as, the token's `email` (default: the simulator's push account,
        /// `rtdn-push@<project>.iam.gserviceaccount.com`).
        public var serviceAccountEmail: String?
        public init(url: String? = nil, audience: String? = nil, serviceAccountEmail: String? = nil) {
            self.url = url
            self.audience = audience
            self.serviceAccountEmail = serviceAccountEmail
        }
    }
    public typealias Result = EmptyResult
    public static let name = "play.setPushEndpoint"
    public static let summary = "Where real-time developer notifications are pushed, with which OIDC audience."
}

public enum PlaySetPushFault: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        /// Percent of pushes that never arrive (retried later, as Pub/Sub would after the deadline).
        public var dropPercent: Int?
        /// Percent of delivered pushes sent twice.
        public var duplicatePercent: Int?
        /// Wait before each push, milliseconds (0-10,000).
        public var delayMs: Int?
        /// Push what is due in a random order.
        public var reorder: Bool?
        public init(dropPercent: Int? = nil, duplicatePercent: Int? = nil, delayMs: Int? = nil, reorder: Bool? = nil) {
            self.dropPercent = dropPercent
            self.duplicatePercent = duplicatePercent
            self.delayMs = delayMs
            self.reorder = reorder
        }
    }
    public typealias Result = EmptyResult
    public static let name = "play.setPushFault"
    public static let summary = "Make push deliveries misbehave: drop, duplicate, delay, reorder."
}

public enum PlayDeliverNotifications: RPCMethod {
    public typealias Params = EmptyParams
    public struct Result: Codable, Sendable, Equatable {
        public var attempted: Int
        public var delivered: Int
        /// Notifications still waiting for a 2xx.
        public var pending: Int
        public init(attempted: Int, delivered: Int, pending: Int) {
            self.attempted = attempted
            self.delivered = delivered
            self.pending = pending
        }
    }
    public static let name = "play.deliverNotifications"
    public static let summary = "Push every notification due now and answer when each push has an answer."
}

/// How the simulator's Play Developer API misbehaves (`play.setFault`).
public enum PlayFaultMode: String, Codable, Sendable, JSONSchemaEnum {
    /// Normal answers.
    case none
    /// HTTP 503 `UNAVAILABLE` (Google's "backendError").
    case http503
    /// HTTP 429 `RESOURCE_EXHAUSTED` (a quota spent).
    case http429
}

public enum PlaySetFault: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var mode: PlayFaultMode
        /// How many Developer API requests it applies to (default: until changed).
        public var count: Int?
        public init(mode: PlayFaultMode, count: Int? = nil) {
            self.mode = mode
            self.count = count
        }
    }
    public typealias Result = EmptyResult
    public static let name = "play.setFault"
    public static let summary = "Make the Play Developer API answer 503 or 429 (for a number of requests, or until changed)."
}
