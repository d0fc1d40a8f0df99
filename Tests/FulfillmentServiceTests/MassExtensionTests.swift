import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import SuiteTestSupport
import Testing

/// A mass renewal extension through the whole suite: support asks (audited), the simulated App Store carries it out
/// afterwards, and fulfillment, taking Apple's notifications in (here by reconciliation from Notification History, as a
/// missed webhook would be), moves each active subscriber's end once and records Apple's summary.
@Suite struct MassExtensionTests {
    static let day: Int64 = 86_400_000

    @Test func supportExtendsEveryActiveSubscriberOnceAndRecordsApplesSummary() async throws {
        try await SuiteFixture.with { suite in
            var sessions: [String: String] = [:]
            var purchases: [String: SimPurchase.Result] = [:]
            for name in ["hal", "ida", "jon"] {
                let account = try await suite.register(name)
                let sub = try await suite.buy("\(name)@icloud", "sub.premium", appAccountToken: account.appAccountToken)
                _ = try await suite.redeem(account.session, signed: [sub.signedTransaction])
                sessions[name] = account.session
                purchases[name] = sub
            }
            // jon's subscription is refunded: not active, so not extended.
            _ = try await suite.simulator.call(SimRefund.self, .init(appleId: "jon@icloud", transactionId: purchases["jon"]!.transactionId))
            _ = try await suite.service.support.reconcile(notificationHistory: true, subscriptionStatuses: false)
            #expect(try await suite.entitlements(sessions["jon"]!).isEmpty)
            var before: [String: Int64] = [:]
            for name in ["hal", "ida"] { before[name] = try #require(try await suite.entitlements(sessions[name]!).first?.expiresAtMs) }

            let started = try await suite.fulfillment.call(
                FulfillmentExtendAllSubscriptions.self,
                .init(adminToken: SuiteFixture.adminToken, productId: "sub.premium", days: 7, reasonCode: 3, reason: "outage on 2026-11-26"))
            #expect(started.environment == .production)
            _ = try await suite.simulator.call(SimDeliverNotifications.self, EmptyParams())  // Apple carries it out
            for _ in 0..<2 {  // taken in twice: applied once
                _ = try await suite.service.support.reconcile(notificationHistory: true, subscriptionStatuses: false)
                for name in ["hal", "ida"] {
                    #expect(try await suite.entitlements(sessions[name]!).first?.expiresAtMs == before[name]! + 7 * Self.day, "\(name)")
                }
                #expect(try await suite.entitlements(sessions["jon"]!).isEmpty)
            }
            let status = try await suite.fulfillment.call(
                FulfillmentMassExtensionStatus.self,
                .init(adminToken: SuiteFixture.adminToken, productId: "sub.premium", requestIdentifier: started.requestIdentifier))
            #expect(status.atApple.complete && status.atApple.succeededCount == 2 && status.atApple.failedCount == 0, "\(status.atApple)")
            let summary = try #require(status.summary, "Apple's RENEWAL_EXTENSION / SUMMARY was recorded")
            #expect(
                summary.succeededCount == 2 && summary.failedCount == 0 && summary.productId == "sub.premium" && summary.environment == "Production")
            let audit = try await suite.fulfillment.call(FulfillmentListAudit.self, .init(adminToken: SuiteFixture.adminToken))
            let asked = audit.entries.filter { $0.action == "extendAllSubscriptions" }
            #expect(asked.count == 1 && asked[0].transactionId == started.requestIdentifier && asked[0].reason.contains("outage on 2026-11-26"))
            // Refusals: the admin token, Apple's limits, a request Apple does not know.
            let wrong = await rpcError {
                try await suite.fulfillment.call(
                    FulfillmentExtendAllSubscriptions.self, .init(adminToken: "wrong", productId: "sub.premium", days: 7, reasonCode: 3, reason: "x"))
            }
            #expect(wrong?.reason == "adminTokenRequired")
            let tooLong = await rpcError {
                try await suite.fulfillment.call(
                    FulfillmentExtendAllSubscriptions.self,
                    .init(adminToken: SuiteFixture.adminToken, productId: "sub.premium", days: 91, reasonCode: 3, reason: "x"))
            }
            #expect(tooLong?.knownCode == .invalidParams)
            let unknown = await rpcError {
                try await suite.fulfillment.call(
                    FulfillmentMassExtensionStatus.self,
                    .init(adminToken: SuiteFixture.adminToken, productId: "sub.premium", requestIdentifier: UUID().uuidString))
            }
            #expect(unknown?.knownCode == .notFound && unknown?.reason == "massExtensionNotFound")
        }
    }
}
