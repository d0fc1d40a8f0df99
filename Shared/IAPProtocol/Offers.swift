import JSONRPC

/// Who may redeem a subscription offer, decided by the server from its own records of the account (never on
/// the device's word), within the product's subscription group and the account's scope.
public enum OfferEligibilityKind: String, Codable, Sendable, JSONSchemaEnum {
    /// Every signed-in account.
    case anyone
    /// Subscribed before in the group, and nothing in it active now (win-back).
    case lapsed
    /// Never subscribed in the group.
    case neverSubscribed
    /// Paid for at most `times` periods in the group (renewals count).
    case subscribedAtMost
}

public struct OfferEligibilityRule: Codable, Sendable, Equatable {
    public var kind: OfferEligibilityKind
    /// `subscribedAtMost` only: the most periods paid for.
    public var times: Int?
    public init(kind: OfferEligibilityKind, times: Int? = nil) {
        self.kind = kind
        self.times = times
    }
}

/// A subscription offer of an auto-renewable product, as set up in App Store Connect (the offer id is
/// App Store Connect's): promotional offers need a server signature for StoreKit.
public struct SubscriptionOffer: Codable, Sendable, Equatable {
    public var offerId: String
    /// `promotional` (the only type signed by the server today).
    public var type: String
    public var eligibility: OfferEligibilityRule
    /// The window in which it is signed; open-ended when absent.
    public var startsAtMs: Int64?
    public var endsAtMs: Int64?
    public init(offerId: String, type: String = "promotional", eligibility: OfferEligibilityRule, startsAtMs: Int64? = nil, endsAtMs: Int64? = nil) {
        self.offerId = offerId
        self.type = type
        self.eligibility = eligibility
        self.startsAtMs = startsAtMs
        self.endsAtMs = endsAtMs
    }
}

/// Eligibility is decided from the account's Production records only: an offer signature does not name an
/// environment, so free Sandbox / TestFlight subscriptions must neither make an account eligible (a lapsed
/// TestFlight subscription is not a lapsed customer) nor hide a real subscription.
public struct OfferParams: Codable, Sendable, Equatable {
    public var session: String
    public var productId: String
    public var offerId: String
    public init(session: String, productId: String, offerId: String) {
        self.session = session
        self.productId = productId
        self.offerId = offerId
    }
}

/// Whether the account may redeem each offer of a product, and its introductory-offer eligibility signed for
/// StoreKit (Apple's `introductory-offer-eligibility` JWS); from Production records only (see `OfferParams`).
public enum FulfillmentOfferEligibility: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var session: String
        public var productId: String
        public init(session: String, productId: String) {
            self.session = session
            self.productId = productId
        }
    }
    public struct OfferStanding: Codable, Sendable, Equatable {
        public var offerId: String
        public var eligible: Bool
        /// Why not, when not.
        public var reason: String?
        public init(offerId: String, eligible: Bool, reason: String? = nil) {
            self.offerId = offerId
            self.eligible = eligible
            self.reason = reason
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var productId: String
        public var offers: [OfferStanding]
        /// The Apple customer never subscribed in the group: the introductory offer applies. False also when the
        /// customer is unknown here (`introductoryOfferReason` says so): StoreKit then decides from Apple's records.
        public var introductoryOfferEligible: Bool
        /// The same, signed (compact JWS, `aud: introductory-offer-eligibility`, naming one of the customer's
        /// transactions as Apple's form requires); absent without an offer key or when the customer is unknown.
        public var introductoryOfferJWS: String?
        /// Why not, or why this server cannot say, when not eligible.
        public var introductoryOfferReason: String?
        public init(
            productId: String, offers: [OfferStanding], introductoryOfferEligible: Bool, introductoryOfferJWS: String? = nil,
            introductoryOfferReason: String? = nil
        ) {
            self.productId = productId
            self.offers = offers
            self.introductoryOfferEligible = introductoryOfferEligible
            self.introductoryOfferJWS = introductoryOfferJWS
            self.introductoryOfferReason = introductoryOfferReason
        }
    }
    public static let name = "fulfillment.offerEligibility"
    public static let summary =
        "Which of a subscription's offers the account's Apple customer may redeem (this server's records and Apple's history)."
}

/// A promotional offer signed for the account, in both forms StoreKit takes: the original signature
/// (`Product.PurchaseOption.promotionalOffer(offerID:keyID:nonce:signature:timestamp:)`) and the JWS
/// (`aud: promotional-offer`). Refused with `forbidden` (reason `notEligible`) when the rule excludes the account.
public enum FulfillmentSignOffer: RPCMethod {
    public typealias Params = OfferParams
    public struct Result: Codable, Sendable, Equatable {
        public var productId: String
        public var offerId: String
        public var keyId: String
        /// Lowercase UUID, used once.
        public var nonce: String
        /// When signed (ms); Apple accepts the signature for 24 hours.
        public var timestamp: Int64
        /// The account's appAccountToken (lowercase), signed in as `applicationUsername`.
        public var appAccountToken: String
        /// Base64 DER ECDSA P-256 over bundle id, key id, product id, offer id, appAccountToken, nonce and
        /// timestamp joined by U+2063.
        public var signature: String
        /// The same offer as a compact JWS for StoreKit's newer API.
        public var jws: String
        public init(
            productId: String, offerId: String, keyId: String, nonce: String, timestamp: Int64, appAccountToken: String, signature: String,
            jws: String
        ) {
            self.productId = productId
            self.offerId = offerId
            self.keyId = keyId
            self.nonce = nonce
            self.timestamp = timestamp
            self.appAccountToken = appAccountToken
            self.signature = signature
            self.jws = jws
        }
    }
    public static let name = "fulfillment.signOffer"
    public static let summary = "Sign a promotional offer for the account when it is eligible (both StoreKit signature forms)."
}

/// A promotional offer as a purchase carries it to the App Store (StoreKit's original form).
public struct SimPromotionalOffer: Codable, Sendable, Equatable {
    public var offerIdentifier: String
    public var keyIdentifier: String
    public var nonce: String
    public var timestamp: Int64
    public var signature: String
    public init(offerIdentifier: String, keyIdentifier: String, nonce: String, timestamp: Int64, signature: String) {
        self.offerIdentifier = offerIdentifier
        self.keyIdentifier = keyIdentifier
        self.nonce = nonce
        self.timestamp = timestamp
        self.signature = signature
    }
}

/// The subscription-offer key, as App Store Connect hands it over: the simulator checks offer signatures
/// made with it.
public enum SimOfferKey: RPCMethod {
    public typealias Params = EmptyParams
    public struct Result: Codable, Sendable, Equatable {
        public var keyId: String
        public var issuerId: String
        /// PEM (PKCS#8).
        public var privateKey: String
        public init(keyId: String, issuerId: String, privateKey: String) {
            self.keyId = keyId
            self.issuerId = issuerId
            self.privateKey = privateKey
        }
    }
    public static let name = "sim.offerKey"
    public static let summary = "The subscription-offer signing key (key id, issuer id, PEM private key) the simulated App Store checks offers with."
}

/// Admin: replace an auto-renewable product's subscription offers (an empty list removes them).
public enum CatalogSetOffers: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var productId: String
        public var offers: [SubscriptionOffer]
        public init(adminToken: String, productId: String, offers: [SubscriptionOffer]) {
            self.adminToken = adminToken
            self.productId = productId
            self.offers = offers
        }
    }
    public typealias Result = EmptyResult
    public static let name = "catalog.setOffers"
    public static let summary = "Admin: replace a subscription's offers (id, eligibility rule, validity window)."
    public static let access = RPCAccess.admin
}
