import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import RPCTestSupport
import SuiteTestSupport
import Testing

/// Apple's notifications through fulfillment's inbox, against the whole suite over TCP with the simulator as
/// the App Store: renewal state (auto-renew, billing retry, grace), refunds that arrive before the purchase,
/// refund reversals and declines, and notifications out of order.
@Suite struct NotificationLifecycleTests {
    static let day: Int64 = 86_400_000

    static func receive(_ suite: SuiteFixture, _ payloads: [String]) async throws -> [NotificationState] {
        var states: [NotificationState] = []
        for payload in payloads {
            states.append(
                try await suite.fulfillment.call(
                    FulfillmentReceiveNotification.self, .init(signedPayload: payload, internalToken: SuiteFixture.internalToken)
                ).state)
        }
        return states
    }

    static func advance(_ suite: SuiteFixture, days: Int64) async throws -> [String] {
        suite.clock.advance(ms: days * day)
        return try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: days * 86_400)).notifications
    }

    @Test func aFailedRenewalKeepsAccessThroughGraceEndsAfterItAndRecoveryRestoresIt() async throws {
        try await SuiteFixture.with { suite in
            let ivy = try await suite.register("ivy")
            let sub = try await suite.buy("ivy@icloud", "sub.premium", appAccountToken: ivy.appAccountToken)
            _ = try await suite.redeem(ivy.session, signed: [sub.signedTransaction])
            let expires = try #require(try await suite.entitlements(ivy.session).first?.expiresAtMs)
            _ = try await suite.simulator.call(
                SimBilling.self, .init(appleId: "ivy@icloud", transactionId: sub.transactionId, event: .fail, gracePeriodDays: 6))
            #expect(try await Self.receive(suite, try await Self.advance(suite, days: 31)) == [.applied])  // DID_FAIL_TO_RENEW/GRACE_PERIOD
            var premium = try #require(try await suite.entitlements(ivy.session).first, "active through the grace period")
            #expect(premium.inBillingRetry == true && premium.willRenew == false)
            #expect(premium.gracePeriodExpiresAtMs == expires + 6 * Self.day)
            #expect(try await Self.receive(suite, try await Self.advance(suite, days: 6)) == [.applied])  // GRACE_PERIOD_EXPIRED
            #expect(try await suite.entitlements(ivy.session).isEmpty, "grace over: no access while Apple retries")
            let recovered = try await suite.simulator.call(
                SimBilling.self, .init(appleId: "ivy@icloud", transactionId: sub.transactionId, event: .recover))
            #expect(try await Self.receive(suite, [try #require(recovered.signedPayload)]) == [.applied])  // DID_RENEW/BILLING_RECOVERY
            premium = try #require(try await suite.entitlements(ivy.session).first)
            #expect(premium.inBillingRetry == false && premium.willRenew == true && premium.gracePeriodExpiresAtMs == nil)
            #expect((premium.expiresAtMs ?? 0) > suite.clock.clock.nowMs + 29 * Self.day)
        }
    }

    @Test func autoRenewOffShowsAndAnOlderRenewalAfterExpiredLeavesItExpired() async throws {
        try await SuiteFixture.with { suite in
            let jo = try await suite.register("jo")
            let sub = try await suite.buy("jo@icloud", "sub.premium", appAccountToken: jo.appAccountToken)
            _ = try await suite.redeem(jo.session, signed: [sub.signedTransaction])
            let renewal = try await Self.advance(suite, days: 31)  // DID_RENEW: delivered late, below
            #expect(renewal.count == 1)
            let off = try await suite.simulator.call(
                SimSetAutoRenew.self, .init(appleId: "jo@icloud", transactionId: sub.transactionId, enabled: false))
            #expect(try await Self.receive(suite, [try #require(off.signedPayload)]) == [.applied])
            let expired = try await Self.advance(suite, days: 31)  // EXPIRED/VOLUNTARY at the end of the renewed period
            #expect(try await Self.receive(suite, expired) == [.applied])
            // The renewal notification arrives after the expiry: Apple says the renewal is valid, it is recorded, and
            // the subscription still ends where Apple says it ended (the renewed period's end): expired now.
            #expect(try await Self.receive(suite, renewal) == [.applied])
            #expect(try await suite.entitlements(jo.session).isEmpty)
        }
    }

    @Test func aRefundThatArrivesBeforeThePurchaseIsRedeemedRevokesItWhenItIs() async throws {
        try await SuiteFixture.with { suite in
            let kim = try await suite.register("kim")
            // The app holds the signed transaction from before the refund; Apple's REFUND reaches us first.
            let coins = try await suite.buy("kim@icloud", "coins.100", appAccountToken: kim.appAccountToken)
            let refund = try await suite.simulator.call(SimRefund.self, .init(appleId: "kim@icloud", transactionId: coins.transactionId))
            #expect(try await Self.receive(suite, [try #require(refund.signedPayload)]) == [.applied])
            let redeemed = try await suite.redeem(kim.session, signed: [coins.signedTransaction])
            #expect(redeemed.results.map(\.outcome) == [.revoked] && redeemed.balance == 0)
            #expect(try await suite.ledgerIsConsistent())
        }
    }

    @Test func aReversedRefundGivesTheCoinsBackAndForgivesTheDebtItMade() async throws {
        try await SuiteFixture.with { suite in
            let lou = try await suite.register("lou")
            let coins = try await suite.buy("lou@icloud", "coins.100", appAccountToken: lou.appAccountToken)
            _ = try await suite.redeem(lou.session, signed: [coins.signedTransaction])
            _ = try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: lou.session, amount: 70, idempotencyKey: "sword"))
            let refund = try await suite.simulator.call(SimRefund.self, .init(appleId: "lou@icloud", transactionId: coins.transactionId))
            _ = try await Self.receive(suite, [try #require(refund.signedPayload)])
            var wallet = try await suite.fulfillment.call(FulfillmentGetBalance.self, .init(session: lou.session))
            #expect(wallet.balance == 0 && wallet.owed == 70)
            let declined = try await suite.simulator.call(
                SimRefundDecision.self, .init(appleId: "lou@icloud", transactionId: coins.transactionId, event: .reverse))
            #expect(try await Self.receive(suite, [try #require(declined.signedPayload)]) == [.applied])
            wallet = try await suite.fulfillment.call(FulfillmentGetBalance.self, .init(session: lou.session))
            #expect(wallet.balance == 30 && wallet.owed == 0, "as if the refund never happened: 100 granted, 70 spent")
            let ledger = try await suite.ledger(lou.session)
            #expect(ledger.map(\.kind) == [.grant, .spend, .reversal, .reinstatement])
            #expect(ledger.last?.delta == 30 && ledger.last?.recovered == 70)
            #expect(try await suite.ledgerIsConsistent())
            // Redelivered: nothing more.
            #expect(try await Self.receive(suite, [declined.signedPayload!]) == [.applied])
            #expect(try await suite.ledger(lou.session).count == 4)
        }
    }

    @Test func reconciliationTakesInWhatNeverArrivedAndSweepsSubscriptionsThatEndedWithoutNews() async throws {
        try await SuiteFixture.with { suite in
            let mo = try await suite.register("mo")
            let token = mo.appAccountToken
            let sub = try await suite.buy("mo@icloud", "sub.premium", appAccountToken: token)
            _ = try await suite.redeem(mo.session, signed: [sub.signedTransaction])
            // Bought on the phone and never redeemed; a pack redeemed and then refunded. No notification reached
            // us (no URL is configured): Apple's Notification History has them all.
            _ = try await suite.buy("mo@icloud", "coins.100", appAccountToken: token)
            let pack = try await suite.buy("mo@icloud", "pack.castle", appAccountToken: token)
            _ = try await suite.redeem(mo.session, signed: [pack.signedTransaction])
            _ = try await suite.simulator.call(SimRefund.self, .init(appleId: "mo@icloud", transactionId: pack.transactionId))
            func reconcile(history: Bool = true, statuses: Bool = true) async throws -> FulfillmentReconcile.Result {
                try await suite.fulfillment.call(
                    FulfillmentReconcile.self,
                    .init(adminToken: SuiteFixture.adminToken, notificationHistory: history, subscriptionStatuses: statuses))
            }
            let first = try await reconcile()
            #expect(first.notificationsSeen == 4 && first.notificationsTakenIn == 4, "\(first)")
            #expect(try await suite.balance(mo.session) == 100)
            #expect(try await suite.entitlements(mo.session).map(\.entitlement) == ["premium"], "the pack's refund applied")
            // Again: the overlap lists them again, nothing is taken in twice.
            let second = try await reconcile()
            #expect(second.notificationsTakenIn == 0 && second.notificationsSeen == 4, "\(second)")
            #expect(try await suite.balance(mo.session) == 100)

            // The subscription renews at Apple, and the DID_RENEW never reaches us: its period ends here.
            _ = try await Self.advance(suite, days: 31)
            #expect(try await suite.entitlements(mo.session).isEmpty)
            let swept = try await reconcile(history: false)
            #expect(swept.subscriptionsChecked == 1 && swept.subscriptionsUpdated == 1, "\(swept)")
            let premium = try #require(try await suite.entitlements(mo.session).first)
            #expect(premium.entitlement == "premium" && (premium.expiresAtMs ?? 0) > suite.clock.clock.nowMs + 28 * Self.day)
            #expect(try await reconcile(history: false).subscriptionsChecked == 0, "nothing stale left")
            #expect(try await suite.ledgerIsConsistent())
        }
    }

    /// Notification History is never asked from before what Apple keeps (180 days; Apple refuses an earlier start): a
    /// checkpoint left further back (a server stopped for half a year, a record refused for good long ago) starts the read
    /// at the window instead of failing every run, and the sweep after it.
    @Test func aCheckpointOlderThanApplesHistoryStartsTheReadAtItsWindow() async throws {
        try await SuiteFixture.with { suite in
            let ana = try await suite.register("ana")
            _ = try await suite.buy("ana@icloud", "coins.100", appAccountToken: ana.appAccountToken)
            try await suite.store.saveReconcileCheckpoint(environment: "Production", signedDateMs: suite.clock.nowMs - 200 * Self.day)
            let run = try await suite.fulfillment.call(
                FulfillmentReconcile.self, .init(adminToken: SuiteFixture.adminToken, notificationHistory: true, subscriptionStatuses: false))
            #expect(run.notificationsTakenIn == 1)
            #expect(try await suite.balance(ana.session) == 100)
            #expect(try await suite.store.reconcileCheckpoint(environment: "Production") ?? 0 >= suite.clock.nowMs - Self.day)
        }
    }

    /// The sweep asks about each stale subscription in turn: one Apple keeps answering the same about (here another app's,
    /// not found for this key) does not hold back a later one whose renewal never reached us. Before, every run asked the
    /// earliest-ending ones again (200 a run), so past 200 such the rest were never asked.
    @Test func theSweepAsksEveryStaleSubscriptionInTurn() async throws {
        try await SuiteFixture.with(configure: { $0.reconcileSubscriptionsPerRun = 1 }) { suite in
            let start = suite.clock.nowMs
            // Two of another app's subscriptions, ended at the same moment a day before: Apple does not know them for this key.
            for id in ["9000000001", "9000000002"] {
                _ = try await suite.store.apply(
                    [
                        PlannedPurchase(
                            purchase: VerifiedPurchase(
                                environment: "Production", transactionId: id, originalTransactionId: id,
                                productId: "sub.premium", purchaseDateMs: start - 31 * Self.day, expiresDateMs: start - Self.day),
                            rule: .subscription(entitlement: "premium"))
                    ], accountId: "elsewhere-\(id)", appAccountToken: nil, owed: [], mode: .redeem, policy: .refuse,
                    answerScope: .production, nowMs: start - 31 * Self.day)
            }
            let mo = try await suite.register("mo")
            let sub = try await suite.buy("mo@icloud", "sub.premium", appAccountToken: mo.appAccountToken)
            _ = try await suite.redeem(mo.session, signed: [sub.signedTransaction])
            _ = try await Self.advance(suite, days: 31)  // renewed at Apple; the DID_RENEW never reached us
            #expect(try await suite.entitlements(mo.session).isEmpty)
            var asked = 0
            for _ in 0..<3 {
                asked += try await suite.fulfillment.call(
                    FulfillmentReconcile.self,
                    .init(adminToken: SuiteFixture.adminToken, notificationHistory: false, subscriptionStatuses: true)
                ).subscriptionsChecked
            }
            #expect(asked == 3, "each asked once, the two ending at the same moment too")
            #expect(try await suite.entitlements(mo.session).map(\.entitlement) == ["premium"], "Mo's renewal, found on the third run")
        }
    }

    /// A reconciliation is not cut off when its caller gives up (the CLI's 30 s timeout, a dropped connection), and
    /// a call made while one runs joins it rather than starting a second one beside it.
    @Test func aReconciliationOutlivesACallerThatGivesUpAndIsJoinedMeanwhile() async throws {
        try await SuiteFixture.with { suite in
            let ri = try await suite.register("ri")
            for _ in 0..<3 { _ = try await suite.buy("ri@icloud", "coins.100", appAccountToken: ri.appAccountToken) }
            // Apple answers slowly (each App Store Server API call takes 300 ms), so the run is still going when the
            // second call comes.
            _ = try await suite.simulator.call(SimSetFault.self, .init(mode: .slow, delayMs: 300))
            let caller = Task { try await suite.service.support.reconcile(notificationHistory: true, subscriptionStatuses: false) }
            caller.cancel()  // gives up at once
            let joined = try await suite.service.support.reconcile(notificationHistory: true, subscriptionStatuses: false)
            let abandoned = try await caller.value
            #expect(abandoned.notificationsTakenIn == 3 && abandoned == joined, "\(abandoned) / \(joined)")
            _ = try await suite.simulator.call(SimSetFault.self, .init(mode: .none))
            #expect(try await suite.balance(ri.session) == 300)
            // Once it has ended, the next call is a run of its own (and finds nothing new).
            let next = try await suite.service.support.reconcile(notificationHistory: true, subscriptionStatuses: false)
            #expect(next.notificationsTakenIn == 0 && next.notificationsSeen == 3)
        }
    }

    @Test func aConsumptionRequestIsAnsweredOnlyWithConsentWithinTheWindowAndOnce() async throws {
        try await SuiteFixture.with { suite in
            let nia = try await suite.register("nia")
            let coins = try await suite.buy("nia@icloud", "coins.100", appAccountToken: nia.appAccountToken)
            _ = try await suite.redeem(nia.session, signed: [coins.signedTransaction])
            _ = try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: nia.session, amount: 30, idempotencyKey: "potion"))
            func request() async throws -> String {
                try #require(
                    try await suite.simulator.call(
                        SimRefundDecision.self, .init(appleId: "nia@icloud", transactionId: coins.transactionId, event: .request)
                    ).signedPayload)
            }
            func reports() async throws -> [JSONValue] {
                _ = try await suite.service.outbox.deliverOutbox()
                return try await suite.simulator.call(SimConsumptionReports.self, .init(transactionId: coins.transactionId)).reports
            }
            // No consent (the default): Apple is told nothing.
            #expect(try await Self.receive(suite, [try await request()]) == [.ignored])
            #expect(try await reports().isEmpty)
            _ = try await suite.accounts.call(AccountsSetConsumptionConsent.self, .init(session: nia.session, consent: true))
            let payload = try await request()
            #expect(try await Self.receive(suite, [payload]) == [.applied])
            // Owed to Apple through the outbox (committed with the notification's outcome), then sent as v2.
            let owed = try await suite.fulfillment.call(FulfillmentListOutbox.self, .init(adminToken: SuiteFixture.adminToken, limit: 10))
            #expect(owed.items.map(\.kind) == ["consumptionInformation"] && owed.items.first?.key == coins.transactionId)
            let sent = try await reports()
            #expect(sent.count == 1)
            #expect(
                sent.first
                    == .object([
                        "customerConsented": .bool(true), "deliveryStatus": .string("DELIVERED"), "sampleContentProvided": .bool(false),
                        "consumptionPercentage": .int(30_000),
                    ]), "30 of the 100 coins spent: \(String(describing: sent.first))")
            // Once: the same request delivered again sends nothing more.
            #expect(try await Self.receive(suite, [payload]) == [.applied])
            #expect(try await reports().count == 1)
            // Past Apple's 12-hour window: not answered.
            let late = try await request()
            suite.clock.advance(ms: 13 * 60 * 60 * 1000)
            #expect(try await Self.receive(suite, [late]) == [.ignored])
            #expect(try await reports().count == 1)
        }
    }
}
