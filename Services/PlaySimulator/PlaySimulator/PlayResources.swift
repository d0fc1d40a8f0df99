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
        // One line item, or after a DEFERRED plan change two: the replaced plan's (until the switch the current one, not
        // renewing, with `deferredItemReplacement`; after it expired) listed before the new plan's (no expiry until it
        // starts). Google documents no order: the replaced one first, so a reader taking the first item is caught out.
        let current = PlayPlanItem(
            productId: productId, basePlanId: basePlanId, offerId: offerId, periodMs: periodMs, priceMicros: priceMicros,
            expiryTimeMs: expiryTimeMs, latestOrderId: latestOrderId)
        var items: [[String: Any]] = []
        if let replacedItem { items.append(lineItem(replacedItem, autoRenew: false)) }
        if let deferred {
            var replaced = lineItem(current, autoRenew: false)
            replaced["deferredItemReplacement"] = ["productId": deferred.productId]
            items += [replaced, lineItem(deferred, autoRenew: autoRenewing)]
        } else {
            items.append(lineItem(current, autoRenew: autoRenewing))
        }
        var r: [String: Any] = [
            "kind": "androidpublisher#subscriptionPurchaseV2", "regionCode": regionCode, "startTime": PlayTime.rfc3339(purchaseTimeMs),
            "subscriptionState": state.googleName,
            "acknowledgementState": acknowledged ? "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED" : "ACKNOWLEDGEMENT_STATE_PENDING",
            "lineItems": items, "etag": etag,
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

    /// A `SubscriptionPurchaseLineItem`: its expiry and last order only once it has them.
    private func lineItem(_ item: PlayPlanItem, autoRenew: Bool) -> [String: Any] {
        var offer: [String: Any] = ["basePlanId": item.basePlanId ?? "", "offerTags": [String]()]
        if let offerId = item.offerId { offer["offerId"] = offerId }
        var r: [String: Any] = [
            "productId": item.productId, "offerDetails": offer,
            "autoRenewingPlan": [
                "autoRenewEnabled": autoRenew,
                "recurringPrice": [
                    "currencyCode": currency, "units": String(item.priceMicros / 1_000_000), "nanos": Int((item.priceMicros % 1_000_000) * 1_000),
                ] as [String: Any],
            ] as [String: Any],
        ]
        if let expiry = item.expiryTimeMs { r["expiryTime"] = PlayTime.rfc3339(expiry) }
        if let order = item.latestOrderId { r["latestSuccessfulOrderId"] = order }
        return r
    }

    /// Changes whenever anything a developer can see changes.
    private var etag: String {
        let seen = "\(state.rawValue) \(productId) \(expiryTimeMs) \(autoRenewing) \(acknowledged) \(renewals) \(cancelTimeMs ?? 0)"
        return String(seen.utf8.reduce(UInt64(14_695_981_039_346_656_037)) { ($0 ^ UInt64($1)) &* 1_099_511_628_211 }, radix: 36)
    }
}

enum PlayTime {
    /// RFC 3339 in UTC with milliseconds, as Google writes `google-datetime` values (by hand: Foundation's formatter sets
    /// up ICU on every use, and the simulator answers on the same cores as the suite it stands beside).
    static func rfc3339(_ ms: Int64) -> String {
        let days = ms >= 0 ? ms / 86_400_000 : (ms - 86_399_999) / 86_400_000
        let inDay = ms - days * 86_400_000
        // Howard Hinnant's `civil_from_days`.
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func pad(_ n: Int64, _ width: Int) -> String {
            let s = String(n)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(inDay / 3_600_000, 2)):\(pad(inDay / 60_000 % 60, 2)):"
            + "\(pad(inDay / 1000 % 60, 2)).\(pad(inDay % 1000, 3))Z"
    }
}
