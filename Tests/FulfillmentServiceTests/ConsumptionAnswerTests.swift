import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import SuiteTestSupport
import Testing

/// The share of a purchase consumed, as the ledger says it (pure rules).
@Suite struct ConsumptionRulesTests {
    @Test func eachKindOfPurchaseHasItsShare() {
        #expect(ConsumptionRules.percentage(.coins(granted: 100, balance: 100)) == 0)
        #expect(ConsumptionRules.percentage(.coins(granted: 100, balance: 70)) == 30_000)
        #expect(ConsumptionRules.percentage(.coins(granted: 100, balance: 250)) == 0, "the balance counts as this purchase's first")
        #expect(ConsumptionRules.percentage(.coins(granted: 100, balance: 0)) == 100_000)
        #expect(ConsumptionRules.percentage(.coins(granted: 3, balance: 1)) == 66_666)
        #expect(ConsumptionRules.percentage(.content(contentIds: ["a", "b"], delivered: [])) == 0)
        #expect(ConsumptionRules.percentage(.content(contentIds: ["a", "b"], delivered: ["b", "other"])) == 50_000)
        #expect(ConsumptionRules.percentage(.content(contentIds: [], delivered: [])) == 100_000, "an unlock with no files")
        #expect(ConsumptionRules.percentage(.period(startMs: 1_000, durationMs: 10_000, nowMs: 3_500)) == 25_000)
        #expect(ConsumptionRules.percentage(.period(startMs: 1_000, durationMs: 10_000, nowMs: 500)) == 0)
        #expect(ConsumptionRules.percentage(.period(startMs: 1_000, durationMs: 10_000, nowMs: 99_000)) == 100_000)
        #expect(ConsumptionRules.percentage(.autoRenewable) == nil, "Apple refuses a percentage for auto-renewables")
    }

    @Test func aRevokedPurchaseIsNotDelivered() {
        let revoked = ConsumptionRules.request(.coins(granted: 100, balance: 0), revoked: true)
        #expect(revoked.deliveryStatus == .undeliveredOther && revoked.consumptionPercentage == 0, "0 unless delivered, as Apple requires")
        #expect(ConsumptionRules.request(.autoRenewable, revoked: true).consumptionPercentage == nil)
        let kept = ConsumptionRules.request(.coins(granted: 100, balance: 40), revoked: false)
        #expect(kept.deliveryStatus == .delivered && kept.consumptionPercentage == 60_000 && kept.customerConsented)
    }
}

/// CONSUMPTION_REQUEST through the whole suite, per product type: the answer owed to Apple is committed with the
/// notification, sent by the outbox as Send Consumption Information v2, and the simulated App Store (which checks
/// Apple's v2 rules) records it with the percentage the ledger implies.
@Suite struct ConsumptionAnswerTests {
    static let day: Int64 = 86_400_000

    /// Buys and redeems `productId` for a consenting account, asks Apple for a refund, runs `between` (the customer's use),
    /// then delivers the request and the outbox: what the App Store received.
    static func answer(
        _ suite: SuiteFixture, _ name: String, _ productId: String,
        between: (String) async throws -> Void = { _ in },
        before: ((session: String, accountId: String, appAccountToken: String)) async throws -> Void = { _ in }
    ) async throws -> JSONValue? {
        let account = try await suite.register(name)
        _ = try await suite.accounts.call(AccountsSetConsumptionConsent.self, .init(session: account.session, consent: true))
        try await before(account)
        let bought = try await suite.buy("\(name)@icloud", productId, appAccountToken: account.appAccountToken)
        #expect(try await suite.redeem(account.session, signed: [bought.signedTransaction]).results.map(\.outcome) == [.granted])
        try await between(account.session)
        let request = try #require(
            try await suite.simulator.call(
                SimRefundDecision.self, .init(appleId: "\(name)@icloud", transactionId: bought.transactionId, event: .request)
            ).signedPayload)
        let state = try await suite.fulfillment.call(
            FulfillmentReceiveNotification.self, .init(signedPayload: request, internalToken: SuiteFixture.internalToken)
        ).state
        #expect(state == .applied)
        _ = try await suite.service.outbox.deliverOutbox()
        let reports = try await suite.simulator.call(SimConsumptionReports.self, .init(transactionId: bought.transactionId)).reports
        #expect(reports.count == 1)
        return reports.first
    }

    @Test func aNonConsumableIsConsumedAsItsContentIsDownloaded() async throws {
        try await SuiteFixture.with { suite in
            let untouched = try await Self.answer(suite, "nora", "pack.castle")
            #expect(untouched?["deliveryStatus"] == .string("DELIVERED") && untouched?["consumptionPercentage"] == .int(0))
            let downloaded = try await Self.answer(suite, "otto", "pack.castle") { session in
                _ = try await suite.fulfillment.call(
                    FulfillmentReadContent.self, .init(session: session, contentId: SuiteFixture.contentId, offset: 0, length: 1024))
            }
            #expect(downloaded?["consumptionPercentage"] == .int(100_000), "\(String(describing: downloaded))")
            // A client that skips the first byte has downloaded the file all the same.
            let skipped = try await Self.answer(suite, "pia", "pack.castle") { session in
                _ = try await suite.fulfillment.call(
                    FulfillmentReadContent.self, .init(session: session, contentId: SuiteFixture.contentId, offset: 1, length: 1024))
            }
            #expect(skipped?["consumptionPercentage"] == .int(100_000), "\(String(describing: skipped))")
        }
    }

    @Test func anAutoRenewableIsAnsweredWithoutAPercentage() async throws {
        try await SuiteFixture.with { suite in
            let answer = try #require(try await Self.answer(suite, "paul", "sub.premium"))
            #expect(answer["deliveryStatus"] == .string("DELIVERED") && answer["customerConsented"] == .bool(true))
            #expect(answer["consumptionPercentage"] == nil, "Apple answers 4000209 for a percentage on an auto-renewable")
        }
    }

    @Test func aNonRenewingSubscriptionIsConsumedAsItsPeriodPasses() async throws {
        try await SuiteFixture.with { suite in
            let answer = try #require(
                try await Self.answer(suite, "quin", "pass.season") { _ in
                    // Half the pass later, for both (Apple signs the request then; fulfillment answers within the window).
                    suite.clock.advance(ms: 15 * Self.day)
                    _ = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 15 * 86_400))
                })
            let share = try #require(answer["consumptionPercentage"]?.intValue)
            #expect((49_000...50_000).contains(share), "half of the 30-day pass elapsed: \(share)")
        }
    }

    @Test func aPassStackedAfterAnotherIsNotConsumedBeforeItStarts() async throws {
        try await SuiteFixture.with { suite in
            let answer = try #require(
                try await Self.answer(
                    suite, "sven", "pass.season",
                    between: { _ in
                        suite.clock.advance(ms: 5 * Self.day)
                        _ = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 5 * 86_400))
                    },
                    before: { account in
                        let first = try await suite.buy("sven@icloud", "pass.season", appAccountToken: account.appAccountToken)
                        _ = try await suite.redeem(account.session, signed: [first.signedTransaction])
                    }))
            #expect(answer["consumptionPercentage"] == .int(0), "it starts when the first pass ends: \(answer)")
        }
    }

    @Test func aConsumableIsConsumedAsItsCoinsAreSpent() async throws {
        try await SuiteFixture.with { suite in
            let answer = try await Self.answer(suite, "rita", "coins.100") { session in
                _ = try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: session, amount: 100, idempotencyKey: "all"))
            }
            #expect(answer?["consumptionPercentage"] == .int(100_000))
        }
    }
}
