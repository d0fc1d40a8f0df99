import Foundation
import IAPProtocol
import JSONRPC
import Receipts

/// One subscription of an account as this server recorded it: what offer eligibility is decided from.
public struct SubscriptionHistoryRecord: Sendable, Equatable {
    public var originalTransactionId: String
    /// Its current plan and the plan of every period paid here.
    public var productIds: Set<String>
    public var active: Bool
    /// Periods paid and not refunded.
    public var periodsPaid: Int
    public init(originalTransactionId: String, productIds: Set<String>, active: Bool, periodsPaid: Int) {
        self.originalTransactionId = originalTransactionId
        self.productIds = productIds
        self.active = active
        self.periodsPaid = periodsPaid
    }
}

/// What this server knows of the Apple customer behind an account. Offers are for customers, not accounts: a
/// returning subscriber who registers a fresh account is the same customer at Apple.
public enum OfferCustomer: Sendable, Equatable {
    /// One of the customer's Production transactions (named in the signed JWS, as Apple asks) and their
    /// subscriptions in the product's group, from this server's records and the customer's history at Apple.
    case known(transactionId: String, history: [SubscriptionHistoryRecord])
    /// Why this server cannot say.
    case unknown(String)

    /// Only the subscriptions to `plans` (the product's group).
    func inGroup(_ plans: Set<String>) -> OfferCustomer {
        guard case .known(let transactionId, let history) = self else { return self }
        return .known(transactionId: transactionId, history: history.filter { !$0.productIds.isDisjoint(with: plans) })
    }

    static let noPurchase =
        "neither this account nor one linked to the same Apple customer (app transaction) holds a Production purchase, so the customer is unknown here"
    static let noAppleAPI = "the App Store Server API is not configured, so the customer's history at Apple cannot be read"
}

/// The account's own Apple customer (its own purchases) and, when it is linked to an Apple customer by app transaction,
/// that customer as every linked account's purchases show it.
public struct OfferCustomers: Sendable, Equatable {
    public var own: OfferCustomer
    public var linked: OfferCustomer?
    public init(own: OfferCustomer, linked: OfferCustomer? = nil) {
        self.own = own
        self.linked = linked
    }
}

/// Who may redeem an offer: decided from the Apple customer's subscriptions in the product's group (this server's
/// records and Apple's history), never from what a device says.
public enum OfferRules {
    /// Nil when `offer` may be signed now for `customer`; otherwise why not.
    public static func refusal(_ offer: SubscriptionOffer, customer: OfferCustomer, nowMs: Int64) -> String? {
        if let starts = offer.startsAtMs, nowMs < starts { return "the offer has not started" }
        if let ends = offer.endsAtMs, nowMs >= ends { return "the offer has ended" }
        if offer.eligibility.kind == .anyone { return nil }
        let history: [SubscriptionHistoryRecord]
        switch customer {
        case .unknown(let why): return "decided from the customer's history at Apple: \(why)"
        case .known(_, let records): history = records
        }
        switch offer.eligibility.kind {
        case .anyone:
            return nil
        case .lapsed:
            if history.isEmpty { return "for lapsed subscribers: this customer never subscribed" }
            if history.contains(where: \.active) { return "for lapsed subscribers: this customer is subscribed now" }
            return nil
        case .neverSubscribed:
            return history.isEmpty ? nil : "for new subscribers: this customer subscribed before"
        case .subscribedAtMost:
            let paid = history.reduce(0) { $0 + $1.periodsPaid }
            let times = offer.eligibility.times ?? 0
            return paid <= times ? nil : "for customers who paid for at most \(times) periods: this one paid for \(paid)"
        }
    }

    /// Apple's introductory offer is for customers new to the group: nil when eligible, otherwise why not.
    public static func introductoryOfferRefusal(customer: OfferCustomer) -> String? {
        switch customer {
        case .unknown(let why): return "\(why); StoreKit decides (isEligibleForIntroOffer)"
        case .known(_, let history): return history.isEmpty ? nil : "this customer subscribed in the group before"
        }
    }

    /// A link (`accounts.linkAppTransaction`: a JWS whoever holds it can present) only narrows: eligible when both the
    /// account's own view and its linked customer's are; the linked view's refusal is named when the own view cannot
    /// decide (the customer unknown).
    public static func refusal(_ offer: SubscriptionOffer, customers: OfferCustomers, nowMs: Int64) -> String? {
        narrowed(customers) { refusal(offer, customer: $0, nowMs: nowMs) }
    }

    public static func introductoryOfferRefusal(customers: OfferCustomers) -> String? {
        narrowed(customers) { introductoryOfferRefusal(customer: $0) }
    }

    private static func narrowed(_ customers: OfferCustomers, _ refusal: (OfferCustomer) -> String?) -> String? {
        let own = refusal(customers.own)
        guard let linked = customers.linked else { return own }
        let viaLink = refusal(linked)
        if case .unknown = customers.own { return viaLink ?? own }
        return own ?? viaLink
    }

    /// The customer's auto-renewable subscriptions as Apple's transaction history shows them (Production only):
    /// one record per original, its plans, active while a period not revoked runs, periods not revoked.
    public static func subscriptions(inAppleHistory purchases: [VerifiedPurchase], nowMs: Int64) -> [SubscriptionHistoryRecord] {
        let periods = purchases.filter { $0.environment == "Production" && $0.expiresDateMs != nil }
        return Dictionary(grouping: periods, by: \.originalTransactionId).map { original, periods in
            let paid = periods.filter { $0.cancellationDateMs == nil }
            return SubscriptionHistoryRecord(
                originalTransactionId: original, productIds: Set(periods.map(\.productId)),
                active: paid.contains { ($0.expiresDateMs ?? 0) > nowMs }, periodsPaid: paid.count)
        }.sorted { $0.originalTransactionId < $1.originalTransactionId }
    }

    /// This server's records and Apple's, one per original: the plans of both, active if either says so, the
    /// larger count of periods (Apple's history may be behind a renewal this server applied, and the reverse).
    public static func merged(_ local: [SubscriptionHistoryRecord], _ apple: [SubscriptionHistoryRecord]) -> [SubscriptionHistoryRecord] {
        var byOriginal: [String: SubscriptionHistoryRecord] = [:]
        for record in local + apple {
            guard var known = byOriginal[record.originalTransactionId] else {
                byOriginal[record.originalTransactionId] = record
                continue
            }
            known.productIds.formUnion(record.productIds)
            known.active = known.active || record.active
            known.periodsPaid = max(known.periodsPaid, record.periodsPaid)
            byOriginal[record.originalTransactionId] = known
        }
        return byOriginal.values.sorted { $0.originalTransactionId < $1.originalTransactionId }
    }
}

/// Subscription offers: which the account's Apple customer may redeem, and their signatures.
public struct OfferDesk: FulfillmentPart {
    let service: FulfillmentService

    /// `fulfillment.offerEligibility`: each offer of the product, eligible or why not, and the introductory
    /// offer's eligibility signed for StoreKit when an offer key is configured and the customer is known (Apple's
    /// form names one of the customer's transactions; without it StoreKit decides from Apple's records).
    public func offerEligibility(_ p: FulfillmentOfferEligibility.Params) async throws(RPCError) -> FulfillmentOfferEligibility.Result {
        let context = try await offerContext(session: p.session, productId: p.productId)
        let now = clock.nowMs
        let standings = (context.product.offers ?? []).map { offer in
            let refusal = OfferRules.refusal(offer, customers: context.customers, nowMs: now)
            return FulfillmentOfferEligibility.OfferStanding(offerId: offer.offerId, eligible: refusal == nil, reason: refusal)
        }
        let introductoryRefusal = OfferRules.introductoryOfferRefusal(customers: context.customers)
        // Signed for the account's own customer; for the linked one only to say "not eligible" (a link only narrows).
        var named: String?
        if case .known(let own, _) = context.customers.own {
            named = own
        } else if case .known(let linked, _)? = context.customers.linked, introductoryRefusal != nil {
            named = linked
        }
        var signed: String?
        if let key = configuration.offerKey, let transactionId = named {
            let claims: [String: JSONValue] = [
                "productId": .string(p.productId), "allowIntroductoryOffer": .bool(introductoryRefusal == nil),
                "transactionId": .string(transactionId),
            ]
            signed = try sign {
                try PromotionalOffer.jws(
                    audience: "introductory-offer-eligibility", claims: claims, keyId: key.keyId, issuerId: key.issuerId,
                    bundleId: key.bundleId, nonce: UUID().uuidString.lowercased(), issuedAtMs: now, key: key.key)
            }
        }
        return .init(
            productId: p.productId, offers: standings, introductoryOfferEligible: introductoryRefusal == nil,
            introductoryOfferJWS: signed, introductoryOfferReason: introductoryRefusal)
    }

    /// `fulfillment.signOffer`: a promotional offer signed for this account (both StoreKit forms), or
    /// `forbidden` / `notEligible` with the rule's reason.
    public func signOffer(_ p: FulfillmentSignOffer.Params) async throws(RPCError) -> FulfillmentSignOffer.Result {
        guard let key = configuration.offerKey else {
            throw RPCError(
                code: .unavailable, message: "subscription offers are not configured on this server (--offer-key)",
                reason: "offersNotConfigured", retryable: false)
        }
        let context = try await offerContext(session: p.session, productId: p.productId)
        guard let offer = context.product.offers?.first(where: { $0.offerId == p.offerId }) else {
            throw RPCError.notFound("\(p.productId) has no offer \(p.offerId)", reason: "unknownOffer")
        }
        let now = clock.nowMs
        if let refusal = OfferRules.refusal(offer, customers: context.customers, nowMs: now) {
            throw RPCError.forbidden(refusal, reason: "notEligible")
        }
        let nonce = UUID().uuidString.lowercased()
        let token = context.account.appAccountToken.lowercased()
        // Optional in Apple's form, and recommended: one of the customer's transactions.
        var named: String?
        if case .known(let transactionId, _) = context.customers.own { named = transactionId }
        let (signature, jws) = try sign {
            (
                try key.signatureV1(productId: p.productId, offerId: p.offerId, appAccountToken: token, nonce: nonce, nowMs: now),
                try key.signatureV2(productId: p.productId, offerId: p.offerId, transactionId: named, nonce: nonce, nowMs: now)
            )
        }
        logger.debug(
            "offer signed", metadata: ["productId": "\(p.productId)", "offerId": "\(p.offerId)", "accountId": "\(context.account.accountId)"])
        return .init(
            productId: p.productId, offerId: p.offerId, keyId: key.keyId, nonce: nonce, timestamp: now, appAccountToken: token,
            signature: signature, jws: jws)
    }

    private func sign<T>(_ body: () throws -> T) throws(RPCError) -> T {
        do {
            return try body()
        } catch {
            logger.error("signing an offer failed", metadata: ["error": "\(type(of: error))"])
            throw RPCError.internalError("signing the offer failed")
        }
    }

    /// The caller, the product (an auto-renewable with its offers), and the caller's Apple customer with their
    /// Production subscriptions in its group (Sandbox value never counts for offers: their signatures name no
    /// environment): as its own purchases show it, and as those of every account linked to the same Production app
    /// transaction do.
    private func offerContext(session: String, productId: String) async throws(RPCError) -> (
        account: AuthenticatedAccount, product: Product, customers: OfferCustomers
    ) {
        let account = try await dependencies.authenticate(session)
        guard let product = try await dependencies.products([productId]).products.first(where: { $0.productId == productId }),
            case .subscription(_, let group) = product.grant
        else {
            throw RPCError.notFound("\(productId) is not an auto-renewable subscription in the catalog", reason: "unknownProduct")
        }
        // A retired product is no longer sold: none of its offers is signed (Retention Messaging answers its subscribers
        // on their own path).
        guard product.status == .active else {
            throw RPCError.forbidden("\(productId) is retired: it is no longer sold, so none of its offers is signed", reason: "productRetired")
        }
        let accountId = account.accountId
        let now = clock.nowMs
        // Each account's records read once: the own view is the caller's, the linked view every linked account's too.
        var held: [(transactionId: String?, history: [SubscriptionHistoryRecord])] = []
        for id in [accountId] + (try await linkedAccounts(accountId)) {
            let transactionId = try await storeCall { try await self.store.customerTransactionId(accountId: id) }
            let history = try await storeCall { try await self.store.subscriptionHistory(accountId: id, scope: .production, nowMs: now) }
            held.append((transactionId, history))
        }
        let own = try await customer(held[..<1], caller: accountId, nowMs: now)
        let viaLink = held.count > 1 ? try await customer(held[...], caller: accountId, nowMs: now) : nil
        // Which of the customer's subscriptions are in this product's group: the catalog says of each plan (one call).
        var plans: Set<String> = []
        for case .known(_, let history) in [own, viaLink].compactMap({ $0 }) { plans.formUnion(history.flatMap(\.productIds)) }
        plans.remove(productId)
        var inGroup: Set<String> = [productId]
        if !plans.isEmpty {
            for other in try await dependencies.products(Array(plans)).products {
                if case .subscription(_, let otherGroup) = other.grant, otherGroup == group { inGroup.insert(other.productId) }
            }
        }
        return (account, product, OfferCustomers(own: own.inGroup(inGroup), linked: viaLink?.inGroup(inGroup)))
    }

    /// The Apple customer as the held records show it (the first account holding a Production purchase names it), with
    /// Apple's history of that customer.
    private func customer(_ held: ArraySlice<(transactionId: String?, history: [SubscriptionHistoryRecord])>, caller: String, nowMs: Int64)
        async throws(RPCError) -> OfferCustomer
    {
        guard let transactionId = held.lazy.compactMap(\.transactionId).first else { return .unknown(OfferCustomer.noPurchase) }
        guard let apple = try await appleSubscriptions(customerTransactionId: transactionId, accountId: caller, nowMs: nowMs) else {
            return .unknown(OfferCustomer.noAppleAPI)
        }
        return .known(transactionId: transactionId, history: OfferRules.merged(held.flatMap(\.history), apple))
    }

    /// The other accounts linked to the account's Apple customers (Production app transactions only,
    /// `accounts.linkAppTransaction`), oldest link first, at most `maxLinkedAccounts`; none without an internal token.
    private func linkedAccounts(_ accountId: String) async throws(RPCError) -> [String] {
        guard let token = configuration.internalToken else { return [] }
        let links = try await dependencies.appleCustomer(accountId: accountId, internalToken: token).filter { $0.environment == "Production" }
        let customers = Set(links.filter { $0.accountId == accountId }.map(\.appTransactionId))
        var accounts: [String] = []
        for link in links where customers.contains(link.appTransactionId) && link.accountId != accountId && !accounts.contains(link.accountId) {
            accounts.append(link.accountId)
        }
        return Array(accounts.prefix(Self.maxLinkedAccounts))
    }

    /// Accounts of one Apple customer read for an offer decision (accounts caps the links themselves).
    static let maxLinkedAccounts = 20

    /// The customer's subscriptions in their transaction history at Apple (one history read from the account's
    /// budget of Apple calls); nil when the App Store Server API is not configured.
    private func appleSubscriptions(customerTransactionId: String, accountId: String, nowMs: Int64) async throws(RPCError)
        -> [SubscriptionHistoryRecord]?
    {
        guard let token = configuration.internalToken else { return nil }
        let key = accountId + " " + customerTransactionId
        if let known = service.appleHistoryCache.value(key, nowMs: nowMs) { return known }
        if let wait = service.appleCalls.take(accountId, cost: Double(configuration.appleHistoryCost)) {
            throw RPCError.rateLimited(
                retryAfterMs: Int64((wait * 1000).rounded(.up)), detail: "this account's budget of calls to Apple is spent")
        }
        let answers: [VerificationVerifyTransaction.Result]
        do {
            answers = try await dependencies.transactionHistory(customerTransactionId, internalToken: token)
        } catch  where error.has(.appStoreAPINotConfigured) {
            return nil
        }
        let purchases = answers.compactMap { answer in
            answer.status == 0 ? answer.transaction.flatMap { VerifiedPurchase.fromSignedTransaction($0, environment: answer.environment) } : nil
        }
        let records = OfferRules.subscriptions(inAppleHistory: purchases, nowMs: nowMs)
        service.appleHistoryCache.keep(records, for: key, nowMs: nowMs)
        return records
    }
}
