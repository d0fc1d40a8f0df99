import AppStoreServerAPI
import AppStoreSimulator
import Foundation
import IAPProtocol
import JSONRPC
import Receipts
import Testing

/// Finish Transaction (App Store Server API 1.20) over real HTTP, through the shared client and the simulator: 200
/// with no body, the transaction finished as the device's `finish()` would, and Apple's documented refusals.
@Suite struct AppStoreServerAPIFinishTests {
    typealias API = AppStoreServerAPITests

    @Test func aFinishedTransactionIsRecordedAndApplesRefusalsAreTyped() async throws {
        try await API.serve { served in
            let sim = served.simulator
            let client = try served.client()
            let coins = try await API.buy(sim, "coins.100", .consumable)
            let other = try await API.buy(sim, "coins.100", .consumable)
            try await client.finishTransaction(coins.transactionId)
            try await client.finishTransaction(coins.transactionId)  // a second finish is harmless, as Apple's is
            #expect(try sim.serverFinishes(.init(transactionId: coins.transactionId)).finishedAtMs.count == 2)
            #expect(try sim.serverFinishes(.init(transactionId: other.transactionId)).finishedAtMs.isEmpty)
            // The finished consumable left the receipt; the unfinished one is still in it.
            let receipt = try await AppStoreServerAPISubscriptionTests.blocking {
                try sim.currentReceipt(.init(appleId: "ann@icloud", bundleId: AppStoreServerAPITests.bundleId))
            }
            let container = try ReceiptContainer.parse(Array(try #require(Data(base64Encoded: receipt.receiptData))))
            let parsed = try Receipt(payload: container.payload).inApp.map(\.transactionId)
            #expect(parsed.contains(other.transactionId) && !parsed.contains(coins.transactionId), "\(parsed)")

            // Apple's refusals: an id it does not have (after production, sandbox is asked too), and one that is not an id.
            await #expect(throws: AppStoreAPIError.api(httpStatus: 404, errorCode: 4_040_010, message: "Transaction id not found.")) {
                try await client.finishTransaction("9999999999")
            }
            let bearer = try API.token(served.key)
            let invalid = try await AppStoreServerAPISubscriptionTests.send(
                .POST, served.base + "/inApps/v1/transactions/not-an-id/finish", token: bearer, body: "")
            #expect(invalid.status == 400 && invalid.body?["errorCode"]?.intValue == 4_000_006)
            // Not retried here (its caller, fulfillment's outbox, retries on its own schedule): a 503 fails the call at once,
            // after one request, where other calls would have waited and tried again.
            try served.faults.set(.init(mode: .http503, count: 1))
            await #expect(throws: AppStoreAPIError.api(httpStatus: 503, errorCode: 5_000_001, message: "An unknown retryable error occurred.")) {
                try await client.finishTransaction(other.transactionId)
            }
            #expect(try sim.serverFinishes(.init(transactionId: other.transactionId)).finishedAtMs.isEmpty)
            try await client.finishTransaction(other.transactionId)
            #expect(try sim.serverFinishes(.init(transactionId: other.transactionId)).finishedAtMs.count == 1)
            // A sandbox transaction is not Production's: the client finds it in sandbox.
            let sandbox = try await API.buy(sim, "coins.100", .consumable, environment: .sandbox)
            try await client.finishTransaction(sandbox.transactionId)
            #expect(try sim.serverFinishes(.init(transactionId: sandbox.transactionId)).finishedAtMs.count == 1)
        }
    }
}

/// Apple's Retry-After is the UNIX time, in milliseconds, of the next request allowed ("Identifying rate limits"); a
/// small number is HTTP's delay in seconds.
@Suite struct RetryAfterTests {
    @Test func appleTimesAndHTTPDelaysAreBothRead() {
        let now: Int64 = 1_800_000_000_000
        #expect(AppStoreServerAPIClient.wait(retryAfter: String(now + 1_500), nowMs: now) == .milliseconds(1_500))
        #expect(AppStoreServerAPIClient.wait(retryAfter: String(now - 10), nowMs: now) == .zero, "a time already past: at once")
        #expect(AppStoreServerAPIClient.wait(retryAfter: "2", nowMs: now) == .seconds(2))
        #expect(AppStoreServerAPIClient.wait(retryAfter: "soon", nowMs: now) == nil)
        #expect(AppStoreServerAPIClient.wait(retryAfter: "-1", nowMs: now) == nil)
    }
}
