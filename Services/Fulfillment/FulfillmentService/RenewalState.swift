import IAPProtocol
import JSONRPC

/// A subscription's renewal state as Apple's signed renewal info (JWSRenewalInfoDecodedPayload) last said
/// it, kept per original transaction and only ever replaced by a later signed one.
public struct RenewalState: Sendable, Equatable {
    public var originalTransactionId: String
    public var autoRenew: Bool
    public var autoRenewProductId: String?
    public var inBillingRetry: Bool
    /// The end of the billing grace period: access continues until then although the charge failed.
    public var gracePeriodExpiresAtMs: Int64?
    /// Why it expired: 1 the customer cancelled, 2 billing error, 3 price increase not accepted, 4 product unavailable.
    public var expirationIntent: Int?
    public var priceIncreaseStatus: Int?
    public var signedDateMs: Int64

    public init(
        originalTransactionId: String, autoRenew: Bool, autoRenewProductId: String? = nil, inBillingRetry: Bool,
        gracePeriodExpiresAtMs: Int64? = nil, expirationIntent: Int? = nil, priceIncreaseStatus: Int? = nil, signedDateMs: Int64
    ) {
        self.originalTransactionId = originalTransactionId
        self.autoRenew = autoRenew
        self.autoRenewProductId = autoRenewProductId
        self.inBillingRetry = inBillingRetry
        self.gracePeriodExpiresAtMs = gracePeriodExpiresAtMs
        self.expirationIntent = expirationIntent
        self.priceIncreaseStatus = priceIncreaseStatus
        self.signedDateMs = signedDateMs
    }

    /// From verified renewal info (Apple's field names); `fallbackSignedDateMs` when it carries no signedDate.
    public init?(renewalInfo payload: JSONValue, fallbackSignedDateMs: Int64?) {
        guard let info = AppleRenewalInfo(payload) else { return nil }
        self.init(info, fallbackSignedDateMs: fallbackSignedDateMs)
    }

    public init?(_ info: AppleRenewalInfo, fallbackSignedDateMs: Int64?) {
        guard let signed = info.signedDateMs ?? fallbackSignedDateMs else { return nil }
        self.init(
            originalTransactionId: info.originalTransactionId, autoRenew: info.autoRenew, autoRenewProductId: info.autoRenewProductId,
            inBillingRetry: info.inBillingRetry, gracePeriodExpiresAtMs: info.gracePeriodExpiresDateMs,
            expirationIntent: info.expirationIntent, priceIncreaseStatus: info.priceIncreaseStatus, signedDateMs: signed)
    }

    /// What an app shows: will it renew, is the charge being retried, until when access continues.
    public func describe(_ e: inout Entitlement) {
        e.willRenew = autoRenew && !inBillingRetry
        e.inBillingRetry = inBillingRetry
        e.gracePeriodExpiresAtMs = inBillingRetry ? gracePeriodExpiresAtMs : nil
    }
}
