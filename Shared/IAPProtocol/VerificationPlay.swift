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
    /// The one-time product's id, or the subscription's.
    public var productId: String
    public var purchaseToken: String
    public var kind: PlayPurchaseKind
    public init(internalToken: String, packageName: String?, productId: String, purchaseToken: String, kind: PlayPurchaseKind) {
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
