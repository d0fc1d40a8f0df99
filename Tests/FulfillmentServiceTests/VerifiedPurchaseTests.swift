import IAPProtocol
import Testing

@testable import FulfillmentService

/// When Apple signed what a verified purchase says: a receipt's purchases carry the receipt's creation time, the only
/// signing time a receipt has; with it, a refund in a receipt made before Apple's later word that the purchase stands
/// no longer holds (`revocationSignedBefore`), as a signed transaction's does.
@Suite struct VerifiedPurchaseTests {
    @Test func aReceiptsPurchasesCarryItsCreationTimeAsTheirSignedTime() throws {
        var receipt = ReceiptBody(bundleId: "com.example.game", inApp: [InAppPurchase(quantity: "1", productId: "coins.100", transactionId: "7")])
        receipt.receiptCreationDateMs = "1000"
        receipt.inApp[0].cancellationDateMs = "900"
        let purchases = try VerifiedPurchase.fromReceipt(.init(status: 0, environment: "Production", receipt: receipt))
        let refunded = try #require(purchases.first)
        #expect(refunded.signedDateMs == 1000)
        #expect(refunded.revocationSignedBefore(standsSignedMs: 1001), "Apple said it stands after this receipt was made")
        #expect(!refunded.revocationSignedBefore(standsSignedMs: 1000), "a refund signed as late stands")
        receipt.receiptCreationDateMs = nil
        let undated = try #require(try VerifiedPurchase.fromReceipt(.init(status: 0, environment: "Production", receipt: receipt)).first)
        #expect(undated.signedDateMs == nil && !undated.revocationSignedBefore(standsSignedMs: 1001), "no signed time: the refund holds")
    }
}
