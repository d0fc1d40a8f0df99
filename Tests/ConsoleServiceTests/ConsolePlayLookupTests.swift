import Foundation
import IAPProtocol
import JSONRPC
import SuiteTestSupport
import Testing

@testable import ConsoleService

/// Support finds a customer by what a Google Play customer has: the order id of Google's receipt email (`GPA.`...) or a
/// purchase token, and can revoke by that order id (an extension stays the App Store's).
@Suite(.serialized) struct ConsolePlayLookupTests {
    @Test func aGooglePlayOrderIdOrPurchaseTokenFindsItsCustomer() async throws {
        try await SuiteFixture.with(play: true) { suite in
            let play = try #require(suite.play)
            let console = try await ConsoleFixture.start(suite)
            defer { Task { await console.stop() } }
            let ann = try await suite.register("ann")
            let bought = try await play.buy("coins.100", accountToken: ann.appAccountToken)
            let order = try #require(bought.orderId)
            _ = try await suite.fulfillment.call(
                FulfillmentRedeem.self, .init(session: ann.session, googlePlay: [.init(productId: "coins.100", purchaseToken: bought.purchaseToken)]))
            #expect(try await console.service.resolve(order) == ann.accountId)
            #expect(try await console.service.resolve(bought.purchaseToken) == ann.accountId)
            #expect(try await console.service.resolve("GPA.0000-0000-0000-00000") == nil)
            // The revoke form takes a Play order id; the extend form does not.
            let revoke = try CustomerAction.parse(["action": "revoke", "reason": "fraud", "transactionId": order])
            #expect(revoke.transactionId == order)
            #expect(throws: CustomerAction.Invalid.self) {
                try CustomerAction.parse(["action": "extend", "reason": "outage", "transactionId": order, "days": "3"])
            }
            #expect(throws: CustomerAction.Invalid.self) {
                try CustomerAction.parse(["action": "revoke", "reason": "fraud", "transactionId": "GPA.1<script>"])
            }
        }
    }
}
