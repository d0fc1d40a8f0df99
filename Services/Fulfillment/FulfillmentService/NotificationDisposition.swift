/// What fulfillment does with an App Store Server Notification v2, by its type and subtype (a pure rule;
/// `FulfillmentService` carries it out). Renewal info a notification carries is kept first whatever its type.
public enum NotificationDisposition: Equatable, Sendable {
    /// About a transaction's standing (purchase, renewal, refund, revocation, reversal, offer, upgrade): the
    /// transaction is brought to what Apple says of it now: granted, revoked or given back.
    case bringToAppleState
    /// About a subscription's renewal (auto-renew, plan for the next period, billing, grace, price increase,
    /// expiry): its renewal info is the news, kept forward only by signed date.
    case keepRenewalState
    /// RENEWAL_EXTENDED: the subscription's end moves to the transaction's new expiry.
    case moveSubscriptionEnd
    /// CONSUMPTION_REQUEST: answered with Send Consumption Information when the account consented.
    case answerConsumptionRequest
    /// REFUND_DECLINED: recorded (the purchase stands).
    case record
    /// RENEWAL_EXTENSION / SUMMARY: a mass extension's counts, recorded for `fulfillment.massExtensionStatus` (each
    /// subscription it extended has its own RENEWAL_EXTENDED).
    case recordExtensionSummary
    /// Nothing to apply here; the reason is kept on the inbox row.
    case ignore(String)

    /// The types about a purchase's standing (granted, renewed, refunded, revoked, given back): the only ones that make
    /// an older notification of the same purchase superseded when Apple cannot be asked.
    public static let standingTypes = ["SUBSCRIBED", "DID_RENEW", "ONE_TIME_CHARGE", "OFFER_REDEEMED", "REFUND", "REVOKE", "REFUND_REVERSED"]

    public static func of(type: String, subtype: String?) -> NotificationDisposition {
        switch (type, subtype) {
        case ("SUBSCRIBED", _), ("DID_RENEW", _), ("ONE_TIME_CHARGE", _), ("OFFER_REDEEMED", _), ("REFUND", _), ("REVOKE", _),
            ("REFUND_REVERSED", _):
            return .bringToAppleState
        // An upgrade takes effect now: its transaction is the new plan's first period.
        case ("DID_CHANGE_RENEWAL_PREF", "UPGRADE"): return .bringToAppleState
        case ("DID_CHANGE_RENEWAL_PREF", _), ("DID_CHANGE_RENEWAL_STATUS", _), ("DID_FAIL_TO_RENEW", _), ("GRACE_PERIOD_EXPIRED", _),
            ("EXPIRED", _), ("PRICE_INCREASE", _):
            return .keepRenewalState
        case ("RENEWAL_EXTENDED", _): return .moveSubscriptionEnd
        case ("CONSUMPTION_REQUEST", _): return .answerConsumptionRequest
        case ("REFUND_DECLINED", _): return .record
        case ("TEST", _): return .ignore("a test notification (Request a Test Notification): nothing to apply")
        case ("EXTERNAL_PURCHASE_TOKEN", _):
            return .ignore("an external purchase token: purchases made outside the App Store are not fulfilled here")
        case ("RENEWAL_EXTENSION", "SUMMARY"): return .recordExtensionSummary
        case ("RENEWAL_EXTENSION", _): return .ignore("a mass extension did not extend this subscription: nothing changed at Apple")
        default: return .ignore("\(type) is not a notification type this server acts on")
        }
    }

    /// Every notification type of App Store Server Notifications v2 with the subtypes Apple documents for it
    /// (nil: sent without a subtype).
    public static let documented: [(type: String, subtypes: [String?])] = [
        ("CONSUMPTION_REQUEST", [nil]),
        ("DID_CHANGE_RENEWAL_PREF", ["UPGRADE", "DOWNGRADE", nil]),
        ("DID_CHANGE_RENEWAL_STATUS", ["AUTO_RENEW_ENABLED", "AUTO_RENEW_DISABLED"]),
        ("DID_FAIL_TO_RENEW", ["GRACE_PERIOD", nil]),
        ("DID_RENEW", ["BILLING_RECOVERY", nil]),
        ("EXPIRED", ["VOLUNTARY", "BILLING_RETRY", "PRICE_INCREASE", "PRODUCT_NOT_FOR_SALE", nil]),
        ("EXTERNAL_PURCHASE_TOKEN", ["UNREPORTED", "ACTIVE_TOKEN_REMINDER", "CREATED"]),
        ("GRACE_PERIOD_EXPIRED", [nil]),
        ("OFFER_REDEEMED", ["INITIAL_BUY", "RESUBSCRIBE", "UPGRADE", "DOWNGRADE", nil]),
        ("ONE_TIME_CHARGE", [nil]),
        ("PRICE_INCREASE", ["PENDING", "ACCEPTED"]),
        ("REFUND", [nil]),
        ("REFUND_DECLINED", [nil]),
        ("REFUND_REVERSED", [nil]),
        ("RENEWAL_EXTENDED", [nil]),
        ("RENEWAL_EXTENSION", ["SUMMARY", "FAILURE"]),
        ("REVOKE", [nil]),
        ("SUBSCRIBED", ["INITIAL_BUY", "RESUBSCRIBE"]),
        ("TEST", [nil]),
    ]
}
