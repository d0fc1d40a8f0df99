import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

/// Support's tools over real TCP against the whole suite, with the simulator as Apple's App Store Server
/// API: an order granted to the right account (and not moved from another), a purchase without an app
/// account token tied to its account at Apple, a subscription extended at Apple and here, all audited.
@Suite struct SupportActionsTests {
    /// One call to the verification service (internal methods, with the suite's internal token).
    static func verification<M: RPCMethod>(_ suite: SuiteFixture, _ method: M.Type, _ params: M.Params) async throws -> M.Result {
        let client = RPCClient(host: "127.0.0.1", port: suite.verificationPort)
        do {
            let result = try await client.call(method, params)
            await client.close()
            return result
        } catch {
            await client.close()
            throw error
        }
    }

    static func transactionInfo(_ suite: SuiteFixture, _ id: String) async throws -> JSONValue? {
        try await verification(suite, VerificationTransactionInfo.self, .init(internalToken: SuiteFixture.internalToken, transactionId: id))
            .transaction
    }

    static func grant(_ suite: SuiteFixture, _ orderId: String, to username: String) async throws -> FulfillmentGrantOrder.Result {
        try await suite.fulfillment.call(
            FulfillmentGrantOrder.self, .init(adminToken: SuiteFixture.adminToken, orderId: orderId, username: username, reason: "ticket 4711"))
    }

    @Test func supportGrantsAnOrderToTheRightAccountAndNeverMovesAnotherAccountsPurchase() async throws {
        try await SuiteFixture.with { suite in
            // Dana bought the castle pack on a device that never reached our server; she mails the order id.
            let dana = try await suite.register("dana")
            let pack = try await suite.buy("dana@icloud", "pack.castle")
            let orderId = try #require(pack.orderId)
            let looked = try await suite.fulfillment.call(FulfillmentLookUpOrder.self, .init(adminToken: SuiteFixture.adminToken, orderId: orderId))
            #expect(looked.lines.map(\.ownerAccountId) == [nil])
            let granted = try await Self.grant(suite, orderId, to: "Dana")
            #expect(granted.accountId == dana.accountId && granted.results.map(\.outcome) == [.granted])
            #expect(try await suite.service.outbox.deliverOutbox() == 1)
            #expect(try await suite.entitlements(dana.session).map(\.entitlement) == ["castle"])
            // Tied to her account at Apple: Apple's copy now carries her appAccountToken.
            #expect(try await Self.transactionInfo(suite, pack.transactionId)?["appAccountToken"]?.stringValue == dana.appAccountToken.lowercased())
            // Granting again changes nothing; granting it to someone else does not move it (default policy).
            #expect(try await Self.grant(suite, orderId, to: "dana").results.map(\.outcome) == [.alreadyGranted])
            let eve = try await suite.register("eve")
            #expect(try await Self.grant(suite, orderId, to: "eve").results.map(\.outcome) == [.ownedByAnotherAccount])
            #expect(try await suite.entitlements(eve.session).isEmpty)
            #expect(try await suite.entitlements(dana.session).map(\.entitlement) == ["castle"])
            // An unknown order or username changes nothing.
            #expect(await rpcError { try await Self.grant(suite, "MKNOSUCH00", to: "dana") }?.reason == "unknownOrder")
            #expect(await rpcError { try await Self.grant(suite, orderId, to: "nobody") }?.reason == "unknownUsername")
            // The audit log has the grant, with the reason and the order, never the token; and the second call, which changed
            // nothing, says so (a call whose audit write failed after its grant committed is retried: its audit lands then).
            let audit = try await suite.fulfillment.call(FulfillmentListAudit.self, .init(adminToken: SuiteFixture.adminToken))
            let grants = audit.entries.filter { $0.action == "grantOrder" }
            #expect(grants.count == 2 && grants.allSatisfy { $0.accountId == dana.accountId && $0.transactionId == pack.transactionId })
            #expect(grants.last?.reason.contains(orderId) == true && grants.last?.reason.contains("ticket 4711") == true)
            #expect(grants.last?.reason.contains("changed nothing") == false && grants.first?.reason.contains("changed nothing") == true)
            #expect(grants.allSatisfy { !$0.credential.contains(SuiteFixture.adminToken) })
        }
    }

    @Test func aPurchaseRedeemedWithoutAnAccountTokenIsTiedToTheAccountAndItsRefundReachesIt() async throws {
        try await SuiteFixture.with { suite in
            let fay = try await suite.register("fay")
            // A receipt carries no appAccountToken, and this purchase was made without one.
            let pack = try await suite.buy("fay@icloud", "pack.castle")
            #expect(try await Self.transactionInfo(suite, pack.transactionId)?["appAccountToken"] == nil)
            _ = try await suite.redeem(fay.session, receipt: pack.receiptData)
            // Not in the redeem's path: the outbox makes the tie (the service's worker every 5 s; here, now).
            #expect(try await Self.transactionInfo(suite, pack.transactionId)?["appAccountToken"] == nil)
            #expect(try await suite.service.outbox.deliverOutbox() == 1)
            #expect(try await suite.service.outbox.deliverOutbox() == 0, "done once")
            #expect(try await Self.transactionInfo(suite, pack.transactionId)?["appAccountToken"]?.stringValue == fay.appAccountToken.lowercased())
            // Apple's refund notification now names fay's account, and revokes her pack.
            let refund = try await suite.simulator.call(SimRefund.self, .init(appleId: "fay@icloud", transactionId: pack.transactionId))
            let payload = try #require(refund.signedPayload)
            let verified = try await Self.verification(suite, VerificationVerifyNotification.self, .init(signedPayload: payload))
            #expect(verified.notification?["data"]?["transactionInfo"]?["appAccountToken"]?.stringValue == fay.appAccountToken.lowercased())
            let received = try await suite.fulfillment.call(
                FulfillmentReceiveNotification.self, .init(signedPayload: payload, internalToken: SuiteFixture.internalToken))
            #expect(received.state == .applied)
            #expect(try await suite.entitlements(fay.session).isEmpty)
        }
    }

    /// Whoever redeems a copied receipt first owns its unredeemed purchases here (receipts carry no appAccountToken),
    /// but the tie never overwrites the token the buyer's app set at Apple: Apple's notifications keep following the
    /// buyer (they used to move to the attacker, and the buyer's redeem by id was then refused).
    /// The attack: the buyer's app set its appAccountToken at purchase; a receipt carries no token, and a copy
    /// redeemed first would make its redeemer the owner. With the App Store Server API the receipt's purchase is looked
    /// up at Apple: another account's token there refuses it, and the buyer's redeem still grants.
    @Test func aCopiedReceiptIsRefusedWhenAppleHoldsTheBuyersToken() async throws {
        try await SuiteFixture.with { suite in
            let buyer = try await suite.register("buyer")
            let mallory = try await suite.register("mallory")
            let pack = try await suite.buy("buyer@icloud", "pack.castle", appAccountToken: buyer.appAccountToken)
            let copied = try await suite.redeem(mallory.session, receipt: pack.receiptData)
            #expect(copied.results.map(\.outcome) == [.ownedByAnotherAccount] && copied.entitlements.isEmpty)
            // Again and again: still refused (nothing is bound here), and Apple was asked once.
            let asked = suite.simAPI.requestCount
            for _ in 0..<3 {
                #expect(try await suite.redeem(mallory.session, receipt: pack.receiptData).results.map(\.outcome) == [.ownedByAnotherAccount])
            }
            #expect(suite.simAPI.requestCount == asked)
            let mine = try await suite.redeem(buyer.session, receipt: pack.receiptData)
            #expect(mine.results.map(\.outcome) == [.granted] && mine.entitlements.count == 1)
            #expect(try await suite.count("SELECT COUNT(*) FROM outbox") == 0, "Apple already names the buyer: nothing to tie")
        }
    }

    /// Twenty concurrent redeems of one copied receipt ask Apple once (they share the lookup), and Apple failing
    /// fails the redeem without remembering anything: once Apple answers, the copy is refused.
    @Test func concurrentCopiesShareOneLookupAndAFailureIsNotRemembered() async throws {
        try await SuiteFixture.with { suite in
            let buyer = try await suite.register("buyer")
            let mallory = try await suite.register("mallory")
            let pack = try await suite.buy("buyer@icloud", "pack.castle", appAccountToken: buyer.appAccountToken)
            let asked = suite.simAPI.requestCount
            let outcomes = try await withThrowingTaskGroup(of: [RedeemOutcome].self) { group in
                for _ in 0..<20 { group.addTask { try await suite.redeem(mallory.session, receipt: pack.receiptData).results.map(\.outcome) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(outcomes.allSatisfy { $0 == [.ownedByAnotherAccount] })
            #expect(suite.simAPI.requestCount - asked == 1, "one lookup for twenty redeems")

            let second = try await suite.buy("buyer@icloud", "coins.100", appAccountToken: buyer.appAccountToken)
            _ = try await suite.simulator.call(SimSetFault.self, .init(mode: .http503))
            let failed = await rpcError { try await suite.redeem(mallory.session, receipt: second.receiptData) }
            #expect(failed?.knownCode == .unavailable, "Apple unreachable: nothing granted, retry later")
            _ = try await suite.simulator.call(SimSetFault.self, .init(mode: SimFaultMode.none))
            #expect(try await suite.redeem(mallory.session, receipt: second.receiptData).results.allSatisfy { $0.outcome != .granted })
            let (balance, entitlements) = (try await suite.balance(mallory.session), try await suite.entitlements(mallory.session))
            #expect(balance == 0 && entitlements.isEmpty)
        }
    }

    /// A purchase Apple knew no token for when it was redeemed, tied to another account at Apple before the outbox
    /// made the redeemer's tie: the tie never overwrites the token Apple holds.
    @Test func theTieNeverOverwritesATokenAppleHolds() async throws {
        try await SuiteFixture.with { suite in
            let buyer = try await suite.register("buyer")
            let first = try await suite.register("first")
            let pack = try await suite.buy("buyer@icloud", "pack.castle")
            #expect(try await suite.redeem(first.session, receipt: pack.receiptData).results.map(\.outcome) == [.granted])
            _ = try await Self.verification(
                suite, VerificationSetAppAccountToken.self,
                .init(
                    internalToken: SuiteFixture.internalToken, originalTransactionId: pack.originalTransactionId,
                    appAccountToken: buyer.appAccountToken))
            #expect(try await suite.service.outbox.deliverOutbox() == 1)
            #expect(
                try await Self.transactionInfo(suite, pack.transactionId)?["appAccountToken"]?.stringValue == buyer.appAccountToken.lowercased(),
                "Apple still names the buyer")
            #expect(try await suite.count("SELECT COUNT(*) FROM outbox") == 0, "settled: nothing left to retry")
        }
    }

    @Test func aTieThatFailsWaitsInTheOutboxAndIsMadeOnceAppleAnswers() async throws {
        try await SuiteFixture.with { suite in
            let hal = try await suite.register("hal")
            let pack = try await suite.buy("hal@icloud", "pack.castle")
            _ = try await suite.redeem(hal.session, receipt: pack.receiptData)
            await suite.stopVerification()
            #expect(try await suite.service.outbox.deliverOutbox() == 1, "tried, and failed")
            #expect(try await suite.service.outbox.deliverOutbox() == 0, "not due again before its retry")
            try await suite.restartVerification()
            suite.clock.advance(ms: 5_000)
            #expect(try await suite.service.outbox.deliverOutbox() == 1)
            #expect(try await Self.transactionInfo(suite, pack.transactionId)?["appAccountToken"]?.stringValue == hal.appAccountToken.lowercased())
            #expect(try await suite.count("SELECT COUNT(*) FROM outbox") == 0)
        }
    }

    @Test func supportExtendsASubscriptionAtAppleAndHereOnceAndAuditsIt() async throws {
        try await SuiteFixture.with { suite in
            let gil = try await suite.register("gil")
            let sub = try await suite.buy("gil@icloud", "sub.premium", appAccountToken: nil)
            _ = try await suite.redeem(gil.session, receipt: sub.receiptData)
            // Apple's expiry to the millisecond (a receipt has seconds).
            let before = try #require(try await Self.transactionInfo(suite, sub.transactionId)?["expiresDate"]?.intValue)
            #expect(try await suite.entitlements(gil.session).first?.expiresAtMs == before / 1000 * 1000)
            func extend(_ requestId: String) async throws -> FulfillmentExtendSubscription.Result {
                try await suite.fulfillment.call(
                    FulfillmentExtendSubscription.self,
                    .init(
                        adminToken: SuiteFixture.adminToken, originalTransactionId: sub.originalTransactionId, days: 7, reasonCode: 3,
                        reason: "outage on 2026-11-20", requestId: requestId))
            }
            let extended = try await extend("outage-1")
            #expect(extended.expiresAtMs == before + 7 * 86_400_000 && extended.accountId == gil.accountId)
            #expect(try await suite.entitlements(gil.session).first?.expiresAtMs == extended.expiresAtMs)
            // The same request again (a support tool retrying) is not a second week.
            #expect(try await extend("outage-1").expiresAtMs == extended.expiresAtMs)
            #expect(try await Self.transactionInfo(suite, sub.transactionId)?["expiresDate"]?.intValue == extended.expiresAtMs)
            // Apple's RENEWAL_EXTENDED for it, delivered later, changes nothing more.
            let nowMs = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 0)).nowMs
            let history = try await Self.verification(
                suite, VerificationNotificationHistory.self,
                .init(
                    internalToken: SuiteFixture.internalToken, environment: .production, startDateMs: nowMs - 86_400_000, endDateMs: nowMs + 1,
                    notificationType: "RENEWAL_EXTENDED"))
            let payload = try #require(history.notifications.first?.signedPayload)
            _ = try await suite.fulfillment.call(
                FulfillmentReceiveNotification.self, .init(signedPayload: payload, internalToken: SuiteFixture.internalToken))
            #expect(try await suite.entitlements(gil.session).first?.expiresAtMs == extended.expiresAtMs)
            let audit = try await suite.fulfillment.call(FulfillmentListAudit.self, .init(adminToken: SuiteFixture.adminToken))
            let entries = audit.entries.filter { $0.action == "extendSubscription" }
            #expect(entries.count == 2 && entries.allSatisfy { $0.accountId == gil.accountId && $0.reason.contains("outage on 2026-11-20") })
            // Apple refuses a third extension: nothing changes here.
            _ = try await extend("outage-2")
            let refused = await rpcError { try await extend("outage-3") }
            #expect(refused?.reason == "appleForbidden")
            #expect(try await suite.entitlements(gil.session).first?.expiresAtMs == extended.expiresAtMs + 7 * 86_400_000)
        }
    }

    /// Without the internal token the tie worker cannot reach Apple, so a redeem records no tie it would never
    /// make (the outbox would only grow). (Support grants refuse without the token altogether.)
    @Test func withoutTheInternalTokenNoTieIsRecorded() async throws {
        try await SuiteFixture.with(configure: { $0.internalToken = nil }) { suite in
            let ivy = try await suite.register("ivy")
            let coins = try await suite.buy("ivy@icloud", "coins.100")
            #expect(try await suite.redeem(ivy.session, receipt: coins.receiptData).balance == 100)
            #expect(try await suite.count("SELECT COUNT(*) FROM outbox") == 0)
        }
    }
}
