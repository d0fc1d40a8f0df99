import JSONRPC

// Apple's Retention Messaging, the app's side: when a customer looks at cancelling a subscription, Apple POSTs a signed
// `RealtimeRequestBody` to the app's Get Retention Message endpoint (the edge's `POST /v1/retention/appstore`), and shows
// what the answer chooses: a message, an alternate product, or a promotional offer. The rules that choose are the
// catalog's (per product), the facts they read are fulfillment's (the subscriber's ledger and offer history).

/// What a retention rule shows.
public enum RetentionChoiceKind: String, Codable, Sendable, JSONSchemaEnum {
    case message, alternateProduct, promotionalOffer
}

/// When a rule applies, from this server's records of the subscriber (all optional; every one given must hold). A
/// subscriber unknown here (their subscription was never redeemed or notified here) meets no condition.
public struct RetentionConditions: Codable, Sendable, Equatable {
    /// Days since the subscription's first period began.
    public var minTenureDays: Int?
    public var maxTenureDays: Int?
    /// Periods paid after the first (renewals recorded here).
    public var minRenewals: Int?
    public var maxRenewals: Int?
    /// Purchases of the account refunded so far.
    public var maxRefunds: Int?
    public init(minTenureDays: Int? = nil, maxTenureDays: Int? = nil, minRenewals: Int? = nil, maxRenewals: Int? = nil, maxRefunds: Int? = nil) {
        self.minTenureDays = minTenureDays
        self.maxTenureDays = maxTenureDays
        self.minRenewals = minRenewals
        self.maxRenewals = maxRenewals
        self.maxRefunds = maxRefunds
    }
}

/// One rule: in order, the first whose locale and conditions match (and, for an offer, whose offer the subscriber may
/// have and was not offered before) is what Apple is asked to show.
public struct RetentionChoice: Codable, Sendable, Equatable {
    /// The rule's name (in the answer's record and the logs).
    public var id: String
    public var kind: RetentionChoiceKind
    /// The message uploaded to Apple (a UUID), shown with the choice; Apple shows only approved messages.
    public var messageIdentifier: String
    /// The device locales it is for (`en-US`; a bare language `en` matches every region); every locale when absent.
    public var locales: [String]?
    /// `alternateProduct`: the product offered instead (a subscription of the catalog).
    public var alternateProductId: String?
    /// `alternateProduct`: Apple's `BILLED_UPFRONT` or `MONTHLY`, for products with both plans.
    public var billingPlanType: String?
    /// `promotionalOffer`: one of the product's offers (`catalog.setOffers`); its own eligibility rule applies too.
    public var offerId: String?
    /// `promotionalOffer`: `v2` (the JWS, the default) or `v1` (the original signature).
    public var signatureVersion: String?
    public var when: RetentionConditions?
    public init(
        id: String, kind: RetentionChoiceKind, messageIdentifier: String, locales: [String]? = nil, alternateProductId: String? = nil,
        billingPlanType: String? = nil, offerId: String? = nil, signatureVersion: String? = nil, when: RetentionConditions? = nil
    ) {
        self.id = id
        self.kind = kind
        self.messageIdentifier = messageIdentifier
        self.locales = locales
        self.alternateProductId = alternateProductId
        self.billingPlanType = billingPlanType
        self.offerId = offerId
        self.signatureVersion = signatureVersion
        self.when = when
    }
}

/// A subscription's retention rules: the choices in order, and the message answered when none applies (absent: the
/// answer chooses nothing and Apple shows the default message configured with Apple).
public struct RetentionRules: Codable, Sendable, Equatable {
    public var choices: [RetentionChoice]
    public var defaultMessageIdentifier: String?
    public init(choices: [RetentionChoice], defaultMessageIdentifier: String? = nil) {
        self.choices = choices
        self.defaultMessageIdentifier = defaultMessageIdentifier
    }
}

/// Replaces (or, with no `retention`, removes) a subscription's retention rules.
public enum CatalogSetRetention: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var productId: String
        public var retention: RetentionRules?
        public init(adminToken: String, productId: String, retention: RetentionRules?) {
            self.adminToken = adminToken
            self.productId = productId
            self.retention = retention
        }
    }
    public typealias Result = EmptyResult
    public static let name = "catalog.setRetention"
    public static let access = RPCAccess.admin
    public static let summary =
        "Set a subscription's retention rules: the messages, alternate products and offers shown to a customer about to cancel."
}

/// What fulfillment reads to answer a retention request: the product's rules, its offers and its subscription group.
public enum CatalogGetRetention: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var internalToken: String
        public var productId: String
        public init(internalToken: String, productId: String) {
            self.internalToken = internalToken
            self.productId = productId
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var productId: String
        public var subscriptionGroup: String
        public var retention: RetentionRules?
        public var offers: [SubscriptionOffer]?
        public init(productId: String, subscriptionGroup: String, retention: RetentionRules?, offers: [SubscriptionOffer]?) {
            self.productId = productId
            self.subscriptionGroup = subscriptionGroup
            self.retention = retention
            self.offers = offers
        }
    }
    public static let name = "catalog.getRetention"
    public static let access = RPCAccess.internal
    public static let summary = "A subscription's retention rules, offers and group (fulfillment's retention answers read them)."
}

/// The decoded, verified `RealtimeRequestBody` (Apple's DecodedRealtimeRequestBody).
public struct RealtimeRequest: Codable, Sendable, Equatable {
    public var originalTransactionId: String
    public var appAppleId: Int64
    public var productId: String
    public var userLocale: String
    public var requestIdentifier: String
    /// `Production` or `Sandbox`.
    public var environment: String
    public var signedDate: Int64
    public init(
        originalTransactionId: String, appAppleId: Int64, productId: String, userLocale: String, requestIdentifier: String,
        environment: String, signedDate: Int64
    ) {
        self.originalTransactionId = originalTransactionId
        self.appAppleId = appAppleId
        self.productId = productId
        self.userLocale = userLocale
        self.requestIdentifier = requestIdentifier
        self.environment = environment
        self.signedDate = signedDate
    }
}

/// Verifies a Get Retention Message request as Apple asks: the JWS chain to Apple's root (the leaf marked for signed
/// App Store data), a known environment, and in Production the app's own `appAppleId` (`--app-apple-id`).
public enum VerificationVerifyRealtimeRequest: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var signedPayload: String
        public init(signedPayload: String) { self.signedPayload = signedPayload }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// 0 when verified; else the receipt-style status of the failure, with `reason`.
        public var status: Int
        public var reason: String?
        public var request: RealtimeRequest?
        public init(status: Int, reason: String? = nil, request: RealtimeRequest? = nil) {
            self.status = status
            self.reason = reason
            self.request = request
        }
    }
    public static let name = "verification.verifyRealtimeRequest"
    public static let summary = "Verify a Retention Messaging RealtimeRequestBody signed payload (chain, environment, appAppleId)."
}

/// Apple's `RealtimeResponseBody`: exactly one member, or none (Apple then shows the default message).
public struct RealtimeResponse: Codable, Sendable, Equatable {
    public struct Message: Codable, Sendable, Equatable {
        public var messageIdentifier: String
        public init(messageIdentifier: String) { self.messageIdentifier = messageIdentifier }
    }
    public struct AlternateProduct: Codable, Sendable, Equatable {
        public var messageIdentifier: String
        public var productId: String
        public var billingPlanType: String?
        public init(messageIdentifier: String, productId: String, billingPlanType: String? = nil) {
            self.messageIdentifier = messageIdentifier
            self.productId = productId
            self.billingPlanType = billingPlanType
        }
    }
    /// Apple's `PromotionalOfferSignatureV1`.
    public struct SignatureV1: Codable, Sendable, Equatable {
        public var encodedSignature: String
        public var productId: String
        public var nonce: String
        public var timestamp: Int64
        public var keyId: String
        public var offerIdentifier: String
        public var appAccountToken: String?
        public init(
            encodedSignature: String, productId: String, nonce: String, timestamp: Int64, keyId: String, offerIdentifier: String,
            appAccountToken: String? = nil
        ) {
            self.encodedSignature = encodedSignature
            self.productId = productId
            self.nonce = nonce
            self.timestamp = timestamp
            self.keyId = keyId
            self.offerIdentifier = offerIdentifier
            self.appAccountToken = appAccountToken
        }
    }
    public struct PromotionalOffer: Codable, Sendable, Equatable {
        public var messageIdentifier: String
        public var promotionalOfferSignatureV1: SignatureV1?
        /// The offer as a compact JWS (`aud: promotional-offer`).
        public var promotionalOfferSignatureV2: String?
        public init(messageIdentifier: String, promotionalOfferSignatureV1: SignatureV1? = nil, promotionalOfferSignatureV2: String? = nil) {
            self.messageIdentifier = messageIdentifier
            self.promotionalOfferSignatureV1 = promotionalOfferSignatureV1
            self.promotionalOfferSignatureV2 = promotionalOfferSignatureV2
        }
    }
    public var message: Message?
    public var alternateProduct: AlternateProduct?
    public var promotionalOffer: PromotionalOffer?
    public init(message: Message? = nil, alternateProduct: AlternateProduct? = nil, promotionalOffer: PromotionalOffer? = nil) {
        self.message = message
        self.alternateProduct = alternateProduct
        self.promotionalOffer = promotionalOffer
    }
}

/// The edge's Get Retention Message endpoint hands Apple's request over: verified, decided from the catalog's rules and
/// this server's records only (never waiting on Apple), recorded once per `requestIdentifier` (a repeated request gets the
/// same answer), and answered.
public enum FulfillmentRetentionMessage: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var signedPayload: String
        /// The suite's internal token (the edge presents it).
        public var internalToken: String?
        /// Milliseconds the caller waits for the answer (the edge: less than Apple's deadline): an answer not ready by then
        /// is not recorded, so an offer Apple never showed is not spent.
        public var budgetMs: Int?
        public init(signedPayload: String, internalToken: String?, budgetMs: Int? = nil) {
            self.signedPayload = signedPayload
            self.internalToken = internalToken
            self.budgetMs = budgetMs
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var requestIdentifier: String
        /// The body answered to Apple.
        public var response: RealtimeResponse
        /// The rule chosen (`default` for the default message; absent when nothing was chosen).
        public var choiceId: String?
        /// Why no rule was chosen, when none was.
        public var reason: String?
        public init(requestIdentifier: String, response: RealtimeResponse, choiceId: String? = nil, reason: String? = nil) {
            self.requestIdentifier = requestIdentifier
            self.response = response
            self.choiceId = choiceId
            self.reason = reason
        }
    }
    public static let name = "fulfillment.retentionMessage"
    public static let access = RPCAccess.internal
    public static let summary =
        "Answer Apple's Get Retention Message request (the edge's endpoint calls it): the message, alternate product or offer to show."
}
