import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import SuiteTestSupport
import Testing

/// Redeem and restore by transaction id spend the developer's App Store Server API key on the caller's word. Two
/// attacks by an ordinary account: reading other customers' purchases (ids and products came back in `rejected`
/// results, a whole history from `restore`), and burning Apple's rate limit (100 ids a call, each retried on 429)
/// so that notifications and reconciliation starve. The simulator counts the calls Apple would have received.
@Suite struct AppleCallBudgetTests {
    static func redeem(_ suite: SuiteFixture, _ session: String, ids: [String]) async throws -> RedeemResult {
        try await suite.fulfillment.call(FulfillmentRedeem.self, .init(session: session, transactionIds: ids))
    }

    @Test func otherCustomersPurchasesStayUnreadAndEachAccountHasABudgetOfCallsToApple() async throws {
        try await SuiteFixture.with { suite in
            let victim = try await suite.register("victim")
            var ids: [String] = []
            for _ in 0..<3 {
                ids.append(try await suite.buy("victim@icloud", "pack.castle", appAccountToken: victim.appAccountToken).transactionId)
            }
            let mallory = try await suite.register("mallory")

            // A whole history by someone else's id: nothing of it comes back. Each costs five of the twenty calls.
            var hits = suite.simAPI.requestCount
            var restores = 0
            var spent: RPCError?
            while spent == nil, restores < 10 {
                spent = await rpcError {
                    let restored = try await suite.fulfillment.call(
                        FulfillmentRestore.self, .init(session: mallory.session, transactionId: ids[0]))
                    #expect(restored.results.isEmpty, "\(restored.results)")
                }
                if spent == nil { restores += 1 }
            }
            #expect(restores == 4, "twenty calls, five each")
            #expect(suite.simAPI.requestCount > hits)

            // Spent: the next call is refused before Apple is asked, with when to come back.
            hits = suite.simAPI.requestCount
            spent = await rpcError { _ = try await Self.redeem(suite, mallory.session, ids: ids) }
            #expect(spent?.knownCode == .rateLimited && (spent?.data.extra["retryAfterMs"]?.intValue ?? 0) > 0, "\(String(describing: spent))")
            #expect(suite.simAPI.requestCount == hits, "a refused call asks Apple nothing")

            // A minute later: refilled. Ids of other customers' purchases are rejected with nothing of Apple's.
            suite.clock.advance(ms: 60_000)
            let rejected = try await Self.redeem(suite, mallory.session, ids: ids)
            #expect(rejected.results.map(\.outcome) == [.rejected, .rejected, .rejected])
            #expect(rejected.results.allSatisfy { $0.productId.isEmpty && $0.originalTransactionId.isEmpty && !$0.finishable })
            #expect(Set(rejected.results.map(\.transactionId)) == Set(ids), "only the ids the caller sent")
            #expect(suite.simAPI.requestCount - hits <= ids.count * 2, "one question to Apple per id (production, then sandbox)")

            // More ids than the budget in one call: refused outright.
            let tooMany = await rpcError {
                _ = try await Self.redeem(suite, mallory.session, ids: (0..<21).map { String(3_000_000_000 + $0) })
            }
            #expect(tooMany?.knownCode == .invalidParams && tooMany?.reason == "tooMany")
            #expect(try await suite.entitlements(mallory.session).isEmpty)
            // The victim's own budget is untouched by mallory's.
            #expect(try await Self.redeem(suite, victim.session, ids: ids).results.map(\.outcome) == [.granted, .restored, .restored])
        }
    }
}
