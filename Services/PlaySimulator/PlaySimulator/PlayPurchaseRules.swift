import Foundation
import IAPProtocol
import JSONRPC

/// The decisions of the `play.*` methods, apart from storage: what a new purchase looks like, what a customer's action
/// or a refund does to one.
enum PlayPurchaseRules {
    static func validate(_ p: PlayPurchaseProduct.Params) throws {
        for (field, value) in [("packageName", p.packageName), ("productId", p.productId)] where !isIdentifier(value) {
            throw RPCError.invalidParams("\(field) must be 1-150 letters, digits, '.', '_' or '-'", field: field, reason: "invalidValue")
        }
        if let plan = p.basePlanId, !isIdentifier(plan) {
            throw RPCError.invalidParams("basePlanId must be an identifier", field: "basePlanId", reason: "invalidValue")
        }
        for (field, value) in [
            ("obfuscatedExternalAccountId", p.obfuscatedExternalAccountId), ("obfuscatedExternalProfileId", p.obfuscatedExternalProfileId),
        ] {
            if let value, value.isEmpty || value.count > 64 {
                throw RPCError.invalidParams("\(field) is 1-64 characters, as Google limits it", field: field, reason: "invalidValue")
            }
        }
        let quantity = p.quantity ?? 1
        guard (1...10).contains(quantity), p.basePlanId == nil || quantity == 1 else {
            throw RPCError.invalidParams("quantity must be 1-10, and 1 for subscriptions", field: "quantity", reason: "invalidQuantity")
        }
        if let type = p.productType, (type == .subs) != (p.basePlanId != nil) {
            throw RPCError.invalidParams(
                "a subscription (productType subs) names its basePlanId; a one-time product (inapp) none", field: "basePlanId",
                reason: "invalidValue")
        }
        guard p.replacementMode == nil || p.linkedPurchaseToken != nil else {
            throw RPCError.invalidParams(
                "replacementMode is for a plan change (with linkedPurchaseToken)", field: "replacementMode", reason: "invalidValue")
        }
        guard (p.basePlanId != nil) || (p.linkedPurchaseToken == nil && p.offerId == nil && p.billingPeriod == nil) else {
            throw RPCError.invalidParams(
                "offerId, billingPeriod and linkedPurchaseToken are for subscriptions (with basePlanId)", field: "basePlanId", reason: "invalidValue")
        }
        for (field, days) in [("gracePeriodDays", p.gracePeriodDays), ("accountHoldDays", p.accountHoldDays)] {
            if let days, !(0...60).contains(days) {
                throw RPCError.invalidParams("\(field) must be 0-60", field: field, reason: "invalidValue")
            }
        }
        if let region = p.regionCode, region.count != 2 || !region.allSatisfy({ $0.isASCII && $0.isUppercase }) {
            throw RPCError.invalidParams("regionCode is ISO 3166-1 alpha-2, e.g. US", field: "regionCode", reason: "invalidValue")
        }
        if let currency = p.currency, currency.count != 3 || !currency.allSatisfy({ $0.isASCII && $0.isUppercase }) {
            throw RPCError.invalidParams("currency is ISO 4217, e.g. USD", field: "currency", reason: "invalidValue")
        }
        if let price = p.priceMicros, !(0...1_000_000_000_000_000).contains(price) {
            throw RPCError.invalidParams("priceMicros must be 0 to 10^15", field: "priceMicros", reason: "invalidValue")
        }
    }

    static func isIdentifier(_ s: String) -> Bool {
        (1...150).contains(s.count) && s.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }
    }

    /// A base plan's period; license testers' are the accelerated ones Google documents (a week or a month in five
    /// minutes, three months in ten, six in fifteen, a year in thirty).
    static func periodMs(_ period: PlayBillingPeriod, test: Bool) -> Int64 {
        let minute: Int64 = 60_000
        let day: Int64 = 86_400_000
        switch period {
        case .P1W: return test ? 5 * minute : 7 * day
        case .P1M: return test ? 5 * minute : 30 * day
        case .P3M: return test ? 10 * minute : 90 * day
        case .P6M: return test ? 15 * minute : 180 * day
        case .P1Y: return test ? 30 * minute : 365 * day
        }
    }

    static func make(_ p: PlayPurchaseProduct.Params, nowMs: Int64, linked: String?) -> PlayPurchase {
        let test = p.testPurchase ?? false
        var made = PlayPurchase(
            purchaseToken: newPurchaseToken(), packageName: p.packageName, productId: p.productId,
            kind: p.basePlanId == nil ? .product : .subscription, basePlanId: p.basePlanId, offerId: p.offerId, orderId: newOrderId(),
            quantity: p.quantity ?? 1, refundableQuantity: p.quantity ?? 1, obfuscatedExternalAccountId: p.obfuscatedExternalAccountId,
            obfuscatedExternalProfileId: p.obfuscatedExternalProfileId, test: test, regionCode: p.regionCode ?? "US",
            priceMicros: p.priceMicros ?? 990_000, currency: p.currency ?? "USD", purchaseTimeMs: nowMs)
        if made.kind == .subscription {
            made.periodMs = periodMs(p.billingPeriod ?? .P1M, test: test)
            made.expiryTimeMs = nowMs + made.periodMs
            made.autoRenewing = true
            made.linkedPurchaseToken = linked
            // Off when 0; license testers' are Google's accelerated five and ten minutes whatever their length.
            let grace = Int64(p.gracePeriodDays ?? 7)
            let hold = Int64(p.accountHoldDays ?? 30)
            made.gracePeriodMs = grace == 0 ? 0 : test ? 5 * 60_000 : grace * 86_400_000
            made.accountHoldMs = hold == 0 ? 0 : test ? 10 * 60_000 : hold * 86_400_000
        }
        return made
    }

    /// A DEFERRED plan change: the new purchase `made` is issued now and carries on the item of the plan it replaces (its
    /// product, base plan and expiry, not renewing), with the new plan's item waiting to take over at that expiry
    /// (`PlayPurchase.advance`); the replaced token expires now, its entitlement passed on (Google: SUBSCRIPTION_EXPIRED for
    /// it, SUBSCRIPTION_PURCHASED with the old product for the new one).
    /// Only a plan in a paid period defers (active, or canceled before its expiry): on hold, paused or in its grace period
    /// there is no paid period to carry on, and the change would start at once.
    static func deferReplacement(_ made: inout PlayPurchase, replacing old: inout PlayPurchase, nowMs: Int64) throws {
        guard [.active, .canceled].contains(old.state), old.expiryTimeMs > nowMs else {
            throw RPCError.conflict(
                "a DEFERRED change needs a plan in a paid period (active, or canceled before its expiry)", reason: "invalidSubscriptionState")
        }
        made.deferred = PlayPlanItem(
            productId: made.productId, basePlanId: made.basePlanId, offerId: made.offerId, periodMs: made.periodMs,
            priceMicros: made.priceMicros)
        made.productId = old.productId
        made.basePlanId = old.basePlanId
        made.offerId = old.offerId
        made.periodMs = old.periodMs
        made.priceMicros = old.priceMicros
        made.expiryTimeMs = old.expiryTimeMs
        old.state = .expired
        old.autoRenewing = false
        old.cancellation = .replacement
        old.cancelTimeMs = nowMs
        old.expiryTimeMs = min(old.expiryTimeMs, nowMs)
    }

    /// A customer's action on a subscription, and the notifications it makes.
    static func apply(_ p: PlaySubscriptionEvent.Params, to s: inout PlayPurchase, nowMs: Int64) throws -> [PlayEvent] {
        func refuse(_ why: String) -> RPCError { RPCError.conflict("\(p.action.rawValue): \(why)", reason: "invalidSubscriptionState") }
        switch p.action {
        case .cancel:
            guard [.active, .inGracePeriod, .onHold, .paused].contains(s.state), s.autoRenewing else { throw refuse("not renewing") }
            s.autoRenewing = false
            s.cancellation = .user
            s.cancelTimeMs = nowMs
            s.pendingPauseMs = nil
            if s.state == .onHold || s.state == .paused {
                s.state = .expired
                s.holdUntilMs = nil
                s.pausedUntilMs = nil
                return [.subscription(.canceled), .subscription(.expired)]
            }
            s.state = .canceled
            return [.subscription(.canceled)]
        case .restart:
            guard s.state == .canceled, s.cancellation != .replacement, s.expiryTimeMs > nowMs else {
                throw refuse("only a canceled subscription before its expiry restarts (not one a replacement ended)")
            }
            s.state = .active
            s.autoRenewing = true
            s.cancellation = nil
            s.cancelTimeMs = nil
            return [.subscription(.restarted)]
        case .declinePayment:
            guard s.state != .expired else { throw refuse("expired") }
            s.paymentDeclined = true
            return []
        case .fixPayment:
            s.paymentDeclined = false
            guard s.state == .inGracePeriod || s.state == .onHold else { return [] }
            s.state = .active
            s.holdUntilMs = nil
            s.renewals += 1
            s.expiryTimeMs = nowMs + s.periodMs
            return [.subscription(.recovered)]
        case .pause:
            guard let days = p.pauseDays, (7...90).contains(days) else {
                throw RPCError.invalidParams("pauseDays must be 7-90", field: "pauseDays", reason: "invalidValue")
            }
            guard s.state == .active, s.autoRenewing else { throw refuse("only an active, renewing subscription pauses") }
            s.pendingPauseMs = Int64(days) * 86_400_000
            return [.subscription(.pauseScheduleChanged)]
        case .resume:
            if s.state == .paused {
                s.state = .active
                s.pausedUntilMs = nil
                s.renewals += 1
                s.expiryTimeMs = nowMs + s.periodMs
                return [.subscription(.recovered)]
            }
            guard s.pendingPauseMs != nil else { throw refuse("not paused") }
            s.pendingPauseMs = nil
            return [.subscription(.pauseScheduleChanged)]
        }
    }

    /// A refund or chargeback from outside the app (`play.refund`): the whole purchase revoked, or, for a
    /// one-time purchase of several, a quantity-based partial refund (revoked entirely when nothing is left).
    static func void(_ s: inout PlayPurchase, _ p: PlayRefund.Params, nowMs: Int64) throws -> [(atMs: Int64, event: PlayEvent)] {
        guard s.isLive || (s.kind == .subscription && s.state != .expired) else {
            throw RPCError.conflict("the purchase is already revoked or expired", reason: "alreadyVoided")
        }
        let source = PlayVoidedSource(p.source ?? .user)
        let reason = PlayVoidedReason(p.reason ?? .remorse)
        if let quantity = p.quantity {
            guard s.kind == .product, (1...s.refundableQuantity).contains(quantity) else {
                throw RPCError.invalidParams(
                    "quantity is for one-time purchases, 1 to the refundable quantity (\(s.refundableQuantity))", field: "quantity",
                    reason: "invalidQuantity")
            }
            if quantity < s.refundableQuantity {
                s.refundableQuantity -= quantity
                return [(nowMs, .voided(orderId: s.orderId, source: source, reason: reason, quantity: quantity))]
            }
        }
        return s.revoke(atMs: nowMs, source: source, reason: reason, cancellation: source == .developer ? .developer : .system)
    }

    /// Google's purchase tokens are long opaque strings (letters, digits, '.', '-', '_').
    static func newPurchaseToken() -> String {
        let letters = Array("abcdefghijklmnopqrstuvwxyz")
        var rng = SystemRandomNumberGenerator()
        let head = String((0..<24).map { _ in letters[Int(rng.next() % 26)] })
        let body = (0..<72).map { _ in UInt8.random(in: 0...255, using: &rng) }
        return
            "\(head).AO-J1O\(Data(body).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: ""))"
    }

    /// `GPA.` and four groups of digits, the form of Google Play order ids.
    static func newOrderId() -> String {
        func digits(_ n: Int) -> String { String((0..<n).map { _ in Character(String(Int.random(in: 0...9))) }) }
        return "GPA.\(digits(4))-\(digits(4))-\(digits(4))-\(digits(5))"
    }
}
