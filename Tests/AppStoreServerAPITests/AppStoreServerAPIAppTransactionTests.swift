import AppStoreServerAPI
import AppStoreSimulator
import Foundation
import IAPProtocol
import JSONRPC
import Receipts
import Testing

/// Get App Transaction Info (App Store Server API 1.17) over real HTTP, through the shared client and the simulator: one
/// app transaction per Apple ID and app, found by any of the customer's transaction ids or by its own id, named by every
/// transaction the customer makes, with Apple's documented refusals.
@Suite struct AppStoreServerAPIAppTransactionTests {
    typealias API = AppStoreServerAPITests

    @Test func anyTransactionOfTheCustomerFindsTheirAppTransaction() async throws {
        try await API.serve { served in
            let sim = served.simulator
            let client = try served.client()
            let coins = try await API.buy(sim, "coins.100", .consumable)
            let pack = try await API.buy(sim, "levels.pack1", .nonConsumable)
            let device = try sim.appTransaction(.init(appleId: "ann@icloud", bundleId: API.bundleId))
            for id in [coins.transactionId, pack.transactionId, pack.originalTransactionId, device.appTransactionId] {
                let found = try await client.appTransactionInfo(id)
                let app = try #require(AppleAppTransaction(found.payload))
                #expect(app.appTransactionId == device.appTransactionId, "by \(id)")
                #expect(app.bundleId == API.bundleId && app.environment == "Production" && app.originalPlatform == "iOS")
                #expect(app.appAppleId == 1_234_567_890, "Production names the app's Apple id")
            }
            // Every transaction of the customer names it, as Apple's do since API 1.17.
            let payload = try JSONValue(parsing: try #require(SignedPayloadVerifier.unverifiedPayload(coins.signedTransaction)))
            #expect(payload["appTransactionId"]?.stringValue == device.appTransactionId)
            // Another Apple ID is another customer.
            _ = try await API.buy(sim, "coins.100", .consumable, appleId: "bob@icloud")
            let bob = try sim.appTransaction(.init(appleId: "bob@icloud", bundleId: API.bundleId))
            #expect(bob.appTransactionId != device.appTransactionId)

            // Apple's refusals: an id nobody has (production, then sandbox), and one that is not an id.
            await #expect(throws: AppStoreAPIError.api(httpStatus: 404, errorCode: 4_040_010, message: "Transaction id not found.")) {
                _ = try await client.appTransactionInfo("9999999999")
            }
            let invalid = try await AppStoreServerAPISubscriptionTests.send(
                .GET, served.base + "/inApps/v1/transactions/appTransactions/not-an-id", token: try API.token(served.key), body: "")
            #expect(invalid.status == 400 && invalid.body?["errorCode"]?.intValue == 4_000_006)
            // A Sandbox customer is found in sandbox, with Sandbox's receiptType.
            let sandbox = try await API.buy(sim, "coins.100", .consumable, environment: .sandbox)
            let found = try #require(AppleAppTransaction(try await client.appTransactionInfo(sandbox.transactionId).payload))
            #expect(found.environment == "Sandbox" && found.appTransactionId != device.appTransactionId && found.appAppleId == nil)
        }
    }
}
