import JSONRPC

// sim.* — the local App Store simulator (development and tests only; docs/contract.md).

public enum SimTrustAnchor: RPCMethod {
    public typealias Params = EmptyParams
    public struct Result: Codable, Sendable, Equatable {
        /// Base64 DER of the RSA root that signs receipt chains.
        public var receiptRoot: String
        /// Base64 DER of the ECDSA P-256 root of JWS chains.
        public var jwsRoot: String
        public init(receiptRoot: String, jwsRoot: String) { self.receiptRoot = receiptRoot; self.jwsRoot = jwsRoot }
    }
    public static let name = "sim.trustAnchor"
    public static let summary = "The simulator's two roots, to configure a verification service with."
}

/// How the simulator signs a receipt: its normal chain, or a broken one for negative tests.
public enum SimSigning: String, Codable, Sendable, JSONSchemaEnum {
    /// The simulator's own chain (trusted by a verification service given `sim.trustAnchor`).
    case valid
    /// A chain whose leaf expired before the receipt was created.
    case expiredChain
    /// A chain to a root the simulator never hands out.
    case untrustedChain
}

public enum SimDigest: String, Codable, Sendable, JSONSchemaEnum {
    case sha256, sha1
}

/// The App Store environment a simulated purchase is made in, fixed when it is made: every receipt and
/// JWS that later shows it says the same.
public enum SimEnvironment: String, Codable, Sendable, JSONSchemaEnum {
    case sandbox, production

    /// As Apple writes it in JWS payloads and notifications.
    public var appleName: String { self == .production ? "Production" : "Sandbox" }
    /// The app receipt's `receipt_type`.
    public var receiptType: String { self == .production ? "Production" : "ProductionSandbox" }
}

/// How the receipt returned by a `sim.*` call is made (defaults: sha256, valid, and the environment of
/// the purchase just made, else production).
public struct SimReceiptOptions: Codable, Sendable, Equatable {
    public var digest: SimDigest?
    public var signing: SimSigning?
    /// Which environment's receipt: a receipt holds only that environment's purchases and says so
    /// (`receipt_type` `Production` or `ProductionSandbox`).
    public var environment: SimEnvironment?
    public init(digest: SimDigest? = nil, signing: SimSigning? = nil, environment: SimEnvironment? = nil) {
        self.digest = digest
        self.signing = signing
        self.environment = environment
    }
}

public enum SimFaultMode: String, Codable, Sendable, JSONSchemaEnum {
    /// Normal answers.
    case none
    /// `{"status": 21005, "is-retryable": true}` (receipt server temporarily unavailable).
    case status21005
    /// HTTP 503 with no JSON.
    case http503
    /// HTTP 429 with `Retry-After: 1` (the App Store Server API's rate limit, `errorCode` 4290000).
    case http429
    /// A normal answer after `delayMs`.
    case slow
}

public enum SimSetFault: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var mode: SimFaultMode
        /// How many verifyReceipt requests the fault applies to (default: until changed).
        public var count: Int?
        public var delayMs: Int?
        public init(mode: SimFaultMode, count: Int? = nil, delayMs: Int? = nil) {
            self.mode = mode
            self.count = count
            self.delayMs = delayMs
        }
    }
    public typealias Result = EmptyResult
    public static let name = "sim.setFault"
    public static let summary = "Make the HTTP verifyReceipt endpoints fail (21005, HTTP 503, slow) for resilience tests."
}

public enum SimPurchase: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var appleId: String
        public var bundleId: String
        public var productId: String
        public var productType: ProductType
        public var quantity: Int?
        public var deviceIdentifier: String?
        public var appAccountToken: String?
        /// Auto-renewables: the subscription period (default 30 days).
        public var subscriptionPeriodDays: Int?
        public var receipt: SimReceiptOptions?
        /// The environment of the purchase (default production), fixed for good.
        public var environment: SimEnvironment?
        /// Auto-renewables: a promotional offer signed by the developer's server (StoreKit's original form);
        /// checked as the App Store checks it (key, signature, 24 hours, nonce once).
        public var offer: SimPromotionalOffer?
        /// The same as a compact JWS (`aud: promotional-offer`), StoreKit's newer form.
        public var offerJWS: String?
        /// What the customer paid, in milliunits of `currency` (Apple's `price`: 990 for 0.99); with `currency`, carried
        /// in the signed transaction and its renewals. Absent: the transaction carries no price.
        public var price: Int64?
        /// ISO 4217, three upper-case letters (Apple's `currency`).
        public var currency: String?
        public init(
            appleId: String, bundleId: String, productId: String, productType: ProductType, quantity: Int? = nil,
            deviceIdentifier: String? = nil, appAccountToken: String? = nil, subscriptionPeriodDays: Int? = nil,
            receipt: SimReceiptOptions? = nil, environment: SimEnvironment? = nil, offer: SimPromotionalOffer? = nil, offerJWS: String? = nil,
            price: Int64? = nil, currency: String? = nil
        ) {
            self.price = price
            self.currency = currency
            self.offer = offer
            self.offerJWS = offerJWS
            self.appleId = appleId
            self.bundleId = bundleId
            self.productId = productId
            self.productType = productType
            self.quantity = quantity
            self.deviceIdentifier = deviceIdentifier
            self.appAccountToken = appAccountToken
            self.subscriptionPeriodDays = subscriptionPeriodDays
            self.receipt = receipt
            self.environment = environment
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var transactionId: String
        public var originalTransactionId: String
        public var receiptData: String
        public var signedTransaction: String
        /// `Production` or `Sandbox`, as Apple writes it.
        public var environment: String
        /// The order id on the customer's emailed receipt (App Store Server API: Look Up Order ID).
        public var orderId: String?
        public init(
            transactionId: String, originalTransactionId: String, receiptData: String, signedTransaction: String,
            environment: String, orderId: String? = nil
        ) {
            self.transactionId = transactionId
            self.originalTransactionId = originalTransactionId
            self.receiptData = receiptData
            self.signedTransaction = signedTransaction
            self.environment = environment
            self.orderId = orderId
        }
    }
    public static let name = "sim.purchase"
    public static let summary = "Buy a product as a simulated Apple ID; returns the receipt and the signed transaction."
}

public enum SimFinishTransaction: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var appleId: String
        public var transactionId: String
        public init(appleId: String, transactionId: String) { self.appleId = appleId; self.transactionId = transactionId }
    }
    public typealias Result = EmptyResult
    public static let name = "sim.finishTransaction"
    public static let summary = "Finish a transaction (a consumable then leaves the receipt)."
}

public enum SimRestore: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var appleId: String
        public var bundleId: String
        public var receipt: SimReceiptOptions?
        public init(appleId: String, bundleId: String, receipt: SimReceiptOptions? = nil) {
            self.appleId = appleId
            self.bundleId = bundleId
            self.receipt = receipt
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var receiptData: String
        public var signedTransactions: [String]
        public init(receiptData: String, signedTransactions: [String]) {
            self.receiptData = receiptData
            self.signedTransactions = signedTransactions
        }
    }
    public static let name = "sim.restore"
    public static let summary = "Restore purchases: new restored transactions pointing at the originals."
}

/// The purchaser shares a non-consumable with a family member (Family Sharing): the member gets a transaction of their
/// own (its own ids, `inAppOwnershipType` FAMILY_SHARED, no appAccountToken), which their app redeems. A refund of the
/// purchaser's revokes it (REVOKE); so does `sim.lifecycleEvent` `revokeFamilySharing`. Family members' subscriptions
/// are not modelled (their renewals would be transactions of their own).
public enum SimShareWithFamily: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        /// The purchaser.
        public var appleId: String
        /// The purchaser's transaction of a non-consumable.
        public var transactionId: String
        public var memberAppleId: String
        public init(appleId: String, transactionId: String, memberAppleId: String) {
            self.appleId = appleId
            self.transactionId = transactionId
            self.memberAppleId = memberAppleId
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// The family member's transaction (its own original).
        public var transactionId: String
        public var signedTransaction: String
        public init(transactionId: String, signedTransaction: String) {
            self.transactionId = transactionId
            self.signedTransaction = signedTransaction
        }
    }
    public static let name = "sim.shareWithFamily"
    public static let summary = "Share a non-consumable with a family member: a FAMILY_SHARED transaction of their own."
}

public enum SimRefund: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var appleId: String
        public var transactionId: String
        /// A prorated refund (Apple's REFUND_PRORATED, from the customer's consumption): the share refunded, in milliunits
        /// of a percent (1-99,999; 33,333 is a third). Nil: the whole (REFUND_FULL).
        public var revocationPercentage: Int?
        public init(appleId: String, transactionId: String, revocationPercentage: Int? = nil) {
            self.appleId = appleId
            self.transactionId = transactionId
            self.revocationPercentage = revocationPercentage
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// The signed App Store Server Notification v2 announcing the refund.
        public var signedPayload: String?
        public init(signedPayload: String? = nil) { self.signedPayload = signedPayload }
    }
    public static let name = "sim.refund"
    public static let summary = "Refund a transaction: sets its cancellation date."
}

public enum SimAdvanceClock: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var seconds: Int64
        public init(seconds: Int64) { self.seconds = seconds }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var nowMs: Int64
        /// Renewal transactions created because their periods passed.
        public var renewals: Int
        /// The signed DID_RENEW App Store Server Notifications v2 for those renewals, oldest first.
        public var notifications: [String]
        public init(nowMs: Int64, renewals: Int, notifications: [String] = []) {
            self.nowMs = nowMs
            self.renewals = renewals
            self.notifications = notifications
        }
    }
    public static let name = "sim.advanceClock"
    public static let summary = "Move the simulator's clock forward; subscriptions renew as their periods pass."
}

public enum SimReceipt: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var appleId: String
        public var bundleId: String
        public var receipt: SimReceiptOptions?
        public init(appleId: String, bundleId: String, receipt: SimReceiptOptions? = nil) {
            self.appleId = appleId
            self.bundleId = bundleId
            self.receipt = receipt
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var receiptData: String
        public init(receiptData: String) { self.receiptData = receiptData }
    }
    public static let name = "sim.receipt"
    public static let summary = "The current app receipt of an Apple ID for a bundle."
}

/// The simulator's App Store Server API key, as App Store Connect issues one: sign ES256 JWTs with it to
/// call the simulator's `/inApps/...` endpoints. Persisted with the simulator's PKI.
public enum SimAPIKey: RPCMethod {
    public typealias Params = EmptyParams
    public struct Result: Codable, Sendable, Equatable {
        public var keyId: String
        public var issuerId: String
        /// The private key as PEM (PKCS#8), as App Store Connect's download is.
        public var privateKey: String
        public init(keyId: String, issuerId: String, privateKey: String) {
            self.keyId = keyId
            self.issuerId = issuerId
            self.privateKey = privateKey
        }
    }
    public static let name = "sim.apiKey"
    public static let summary = "The App Store Server API key (key id, issuer id, PEM private key) the simulator's /inApps endpoints accept."
}

/// Where the simulated App Store POSTs its App Store Server Notifications v2 (Apple's body,
/// `{"signedPayload": ...}`) for one environment; no `url` stops sending there.
public enum SimSetNotificationURL: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var environment: SimEnvironment
        /// An http or https URL; nil or absent stops delivery for the environment.
        public var url: String?
        public init(environment: SimEnvironment, url: String? = nil) {
            self.environment = environment
            self.url = url
        }
    }
    public typealias Result = EmptyResult
    public static let name = "sim.setNotificationURL"
    public static let summary = "Set (or clear) the URL the simulator sends an environment's App Store Server Notifications to."
}

/// Sends every notification whose next attempt is due on the simulated clock, and answers once they are
/// sent: what `advanceClock` and each event also start in the background, made awaitable.
public enum SimDeliverNotifications: RPCMethod {
    public typealias Params = EmptyParams
    public struct Result: Codable, Sendable, Equatable {
        /// Send attempts made by this call.
        public var attempted: Int
        /// Of those, answered with HTTP 200-206.
        public var succeeded: Int
        /// Notifications still waiting for a retry (Apple's schedule: 1, 12, 24, 48, 72 hours; production only).
        public var pendingRetries: Int
        public init(attempted: Int, succeeded: Int, pendingRetries: Int) {
            self.attempted = attempted
            self.succeeded = succeeded
            self.pendingRetries = pendingRetries
        }
    }
    public static let name = "sim.deliverNotifications"
    public static let summary = "Send the notifications due now on the simulated clock and wait for the answers."
}

/// The customer turns auto-renew off or on (Settings > Subscriptions): DID_CHANGE_RENEWAL_STATUS.
public enum SimSetAutoRenew: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var appleId: String
        /// Any transaction of the subscription (its original is looked up).
        public var transactionId: String
        public var enabled: Bool
        public init(appleId: String, transactionId: String, enabled: Bool) {
            self.appleId = appleId
            self.transactionId = transactionId
            self.enabled = enabled
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// The DID_CHANGE_RENEWAL_STATUS notification (AUTO_RENEW_DISABLED / AUTO_RENEW_ENABLED); none when unchanged.
        public var signedPayload: String?
        public init(signedPayload: String? = nil) { self.signedPayload = signedPayload }
    }
    public static let name = "sim.setAutoRenew"
    public static let summary = "Turn a subscription's auto-renew off or on, as the customer would."
}

/// The Finish Transaction calls the App Store Server API received for a transaction (tests and support).
public enum SimServerFinishes: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var transactionId: String
        public init(transactionId: String) { self.transactionId = transactionId }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// When each Finish Transaction call for the transaction arrived (simulated clock), oldest first.
        public var finishedAtMs: [Int64]
        public init(finishedAtMs: [Int64]) { self.finishedAtMs = finishedAtMs }
    }
    public static let name = "sim.serverFinishes"
    public static let summary = "The App Store Server API's Finish Transaction calls a transaction received, oldest first."
}

public enum SimConsumptionReports: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var transactionId: String
        public init(transactionId: String) { self.transactionId = transactionId }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// Each request body as received (Apple's ConsumptionRequest fields), oldest first.
        public var reports: [JSONValue]
        public init(reports: [JSONValue]) { self.reports = reports }
    }
    public static let name = "sim.consumptionReports"
    public static let summary = "The consumption information sent to the simulator for a transaction."
}

/// How the simulated App Store mishandles its notification deliveries from now on (chaos tests): a share
/// dropped (the attempt is recorded as TIMED_OUT and retried on Apple's schedule, but nothing reaches the
/// server), a share sent twice, each send delayed, the due ones sent in random order.
public enum SimSetNotificationFault: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        /// 0-100.
        public var dropPercent: Int?
        /// 0-100.
        public var duplicatePercent: Int?
        /// 0-10,000 ms before each send.
        public var delayMs: Int?
        public var reorder: Bool?
        public init(dropPercent: Int? = nil, duplicatePercent: Int? = nil, delayMs: Int? = nil, reorder: Bool? = nil) {
            self.dropPercent = dropPercent
            self.duplicatePercent = duplicatePercent
            self.delayMs = delayMs
            self.reorder = reorder
        }
    }
    public typealias Result = EmptyResult
    public static let name = "sim.setNotificationFault"
    public static let summary = "Drop, duplicate, delay or reorder the simulator's notification deliveries (all zero: deliver faithfully)."
}

/// A subscription event the customer's bank or Apple causes: billing fails (with an optional grace
/// period), billing recovers. Answers the notification sent (DID_FAIL_TO_RENEW, DID_RENEW/BILLING_RECOVERY).
public enum SimBillingEvent: String, Codable, Sendable, JSONSchemaEnum {
    case fail, recover
}

public enum SimBilling: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var appleId: String
        /// Any transaction of the subscription.
        public var transactionId: String
        public var event: SimBillingEvent
        /// `fail` only: days of grace after the period ends (0-16; none by default).
        public var gracePeriodDays: Int?
        public init(appleId: String, transactionId: String, event: SimBillingEvent, gracePeriodDays: Int? = nil) {
            self.appleId = appleId
            self.transactionId = transactionId
            self.event = event
            self.gracePeriodDays = gracePeriodDays
        }
    }
    public typealias Result = SimSetAutoRenew.Result
    public static let name = "sim.billing"
    public static let summary =
        "Fail a subscription's billing (DID_FAIL_TO_RENEW, optionally with a grace period) or recover it (DID_RENEW/BILLING_RECOVERY)."
}

/// What happens to a refund request: Apple asks the developer for consumption data (CONSUMPTION_REQUEST),
/// declines it (REFUND_DECLINED), or reverses a refund it granted (REFUND_REVERSED).
public enum SimRefundEvent: String, Codable, Sendable, JSONSchemaEnum {
    case request, decline, reverse
}

public enum SimRefundDecision: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var appleId: String
        public var transactionId: String
        public var event: SimRefundEvent
        public init(appleId: String, transactionId: String, event: SimRefundEvent) {
            self.appleId = appleId
            self.transactionId = transactionId
            self.event = event
        }
    }
    public typealias Result = SimSetAutoRenew.Result
    public static let name = "sim.refundDecision"
    public static let summary = "A refund request (CONSUMPTION_REQUEST), its decline (REFUND_DECLINED) or a refund's reversal (REFUND_REVERSED)."
}

/// Subscription and family-sharing events the simulated App Store models beyond renewals, billing and
/// refunds; each sends what Apple sends for it, now or when the clock reaches the period's end.
public enum SimLifecycleEventKind: String, Codable, Sendable, JSONSchemaEnum {
    /// A price increase that needs the customer's consent: PRICE_INCREASE/PENDING now; unless accepted before
    /// the period ends, the subscription then expires (EXPIRED/PRICE_INCREASE).
    case priceIncrease
    /// The customer accepts the increase: PRICE_INCREASE/ACCEPTED; the subscription renews.
    case acceptPriceIncrease
    /// A higher plan (`productId`) from now: a new period of it starts today; DID_CHANGE_RENEWAL_PREF/UPGRADE.
    case upgrade
    /// A lower plan (`productId`) from the next renewal: DID_CHANGE_RENEWAL_PREF/DOWNGRADE.
    case downgrade
    /// Back to the current plan before a downgrade took effect: DID_CHANGE_RENEWAL_PREF without subtype.
    case cancelDowngrade
    /// The product is taken off sale: nothing now; EXPIRED/PRODUCT_NOT_FOR_SALE at the period's end.
    case withdrawProduct
    /// The subscription ends at the period's end for another reason: EXPIRED without subtype then.
    case endOtherwise
    /// Family Sharing ends (Apple's REVOKE, each about a family member's own transaction): named by a family
    /// member's transaction (`sim.shareWithFamily`), that member leaves the family; named by the purchaser's, the
    /// purchaser stops sharing it and every member's is revoked. The purchaser keeps the purchase.
    case revokeFamilySharing
}

public enum SimLifecycleEvent: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var appleId: String
        /// The purchase (any transaction of a subscription).
        public var transactionId: String
        public var event: SimLifecycleEventKind
        /// `upgrade` and `downgrade`: the plan (an auto-renewable product) to move to.
        public var productId: String?
        /// `upgrade`: the new plan's period in days (1-366; default: the current plan's). A shorter plan's first period
        /// ends before the one it replaces, as Apple's upgrade to a monthly plan from a yearly one does.
        public var subscriptionPeriodDays: Int?
        public init(
            appleId: String, transactionId: String, event: SimLifecycleEventKind, productId: String? = nil, subscriptionPeriodDays: Int? = nil
        ) {
            self.appleId = appleId
            self.transactionId = transactionId
            self.event = event
            self.productId = productId
            self.subscriptionPeriodDays = subscriptionPeriodDays
        }
    }
    public typealias Result = SimSetAutoRenew.Result
    public static let name = "sim.lifecycleEvent"
    public static let summary =
        "A price increase, its acceptance, a plan upgrade or downgrade, a product taken off sale, an ending for another reason, or the end of Family Sharing."
}

/// A notification Apple documents, about a transaction, that changes nothing the simulator keeps: OFFER_REDEEMED
/// (offers are not modelled yet), RENEWAL_EXTENSION (SUMMARY and FAILURE of a mass extension),
/// EXTERNAL_PURCHASE_TOKEN (UNREPORTED, ACTIVE_TOKEN_REMINDER, CREATED), or a name Apple may add. Types the
/// simulator produces from real events (SUBSCRIBED, DID_RENEW, REFUND...) are refused: use their methods.
public enum SimNotify: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var appleId: String
        /// The transaction the notification is about (it also names the app and the environment).
        public var transactionId: String
        public var notificationType: String
        public var subtype: String?
        public init(appleId: String, transactionId: String, notificationType: String, subtype: String? = nil) {
            self.appleId = appleId
            self.transactionId = transactionId
            self.notificationType = notificationType
            self.subtype = subtype
        }
    }
    public typealias Result = SimSetAutoRenew.Result
    public static let name = "sim.notify"
    public static let summary =
        "Send a documented notification that changes no state kept by the simulator (offers, mass extensions, external purchase tokens)."
}

/// Revokes one of the simulator's certificates: its OCSP responder answers `revoked` about it from then on.
public enum SimRevokeCertificate: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        /// `jws-leaf`, `jws-intermediate`, `receipt-leaf` or `receipt-intermediate`.
        public var certificate: String
        public init(certificate: String) { self.certificate = certificate }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// The revoked certificate's serial number, hex.
        public var serialNumber: String
        /// The responder its certificates name (nil: made without one, so verifiers never ask).
        public var ocspURL: String?
        public init(serialNumber: String, ocspURL: String?) {
            self.serialNumber = serialNumber
            self.ocspURL = ocspURL
        }
    }
    public static let name = "sim.revokeCertificate"
    public static let summary = "Revoke one of the simulator's signing certificates (its OCSP responder then answers revoked)."
}
