import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import ServiceSupport
import SuiteTestSupport
import Testing

/// `Tests/Contracts/fulfillment/*.contract` against one live suite. Each script works on accounts and
/// purchases of its own, minted here and handed to it as variables.
@Suite struct FulfillmentContractTests {
    @Test func everyFulfillmentMethodKeepsItsContract() async throws {
        try await SuiteFixture.with(configure: { $0.contentURLSigner = ContentURLSigner(key: EdgeFixture.contentKey) }) { suite in
            var v: [String: JSONValue] = ["adminToken": .string(SuiteFixture.adminToken)]

            // redeem: a fresh account with an unredeemed coin purchase and a signed pack purchase.
            let redeemer = try await suite.register("contract-redeem")
            let coins = try await suite.buy("redeem@icloud", "coins.100", quantity: 3)
            let pack = try await suite.buy("redeem-jws@icloud", "pack.castle")
            v["redeemSession"] = .string(redeemer.session)
            v["redeemReceipt"] = .string(coins.receiptData)
            v["redeemTransaction"] = .string(coins.transactionId)
            v["redeemJWS"] = .string(pack.signedTransaction)
            v["redeemJWSTransaction"] = .string(pack.transactionId)

            // restore: a pack redeemed on one device, then restored on another.
            let restorer = try await suite.register("contract-restore")
            let owned = try await suite.buy("restore@icloud", "pack.castle")
            _ = try await suite.redeem(restorer.session, receipt: owned.receiptData)
            let restore = try await suite.simulator.call(SimRestore.self, .init(appleId: "restore@icloud", bundleId: SuiteFixture.bundleId))
            v["restoreSession"] = .string(try await suite.login("contract-restore"))
            v["restoreReceipt"] = .string(restore.receiptData)
            v["restoreOriginal"] = .string(owned.originalTransactionId)

            // reads: an account with 100 coins and the castle pack.
            let reader = try await suite.register("contract-reader")
            _ = try await suite.buy("reader@icloud", "coins.100")
            let readerPack = try await suite.buy("reader@icloud", "pack.castle")
            _ = try await suite.redeem(reader.session, receipt: readerPack.receiptData)
            v["readerSession"] = .string(reader.session)
            v["readerPackOriginal"] = .string(readerPack.originalTransactionId)
            v["contentSize"] = .int(Int64(suite.content.count))
            v["readerOrderId"] = .string(readerPack.orderId ?? "")
            v["readerAccountId"] = .string(reader.accountId)

            // spend and ledger: accounts with 300 coins each.
            for name in ["spend", "ledger"] {
                let account = try await suite.register("contract-\(name)")
                let bought = try await suite.buy("\(name)@icloud", "coins.100", quantity: 3)
                _ = try await suite.redeem(account.session, receipt: bought.receiptData)
                v["\(name)Session"] = .string(account.session)
                v["\(name)Transaction"] = .string(bought.transactionId)
            }

            // notifications: a redeemed pack refunded in the simulator.
            let refunded = try await suite.register("contract-refund")
            let refundPack = try await suite.buy("refund@icloud", "pack.castle")
            _ = try await suite.redeem(refunded.session, receipt: refundPack.receiptData)
            let refund = try await suite.simulator.call(SimRefund.self, .init(appleId: "refund@icloud", transactionId: refundPack.transactionId))
            v["refundPayload"] = .string(refund.signedPayload!)
            v["internalToken"] = .string(SuiteFixture.internalToken)

            // retentionMessage: a subscriber's realtime request as the simulated App Store signs it (no URL set: not sent).
            let leaving = try await suite.buy("retention@icloud", "sub.premium")
            let intent = try await suite.simulator.call(
                SimCancelIntent.self, .init(appleId: "retention@icloud", originalTransactionId: leaving.originalTransactionId, locale: "en-US"))
            v["realtimePayload"] = .string(intent.signedPayload)
            let late = try await suite.simulator.call(
                SimCancelIntent.self, .init(appleId: "retention@icloud", originalTransactionId: leaving.originalTransactionId, locale: "en-US"))
            v["lateRealtimePayload"] = .string(late.signedPayload)

            // revokeTransaction: a redeemed coin purchase.
            let revoked = try await suite.register("contract-revoke")
            let revokeCoins = try await suite.buy("revoke@icloud", "coins.100")
            _ = try await suite.redeem(revoked.session, receipt: revokeCoins.receiptData)
            v["revokeTransaction"] = .string(revokeCoins.transactionId)

            // grantOrder: an order nobody redeemed, granted by support to a username.
            _ = try await suite.register("contract-grant")
            let granted = try await suite.buy("grant@icloud", "pack.castle")
            v["grantOrderId"] = .string(granted.orderId ?? "")
            v["grantOriginal"] = .string(granted.originalTransactionId)

            // extendSubscription: a redeemed subscription.
            let subscriber = try await suite.register("contract-extend")
            let sub = try await suite.buy("extend@icloud", "sub.premium")
            _ = try await suite.redeem(subscriber.session, receipt: sub.receiptData)
            v["extendOriginal"] = .string(sub.originalTransactionId)
            v["extendAccountId"] = .string(subscriber.accountId)

            // getCustomer: 100 coins and the castle pack, found by the pack's transaction id.
            let customer = try await suite.register("contract-customer")
            let customerCoins = try await suite.buy("customer@icloud", "coins.100")
            let customerPack = try await suite.buy("customer@icloud", "pack.castle")
            _ = try await suite.redeem(customer.session, receipt: customerPack.receiptData)
            v["customerAccountId"] = .string(customer.accountId)
            v["customerPackTransaction"] = .string(customerPack.transactionId)
            v["customerCoinsTransaction"] = .string(customerCoins.transactionId)

            // signOutCustomer: an account signed in once.
            let signedIn = try await suite.register("contract-sign-out")
            v["signOutAccountId"] = .string(signedIn.accountId)
            v["signOutSession"] = .string(signedIn.session)

            // adjustCoins: an account with nothing yet.
            v["adjustAccountId"] = .string(try await suite.register("contract-adjust").accountId)

            let failures = try await ContractHarness.run(
                service: "fulfillment", port: suite.fulfillment.port,
                declared: ContractMethods.fulfillment, variables: v)
            #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
        }
    }
}
