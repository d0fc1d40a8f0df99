import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import Receipts
import SuiteTestSupport
import Testing

/// The suite as deployed without an App Store Server API key (compose/compose.yaml's default): Apple cannot be asked
/// for a transaction's current state, so a notification's own signed snapshot decides. Refunds, revocations and
/// reversals used to stay `pending` for ever there (verification's "not configured" came back re-wrapped as a
/// dependency failure, and the fallback never ran).
@Suite struct WithoutAppStoreAPITests {
    static func receive(_ suite: SuiteFixture, _ payload: String?) async throws -> FulfillmentReceiveNotification.Result {
        try await suite.fulfillment.call(
            FulfillmentReceiveNotification.self, .init(signedPayload: try #require(payload), internalToken: SuiteFixture.internalToken))
    }

    @Test func refundsRevocationsAndReversalsApplyOnceFromTheNotificationsSnapshot() async throws {
        try await SuiteFixture.with(appStoreAPI: false) { suite in
            let ann = try await suite.register("ann")
            let coins = try await suite.buy("ann@icloud", "coins.100", appAccountToken: ann.appAccountToken)
            _ = try await suite.redeem(ann.session, signed: [coins.signedTransaction])
            _ = try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: ann.session, amount: 70, idempotencyKey: "sword"))

            // REFUND: the 30 left are taken back and 70 are owed; a second delivery changes nothing.
            let refund = try await suite.simulator.call(SimRefund.self, .init(appleId: "ann@icloud", transactionId: coins.transactionId))
            #expect(try await Self.receive(suite, refund.signedPayload).state == .applied)
            var wallet = try await suite.fulfillment.call(FulfillmentGetBalance.self, .init(session: ann.session))
            #expect(wallet.balance == 0 && wallet.owed == 70)
            let again = try await Self.receive(suite, refund.signedPayload)
            #expect(again.state == .applied && !again.firstDelivery)
            wallet = try await suite.fulfillment.call(FulfillmentGetBalance.self, .init(session: ann.session))
            #expect(wallet.balance == 0 && wallet.owed == 70)

            // REFUND_REVERSED: as if the refund never happened.
            let reversed = try await suite.simulator.call(
                SimRefundDecision.self, .init(appleId: "ann@icloud", transactionId: coins.transactionId, event: .reverse))
            #expect(try await Self.receive(suite, reversed.signedPayload).state == .applied)
            wallet = try await suite.fulfillment.call(FulfillmentGetBalance.self, .init(session: ann.session))
            #expect(wallet.balance == 30 && wallet.owed == 0)

            // A refund of coins already spent makes a debt; the next purchase repays it.
            let more = try await suite.buy("ann@icloud", "coins.100", appAccountToken: ann.appAccountToken)
            _ = try await suite.redeem(ann.session, signed: [more.signedTransaction])
            _ = try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: ann.session, amount: 130, idempotencyKey: "castle"))
            let refundMore = try await suite.simulator.call(SimRefund.self, .init(appleId: "ann@icloud", transactionId: more.transactionId))
            #expect(try await Self.receive(suite, refundMore.signedPayload).state == .applied)
            wallet = try await suite.fulfillment.call(FulfillmentGetBalance.self, .init(session: ann.session))
            #expect(wallet.balance == 0 && wallet.owed == 100)
            let repay = try await suite.buy("ann@icloud", "coins.100", appAccountToken: ann.appAccountToken)
            let repaid = try await suite.redeem(ann.session, signed: [repay.signedTransaction])
            #expect(repaid.balance == 0 && repaid.owed == 0)

            // REVOKE (Family Sharing ended): the pack ann's organizer shared with her goes.
            let pack = try await suite.buy("dad@icloud", "pack.castle")
            let shared = try await suite.simulator.call(
                SimShareWithFamily.self, .init(appleId: "dad@icloud", transactionId: pack.transactionId, memberAppleId: "ann@icloud"))
            _ = try await suite.redeem(ann.session, signed: [shared.signedTransaction])
            #expect(try await suite.entitlements(ann.session).map(\.entitlement) == ["castle"])
            let revoke = try await suite.simulator.call(
                SimLifecycleEvent.self, .init(appleId: "ann@icloud", transactionId: shared.transactionId, event: .revokeFamilySharing))
            #expect(try await Self.receive(suite, revoke.signedPayload).state == .applied)
            #expect(try await suite.entitlements(ann.session).isEmpty)

            #expect(try await suite.ledgerIsConsistent())
            #expect(try await suite.store.duplicateLedgerEffects().isEmpty)
            #expect(try await suite.count("SELECT COUNT(*) FROM notificationInbox WHERE state <> 'applied'") == 0)
        }
    }

    /// The signed transaction a notification carries, read without verifying (the test's own bookkeeping).
    static func signedTransaction(of notification: String) throws -> String {
        let outerBytes = try #require(SignedPayloadVerifier.unverifiedPayload(notification))
        return try #require(try JSONValue(parsing: outerBytes)["data"]?["signedTransactionInfo"]?.stringValue)
    }

    /// The transaction a notification is about, read without verifying (the test's own bookkeeping).
    static func transactionId(of notification: String) throws -> String {
        let outerBytes = try #require(SignedPayloadVerifier.unverifiedPayload(notification))
        let inner = try #require(try JSONValue(parsing: outerBytes)["data"]?["signedTransactionInfo"]?.stringValue)
        let innerBytes = try #require(SignedPayloadVerifier.unverifiedPayload(inner))
        let transaction = try JSONValue(parsing: innerBytes)
        return try #require(transaction["transactionId"]?.stringValue)
    }

    /// From a snapshot alone only REFUND_REVERSED gives back a revoked purchase: a later notice that shows the
    /// transaction valid (here OFFER_REDEEMED about a renewal an operator revoked) used to reinstate it.
    @Test func onlyARefundReversalGivesBackARevokedPurchase() async throws {
        try await SuiteFixture.with(appStoreAPI: false) { suite in
            let cy = try await suite.register("cy")
            let sub = try await suite.buy("cy@icloud", "sub.premium", appAccountToken: cy.appAccountToken)
            _ = try await suite.redeem(cy.session, signed: [sub.signedTransaction])
            suite.clock.advance(ms: 31 * 86_400_000)
            let renewed = try #require(try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 31 * 86_400)).notifications.first)
            #expect(try await Self.receive(suite, renewed).state == .applied)  // DID_RENEW: the second period
            let period2 = try Self.transactionId(of: renewed)
            // The operator revokes the current period (a chargeback found elsewhere): no access.
            _ = try await suite.fulfillment.call(
                FulfillmentRevokeTransaction.self, .init(adminToken: SuiteFixture.adminToken, transactionId: period2, reason: "chargeback"))
            #expect(try await suite.entitlements(cy.session).isEmpty)
            // A later notice about that period, still valid at Apple's end, gives nothing back.
            let offer = try await suite.simulator.call(
                SimNotify.self, .init(appleId: "cy@icloud", transactionId: period2, notificationType: "OFFER_REDEEMED", subtype: "UPGRADE"))
            #expect(try await Self.receive(suite, offer.signedPayload).state == .ignored)
            #expect(try await suite.entitlements(cy.session).isEmpty)
        }
    }

    @Test func aRenewalExtendsAndAnExpiryEndsASubscriptionFromTheSnapshot() async throws {
        try await SuiteFixture.with(appStoreAPI: false) { suite in
            let bo = try await suite.register("bo")
            let sub = try await suite.buy("bo@icloud", "sub.premium", appAccountToken: bo.appAccountToken)
            _ = try await suite.redeem(bo.session, signed: [sub.signedTransaction])
            let firstEnd = try #require(try await suite.entitlements(bo.session).first?.expiresAtMs)
            let day: Int64 = 86_400_000
            suite.clock.advance(ms: 31 * day)
            let renewed = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 31 * 86_400)).notifications
            #expect(renewed.count == 1)
            #expect(try await Self.receive(suite, renewed.first).state == .applied)  // DID_RENEW
            let renewedEnd = try #require(try await suite.entitlements(bo.session).first?.expiresAtMs)
            #expect(renewedEnd > firstEnd)
            let off = try await suite.simulator.call(
                SimSetAutoRenew.self, .init(appleId: "bo@icloud", transactionId: sub.transactionId, enabled: false))
            #expect(try await Self.receive(suite, off.signedPayload).state == .applied)
            suite.clock.advance(ms: 31 * day)
            let expired = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 31 * 86_400)).notifications
            #expect(expired.count == 1)
            #expect(try await Self.receive(suite, expired.first).state == .applied)  // EXPIRED/VOLUNTARY
            #expect(try await suite.entitlements(bo.session).isEmpty)
        }
    }

    /// A reversal Apple signed before a later refund, arriving after a redeem applied that refund from its copy (both
    /// refunds' notifications lost, Apple not asked): the later refund stands, as Apple's later word does.
    @Test func aLateReversalDoesNotUndoARefundAppleSignedAfterIt() async throws {
        try await SuiteFixture.with(appStoreAPI: false) { suite in
            let dee = try await suite.register("dee")
            let castle = try await suite.buy("dee@icloud", "pack.castle", appAccountToken: dee.appAccountToken)
            _ = try await suite.redeem(dee.session, signed: [castle.signedTransaction])
            _ = try await suite.simulator.call(SimRefund.self, .init(appleId: "dee@icloud", transactionId: castle.transactionId))
            _ = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 1))
            let reversed = try await suite.simulator.call(
                SimRefundDecision.self, .init(appleId: "dee@icloud", transactionId: castle.transactionId, event: .reverse))
            _ = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 1))
            let again = try await suite.simulator.call(SimRefund.self, .init(appleId: "dee@icloud", transactionId: castle.transactionId))
            let copy = try Self.signedTransaction(of: try #require(again.signedPayload))
            let refunded = try await suite.redeem(dee.session, signed: [copy])
            #expect(refunded.results.map(\.outcome) == [.revoked] && refunded.entitlements.isEmpty)
            let late = try await Self.receive(suite, reversed.signedPayload)
            #expect(late.state == .ignored, "\(late)")
            #expect(try await suite.entitlements(dee.session).isEmpty, "the refund Apple signed last stands")
        }
    }
}
