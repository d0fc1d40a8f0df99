import FulfillmentService
import IAPProtocol
import Testing

/// The pure choice of a retention rule: locale, conditions on the subscriber's records, offers refused.
@Suite struct RetentionDecisionTests {
    static let m = "0f6e1c2a-9b1d-4c59-8a55-0e1b2c3d4e5f"
    static let known = RetentionFacts(known: true, tenureDays: 400, renewals: 12, refunds: 0)

    @Test func localesMatchExactlyOrByLanguageWhateverTheSpelling() {
        #expect(RetentionDecision.localeMatches(nil, "ja-JP"))
        #expect(RetentionDecision.localeMatches(["en-US"], "en_us"))
        #expect(RetentionDecision.localeMatches(["fr"], "fr-CA"))
        #expect(!RetentionDecision.localeMatches(["fr-FR"], "fr-CA"))
        #expect(!RetentionDecision.localeMatches(["en"], "fr-FR"))
    }

    @Test func everyConditionGivenMustHoldAndAnUnknownSubscriberMeetsNone() {
        #expect(RetentionDecision.conditionsHold(.init(minTenureDays: 365, maxRenewals: 12, maxRefunds: 0), Self.known))
        #expect(RetentionDecision.conditionsHold(.init(minTenureDays: 401), Self.known) == false)
        #expect(RetentionDecision.conditionsHold(.init(maxRenewals: 11), Self.known) == false)
        #expect(RetentionDecision.conditionsHold(.init(minRenewals: 13), Self.known) == false)
        #expect(RetentionDecision.conditionsHold(.init(maxRefunds: 0), RetentionFacts(known: true, tenureDays: 1, renewals: 0, refunds: 1)) == false)
        #expect(RetentionDecision.conditionsHold(nil, .unknown))
        #expect(RetentionDecision.conditionsHold(.init(maxRefunds: 5), .unknown) == false)
    }

    @Test func theFirstRuleThatFitsIsChosenAndARefusedOfferFallsThroughWithItsReason() {
        let rules = RetentionRules(choices: [
            .init(id: "german", kind: .message, messageIdentifier: Self.m, locales: ["de"]),
            .init(id: "offer", kind: .promotionalOffer, messageIdentifier: Self.m, offerId: "o1"),
            .init(id: "switch", kind: .alternateProduct, messageIdentifier: Self.m, alternateProductId: "b", when: .init(maxTenureDays: 30)),
            .init(id: "plain", kind: .message, messageIdentifier: Self.m),
        ])
        #expect(RetentionDecision.choose(rules, userLocale: "de-AT", facts: Self.known) { _ in nil }.choice?.id == "german")
        #expect(RetentionDecision.choose(rules, userLocale: "en-US", facts: Self.known) { _ in nil }.choice?.id == "offer")
        let refused = RetentionDecision.choose(rules, userLocale: "en-US", facts: Self.known) { _ in "offered before" }
        #expect(refused.choice?.id == "plain")
        let none = RetentionDecision.choose(RetentionRules(choices: Array(rules.choices.prefix(2))), userLocale: "en-US", facts: Self.known) { _ in
            "offered before"
        }
        #expect(none.choice == nil && none.reason?.contains("offer: offered before") == true)
    }
}
