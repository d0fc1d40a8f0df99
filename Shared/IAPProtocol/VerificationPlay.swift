import JSONRPC

// verification.* for Google Play (internal): a purchase token checked with Google's Play Developer API.

public enum PlayPurchaseKind: String, Codable, Sendable, JSONSchemaEnum {
    /// A one-time product (purchases.productsv2).
    case product
    /// A subscription (purchases.subscriptionsv2).
    case subscription
}

/// A Play purchase as Google's Play Developer API reports it now, normalized for fulfillment.
public struct VerifiedPlayPurchase: Codable, Sendable, Equatable {
    public var packageName: String
    public var productId: String
    public var purchaseToken: String
    public var kind: PlayPurchaseKind
    /// The order (one-time products), or the latest successful order (subscriptions; each renewal has its own).
    public var orderId: String?
    /// One-time products: `PURCHASED`, `CANCELLED` or `PENDING`; subscriptions: Google's `SUBSCRIPTION_STATE_*`.
    public var state: String
    /// True when the purchase gives access now: a one-time purchase `PURCHASED`, a subscription active, canceled
    /// (before its expiry) or in its grace period.
    public var entitles: Bool
    public var acknowledged: Bool
    /// One-time products only.
    public var consumed: Bool?
    public var quantity: Int
    public var refundableQuantity: Int?
    /// What the app passed to `BillingFlowParams.setObfuscatedAccountId` (the suite: the account's appAccountToken).
    public var obfuscatedExternalAccountId: String?
    /// A license tester's purchase (test card): free, so granted only in the Sandbox scope.
    public var test: Bool
    public var purchaseTimeMs: Int64?
    /// Subscriptions: the end of the current period (or of the grace period).
    public var expiryTimeMs: Int64?
    public var autoRenewing: Bool?
    public var basePlanId: String?
    /// Subscriptions: the purchase this one replaced (upgrade, downgrade, re-signup).
    public var linkedPurchaseToken: String?

    public init(
        packageName: String, productId: String, purchaseToken: String, kind: PlayPurchaseKind, orderId: String?, state: String,
        entitles: Bool, acknowledged: Bool, consumed: Bool?, quantity: Int, refundableQuantity: Int?, obfuscatedExternalAccountId: String?,
        test: Bool, purchaseTimeMs: Int64?, expiryTimeMs: Int64?, autoRenewing: Bool?, basePlanId: String?, linkedPurchaseToken: String?
    ) {
        self.packageName = packageName
        self.productId = productId
        self.purchaseToken = purchaseToken
        self.kind = kind
        self.orderId = orderId
        self.state = state
        self.entitles = entitles
        self.acknowledged = acknowledged
        self.consumed = consumed
        self.quantity = quantity
        self.refundableQuantity = refundableQuantity
        self.obfuscatedExternalAccountId = obfuscatedExternalAccountId
        self.test = test
        self.purchaseTimeMs = purchaseTimeMs
        self.expiryTimeMs = expiryTimeMs
        self.autoRenewing = autoRenewing
        self.basePlanId = basePlanId
        self.linkedPurchaseToken = linkedPurchaseToken
    }
}

public struct PlayPurchaseReference: Codable, Sendable, Equatable {
    public var internalToken: String
    /// Absent: the one package name verification accepts (an error when it accepts several).
    public var packageName: String?
    /// The one-time product's id, or the subscription's; absent (a notification that names none): whatever Google answers.
    public var productId: String?
    public var purchaseToken: String
    public var kind: PlayPurchaseKind
    public init(internalToken: String, packageName: String?, productId: String?, purchaseToken: String, kind: PlayPurchaseKind) {
        self.internalToken = internalToken
        self.packageName = packageName
        self.productId = productId
        self.purchaseToken = purchaseToken
        self.kind = kind
    }
}

public enum VerificationVerifyPlayPurchase: RPCMethod {
    public typealias Params = PlayPurchaseReference
    public typealias Result = VerifiedPlayPurchase
    public static let name = "verification.verifyPlayPurchase"
    public static let access = RPCAccess.internal
    public static let summary =
        "Check a Google Play purchase token with Google's Play Developer API (package allow-listed, product matched): its state now."
}

public enum VerificationAcknowledgePlayPurchase: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var purchase: PlayPurchaseReference
        /// One-time consumables: consume (which also acknowledges), so the customer can buy again.
        public var consume: Bool?
        public init(purchase: PlayPurchaseReference, consume: Bool? = nil) {
            self.purchase = purchase
            self.consume = consume
        }
    }
    public typealias Result = EmptyResult
    public static let name = "verification.acknowledgePlayPurchase"
    public static let access = RPCAccess.internal
    public static let summary = "Acknowledge (or consume) a Google Play purchase at Google, so it is not refunded after three days."
}

/// What a real-time developer notification is about (which object of Google's DeveloperNotification it carries).
public enum PlayNotificationKind: String, Codable, Sendable, JSONSchemaEnum {
    case subscription, oneTimeProduct, voidedPurchase, test
    /// An object this version does not know (Google adds types; receivers must accept them).
    case other
}

/// A Pub/Sub push of a real-time developer notification whose OIDC token verified: the message and the
/// DeveloperNotification it carries, flattened.
public struct VerifiedPlayPush: Codable, Sendable, Equatable {
    /// Pub/Sub's id of the message (unique within the topic): the inbox's key.
    public var messageId: String
    public var subscription: String?
    public var publishTimeMs: Int64?
    public var packageName: String
    public var eventTimeMs: Int64?
    public var kind: PlayNotificationKind
    /// `subscriptionNotification` / `oneTimeProductNotification`: Google's number.
    public var notificationType: Int?
    public var purchaseToken: String?
    /// `sku` (one-time), or `subscriptionId` where Google still sends it.
    public var productId: String?
    /// `voidedPurchaseNotification`: the voided order, `productType` (1 subscription, 2 one-time), `refundType`
    /// (1 full, 2 quantity-based partial).
    public var orderId: String?
    public var productType: Int?
    public var refundType: Int?

    public init(
        messageId: String, subscription: String? = nil, publishTimeMs: Int64? = nil, packageName: String, eventTimeMs: Int64? = nil,
        kind: PlayNotificationKind, notificationType: Int? = nil, purchaseToken: String? = nil, productId: String? = nil,
        orderId: String? = nil, productType: Int? = nil, refundType: Int? = nil
    ) {
        self.messageId = messageId
        self.subscription = subscription
        self.publishTimeMs = publishTimeMs
        self.packageName = packageName
        self.eventTimeMs = eventTimeMs
        self.kind = kind
        self.notificationType = notificationType
        self.purchaseToken = purchaseToken
        self.productId = productId
        self.orderId = orderId
        self.productType = productType
        self.refundType = refundType
    }
}

/// A Pub/Sub push as the edge received it: the `Authorization` header and the body, both exactly as sent.
public struct PlayPushDelivery: Codable, Sendable, Equatable {
    public var internalToken: String?
    public var authorization: String
    public var body: String
    /// `fulfillment.receivePlayNotification` only: answer once recorded (`pending`) and process right after.
    public var processLater: Bool?
    public init(internalToken: String?, authorization: String, body: String, processLater: Bool? = nil) {
        self.internalToken = internalToken
        self.authorization = authorization
        self.body = body
        self.processLater = processLater
    }
}

public enum VerificationVerifyPlayPush: RPCMethod {
    public typealias Params = PlayPushDelivery
    public typealias Result = VerifiedPlayPush
    public static let name = "verification.verifyPlayPush"
    public static let access = RPCAccess.internal
    public static let summary =
        "Check a Google Play real-time developer notification's Pub/Sub push: its OIDC token (Google's keys, issuer, audience, email, age), then its message."
}

/// A purchase Google lists as voided (refunded, charged back, revoked; voidedpurchases.list).
public struct PlayVoidedPurchase: Codable, Sendable, Equatable {
    public var packageName: String
    public var purchaseToken: String
    /// The voided order (a subscription's renewal has its own).
    public var orderId: String?
    public var voidedTimeMs: Int64
    /// A quantity-based partial refund: how many units.
    public var voidedQuantity: Int?
    public init(packageName: String, purchaseToken: String, orderId: String?, voidedTimeMs: Int64, voidedQuantity: Int? = nil) {
        self.packageName = packageName
        self.purchaseToken = purchaseToken
        self.orderId = orderId
        self.voidedTimeMs = voidedTimeMs
        self.voidedQuantity = voidedQuantity
    }
}

public enum VerificationPlayVoidedPurchases: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var internalToken: String
        /// The oldest voided time wanted (Google keeps 30 days; older is read as 30 days ago).
        public var startTimeMs: Int64
        /// The previous answer's `nextPageToken` (opaque).
        public var pageToken: String?
        public init(internalToken: String, startTimeMs: Int64, pageToken: String? = nil) {
            self.internalToken = internalToken
            self.startTimeMs = startTimeMs
            self.pageToken = pageToken
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var voidedPurchases: [PlayVoidedPurchase]
        /// More to read (the next page, or the next package name's).
        public var nextPageToken: String?
        public init(voidedPurchases: [PlayVoidedPurchase], nextPageToken: String?) {
            self.voidedPurchases = voidedPurchases
            self.nextPageToken = nextPageToken
        }
    }
    public static let name = "verification.playVoidedPurchases"
    public static let access = RPCAccess.internal
    public static let summary = "Google Play purchases voided since a time, for every accepted package name, a page at a time (voidedpurchases.list)."
}
