import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

/// The attacks of docs/security.md, each against the whole suite over TCP: another app's purchases,
/// free Sandbox purchases, refunds after spending, and one purchase shown under two environments.
@Suite struct TrustBoundaryTests {
    @Test func purchasesOfAnotherAppAreRefusedAsReceiptJWSAndNotification() async throws {
        try await SuiteFixture.with { suite in
            let mallory = try await suite.register("mallory")
            // The attacker's own app, with our product ids, bought with a Sandbox tester.
            let foreign = try await suite.buy(
                "mallory@icloud", "coins.100", quantity: 10, environment: .sandbox,
                bundleId: "com.attacker.freecoins")
            let receipt = await rpcError { try await suite.redeem(mallory.session, receipt: foreign.receiptData) }
            #expect(receipt?.knownCode == .invalidReceipt)
            #expect(receipt?.reason == "bundleMismatch")
            let jws = try await suite.redeem(mallory.session, signed: [foreign.signedTransaction])
            #expect(jws.results.map(\.outcome) == [.rejected])
            #expect(jws.results.allSatisfy { !$0.finishable })
            let refund = try await suite.simulator.call(SimRefund.self, .init(appleId: "mallory@icloud", transactionId: foreign.transactionId))
            let notification = await rpcError {
                try await suite.fulfillment.call(
                    FulfillmentApplyNotification.self, .init(signedPayload: refund.signedPayload!, internalToken: SuiteFixture.internalToken))
            }
            #expect(notification?.knownCode == .invalidReceipt)
            #expect(notification?.reason == "bundleMismatch")
            for scope in AccountScope.allCases { #expect(try await suite.balance(mallory.session, scope) == 0) }
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction") == 0)
        }
    }

    @Test func aSandboxPurchaseNeverBecomesProductionValueUnderTheDefaultPolicy() async throws {
        try await SuiteFixture.with { suite in
            let tester = try await suite.register("testflight")
            let free = try await suite.buy("tester@icloud", "coins.100", environment: .sandbox)
            let pass = try await suite.buy("tester@icloud", "pack.castle", environment: .sandbox)
            let redeemed = try await suite.redeem(tester.session, signed: [free.signedTransaction, pass.signedTransaction])
            #expect(redeemed.results.map(\.outcome) == [.granted, .granted])
            #expect(redeemed.environment == .sandbox)
            #expect(redeemed.balance == 100)
            // Production is untouched: no coins, no entitlement, nothing to spend, no content.
            #expect(try await suite.balance(tester.session) == 0)
            #expect(try await suite.entitlements(tester.session).isEmpty)
            #expect(
                await rpcError {
                    try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: tester.session, amount: 1, idempotencyKey: "k"))
                }?.knownCode == .insufficientFunds)
            #expect(
                await rpcError {
                    try await suite.fulfillment.call(
                        FulfillmentReadContent.self,
                        .init(session: tester.session, contentId: SuiteFixture.contentId, offset: 0, length: 10))
                }?.knownCode == .forbidden)
            // The Sandbox scope has it all, for a TestFlight build that asks for it.
            #expect(try await suite.balance(tester.session, .sandbox) == 100)
            let sandbox = try await suite.fulfillment.call(FulfillmentGetEntitlements.self, .init(session: tester.session, environment: .sandbox))
            #expect(sandbox.entitlements.map(\.entitlement) == ["castle"])
            #expect(try await suite.ledger(tester.session, .sandbox).map(\.kind) == [.grant])
            #expect(try await suite.ledger(tester.session).isEmpty)
            let spent = try await suite.fulfillment.call(
                FulfillmentSpendCoins.self,
                .init(session: tester.session, amount: 40, idempotencyKey: "k", environment: .sandbox))
            #expect(spent.balance == 60 && spent.environment == .sandbox)
            #expect(try await suite.ledgerIsConsistent())
        }
    }

    @Test func theSandboxPolicyCanRefuseOrGrant() async throws {
        try await SuiteFixture.with(configure: { $0.sandboxPolicy = .refuse }) { refusing in
            let a = try await refusing.register("a")
            let bought = try await refusing.buy("a@icloud", "coins.100", environment: .sandbox)
            let refused = try await refusing.redeem(a.session, receipt: bought.receiptData)
            #expect(refused.results.map(\.outcome) == [.wrongEnvironment])
            #expect(refused.results.allSatisfy { !$0.finishable })
            for scope in AccountScope.allCases { #expect(try await refusing.balance(a.session, scope) == 0) }
            // A Production purchase is still granted.
            let real = try await refusing.buy("a@icloud", "coins.100")
            #expect(try await refusing.redeem(a.session, signed: [real.signedTransaction]).results.map(\.outcome) == [.granted])
        }
        try await SuiteFixture.with(configure: { $0.sandboxPolicy = .grant }) { granting in
            let b = try await granting.register("b")
            let sandbox = try await granting.buy("b@icloud", "coins.100", environment: .sandbox)
            _ = try await granting.redeem(b.session, receipt: sandbox.receiptData)
            #expect(try await granting.balance(b.session) == 100)
        }
    }

    @Test func refundingSpentCoinsIsDebtThatTheNextPurchaseRepaysFirst() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let coins = try await suite.buy("alice@icloud", "coins.100")
            _ = try await suite.redeem(alice.session, receipt: coins.receiptData)
            _ = try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: alice.session, amount: 70, idempotencyKey: "sword"))
            let refund = try await suite.simulator.call(SimRefund.self, .init(appleId: "alice@icloud", transactionId: coins.transactionId))
            #expect(
                try await suite.fulfillment.call(
                    FulfillmentApplyNotification.self, .init(signedPayload: refund.signedPayload!, internalToken: SuiteFixture.internalToken)
                ).applied)
            // Delivered twice (Apple retries): applied once.
            #expect(
                try await suite.fulfillment.call(
                    FulfillmentApplyNotification.self, .init(signedPayload: refund.signedPayload!, internalToken: SuiteFixture.internalToken)
                ).applied)
            #expect(try await suite.count("SELECT COUNT(*) FROM notificationInbox WHERE state = 'applied'") == 1)
            #expect(try await suite.count("SELECT COUNT(*) FROM ledger WHERE kind = 'reversal'") == 1)

            let afterRefund = try await suite.fulfillment.call(FulfillmentGetBalance.self, .init(session: alice.session))
            #expect(afterRefund.balance == 0 && afterRefund.owed == 70)
            let blocked = await rpcError {
                try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: alice.session, amount: 1, idempotencyKey: "more"))
            }
            #expect(blocked?.knownCode == .insufficientFunds)
            #expect(blocked?.reason == "debtOutstanding")
            #expect(blocked?.data.extra["owed"]?.intValue == 70)

            // Buying again repays the debt before anything is spendable.
            let again = try await suite.buy("alice@icloud", "coins.100")
            let redeemed = try await suite.redeem(alice.session, signed: [again.signedTransaction])
            #expect(redeemed.balance == 30 && redeemed.owed == 0)
            let ledger = try await suite.ledger(alice.session)
            #expect(ledger.map(\.kind) == [.grant, .spend, .reversal, .grant, .recovery])
            #expect(ledger[2].delta == -30 && ledger[2].shortfall == 70 && ledger[2].owed == 70)
            #expect(ledger[4].delta == -70 && ledger[4].recovered == 70 && ledger[4].owed == 0)
            #expect(ledger.last?.balance == 30)
            let entitlements = try await suite.fulfillment.call(FulfillmentGetEntitlements.self, .init(session: alice.session))
            #expect(entitlements.owed == 0 && entitlements.balance == 30)
            _ = try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: alice.session, amount: 30, idempotencyKey: "more"))
            // balance = sum(ledger) and owed = sum(debt) - sum(recovered), from the database itself.
            #expect(try await suite.ledgerIsConsistent())
            #expect(try await suite.count("SELECT SUM(debt) - SUM(recovered) FROM ledger") == 0)
            #expect(try await suite.count("SELECT SUM(delta) FROM ledger") == 0)
        }
    }

    @Test func aRefundRevokesAPurchaseHoweverItWasFirstSeen() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let pack = try await suite.buy("alice@icloud", "pack.castle")
            #expect(pack.environment == "Production")
            _ = try await suite.redeem(alice.session, receipt: pack.receiptData)
            // Restored on a second device from a fresh receipt; the receipt says Production as the purchase was.
            let restore = try await suite.simulator.call(SimRestore.self, .init(appleId: "alice@icloud", bundleId: SuiteFixture.bundleId))
            let tablet = try await suite.login("alice")
            _ = try await suite.fulfillment.call(FulfillmentRestore.self, .init(session: tablet, receiptData: restore.receiptData))
            // A Sandbox receipt of the same Apple ID holds none of its Production purchases.
            let sandboxReceipt = try await suite.simulator.call(
                SimReceipt.self,
                .init(
                    appleId: "alice@icloud", bundleId: SuiteFixture.bundleId,
                    receipt: .init(environment: .sandbox)))
            #expect(try await suite.redeem(alice.session, receipt: sandboxReceipt.receiptData).results.isEmpty)

            let refund = try await suite.simulator.call(SimRefund.self, .init(appleId: "alice@icloud", transactionId: pack.transactionId))
            let payload = try #require(refund.signedPayload)
            let decoded = try await suite.fulfillment.call(
                FulfillmentApplyNotification.self, .init(signedPayload: payload, internalToken: SuiteFixture.internalToken))
            #expect(decoded.applied)
            #expect(try await suite.entitlements(alice.session).isEmpty)
            #expect(try await suite.entitlements(tablet).isEmpty)
        }
    }

    @Test func onePurchaseIsRecordedUnderOneEnvironmentOnly() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let purchase = VerifiedPurchase(
                environment: "Production", transactionId: "2000000777", originalTransactionId: "2000000777",
                productId: "coins.100", purchaseDateMs: 1)
            var relabelled = purchase
            relabelled.environment = "Sandbox"
            let first = try await suite.store.apply(
                [.init(purchase: purchase, rule: .coins(perUnit: 100))], accountId: alice.accountId,
                appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production, nowMs: 1)
            let second = try await suite.store.apply(
                [.init(purchase: relabelled, rule: .coins(perUnit: 100), scope: .sandbox)],
                accountId: alice.accountId, appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production, nowMs: 2)
            #expect(first.results.map(\.outcome) == [.granted])
            // A copy claiming another environment is refused: a purchase never lands in another scope than its original's.
            #expect(second.results.map(\.outcome) == [.wrongEnvironment])
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction WHERE transactionId = '2000000777'") == 1)
            #expect(try await suite.balance(alice.session, .sandbox) == 0)
            // The schema itself refuses a second environment for the same transaction.
            if suite.store is FulfillmentStore {
                #expect(try await suite.count("SELECT COUNT(*) FROM sqlite_master WHERE name = 'processed_one_environment'") == 1)
            }
            // A revocation finds it whatever environment is claimed.
            #expect(try await suite.store.revoke(transactionId: "2000000777", reason: "refunded", nowMs: 3) == .revoked)
            #expect(try await suite.balance(alice.session) == 0)
        }
    }

    @Test func aTieToMakeAtAppleIsRecordedOnlyWithItsGrant() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            func purchase(_ id: String, quantity: Int64 = 1) -> VerifiedPurchase {
                VerifiedPurchase(
                    environment: "Production", transactionId: id, originalTransactionId: id, productId: "coins.100", quantity: quantity,
                    purchaseDateMs: 1)
            }
            // A grant that fails rolls its tie back with it.
            await #expect(throws: LedgerLimit.self) {
                _ = try await suite.store.apply(
                    [.init(purchase: purchase("2000000901", quantity: 10), rule: .coins(perUnit: Int64.max / 4))],
                    accountId: alice.accountId, appAccountToken: alice.appAccountToken, owed: .ties, mode: .redeem,
                    policy: .refuse, answerScope: .production, nowMs: 1)
            }
            #expect(try await suite.count("SELECT COUNT(*) FROM outbox") == 0)
            // One that commits carries its tie in the same commit.
            let granted = try await suite.store.apply(
                [.init(purchase: purchase("2000000902"), rule: .coins(perUnit: 100))], accountId: alice.accountId,
                appAccountToken: alice.appAccountToken, owed: .ties, mode: .redeem, policy: .refuse,
                answerScope: .production, nowMs: 2)
            #expect(granted.results.map(\.outcome) == [.granted])
            let ties = try await suite.store.outbox(limit: 10).items.map { [$0.kind, $0.key, $0.payload] }
            #expect(ties == [["appAccountToken", "2000000902", alice.appAccountToken.lowercased()]])
        }
    }

    @Test func coinArithmeticIsCheckedNeverWrapped() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let huge = VerifiedPurchase(
                environment: "Production", transactionId: "2000000999", originalTransactionId: "2000000999",
                productId: "coins.huge", quantity: 10, purchaseDateMs: 1)
            await #expect(throws: LedgerLimit.self) {
                _ = try await suite.store.apply(
                    [.init(purchase: huge, rule: .coins(perUnit: Int64.max / 4))], accountId: alice.accountId,
                    appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production, nowMs: 1)
            }
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction") == 0)
            #expect(try await suite.balance(alice.session) == 0)
            // The catalog refuses a product that grants more than the bound per unit.
            let tooRich = SuiteFixture.product("coins.huge", .consumable, .coins(CoinLimits.maxPerUnit + 1))
            let refused = await rpcError {
                try await suite.catalog.call(CatalogUpsertProduct.self, .init(adminToken: SuiteFixture.adminToken, product: tooRich))
            }
            #expect(refused?.knownCode == .invalidParams)
            #expect(refused?.reason == "invalidGrant")
        }
    }
}
