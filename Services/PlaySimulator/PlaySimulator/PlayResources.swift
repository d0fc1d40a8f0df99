import Foundation

/// The Play Developer API's resources as Google shapes them (the androidpublisher v3 discovery document): int64 values as
/// JSON strings, times as RFC 3339 in UTC, absent fields left out.
extension PlayPurchase {
    /// `ProductPurchase` (purchases.products.get).
    var productPurchase: [String: Any] {
        var r: [String: Any] = [
            "kind": "androidpublisher#productPurchase", "purchaseTimeMillis": String(purchaseTimeMs), "purchaseState": canceled ? 1 : 0,
            "consumptionState": consumed ? 1 : 0, "orderId": orderId, "acknowledgementState": acknowledged ? 1 : 0,
            "purchaseToken": purchaseToken, "productId": productId, "quantity": quantity, "refundableQuantity": refundableQuantity,
            "regionCode": regionCode,
        ]
        if test { r["purchaseType"] = 0 }
        if let developerPayload { r["developerPayload"] = developerPayload }
        if let obfuscatedExternalAccountId { r["obfuscatedExternalAccountId"] = obfuscatedExternalAccountId }
        if let obfuscatedExternalProfileId { r["obfuscatedExternalProfileId"] = obfuscatedExternalProfileId }
        return r
    }

    /// `ProductPurchaseV2` (purchases.productsv2.getproductpurchasev2).
    var productPurchaseV2: [String: Any] {
        var r: [String: Any] = [
            "kind": "androidpublisher#productPurchaseV2", "orderId": orderId, "regionCode": regionCode,
            "purchaseCompletionTime": PlayTime.rfc3339(purchaseTimeMs),
            "purchaseStateContext": ["purchaseState": canceled ? "CANCELLED" : "PURCHASED"],
            "acknowledgementState": acknowledged ? "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED" : "ACKNOWLEDGEMENT_STATE_PENDING",
            "productLineItem": [
                [
                    "productId": productId,
                    "productOfferDetails": [
                        "quantity": quantity, "refundableQuantity": refundableQuantity,
                        "consumptionState": consumed ? "CONSUMPTION_STATE_CONSUMED" : "CONSUMPTION_STATE_YET_TO_BE_CONSUMED",
                    ] as [String: Any],
                ] as [String: Any]
            ],
        ]
        if test { r["testPurchaseContext"] = ["fopType": "TEST"] }
        if let obfuscatedExternalAccountId { r["obfuscatedExternalAccountId"] = obfuscatedExternalAccountId }
        if let obfuscatedExternalProfileId { r["obfuscatedExternalProfileId"] = obfuscatedExternalProfileId }
        return r
    }

    /// `SubscriptionPurchaseV2` (purchases.subscriptionsv2.get).
    var subscriptionPurchaseV2: [String: Any] {
        let units = priceMicros / 1_000_000
        let nanos = Int((priceMicros % 1_000_000) * 1_000)
        var offer: [String: Any] = ["basePlanId": basePlanId ?? "", "offerTags": [String]()]
        if let offerId { offer["offerId"] = offerId }
        let item: [String: Any] = [
            "productId": productId, "expiryTime": PlayTime.rfc3339(expiryTimeMs), "latestSuccessfulOrderId": latestOrderId,
            "offerDetails": offer,
            "autoRenewingPlan": [
                "autoRenewEnabled": autoRenewing,
                "recurringPrice": ["currencyCode": currency, "units": String(units), "nanos": nanos] as [String: Any],
            ] as [String: Any],
        ]
        var r: [String: Any] = [
            "kind": "androidpublisher#subscriptionPurchaseV2", "regionCode": regionCode, "startTime": PlayTime.rfc3339(purchaseTimeMs),
            "subscriptionState": state.googleName,
            "acknowledgementState": acknowledged ? "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED" : "ACKNOWLEDGEMENT_STATE_PENDING",
            "lineItems": [item], "etag": etag,
        ]
        if test { r["testPurchase"] = [String: Any]() }
        if let linkedPurchaseToken { r["linkedPurchaseToken"] = linkedPurchaseToken }
        var ids: [String: Any] = [:]
        if let obfuscatedExternalAccountId { ids["obfuscatedExternalAccountId"] = obfuscatedExternalAccountId }
        if let obfuscatedExternalProfileId { ids["obfuscatedExternalProfileId"] = obfuscatedExternalProfileId }
        if !ids.isEmpty { r["externalAccountIdentifiers"] = ids }
        if state == .canceled || state == .expired, let cancellation {
            var context: [String: Any] = [:]
            switch cancellation {
            case .user:
                context["userInitiatedCancellation"] = ["cancelTime": PlayTime.rfc3339(cancelTimeMs ?? expiryTimeMs)]
            case .system: context["systemInitiatedCancellation"] = [String: Any]()
            case .developer: context["developerInitiatedCancellation"] = [String: Any]()
            case .replacement: context["replacementCancellation"] = [String: Any]()
            }
            r["canceledStateContext"] = context
        }
        if state == .paused, let pausedUntilMs { r["pausedStateContext"] = ["autoResumeTime": PlayTime.rfc3339(pausedUntilMs)] }
        if state == .inGracePeriod { r["inGracePeriodStateContext"] = ["renewalDeclined": [String: Any]()] }
        if state == .onHold { r["onHoldStateContext"] = ["renewalDeclined": [String: Any]()] }
        return r
    }

    /// Changes whenever anything a developer can see changes.
    private var etag: String {
        let seen = "\(state.rawValue) \(expiryTimeMs) \(autoRenewing) \(acknowledged) \(renewals) \(cancelTimeMs ?? 0)"
        return String(seen.utf8.reduce(UInt64(14_695_981_039_346_656_037)) { ($0 ^ UInt64($1)) &* 1_099_511_628_211 }, radix: 36)
    }
}

enum PlayTime {
    /// RFC 3339 in UTC with milliseconds, as Google writes `google-datetime` values.
    static func rfc3339(_ ms: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }
}
