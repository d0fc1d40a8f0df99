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

/// Who may redeem an offer: decided from the account's subscriptions in the product's group, never from
/// what a device says.
public enum OfferRules {
    /// Nil when `offer` may be signed now for an account whose subscriptions in the group are `history`;
    /// otherwise why not.
    public static func refusal(_ offer: SubscriptionOffer, history: [SubscriptionHistoryRecord], nowMs: Int64) -> String? {
        if let starts = offer.startsAtMs, nowMs < starts { return "the offer has not started" }
        if let ends = offer.endsAtMs, nowMs >= ends { return "the offer has ended" }
        switch offer.eligibility.kind {
        case .anyone:
            return nil
        case .lapsed:
            if history.isEmpty { return "for lapsed subscribers: this account never subscribed" }
            if history.contains(where: \.active) { return "for lapsed subscribers: this account is subscribed now" }
            return nil
        case .neverSubscribed:
            return history.isEmpty ? nil : "for new subscribers: this account subscribed before"
        case .subscribedAtMost:
            let paid = history.reduce(0) { $0 + $1.periodsPaid }
            let times = offer.eligibility.times ?? 0
            return paid <= times ? nil : "for accounts that paid for at most \(times) periods: this one paid for \(paid)"
        }
    }

    /// Apple's introductory offer is for customers new to the group.
    public static func introductoryOfferEligible(history: [SubscriptionHistoryRecord]) -> Bool { history.isEmpty }
}

extension FulfillmentService {
    /// `fulfillment.offerEligibility`: each offer of the product, eligible or why not, and the introductory
    /// offer's eligibility signed for StoreKit when an offer key is configured.
    public func offerEligibility(_ p: FulfillmentOfferEligibility.Params) async throws(RPCError) -> FulfillmentOfferEligibility.Result {
        let context = try await offerContext(session: p.session, productId: p.productId)
        let now = clock.nowMs
        let standings = (context.product.offers ?? []).map { offer in
            let refusal = OfferRules.refusal(offer, history: context.history, nowMs: now)
            return FulfillmentOfferEligibility.OfferStanding(offerId: offer.offerId, eligible: refusal == nil, reason: refusal)
        }
        let introductory = OfferRules.introductoryOfferEligible(history: context.history)
        var signed: String?
        if let key = configuration.offerKey {
            var claims: [String: JSONValue] = ["productId": .string(p.productId), "allowIntroductoryOffer": .bool(introductory)]
            if let original = context.history.first?.originalTransactionId { claims["transactionId"] = .string(original) }
            signed = try sign {
                try PromotionalOffer.jws(
                    audience: "introductory-offer-eligibility", claims: claims, keyId: key.keyId, issuerId: key.issuerId,
                    bundleId: key.bundleId, nonce: UUID().uuidString.lowercased(), issuedAtMs: now, key: key.key)
            }
        }
        return .init(productId: p.productId, offers: standings, introductoryOfferEligible: introductory, introductoryOfferJWS: signed)
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
        if let refusal = OfferRules.refusal(offer, history: context.history, nowMs: now) {
            throw RPCError.forbidden(refusal, reason: "notEligible")
        }
        let nonce = UUID().uuidString.lowercased()
        let token = context.account.appAccountToken.lowercased()
        let message = PromotionalOffer.message(
            bundleId: key.bundleId, keyId: key.keyId, productId: p.productId, offerId: p.offerId, appAccountToken: token, nonce: nonce,
            timestamp: now)
        let (signature, jws) = try sign {
            (
                try PromotionalOffer.signature(message, key: key.key),
                try PromotionalOffer.jws(
                    audience: "promotional-offer", claims: ["productId": .string(p.productId), "offerIdentifier": .string(p.offerId)],
                    keyId: key.keyId, issuerId: key.issuerId, bundleId: key.bundleId, nonce: nonce, issuedAtMs: now, key: key.key)
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

    /// The caller, the product (an auto-renewable with its offers), and the caller's Production subscriptions in
    /// its group (Sandbox value never counts for offers: their signatures name no environment).
    private func offerContext(session: String, productId: String) async throws(RPCError) -> (
        account: AuthenticatedAccount, product: Product, history: [SubscriptionHistoryRecord]
    ) {
        let account = try await dependencies.authenticate(session)
        guard let product = try await dependencies.products([productId]).products.first(where: { $0.productId == productId }),
            case .subscription(_, let group) = product.grant
        else {
            throw RPCError.notFound("\(productId) is not an auto-renewable subscription in the catalog", reason: "unknownProduct")
        }
        let now = clock.nowMs
        let records = try await storeCall { try await self.store.subscriptionHistory(accountId: account.accountId, scope: .production, nowMs: now) }
        // Which of the account's subscriptions are in this product's group: the catalog says of each plan.
        let plans = Array(Set(records.flatMap(\.productIds)).subtracting([productId]))
        var inGroup: Set<String> = [productId]
        if !plans.isEmpty {
            for other in try await dependencies.products(plans).products {
                if case .subscription(_, let otherGroup) = other.grant, otherGroup == group { inGroup.insert(other.productId) }
            }
        }
        return (account, product, records.filter { !$0.productIds.isDisjoint(with: inGroup) })
    }
}
