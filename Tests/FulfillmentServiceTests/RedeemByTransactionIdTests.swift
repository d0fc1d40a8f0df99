import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import SuiteTestSupport
import Testing

/// Redeem and restore by transaction id: fulfillment asks verification, verification asks the App Store
/// Server API (the simulator on its HTTP port), and only verified transactions are granted, each once.
@Suite struct RedeemByTransactionIdTests {
    static func redeem(_ suite: SuiteFixture, _ session: String, ids: [String]) async throws -> RedeemResult {
        try await suite.fulfillment.call(FulfillmentRedeem.self, .init(session: session, transactionIds: ids))
    }

    @Test func anAppSendsTransactionIdsAndTheServerFetchesVerifiesAndGrantsOnce() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let coins = try await suite.buy("alice@icloud", "coins.100", appAccountToken: alice.appAccountToken)
            let pack = try await suite.buy("alice@icloud", "pack.castle", appAccountToken: alice.appAccountToken)
            let first = try await Self.redeem(suite, alice.session, ids: [coins.transactionId, pack.transactionId])
            #expect(first.results.map(\.outcome).sorted { $0.rawValue < $1.rawValue } == [.granted, .granted])
            #expect(first.balance == 100 && first.entitlements.map(\.entitlement) == ["castle"])
            let again = try await Self.redeem(suite, alice.session, ids: [coins.transactionId])
            #expect(again.results.map(\.outcome) == [.alreadyGranted] && again.balance == 100)

            // Ids Apple does not have for this app: rejected, not finishable, nothing granted.
            let stranger = try await suite.buy("mallory@icloud", "coins.100", bundleId: "com.attacker.freecoins")
            let refused = try await Self.redeem(suite, alice.session, ids: ["123456789", stranger.transactionId])
            #expect(refused.results.map(\.outcome) == [.rejected, .rejected] && refused.results.allSatisfy { !$0.finishable })
            #expect(refused.balance == 100)

            // A transaction id is not a proof of purchase: someone else's purchase (made with their token, or
            // with none) is not granted by id, however it was learnt. Its owner still redeems it by JWS.
            let bob = try await suite.register("bob")
            let bobs = try await suite.buy("bob@icloud", "coins.100", appAccountToken: bob.appAccountToken)
            let untokened = try await suite.buy("carol@icloud", "pack.castle")
            let stolen = try await Self.redeem(suite, alice.session, ids: [bobs.transactionId, untokened.transactionId])
            #expect(stolen.results.map(\.outcome) == [.rejected, .rejected] && stolen.results.allSatisfy { !$0.finishable })
            #expect(stolen.balance == 100)
            #expect(try await Self.redeem(suite, bob.session, ids: [bobs.transactionId]).balance == 100)
            let carol = try await suite.register("carol")
            #expect(try await suite.redeem(carol.session, signed: [untokened.signedTransaction]).results.map(\.outcome) == [.granted])

            // A sandbox purchase is found in sandbox and lands in the Sandbox scope.
            let sandbox = try await suite.buy("alice@icloud", "coins.100", appAccountToken: alice.appAccountToken, environment: .sandbox)
            let sandboxed = try await Self.redeem(suite, alice.session, ids: [sandbox.transactionId])
            #expect(sandboxed.results.map(\.outcome) == [.granted] && sandboxed.environment == .sandbox && sandboxed.balance == 100)
            #expect(try await suite.balance(alice.session) == 100)

            // Malformed input is refused before anyone is asked.
            let malformed = await rpcError { try await Self.redeem(suite, alice.session, ids: ["12a"]) }
            #expect(malformed?.knownCode == .invalidParams)
            let wrongMethod = await rpcError {
                try await suite.fulfillment.call(FulfillmentRedeem.self, .init(session: alice.session, transactionId: coins.transactionId))
            }
            #expect(wrongMethod?.reason == "restoreOnly")
        }
    }

    @Test func aNewDeviceRestoresTheWholeHistoryWithoutAReceiptAndNoCoins() async throws {
        try await SuiteFixture.with { suite in
            let bob = try await suite.register("bob")
            let token = bob.appAccountToken
            let coins = try await suite.buy("bob@icloud", "coins.100", appAccountToken: token)
            _ = try await Self.redeem(suite, bob.session, ids: [coins.transactionId])
            // Bought on the phone, never redeemed here: a pack, a subscription, and more coins.
            _ = try await suite.buy("bob@icloud", "pack.castle", appAccountToken: token)
            _ = try await suite.buy("bob@icloud", "sub.premium", appAccountToken: token)
            _ = try await suite.buy("bob@icloud", "coins.100", appAccountToken: token)
            // Someone who learnt one of bob's transaction ids restores nothing from bob's history.
            let mallory = try await suite.register("mallory")
            let snooped = try await suite.fulfillment.call(
                FulfillmentRestore.self, .init(session: mallory.session, transactionId: coins.transactionId))
            #expect(snooped.entitlements.isEmpty && snooped.balance == 0)
            #expect(snooped.results.allSatisfy { $0.outcome == .rejected && !$0.finishable })

            let tablet = try await suite.login("bob")
            let restored = try await suite.fulfillment.call(FulfillmentRestore.self, .init(session: tablet, transactionId: coins.transactionId))
            #expect(Set(restored.entitlements.map(\.entitlement)) == ["castle", "premium"])
            #expect(restored.balance == 100, "a restore never grants coins")
            // Restoring again changes nothing.
            let twice = try await suite.fulfillment.call(FulfillmentRestore.self, .init(session: tablet, transactionId: coins.transactionId))
            #expect(twice.balance == 100 && Set(twice.entitlements.map(\.entitlement)) == ["castle", "premium"])
            #expect(try await suite.ledgerIsConsistent())
            // An id Apple does not know: notFound, nothing changed.
            let unknown = await rpcError {
                try await suite.fulfillment.call(FulfillmentRestore.self, .init(session: tablet, transactionId: "999999999"))
            }
            #expect(unknown?.knownCode == .notFound)
        }
    }

    /// A subscription bound here by its receipt, without a token at Apple yet (its tie still owed): a restore from Apple's
    /// history brings back the renewals Apple made since, as this account's. Before 2026-11-30 they were left out as
    /// another customer's, and the access ended at the period the receipt had (seen failing so). Another account still
    /// gets nothing of it.
    @Test func aRestoreBringsBackRenewalsOfASubscriptionThisAccountHoldsWithoutAToken() async throws {
        try await SuiteFixture.with { suite in
            let cy = try await suite.register("cy")
            let sub = try await suite.buy("cy@icloud", "sub.premium")
            #expect(try await suite.redeem(cy.session, receipt: sub.receiptData).results.map(\.outcome) == [.granted])
            suite.clock.advance(ms: 31 * 86_400_000)
            _ = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 31 * 86_400))  // renewed at Apple, unheard here
            #expect(try await suite.entitlements(cy.session).isEmpty, "the period the receipt had is over")
            let mallory = try await suite.register("mallory")
            let snooped = try await suite.fulfillment.call(FulfillmentRestore.self, .init(session: mallory.session, transactionId: sub.transactionId))
            #expect(snooped.entitlements.isEmpty && snooped.results.allSatisfy { $0.outcome == .rejected })
            let restored = try await suite.fulfillment.call(FulfillmentRestore.self, .init(session: cy.session, transactionId: sub.transactionId))
            #expect(restored.entitlements.map(\.entitlement) == ["premium"], "\(restored.results)")
            #expect(try await suite.ledgerIsConsistent())
        }
    }
}
