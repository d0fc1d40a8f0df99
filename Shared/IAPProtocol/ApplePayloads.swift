import JSONRPC

// Apple's signed payloads, decoded once from their verified JSON into typed values (field names as Apple documents
// them in App Store Server Notifications v2 and the App Store Server API; dates in milliseconds). Values Apple may add
// to (notification types, subtypes) decode to `unknown(raw)`, never to a failure.

/// `notificationType` of App Store Server Notifications v2.
public enum AppleNotificationType: Hashable, Sendable {
    case consumptionRequest, didChangeRenewalPref, didChangeRenewalStatus, didFailToRenew, didRenew, expired
    case externalPurchaseToken, gracePeriodExpired, metadataUpdate, migration, offerRedeemed, oneTimeCharge, priceChange
    case priceIncrease, refund, refundDeclined, refundReversed, renewalExtended, renewalExtension, rescindConsent, revoke
    case subscribed, test
    /// A type this version does not know (logged and ignored).
    case unknown(String)

    static let known: [String: AppleNotificationType] = [
        "CONSUMPTION_REQUEST": .consumptionRequest, "DID_CHANGE_RENEWAL_PREF": .didChangeRenewalPref,
        "DID_CHANGE_RENEWAL_STATUS": .didChangeRenewalStatus, "DID_FAIL_TO_RENEW": .didFailToRenew, "DID_RENEW": .didRenew,
        "EXPIRED": .expired, "EXTERNAL_PURCHASE_TOKEN": .externalPurchaseToken, "GRACE_PERIOD_EXPIRED": .gracePeriodExpired,
        "METADATA_UPDATE": .metadataUpdate, "MIGRATION": .migration, "OFFER_REDEEMED": .offerRedeemed, "ONE_TIME_CHARGE": .oneTimeCharge,
        "PRICE_CHANGE": .priceChange, "PRICE_INCREASE": .priceIncrease, "REFUND": .refund, "REFUND_DECLINED": .refundDeclined,
        "REFUND_REVERSED": .refundReversed, "RENEWAL_EXTENDED": .renewalExtended, "RENEWAL_EXTENSION": .renewalExtension,
        "RESCIND_CONSENT": .rescindConsent, "REVOKE": .revoke, "SUBSCRIBED": .subscribed, "TEST": .test,
    ]

    static let spelled = Dictionary(uniqueKeysWithValues: known.map { ($1, $0) })

    public init(rawValue: String) { self = Self.known[rawValue] ?? .unknown(rawValue) }

    /// Apple's spelling.
    public var rawValue: String {
        if case .unknown(let raw) = self { return raw }
        return Self.spelled[self] ?? "\(self)"
    }
}

/// `subtype` of App Store Server Notifications v2.
public enum AppleNotificationSubtype: Hashable, Sendable {
    case initialBuy, resubscribe, downgrade, upgrade, autoRenewEnabled, autoRenewDisabled, voluntary, billingRetry
    case priceIncrease, gracePeriod, pending, accepted, billingRecovery, productNotForSale, summary, failure, unreported
    case activeTokenReminder, created
    /// A subtype this version does not know.
    case unknown(String)

    static let known: [String: AppleNotificationSubtype] = [
        "INITIAL_BUY": .initialBuy, "RESUBSCRIBE": .resubscribe, "DOWNGRADE": .downgrade, "UPGRADE": .upgrade,
        "AUTO_RENEW_ENABLED": .autoRenewEnabled, "AUTO_RENEW_DISABLED": .autoRenewDisabled, "VOLUNTARY": .voluntary,
        "BILLING_RETRY": .billingRetry, "PRICE_INCREASE": .priceIncrease, "GRACE_PERIOD": .gracePeriod, "PENDING": .pending,
        "ACCEPTED": .accepted, "BILLING_RECOVERY": .billingRecovery, "PRODUCT_NOT_FOR_SALE": .productNotForSale, "SUMMARY": .summary,
        "FAILURE": .failure, "UNREPORTED": .unreported, "ACTIVE_TOKEN_REMINDER": .activeTokenReminder, "CREATED": .created,
    ]

    static let spelled = Dictionary(uniqueKeysWithValues: known.map { ($1, $0) })

    public init(rawValue: String) { self = Self.known[rawValue] ?? .unknown(rawValue) }

    /// Apple's spelling.
    public var rawValue: String {
        if case .unknown(let raw) = self { return raw }
        return Self.spelled[self] ?? "\(self)"
    }
}

/// A verified transaction (`JWSTransactionDecodedPayload`): the fields this suite acts on.
public struct AppleTransaction: Sendable, Equatable {
    public var transactionId: String
    /// The transaction's own id when Apple names none.
    public var originalTransactionId: String
    public var productId: String
    /// At least 1.
    public var quantity: Int64
    public var purchaseDateMs: Int64
    public var expiresDateMs: Int64?
    /// Set when Apple refunded or revoked it.
    public var revocationDateMs: Int64?
    /// A prorated refund (`revocationType` REFUND_PRORATED): the share Apple refunded, in milliunits of a percent (0 to
    /// 99,999; Apple's `revocationPercentage`: 0 refunds nothing, so the grant stays whole). Nil: refunded or revoked
    /// whole (100% too), or not revoked. Only Apple's signed word sets it; an Xcode-signed one reaches the Sandbox scope
    /// only.
    public var proratedRefundMilli: Int64?
    /// Lowercased; nil when Apple sent none.
    public var appAccountToken: String?
    /// As Apple spells it: `Production`, `Sandbox`, `Xcode`, `LocalTesting`.
    public var environment: String?
    /// What the customer paid, in milliunits of `currency` (Apple's `price`); nil when the payload has no price or no
    /// ISO 4217 currency with it. Apple: not for revenue recognition (App Store Connect's reports are).
    public var price: Int64?
    public var currency: String?
    /// The offer redeemed with this purchase (Apple's `offerIdentifier`: a promotional offer's id, an offer code, a win-back
    /// offer), at most 64 characters.
    public var offerIdentifier: String?
    /// Apple's `isUpgraded`: the customer upgraded this subscription to another, whose transaction holds the access now
    /// (Apple: look for the transaction with the higher level of service).
    public var isUpgraded = false
    /// When Apple signed this copy (`signedDate`): of two copies, the later one says how the purchase stands.
    public var signedDateMs: Int64?

    /// Nil without a transaction id or a product id.
    public init?(_ payload: JSONValue) {
        guard let transactionId = Self.id(payload["transactionId"]), let productId = payload["productId"]?.stringValue,
            !transactionId.isEmpty, !productId.isEmpty
        else { return nil }
        self.transactionId = transactionId
        self.originalTransactionId = Self.id(payload["originalTransactionId"]) ?? transactionId
        self.productId = productId
        self.quantity = max(1, payload["quantity"]?.intValue ?? 1)
        self.purchaseDateMs = payload["purchaseDate"]?.millisecondsValue ?? 0
        self.expiresDateMs = payload["expiresDate"]?.millisecondsValue
        self.revocationDateMs = payload["revocationDate"]?.millisecondsValue
        if revocationDateMs != nil, payload["revocationType"]?.stringValue == "REFUND_PRORATED",
            let share = payload["revocationPercentage"]?.intValue, (0..<100_000).contains(share)
        {
            self.proratedRefundMilli = share
        }
        self.appAccountToken = payload["appAccountToken"]?.stringValue?.lowercased()
        self.environment = payload["environment"]?.stringValue
        self.offerIdentifier = payload["offerIdentifier"]?.stringValue.flatMap { (1...64).contains($0.utf8.count) ? $0 : nil }
        self.isUpgraded = payload["isUpgraded"]?.boolValue == true
        self.signedDateMs = payload["signedDate"]?.millisecondsValue
        // At most a billion units of any currency: anything larger is not a price, and sums of them stay far from overflow.
        if let price = payload["price"]?.intValue, (0...1_000_000_000_000).contains(price), let currency = payload["currency"]?.stringValue,
            currency.utf8.count == 3, currency.utf8.allSatisfy({ $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") })
        {
            self.price = price
            self.currency = currency
        }
    }

    /// Apple sends ids as strings; numbers are taken too.
    static func id(_ value: JSONValue?) -> String? {
        switch value {
        case .string(let s)?: return s
        case .int(let i)?: return String(i)
        default: return nil
        }
    }
}

/// A verified subscription renewal info (`JWSRenewalInfoDecodedPayload`): the fields this suite acts on.
public struct AppleRenewalInfo: Sendable, Equatable {
    public var originalTransactionId: String
    public var autoRenew: Bool
    public var autoRenewProductId: String?
    public var inBillingRetry: Bool
    public var gracePeriodExpiresDateMs: Int64?
    public var expirationIntent: Int?
    public var priceIncreaseStatus: Int?
    public var signedDateMs: Int64?

    /// Nil without an original transaction id.
    public init?(_ payload: JSONValue) {
        guard let original = AppleTransaction.id(payload["originalTransactionId"]) else { return nil }
        self.originalTransactionId = original
        self.autoRenew = payload["autoRenewStatus"]?.intValue == 1
        self.autoRenewProductId = payload["autoRenewProductId"]?.stringValue
        self.inBillingRetry = payload["isInBillingRetryPeriod"]?.boolValue ?? false
        self.gracePeriodExpiresDateMs = payload["gracePeriodExpiresDate"]?.millisecondsValue
        self.expirationIntent = payload["expirationIntent"]?.intValue.map(Int.init)
        self.priceIncreaseStatus = payload["priceIncreaseStatus"]?.intValue.map(Int.init)
        self.signedDateMs = payload["signedDate"]?.millisecondsValue
    }
}

/// A verified notification (`responseBodyV2DecodedPayload`), its transaction and renewal info decoded (verification
/// leaves in `data` only the nested objects it verified).
public struct AppleNotification: Sendable, Equatable {
    public var notificationUUID: String?
    public var type: AppleNotificationType
    public var subtype: AppleNotificationSubtype?
    public var signedDateMs: Int64?
    /// `data.environment`.
    public var environment: String?
    /// `data.transactionInfo`, decoded; nil when absent or without ids.
    public var transaction: AppleTransaction?
    /// `data.renewalInfo`, decoded.
    public var renewalInfo: AppleRenewalInfo?
    /// `summary` (RENEWAL_EXTENSION / SUMMARY: a mass extension's counts); nil when absent or incomplete.
    public var summary: AppleMassExtensionSummary?

    public init(_ payload: JSONValue) {
        notificationUUID = payload["notificationUUID"]?.stringValue
        type = AppleNotificationType(rawValue: payload["notificationType"]?.stringValue ?? "")
        subtype = payload["subtype"]?.stringValue.map(AppleNotificationSubtype.init(rawValue:))
        signedDateMs = payload["signedDate"]?.millisecondsValue
        let data = payload["data"]
        environment = data?["environment"]?.stringValue
        transaction = data?["transactionInfo"].flatMap(AppleTransaction.init)
        renewalInfo = data?["renewalInfo"].flatMap(AppleRenewalInfo.init)
        // Apple sends one of `data`, `summary` and `externalPurchaseToken`; verification checks the bundle of the one present.
        summary = data == nil ? payload["summary"].flatMap(AppleMassExtensionSummary.init) : nil
    }
}

/// The `summary` of a RENEWAL_EXTENSION / SUMMARY notification: a mass extension's counts (kept by fulfillment as it is).
public struct AppleMassExtensionSummary: Codable, Sendable, Equatable {
    public var requestIdentifier: String
    public var productId: String
    /// `Production` or `Sandbox`.
    public var environment: String
    public var succeededCount: Int64
    public var failedCount: Int64

    /// Nil without a request identifier, a product, the environment or the counts.
    public init?(_ payload: JSONValue) {
        guard let id = payload["requestIdentifier"]?.stringValue, let productId = payload["productId"]?.stringValue,
            let environment = payload["environment"]?.stringValue, let succeeded = payload["succeededCount"]?.intValue,
            let failed = payload["failedCount"]?.intValue
        else { return nil }
        requestIdentifier = id
        self.productId = productId
        self.environment = environment
        succeededCount = succeeded
        failedCount = failed
    }
}
