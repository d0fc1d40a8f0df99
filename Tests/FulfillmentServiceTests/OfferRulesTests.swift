import FulfillmentService
import IAPProtocol
import Testing

/// Offer eligibility's pure rules: the Apple customer's history as Apple's transaction history shows it, merged
/// with this server's records, and the refusals when the customer is unknown.
@Suite struct OfferRulesTests {
    static let day: Int64 = 86_400_000
    static let now: Int64 = 100 * day

    static func period(
        _ id: String, original: String, product: String = "sub.premium", ends: Int64, refunded: Bool = false, env: String = "Production"
    )
        -> VerifiedPurchase
    {
        VerifiedPurchase(
            environment: env, transactionId: id, originalTransactionId: original, productId: product, purchaseDateMs: ends - 30 * day,
            expiresDateMs: ends, cancellationDateMs: refunded ? ends - 29 * day : nil)
    }

    @Test func applesHistoryBecomesOneRecordPerSubscriptionCountingPeriodsNotRefunded() {
        let history = [
            Self.period("1", original: "1", ends: Self.now - 30 * Self.day),
            Self.period("2", original: "1", product: "sub.basic", ends: Self.now, refunded: true),
            Self.period("3", original: "1", ends: Self.now + Self.day),
            Self.period("4", original: "4", ends: Self.now - Self.day),
            Self.period("5", original: "5", ends: Self.now + Self.day, env: "Sandbox"),
            VerifiedPurchase(environment: "Production", transactionId: "6", originalTransactionId: "6", productId: "coins.100", purchaseDateMs: 0),
        ]
        let records = OfferRules.subscriptions(inAppleHistory: history, nowMs: Self.now)
        #expect(
            records == [
                SubscriptionHistoryRecord(originalTransactionId: "1", productIds: ["sub.premium", "sub.basic"], active: true, periodsPaid: 2),
                SubscriptionHistoryRecord(originalTransactionId: "4", productIds: ["sub.premium"], active: false, periodsPaid: 1),
            ])
        // A period that ended or was refunded does not keep a subscription active.
        let refundedOnly = OfferRules.subscriptions(
            inAppleHistory: [Self.period("7", original: "7", ends: Self.now + Self.day, refunded: true)], nowMs: Self.now)
        #expect(refundedOnly.map(\.active) == [false] && refundedOnly.map(\.periodsPaid) == [0])
    }

    @Test func theServersRecordsAndApplesMergeByOriginal() {
        let local = [SubscriptionHistoryRecord(originalTransactionId: "1", productIds: ["a"], active: false, periodsPaid: 3)]
        let apple = [
            SubscriptionHistoryRecord(originalTransactionId: "1", productIds: ["b"], active: true, periodsPaid: 2),
            SubscriptionHistoryRecord(originalTransactionId: "9", productIds: ["a"], active: false, periodsPaid: 1),
        ]
        #expect(
            OfferRules.merged(local, apple) == [
                SubscriptionHistoryRecord(originalTransactionId: "1", productIds: ["a", "b"], active: true, periodsPaid: 3),
                SubscriptionHistoryRecord(originalTransactionId: "9", productIds: ["a"], active: false, periodsPaid: 1),
            ])
    }

    @Test func anUnknownCustomerGetsOnlyOffersForAnyone() {
        let unknown = OfferCustomer.unknown("nobody knows")
        for kind in [OfferEligibilityKind.neverSubscribed, .lapsed, .subscribedAtMost] {
            let offer = SubscriptionOffer(offerId: "o", eligibility: .init(kind: kind, times: 1))
            #expect(OfferRules.refusal(offer, customer: unknown, nowMs: Self.now)?.contains("nobody knows") == true, "\(kind)")
            #expect(
                OfferRules.refusal(offer, customer: .known(transactionId: "1", history: []), nowMs: Self.now)
                    == (kind == .lapsed ? "for lapsed subscribers: this customer never subscribed" : nil))
        }
        #expect(OfferRules.refusal(.init(offerId: "o", eligibility: .init(kind: .anyone)), customer: unknown, nowMs: Self.now) == nil)
        #expect(OfferRules.introductoryOfferRefusal(customer: unknown)?.contains("StoreKit decides") == true)
        #expect(OfferRules.introductoryOfferRefusal(customer: .known(transactionId: "1", history: [])) == nil)
    }

    /// A link to an Apple customer (a JWS whoever holds it can present) only narrows: eligible when the account's own
    /// view and the linked customer's both are.
    @Test func aLinkedCustomerOnlyNarrowsEligibility() {
        let unknown = OfferCustomer.unknown("nobody knows")
        let neverSubscribed = OfferCustomer.known(transactionId: "1", history: [])
        let subscribed = OfferCustomer.known(
            transactionId: "2", history: [.init(originalTransactionId: "2", productIds: ["sub"], active: false, periodsPaid: 3)])
        let welcome = SubscriptionOffer(offerId: "welcome", eligibility: .init(kind: .neverSubscribed))
        let winback = SubscriptionOffer(offerId: "winback", eligibility: .init(kind: .lapsed))
        func refusal(_ offer: SubscriptionOffer, _ own: OfferCustomer, _ linked: OfferCustomer?) -> String? {
            OfferRules.refusal(offer, customers: .init(own: own, linked: linked), nowMs: Self.now)
        }
        // Unknown alone, or with a linked customer who would be eligible: still refused (the link cannot grant).
        #expect(refusal(winback, unknown, subscribed)?.contains("nobody knows") == true)
        // ... but the linked customer's refusal is the reason when there is one.
        #expect(refusal(welcome, unknown, subscribed) == "for new subscribers: this customer subscribed before")
        // Known and eligible on its own, refused through the link: refused.
        #expect(refusal(welcome, neverSubscribed, subscribed) == "for new subscribers: this customer subscribed before")
        // Known and refused on its own (never subscribed: no win-back), a lapsed linked customer does not open it.
        #expect(refusal(winback, neverSubscribed, subscribed) == "for lapsed subscribers: this customer never subscribed")
        #expect(refusal(welcome, neverSubscribed, neverSubscribed) == nil && refusal(welcome, neverSubscribed, nil) == nil)
        #expect(
            OfferRules.introductoryOfferRefusal(customers: .init(own: unknown, linked: subscribed)) == "this customer subscribed in the group before")
        #expect(OfferRules.introductoryOfferRefusal(customers: .init(own: unknown, linked: neverSubscribed))?.contains("nobody knows") == true)
    }
}
