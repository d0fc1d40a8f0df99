import IAPProtocol
import JSONRPC

/// Checks an admin's product definitions before anything is written: a bad product (or any bad
/// product of an import) changes nothing.
public enum ProductValidation {
    public static let maxProducts = 10_000

    public static func check(_ p: ProductDefinition, field: String) throws(RPCError) {
        try checkProductId(p.productId, field: "\(field).productId")
        try nonEmpty(p.referenceName, max: 200, field: "\(field).referenceName")
        guard !p.localizations.isEmpty else {
            throw RPCError.invalidParams("at least one localization is required", field: "\(field).localizations", reason: "missingLocalization")
        }
        for (locale, text) in p.localizations {
            try checkLocale(locale, field: "\(field).localizations")
            try nonEmpty(text.title, max: 200, field: "\(field).localizations.\(locale).title")
            guard text.description.count <= 4000 else {
                throw RPCError.invalidParams(
                    "description is longer than 4000 characters",
                    field: "\(field).localizations.\(locale).description", reason: "tooLong")
            }
        }
        guard p.localizations[p.defaultLocale] != nil else {
            throw RPCError.invalidParams(
                "defaultLocale \"\(p.defaultLocale)\" has no localization", field: "\(field).defaultLocale",
                reason: "missingLocalization")
        }
        try checkGrant(p.grant, type: p.type, field: "\(field).grant")
        if let prices = p.prices { try checkPrices(prices, field: "\(field).prices") }
        if let offers = p.offers { try checkOffers(offers, type: p.type, field: "\(field).offers") }
        if let retention = p.retention { try RetentionValidation.check(retention, product: p, field: "\(field).retention") }
        if let play = p.googlePlay {
            // Google's ids: lowercase letters, digits, '.', '_' (product ids), '-' (base plans); a base plan is a subscription's.
            try checkProductId(play.productId, field: "\(field).googlePlay.productId")
            if let plan = play.basePlanId {
                try checkProductId(plan, field: "\(field).googlePlay.basePlanId")
                guard p.type == .autoRenewable else {
                    throw RPCError.invalidParams(
                        "only subscriptions have base plans", field: "\(field).googlePlay.basePlanId", reason: "basePlanNotAllowed")
                }
            }
        }
    }

    /// Offers belong to auto-renewables; ids are App Store Connect's (1-64 letters, digits, '.', '_', '-'),
    /// unique per product; a window ends after it starts; `subscribedAtMost` says how many times.
    static func checkOffers(_ offers: [SubscriptionOffer], type: ProductType, field: String) throws(RPCError) {
        guard offers.isEmpty || type == .autoRenewable else {
            throw RPCError.invalidParams("only auto-renewable subscriptions have offers", field: field, reason: "offersNotAllowed")
        }
        guard offers.count <= 100 else { throw RPCError.invalidParams("at most 100 offers a product", field: field, reason: "tooMany") }
        var seen: Set<String> = []
        for (i, offer) in offers.enumerated() {
            let at = "\(field)[\(i)]"
            let allowed = offer.offerId.unicodeScalars.allSatisfy {
                $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0))
            }
            guard !offer.offerId.isEmpty, offer.offerId.count <= 64, allowed else {
                throw RPCError.invalidParams(
                    "offerId must be 1-64 letters, digits, '.', '_' or '-'", field: "\(at).offerId", reason: "invalidOfferId")
            }
            guard seen.insert(offer.offerId).inserted else {
                throw RPCError.invalidParams("offer \(offer.offerId) is defined twice", field: "\(at).offerId", reason: "duplicateOffer")
            }
            guard offer.type == "promotional" else {
                throw RPCError.invalidParams("type must be promotional", field: "\(at).type", reason: "invalidValue")
            }
            if offer.eligibility.kind == .subscribedAtMost {
                guard let times = offer.eligibility.times, (0...10_000).contains(times) else {
                    throw RPCError.invalidParams(
                        "subscribedAtMost needs times (0-10000)", field: "\(at).eligibility.times", reason: "invalidValue")
                }
            }
            if let starts = offer.startsAtMs, let ends = offer.endsAtMs, ends <= starts {
                throw RPCError.invalidParams("endsAtMs must be after startsAtMs", field: "\(at).endsAtMs", reason: "invalidValue")
            }
        }
    }

    public static func checkProductId(_ id: String, field: String) throws(RPCError) {
        let allowed = id.unicodeScalars.allSatisfy {
            $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0))
        }
        guard !id.isEmpty, id.count <= 100, allowed else {
            throw RPCError.invalidParams(
                "productId must be 1-100 characters of letters, digits, '.', '_' or '-'", field: field,
                reason: "invalidProductId")
        }
    }

    static func checkLocale(_ locale: String, field: String) throws(RPCError) {
        let parts = locale.split(separator: "-", omittingEmptySubsequences: false)
        let ok =
            (2...3).contains(parts[0].count) && parts[0].allSatisfy { $0.isASCII && $0.isLowercase }
            && parts.dropFirst().allSatisfy { (2...8).contains($0.count) && $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) } }
        guard ok else {
            throw RPCError.invalidParams("\"\(locale)\" is not a locale identifier like en-US", field: field, reason: "invalidLocale")
        }
    }

    private static func nonEmpty(_ s: String, max: Int, field: String) throws(RPCError) {
        guard !s.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw RPCError.invalidParams("\(field) must not be empty", field: field, reason: "emptyField")
        }
        guard s.count <= max else { throw RPCError.invalidParams("\(field) is longer than \(max) characters", field: field, reason: "tooLong") }
    }

    /// Each type grants its own kind of thing: coins for consumables, content for non-consumables, a
    /// subscription group for auto-renewables, a duration for non-renewing subscriptions.
    static func checkGrant(_ grant: Grant, type: ProductType, field: String) throws(RPCError) {
        switch (type, grant) {
        case (.consumable, .coins(let n)):
            guard n > 0, n <= CoinLimits.maxPerUnit else {
                throw RPCError.invalidParams("coins must be 1-\(CoinLimits.maxPerUnit)", field: "\(field).coins", reason: "invalidGrant")
            }
        case (.nonConsumable, .content(let e, let ids)):
            try nonEmpty(e, max: 100, field: "\(field).entitlement")
            guard Set(ids).count == ids.count, ids.allSatisfy({ !$0.isEmpty && $0.count <= 200 }) else {
                throw RPCError.invalidParams("content ids must be unique and non-empty", field: "\(field).content", reason: "invalidGrant")
            }
        case (.autoRenewable, .subscription(let e, let group)):
            try nonEmpty(e, max: 100, field: "\(field).entitlement")
            try nonEmpty(group, max: 100, field: "\(field).subscriptionGroup")
        case (.nonRenewing, .timeLimited(let e, let days)):
            try nonEmpty(e, max: 100, field: "\(field).entitlement")
            guard (1...3660).contains(days) else {
                throw RPCError.invalidParams("durationDays must be between 1 and 3660", field: "\(field).durationDays", reason: "invalidGrant")
            }
        default:
            throw RPCError.invalidParams("a \(type.rawValue) product must grant \(expectedGrant(type))", field: field, reason: "grantMismatch")
        }
    }

    private static func expectedGrant(_ type: ProductType) -> String {
        switch type {
        case .consumable: return "{coins}"
        case .nonConsumable: return "{entitlement, content}"
        case .autoRenewable: return "{entitlement, subscriptionGroup}"
        case .nonRenewing: return "{entitlement, durationDays}"
        }
    }

    /// Validated prices in minor units, one per storefront.
    @discardableResult
    public static func checkPrices(_ prices: [PriceEntry], field: String) throws(RPCError) -> [StoredPrice] {
        var seen = Set<String>()
        var out: [StoredPrice] = []
        for (i, p) in prices.enumerated() {
            try Storefronts.check(p.storefront, field: "\(field)[\(i)].storefront")
            try Currencies.check(p.currency, field: "\(field)[\(i)].currency")
            let minor = try Currencies.parseAmount(p.amount, currency: p.currency, field: "\(field)[\(i)].amount")
            guard seen.insert(p.storefront).inserted else {
                throw RPCError.invalidParams(
                    "storefront \(p.storefront) appears twice", field: "\(field)[\(i)].storefront",
                    reason: "duplicateStorefront")
            }
            out.append(StoredPrice(storefront: p.storefront, currency: p.currency, amountMinor: minor))
        }
        return out
    }
}

/// A price as stored: integer minor units.
public struct StoredPrice: Sendable, Equatable, Hashable {
    public var storefront: String
    public var currency: String
    public var amountMinor: Int64

    public init(storefront: String, currency: String, amountMinor: Int64) {
        self.storefront = storefront
        self.currency = currency
        self.amountMinor = amountMinor
    }
}

extension ProductDefinition {
    /// The ids Google Play sells it under: its `googlePlay`, else its own id (any base plan).
    var googlePlayKey: GooglePlayProductIds { googlePlayKey(keeping: nil) }

    /// The ids it is sold under once written over `stored`: left out, they stay as stored (`keepingUnsaid`).
    func googlePlayKey(keeping stored: ProductDefinition?) -> GooglePlayProductIds {
        googlePlay ?? stored?.googlePlay ?? GooglePlayProductIds(productId: productId)
    }
}

extension ProductDefinition {
    /// What an import or an upsert writes for a product already stored: what it leaves out stays as stored. A status
    /// left out keeps the stored one (re-importing the catalog file does not bring a retired product back; `"status":
    /// "active"` does), offers or retention rules left out keep theirs (`[]` clears them), and so do Google Play ids
    /// (`{"productId": <its own id>}` is the same as none). A new product is active.
    func keepingUnsaid(stored: (definition: ProductDefinition, status: ProductStatus)?) -> (definition: ProductDefinition, status: ProductStatus) {
        var merged = self
        merged.prices = nil
        merged.offers = offers ?? stored?.definition.offers
        merged.retention = retention ?? stored?.definition.retention
        merged.googlePlay = googlePlay ?? stored?.definition.googlePlay
        let status = status ?? stored?.status ?? .active
        merged.status = status
        return (merged, status)
    }
}

extension ProductDefinition {
    /// What existing buyers hold of a product, and so cannot change once it exists: its type, its grant's kind, the
    /// entitlement it grants and a subscription's group (fulfillment keeps the entitlement by name, and offers, upgrades
    /// and retention read the group). Coins per unit, content ids and a time-limited pass's days may change: coins are
    /// taken back as granted, content is read from the catalog as it is now, a pass's days count from each purchase.
    /// The Google Play ids it is sold under are kept too: fulfillment finds a Play purchase's product by them at every
    /// renewal, refund and restore, so moved to another product they would move the Play buyers to its grant.
    /// Nil when `self` keeps them, else the member that changed and what it was.
    public func fixedChange(from stored: ProductDefinition) -> (member: String, was: String)? {
        if type != stored.type { return ("type", "its type (\(stored.type.rawValue))") }
        if let change = grantChange(from: stored) { return change }
        guard googlePlayKey(keeping: stored) == stored.googlePlayKey else {
            let was = stored.googlePlayKey
            return ("googlePlay", "the Google Play ids it is sold under (\(was.productId)\(was.basePlanId.map { "/" + $0 } ?? ""))")
        }
        return nil
    }

    private func grantChange(from stored: ProductDefinition) -> (member: String, was: String)? {
        switch (stored.grant, grant) {
        case (.coins, .coins): return nil
        case (.content(let was, _), .content(let now, _)), (.timeLimited(let was, _), .timeLimited(let now, _)):
            return was == now ? nil : ("grant", "its entitlement (\(was))")
        case (.subscription(let was, let wasGroup), .subscription(let now, let group)):
            if was != now { return ("grant", "its entitlement (\(was))") }
            return wasGroup == group ? nil : ("grant", "its subscription group (\(wasGroup))")
        default: return ("grant", "its kind of grant")
        }
    }

    /// `grantChanged` when `self` changes what `stored`'s buyers hold (`fixedChange`); `path` names the product in the call.
    func refuseFixedChange(from stored: ProductDefinition, path: String) throws(RPCError) {
        guard let change = fixedChange(from: stored) else { return }
        throw RPCError.invalidParams(
            "\(productId) cannot change \(change.was): its buyers hold it; sell the new one as a new product, or pass allowGrantChange "
                + "(iap catalog --allow-grant-change) for a product nobody has bought", field: "\(path).\(change.member)", reason: "grantChanged")
    }
}

/// Google Play's ids name one product each (`googlePlayIdTaken`), checked on the whole catalog as written, inside the
/// write: the check on the instance's catalog before it (for the caller's field path) may be a minute old, and another
/// instance's product created meanwhile under the same ids would split their Play buyers between two grants. On
/// PostgreSQL two such writes at once conflict (SERIALIZABLE) and the second, run again, sees the first.
/// Only a pair with a product this write wrote is refused: two others sharing ids already (a race before this check) do
/// not stop unrelated writes.
enum PlayClaims {
    static func refuseShared(_ catalog: [ProductDefinition], written: Set<String>) throws(RPCError) {
        var claimed: [GooglePlayProductIds: String] = [:]
        for product in catalog.sorted(by: { $0.productId < $1.productId }) {
            if let other = claimed.updateValue(product.productId, forKey: product.googlePlayKey),
                written.contains(product.productId) || written.contains(other)
            {
                throw RPCError.invalidParams(
                    "\(product.productId) is sold on Google Play under the ids \(other) already has", field: "products.googlePlay",
                    reason: "googlePlayIdTaken")
            }
        }
    }
}
