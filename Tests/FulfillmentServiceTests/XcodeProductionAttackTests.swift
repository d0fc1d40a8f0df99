import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import RPCTestSupport
import Receipts
import SuiteTestSupport
import Testing

/// `--allow-xcode` lets a developer's own self-signed certificate sign purchases: worth Sandbox value at most. Two
/// attacks that reached Production value through it, each run against the whole suite over TCP with `--allow-xcode`.
@Suite struct XcodeProductionAttackTests {
    static func xcodeSign(_ object: [String: Any]) throws -> String {
        let xcode = try JWSSigningPKI.xcodeStoreKitTesting()
        return try xcode.sign(payload: Array(try JSONSerialization.data(withJSONObject: object)), x5c: [xcode.leaf])
    }

    /// A self-signed notification (top-level `environment: Xcode`, so the verifier took the Xcode path) whose
    /// `data.environment` says Production and whose `data.transactionInfo` is a plain object: 10 x coins.100 for the
    /// attacker. Apple does not know the id, so fulfillment used to grant the forged snapshot: 1,000 Production coins
    /// per request.
    @Test func aForgedXcodeNotificationGrantsNothing() async throws {
        try await SuiteFixture.with(allowXcode: true) { suite in
            let mallory = try await suite.register("mallory")
            let transaction: [String: Any] = [
                "transactionId": "9000001", "originalTransactionId": "9000001", "bundleId": SuiteFixture.bundleId,
                "productId": "coins.100", "type": "Consumable", "quantity": 10, "purchaseDate": suite.clock.clock.nowMs,
                "environment": "Production", "appAccountToken": mallory.appAccountToken, "signedDate": suite.clock.clock.nowMs,
                "inAppOwnershipType": "PURCHASED",
            ]
            let notification = try Self.xcodeSign([
                "notificationType": "ONE_TIME_CHARGE", "notificationUUID": UUID().uuidString.lowercased(), "version": "2.0",
                "signedDate": suite.clock.clock.nowMs, "environment": "Xcode",
                "data": ["bundleId": SuiteFixture.bundleId, "environment": "Production", "transactionInfo": transaction] as [String: Any],
            ])
            await #expect(throws: RPCError.self) {
                _ = try await suite.fulfillment.call(
                    FulfillmentReceiveNotification.self, .init(signedPayload: notification, internalToken: SuiteFixture.internalToken))
            }
            _ = try await suite.service.notifications.processDueNotifications()
            #expect(try await suite.balance(mallory.session, .production) == 0)
            #expect(try await suite.balance(mallory.session, .sandbox) == 0)
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction") == 0)
            #expect(try await suite.count("SELECT COUNT(*) FROM notificationInbox") == 0, "a refused notification is not recorded")
        }
    }

    /// A forged notification that an older version recorded (it accepted Xcode-signed notifications and unsigned
    /// nested objects) and left pending: the inbox worker verifies it again from its signed payload, and ignores it.
    @Test func aForgedNotificationRecordedBeforeTheFixIsIgnoredWhenProcessed() async throws {
        try await SuiteFixture.with(allowXcode: true) { suite in
            let mallory = try await suite.register("mallory")
            let now = suite.clock.clock.nowMs
            let transaction: [String: Any] = [
                "transactionId": "9000002", "originalTransactionId": "9000002", "bundleId": SuiteFixture.bundleId,
                "productId": "coins.100", "type": "Consumable", "quantity": 10, "purchaseDate": now, "environment": "Production",
                "appAccountToken": mallory.appAccountToken, "signedDate": now,
            ]
            let decoded: [String: Any] = [
                "notificationType": "ONE_TIME_CHARGE", "notificationUUID": UUID().uuidString.lowercased(), "version": "2.0",
                "signedDate": now, "environment": "Xcode",
                "data": ["bundleId": SuiteFixture.bundleId, "environment": "Production", "transactionInfo": transaction] as [String: Any],
            ]
            let signed = try Self.xcodeSign(decoded)
            let recorded = try await suite.store.recordNotification(
                InboxEntry(
                    notificationUUID: decoded["notificationUUID"] as! String, notificationType: "ONE_TIME_CHARGE", subtype: nil,
                    signedDateMs: now, signedPayload: signed, notification: Array(try JSONSerialization.data(withJSONObject: decoded)),
                    receivedAtMs: now, nextAttemptAtMs: now, originalTransactionId: "9000002"))
            #expect(recorded.isNew)
            #expect(try await suite.service.notifications.processDueNotifications() == 1)
            #expect(try await suite.balance(mallory.session, .production) == 0)
            #expect(try await suite.count("SELECT COUNT(*) FROM notificationInbox WHERE state = 'ignored'") == 1)
        }
    }

    /// A self-made Xcode JWS with a new transaction id naming the original of a Production purchase the attacker owns:
    /// the grant used to take the original's owner's scope, so 5 x coins.100 landed in Production (and a Production
    /// subscription could be extended at will). A purchase's scope is its own verified environment's; one whose
    /// scope differs from its original's is refused.
    @Test func aForgedXcodeRedeemNamingAProductionOriginalIsRefused() async throws {
        try await SuiteFixture.with(allowXcode: true) { suite in
            let mallory = try await suite.register("mallory")
            let coins = try await suite.buy("mallory@icloud", "coins.100", appAccountToken: mallory.appAccountToken)
            let sub = try await suite.buy("mallory@icloud", "sub.premium", appAccountToken: mallory.appAccountToken)
            let owned = try await suite.redeem(mallory.session, signed: [coins.signedTransaction, sub.signedTransaction])
            #expect(owned.results.map(\.outcome) == [.granted, .granted])
            let premiumEnds = try #require(try await suite.entitlements(mallory.session, .production).first?.expiresAtMs)
            let now = suite.clock.clock.nowMs

            let forgedCoins = try Self.xcodeSign([
                "transactionId": "forged-1", "originalTransactionId": coins.originalTransactionId, "bundleId": SuiteFixture.bundleId,
                "productId": "coins.100", "type": "Consumable", "quantity": 5, "purchaseDate": now, "environment": "Xcode",
                "signedDate": now, "inAppOwnershipType": "PURCHASED",
            ])
            let forgedRenewal = try Self.xcodeSign([
                "transactionId": "forged-2", "originalTransactionId": sub.originalTransactionId, "bundleId": SuiteFixture.bundleId,
                "productId": "sub.premium", "type": "Auto-Renewable Subscription", "quantity": 1, "purchaseDate": now,
                "expiresDate": now + 3_650 * 86_400_000, "environment": "Xcode", "signedDate": now, "inAppOwnershipType": "PURCHASED",
            ])
            let answer = try await suite.redeem(mallory.session, signed: [forgedCoins, forgedRenewal])
            #expect(answer.results.map(\.outcome) == [.wrongEnvironment, .wrongEnvironment], "\(answer.results)")
            #expect(answer.results.allSatisfy { !$0.finishable })
            #expect(try await suite.balance(mallory.session, .production) == 100)
            #expect(try await suite.balance(mallory.session, .sandbox) == 0)
            #expect(try await suite.entitlements(mallory.session, .production).first?.expiresAtMs == premiumEnds)
            #expect(try await suite.entitlements(mallory.session, .sandbox).isEmpty)
            #expect(try await suite.ledgerIsConsistent())
        }
    }
}
