import Crypto
import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

/// The purchase lifecycle end to end: the simulator sells, the client redeems through fulfillment,
/// which calls accounts, verification and catalog over TCP and writes its own SQLite file.
@Suite struct FulfillmentEndToEndTests {
    @Test func aConsumableIsGrantedOnceAndAReplayChangesNothing() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let bought = try await suite.buy("alice@icloud", "coins.100", quantity: 2)

            let first = try await suite.redeem(alice.session, receipt: bought.receiptData)
            #expect(
                first.results == [
                    TransactionResult(
                        transactionId: bought.transactionId, originalTransactionId: bought.originalTransactionId,
                        productId: "coins.100", outcome: .granted, finishable: true)
                ])
            #expect(first.balance == 200)
            #expect(first.accountId == alice.accountId)

            let again = try await suite.redeem(alice.session, receipt: bought.receiptData)
            #expect(again.results.map(\.outcome) == [.alreadyGranted])
            #expect(again.results.allSatisfy { $0.finishable })
            #expect(try await suite.balance(alice.session) == 200)
            // The signed transaction of the same purchase is the same transaction.
            let viaJWS = try await suite.redeem(alice.session, signed: [bought.signedTransaction])
            #expect(viaJWS.results.map(\.outcome) == [.alreadyGranted])

            let ledger = try await suite.ledger(alice.session)
            #expect(ledger.map(\.kind) == [.grant])
            #expect(ledger.first?.delta == 200 && ledger.first?.transactionId == bought.transactionId)
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction") == 1)
            #expect(try await suite.ledgerIsConsistent())
        }
    }

    @Test func restoreOnASecondDeviceGivesEntitlementsButNeverCoins() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            _ = try await suite.buy("alice@icloud", "coins.100")
            let pack = try await suite.buy("alice@icloud", "pack.castle")
            let redeemed = try await suite.redeem(alice.session, receipt: pack.receiptData)
            #expect(redeemed.results.map(\.outcome) == [.granted, .granted])
            #expect(redeemed.balance == 100)

            let secondDevice = try await suite.login("alice")
            let restore = try await suite.simulator.call(SimRestore.self, .init(appleId: "alice@icloud", bundleId: SuiteFixture.bundleId))
            let restored = try await suite.fulfillment.call(FulfillmentRestore.self, .init(session: secondDevice, receiptData: restore.receiptData))
            #expect(restored.entitlements.map(\.entitlement) == ["castle"])
            #expect(restored.balance == 100)
            // The restored copy of the pack is a new transaction of the same original: nothing new granted.
            let outcomes = Dictionary(restored.results.map { ($0.transactionId, $0.outcome) }, uniquingKeysWith: { a, _ in a })
            #expect(outcomes[pack.transactionId] == .alreadyGranted)
            #expect(restored.results.filter { $0.productId == "pack.castle" && $0.transactionId != pack.transactionId }.map(\.outcome) == [.restored])
            #expect(try await suite.ledger(secondDevice).map(\.kind) == [.grant])

            // A restore with a consumable never redeemed leaves it for redeem (not granted, not listed).
            let moreCoins = try await suite.buy("alice@icloud", "coins.100")
            let restoreAgain = try await suite.fulfillment.call(
                FulfillmentRestore.self, .init(session: secondDevice, receiptData: moreCoins.receiptData))
            #expect(!restoreAgain.results.contains { $0.transactionId == moreCoins.transactionId })
            #expect(restoreAgain.balance == 100)
            #expect(try await suite.redeem(secondDevice, receipt: moreCoins.receiptData).balance == 200)
        }
    }

    @Test func rebuyingAnOwnedNonConsumableGrantsNothingNew() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let first = try await suite.buy("alice@icloud", "pack.castle")
            _ = try await suite.redeem(alice.session, receipt: first.receiptData)
            let again = try await suite.buy("alice@icloud", "pack.castle")
            #expect(again.transactionId != first.transactionId && again.originalTransactionId == first.originalTransactionId)

            let result = try await suite.redeem(alice.session, signed: [again.signedTransaction])
            #expect(result.results.map(\.outcome) == [.restored])
            #expect(result.results.first?.finishable == true)
            #expect(result.entitlements.count == 1)
            #expect(try await suite.count("SELECT COUNT(*) FROM entitlement") == 1)
            #expect(try await suite.ledger(alice.session).isEmpty)
        }
    }

    @Test func anotherAccountPresentingTheSameReceiptIsRefused() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let bob = try await suite.register("bob")
            let coins = try await suite.buy("alice@icloud", "coins.100")
            let pack = try await suite.buy("alice@icloud", "pack.castle")
            _ = try await suite.redeem(alice.session, receipt: pack.receiptData)

            let stolen = try await suite.redeem(bob.session, receipt: pack.receiptData)
            #expect(stolen.results.map(\.outcome) == [.ownedByAnotherAccount, .ownedByAnotherAccount])
            #expect(stolen.balance == 0 && stolen.entitlements.isEmpty)
            #expect(try await suite.balance(alice.session) == 100)
            #expect(try await suite.entitlements(alice.session).map(\.entitlement) == ["castle"])
            _ = coins
        }
    }

    @Test func theTransferPolicyMovesTheEntitlementButNeverTheCoins() async throws {
        try await SuiteFixture.with(configure: { $0.ownershipPolicy = .transfer }) { suite in
            let alice = try await suite.register("alice")
            let bob = try await suite.register("bob")
            _ = try await suite.buy("alice@icloud", "coins.100")
            let pack = try await suite.buy("alice@icloud", "pack.castle")
            _ = try await suite.redeem(alice.session, receipt: pack.receiptData)

            let moved = try await suite.redeem(bob.session, receipt: pack.receiptData)
            let byProduct = Dictionary(moved.results.map { ($0.productId, $0.outcome) }, uniquingKeysWith: { a, _ in a })
            #expect(byProduct == ["coins.100": .ownedByAnotherAccount, "pack.castle": .restored])
            #expect(moved.entitlements.map(\.entitlement) == ["castle"] && moved.balance == 0)
            #expect(try await suite.entitlements(alice.session).isEmpty)
            #expect(try await suite.balance(alice.session) == 100)
            #expect(try await suite.count("SELECT COUNT(*) FROM ownershipTransfer") == 1)
        }
    }

    @Test func aRefundNotificationRemovesTheEntitlementWithAReversalEntry() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let pack = try await suite.buy("alice@icloud", "pack.castle")
            _ = try await suite.redeem(alice.session, receipt: pack.receiptData)
            let refund = try await suite.simulator.call(SimRefund.self, .init(appleId: "alice@icloud", transactionId: pack.transactionId))

            let applied = try await suite.fulfillment.call(
                FulfillmentApplyNotification.self, .init(signedPayload: refund.signedPayload!, internalToken: SuiteFixture.internalToken))
            #expect(applied.applied)
            #expect(try await suite.entitlements(alice.session).isEmpty)
            let ledger = try await suite.ledger(alice.session)
            #expect(ledger.map(\.kind) == [.reversal] && ledger.first?.transactionId == pack.transactionId)
            // The same notification again (App Store retries) changes nothing more.
            _ = try await suite.fulfillment.call(
                FulfillmentApplyNotification.self, .init(signedPayload: refund.signedPayload!, internalToken: SuiteFixture.internalToken))
            #expect(try await suite.ledger(alice.session).count == 1)
            // And the refunded receipt redeemed later answers `revoked`.
            let receipt = try await suite.simulator.call(SimReceipt.self, .init(appleId: "alice@icloud", bundleId: SuiteFixture.bundleId))
            #expect(try await suite.redeem(alice.session, receipt: receipt.receiptData).results.map(\.outcome) == [.revoked])
        }
    }

    @Test func refundedCoinsAlreadySpentFloorAtZeroAndTheShortfallIsRecorded() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let coins = try await suite.buy("alice@icloud", "coins.100")
            _ = try await suite.redeem(alice.session, receipt: coins.receiptData)
            _ = try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: alice.session, amount: 70, idempotencyKey: "sword"))
            _ = try await suite.simulator.call(SimRefund.self, .init(appleId: "alice@icloud", transactionId: coins.transactionId))
            // The refund arrives as a cancellation date in the next receipt.
            let receipt = try await suite.simulator.call(SimReceipt.self, .init(appleId: "alice@icloud", bundleId: SuiteFixture.bundleId))
            let result = try await suite.redeem(alice.session, receipt: receipt.receiptData)
            #expect(result.results.map(\.outcome) == [.revoked])
            #expect(result.balance == 0)
            let reversal = try #require(try await suite.ledger(alice.session).last)
            #expect(reversal.kind == .reversal && reversal.delta == -30 && reversal.shortfall == 70 && reversal.balance == 0)
            #expect(try await suite.store.balance(accountId: alice.accountId, scope: .production).owed == 70)
            #expect(try await suite.ledgerIsConsistent())
        }
    }

    @Test func nonRenewingPurchasesStack() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let now = suite.clock.nowMs
            let first = try await suite.buy("alice@icloud", "pass.season")
            let one = try await suite.redeem(alice.session, signed: [first.signedTransaction])
            #expect(one.entitlements.first?.expiresAtMs == now + 30 * 86_400_000)
            suite.clock.advance(ms: 86_400_000)  // a day later, the second pass starts when the first ends
            let second = try await suite.buy("alice@icloud", "pass.season")
            let two = try await suite.redeem(alice.session, signed: [second.signedTransaction])
            #expect(two.results.map(\.outcome) == [.granted])
            #expect(two.entitlements.map(\.entitlement) == ["season-pass"])
            #expect(two.entitlements.first?.expiresAtMs == now + 60 * 86_400_000)
            // The first pass refunded: the second moves up and ends 30 days after its new start.
            try await SuiteFixture.with { refunded in
                let bob = try await refunded.register("bob")
                let t0 = refunded.clock.nowMs
                let p1 = try await refunded.buy("bob@icloud", "pass.season")
                let p2 = try await refunded.buy("bob@icloud", "pass.season")
                _ = try await refunded.redeem(bob.session, signed: [p1.signedTransaction, p2.signedTransaction])
                #expect(try await refunded.entitlements(bob.session).first?.expiresAtMs == t0 + 60 * 86_400_000)
                refunded.clock.advance(ms: 10 * 86_400_000)
                _ = try await refunded.fulfillment.call(
                    FulfillmentRevokeTransaction.self,
                    .init(
                        adminToken: SuiteFixture.adminToken,
                        transactionId: p1.transactionId, reason: "refund"))
                let moved = try await refunded.entitlements(bob.session)
                #expect(moved.first?.originalTransactionId == p2.originalTransactionId)
                #expect(moved.first?.expiresAtMs == refunded.clock.nowMs + 30 * 86_400_000)
            }
            // After both run out, a new pass starts from now.
            suite.clock.advance(ms: 100 * 86_400_000)
            #expect(try await suite.entitlements(alice.session).isEmpty)
            let third = try await suite.buy("alice@icloud", "pass.season")
            let three = try await suite.redeem(alice.session, signed: [third.signedTransaction])
            #expect(three.entitlements.first?.expiresAtMs == suite.clock.nowMs + 30 * 86_400_000)
        }
    }

    @Test func subscriptionRenewalsExtendTheEntitlement() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let sub = try await suite.buy("alice@icloud", "sub.premium")
            let first = try await suite.redeem(alice.session, receipt: sub.receiptData)
            let firstEnd = try #require(first.entitlements.first?.expiresAtMs)

            // One renewal arrives as a notification, the next in a receipt.
            let advanced = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 31 * 86_400))
            #expect(advanced.renewals == 1)
            let applied = try await suite.fulfillment.call(
                FulfillmentApplyNotification.self, .init(signedPayload: advanced.notifications[0], internalToken: SuiteFixture.internalToken))
            #expect(applied.applied)
            let secondEnd = try #require(try await suite.entitlements(alice.session).first?.expiresAtMs)
            // Receipt dates have whole seconds, signed transactions milliseconds.
            #expect(abs(secondEnd - (firstEnd + 30 * 86_400_000)) < 1000)

            _ = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 30 * 86_400))
            let receipt = try await suite.simulator.call(SimReceipt.self, .init(appleId: "alice@icloud", bundleId: SuiteFixture.bundleId))
            let renewed = try await suite.redeem(alice.session, receipt: receipt.receiptData)
            #expect(renewed.results.map(\.outcome) == [.alreadyGranted, .alreadyGranted, .granted])
            #expect(abs(try #require(renewed.entitlements.first?.expiresAtMs) - (secondEnd + 30 * 86_400_000)) < 1000)
            #expect(try await suite.count("SELECT COUNT(*) FROM entitlement") == 1)
        }
    }

    @Test func contentDownloadsInRangesAndOnlyForTheEntitled() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let bob = try await suite.register("bob")
            #expect(try await suite.fulfillment.call(FulfillmentListContent.self, .init(session: alice.session)).content.isEmpty)
            let pack = try await suite.buy("alice@icloud", "pack.castle")
            _ = try await suite.redeem(alice.session, receipt: pack.receiptData)

            let listed = try await suite.fulfillment.call(FulfillmentListContent.self, .init(session: alice.session)).content
            let expectedSHA = SHA256.hash(data: suite.content).map { String(format: "%02x", $0) }.joined()
            #expect(
                listed == [
                    ContentItem(
                        contentId: SuiteFixture.contentId, productId: "pack.castle", size: Int64(suite.content.count),
                        sha256: expectedSHA)
                ])
            var assembled: [UInt8] = []
            for _ in 0..<3 {  // 128 KiB chunks: three reads, the last one short
                let chunk = try await suite.fulfillment.call(
                    FulfillmentReadContent.self,
                    .init(
                        session: alice.session, contentId: SuiteFixture.contentId, offset: Int64(assembled.count), length: 131_072))
                #expect(chunk.offset == Int64(assembled.count) && chunk.size == Int64(suite.content.count) && chunk.sha256 == expectedSHA)
                assembled += Array(Data(base64Encoded: chunk.data)!)
            }
            #expect(assembled == suite.content)
            #expect(SHA256.hash(data: assembled).map { String(format: "%02x", $0) }.joined() == expectedSHA)
            let end = try await suite.fulfillment.call(
                FulfillmentReadContent.self,
                .init(
                    session: alice.session, contentId: SuiteFixture.contentId, offset: Int64(suite.content.count), length: 10))
            #expect(end.data.isEmpty)

            let refused = await rpcError {
                try await suite.fulfillment.call(
                    FulfillmentReadContent.self,
                    .init(
                        session: bob.session, contentId: SuiteFixture.contentId, offset: 0, length: 10))
            }
            #expect(refused?.code == RPCErrorCode.forbidden.rawValue)
            let traversal = await rpcError {
                try await suite.fulfillment.call(
                    FulfillmentReadContent.self,
                    .init(
                        session: alice.session, contentId: "../fulfillment.sqlite", offset: 0, length: 10))
            }
            #expect(traversal?.code == RPCErrorCode.forbidden.rawValue)
            let past = await rpcError {
                try await suite.fulfillment.call(
                    FulfillmentReadContent.self,
                    .init(
                        session: alice.session, contentId: SuiteFixture.contentId, offset: Int64(suite.content.count) + 1, length: 10))
            }
            #expect(past?.reason == "outOfRange")
        }
    }

    @Test func verificationDownMeansUnavailableAndNothingWrittenThenARetryGrantsOnce() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let coins = try await suite.buy("alice@icloud", "coins.100")
            await suite.stopVerification()

            let down = await rpcError { try await suite.redeem(alice.session, receipt: coins.receiptData) }
            #expect(down?.code == RPCErrorCode.unavailable.rawValue)
            #expect(down?.retryable == true)
            #expect(down?.data.extra["dependency"] == .string("verification"))
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction") == 0)
            #expect(try await suite.count("SELECT COUNT(*) FROM ledger") == 0)

            try await suite.restartVerification()
            let retried = try await suite.redeem(alice.session, receipt: coins.receiptData)
            #expect(retried.results.map(\.outcome) == [.granted] && retried.balance == 100)
            let again = try await suite.redeem(alice.session, receipt: coins.receiptData)
            #expect(again.results.map(\.outcome) == [.alreadyGranted] && again.balance == 100)
        }
    }

    @Test func twoHundredConcurrentRedeemsOfOneReceiptFromTwoAccountsGrantOnce() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let bob = try await suite.register("bob")
            let coins = try await suite.buy("shared@icloud", "coins.100")
            let outcomes = try await withThrowingTaskGroup(of: RedeemOutcome.self) { group in
                for i in 0..<200 {
                    let session = i % 2 == 0 ? alice.session : bob.session
                    group.addTask { try await suite.redeem(session, receipt: coins.receiptData).results[0].outcome }
                }
                var all: [RedeemOutcome] = []
                for try await o in group { all.append(o) }
                return all
            }
            #expect(outcomes.filter { $0 == .granted }.count == 1)
            #expect(outcomes.filter { $0 == .alreadyGranted }.count == 99)
            #expect(outcomes.filter { $0 == .ownedByAnotherAccount }.count == 100)
            let total = try await suite.balance(alice.session) + suite.balance(bob.session)
            #expect(total == 100)
            #expect(try await suite.count("SELECT COUNT(*) FROM ledger WHERE kind = 'grant'") == 1)
            #expect(try await suite.ledgerIsConsistent())
        }
    }

    @Test func unknownProductsStayUnfinishedUntilTheCatalogKnowsThem() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let bought = try await suite.simulator.call(
                SimPurchase.self,
                .init(
                    appleId: "alice@icloud", bundleId: SuiteFixture.bundleId,
                    productId: "gems.50", productType: .consumable))
            let before = try await suite.redeem(alice.session, receipt: bought.receiptData)
            #expect(
                before.results == [
                    TransactionResult(
                        transactionId: bought.transactionId, originalTransactionId: bought.transactionId,
                        productId: "gems.50", outcome: .unknownProduct, finishable: false)
                ])
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction") == 0)

            _ = try await suite.catalog.call(
                CatalogUpsertProduct.self,
                .init(
                    adminToken: SuiteFixture.adminToken,
                    product: SuiteFixture.product("gems.50", .consumable, .coins(50))))
            let after = try await suite.redeem(alice.session, receipt: bought.receiptData)
            #expect(after.results.map(\.outcome) == [.granted] && after.balance == 50)
        }
    }

    @Test func forgedAndUnverifiableInputIsRefusedAndWritesNothing() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let garbage = await rpcError { try await suite.redeem(alice.session, receipt: Data("not a receipt".utf8).base64EncodedString()) }
            #expect(garbage?.code == RPCErrorCode.invalidReceipt.rawValue)
            #expect(garbage?.data.extra["status"] == .int(21002))
            let foreign = try await suite.buy("alice@icloud", "coins.100", receipt: .init(signing: .untrustedChain))
            let untrusted = await rpcError { try await suite.redeem(alice.session, receipt: foreign.receiptData) }
            #expect(untrusted?.code == RPCErrorCode.invalidReceipt.rawValue)

            // A signed transaction tampered after signing: `rejected`, not finishable; the good one goes on.
            let good = try await suite.buy("alice@icloud", "pack.castle")
            var parts = foreign.signedTransaction.split(separator: ".").map(String.init)
            let payload = Data(
                base64Encoded: parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
                    .padding(toLength: (parts[1].count + 3) / 4 * 4, withPad: "=", startingAt: 0))!
            let inflated = String(decoding: payload, as: UTF8.self).replacingOccurrences(of: "\"quantity\":1", with: "\"quantity\":9")
            parts[1] = Data(inflated.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
            let mixed = try await suite.redeem(alice.session, signed: [parts.joined(separator: "."), good.signedTransaction])
            #expect(mixed.results.map(\.outcome) == [.rejected, .granted])
            #expect(mixed.results.map(\.finishable) == [false, true])
            #expect(mixed.results.first?.transactionId == foreign.transactionId)
            #expect(mixed.balance == 0)

            let nobody = await rpcError { try await suite.redeem("not-a-session", receipt: good.receiptData) }
            #expect(nobody?.code == RPCErrorCode.unauthenticated.rawValue)
            let empty = await rpcError { try await suite.redeem(alice.session) }
            #expect(empty?.code == RPCErrorCode.invalidParams.rawValue)
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction") == 1)
        }
    }

    @Test func aPurchaseMadeForAnotherAccountTokenIsNotGranted() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let bob = try await suite.register("bob")
            let forBob = try await suite.buy("family@icloud", "coins.100", appAccountToken: bob.appAccountToken)
            let byAlice = try await suite.redeem(alice.session, signed: [forBob.signedTransaction])
            #expect(byAlice.results.map(\.outcome) == [.ownedByAnotherAccount] && byAlice.balance == 0)
            let byBob = try await suite.redeem(bob.session, signed: [forBob.signedTransaction])
            #expect(byBob.results.map(\.outcome) == [.granted] && byBob.balance == 100)
        }
    }

    @Test func aRenewalNotificationGrantsAPurchaseTheAppNeverRedeemed() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            // Bought with alice's appAccountToken, but the app never redeemed it.
            let sub = try await suite.buy("alice@icloud", "sub.premium", appAccountToken: alice.appAccountToken)
            let stranger = try await suite.buy("stranger@icloud", "sub.premium", appAccountToken: UUID().uuidString.lowercased())
            let advanced = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 31 * 86_400))
            #expect(advanced.notifications.count == 2)
            var applied: [Bool] = []
            for payload in advanced.notifications {
                applied.append(
                    try await suite.fulfillment.call(
                        FulfillmentApplyNotification.self, .init(signedPayload: payload, internalToken: SuiteFixture.internalToken)
                    ).applied)
            }
            // Alice's renewal found her through the token; the stranger's token belongs to nobody here.
            #expect(applied.sorted { !$0 && $1 } == [false, true])
            let entitlements = try await suite.entitlements(alice.session)
            #expect(entitlements.map(\.entitlement) == ["premium"] && entitlements.first?.originalTransactionId == sub.originalTransactionId)
            // The first purchase, redeemed later, is already accounted for: its original is alice's.
            let redeemed = try await suite.redeem(alice.session, signed: [sub.signedTransaction])
            #expect(redeemed.results.map(\.outcome) == [.restored])
            #expect(try await suite.count("SELECT COUNT(*) FROM ownership") == 1)
            _ = stranger
            // A fulfillment without the internal token takes no notification at all (it is an internal method).
            try await SuiteFixture.with(configure: { $0.internalToken = nil }) { noToken in
                let bob = try await noToken.register("bob")
                _ = try await noToken.buy("bob@icloud", "sub.premium", appAccountToken: bob.appAccountToken)
                let renewal = try await noToken.simulator.call(SimAdvanceClock.self, .init(seconds: 31 * 86_400)).notifications[0]
                let refused = await #expect(throws: RPCError.self) {
                    try await noToken.fulfillment.call(
                        FulfillmentApplyNotification.self, .init(signedPayload: renewal, internalToken: SuiteFixture.internalToken))
                }
                #expect(refused?.has(.internalTokenRequired) == true)
                #expect(try await noToken.entitlements(bob.session).isEmpty)
            }
        }
    }
}
