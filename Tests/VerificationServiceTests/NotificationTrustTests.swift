import Foundation
import IAPProtocol
import JSONRPC
import Receipts
import Testing

@testable import VerificationService

/// What a notification may carry into fulfillment: only what a chain to a configured root signed. An Xcode
/// self-signed notification is refused even with `--allow-xcode` (Xcode's StoreKit testing sends none to servers),
/// a nested object that arrives unsigned is dropped before anything reads it, and the nested transaction's
/// environment must be the notification's. Each test is written as the attack.
@Suite struct NotificationTrustTests {
    static let ours = BundleAndEnvironmentTests.ours

    static func service(allowXcode: Bool) -> VerificationService {
        BundleAndEnvironmentTests.service {
            $0.bundleIds = [ours]
            $0.allowXcode = allowXcode
        }
    }

    /// A plain (unsigned) transaction object for 10 x coins.100, as an attacker would write it.
    static var forgedTransaction: [String: Any] {
        [
            "transactionId": "9000001", "originalTransactionId": "9000001", "bundleId": ours, "productId": "coins.100",
            "type": "Consumable", "quantity": 10, "purchaseDate": 1_772_366_400_000, "environment": "Production",
            "appAccountToken": "3f0c8a52-7a43-4d0c-9a4e-6b0d3c1f2e11", "signedDate": 1_772_366_401_000,
        ]
    }

    static func xcodeNotification() throws -> String {
        let xcode = try JWSSigningPKI.xcodeStoreKitTesting()
        let root: [String: Any] = [
            "notificationType": "ONE_TIME_CHARGE", "notificationUUID": UUID().uuidString.lowercased(), "version": "2.0",
            "signedDate": 1_772_366_500_000, "environment": "Xcode",
            "data": ["bundleId": ours, "environment": "Production", "transactionInfo": forgedTransaction] as [String: Any],
        ]
        return try xcode.sign(payload: Array(try JSONSerialization.data(withJSONObject: root)), x5c: [xcode.leaf])
    }

    @Test func anXcodeSignedNotificationIsRefusedEvenWithAllowXcode() async throws {
        let payload = try Self.xcodeNotification()
        for allowXcode in [true, false] {
            let service = Self.service(allowXcode: allowXcode)
            let answer = try await service.verifyNotification(.init(signedPayload: payload))
            #expect(answer.status != 0 && answer.notification == nil, "allowXcode \(allowXcode): \(answer)")
            #expect(answer.reason == "invalidChain", "Xcode's one self-signed certificate is no chain here")
            #expect(service.verifyNotificationFromMemory(.init(signedPayload: payload)) == answer)
        }
    }

    @Test func unsignedNestedObjectsAreDroppedBeforeAnythingReadsThem() async throws {
        let service = Self.service(allowXcode: false)
        let payload = try BundleAndEnvironmentTests.notification([
            "bundleId": Self.ours, "environment": "Production", "transactionInfo": Self.forgedTransaction,
            "renewalInfo": ["originalTransactionId": "9000001", "autoRenewStatus": 1, "signedDate": 1_772_366_401_000] as [String: Any],
        ])
        let answer = try await service.verifyNotification(.init(signedPayload: payload))
        #expect(answer.status == 0)
        #expect(answer.notification?["data"]?["transactionInfo"] == nil, "an unsigned transactionInfo must not reach fulfillment")
        #expect(answer.notification?["data"]?["renewalInfo"] == nil, "an unsigned renewalInfo must not reach fulfillment")
        #expect(service.verifyNotificationFromMemory(.init(signedPayload: payload)) == answer)
        // Signed ones are decoded in their place.
        let signed = try BundleAndEnvironmentTests.notification([
            "bundleId": Self.ours, "environment": "Production", "transactionInfo": Self.forgedTransaction,
            "signedTransactionInfo": try BundleAndEnvironmentTests.transaction(id: "2000000777"),
        ])
        let decoded = try await service.verifyNotification(.init(signedPayload: signed))
        #expect(decoded.notification?["data"]?["transactionInfo"]?["transactionId"]?.stringValue == "2000000777")
    }

    @Test func aNestedTransactionMustNameTheNotificationsEnvironment() async throws {
        let service = Self.service(allowXcode: true)
        let unnamed = try VerificationFixture.jwsPKI.sign(
            payload: Array(
                #"{"transactionId":"5","originalTransactionId":"5","bundleId":"\#(Self.ours)","productId":"coins.100","purchaseDate":1772366400000,"signedDate":1772366401000}"#
                    .utf8))
        let payload = try BundleAndEnvironmentTests.notification([
            "bundleId": Self.ours, "environment": "Production", "signedTransactionInfo": unnamed,
        ])
        #expect(try await service.verifyNotification(.init(signedPayload: payload)).reason == "signedTransactionInfo: environmentMismatch")
        // An Xcode-signed transaction inside a notification signed by a trusted chain is refused too.
        let xcode = try JWSSigningPKI.xcodeStoreKitTesting()
        let xcodeTransaction = try xcode.sign(
            payload: Array(
                #"{"transactionId":"6","originalTransactionId":"6","bundleId":"\#(Self.ours)","productId":"coins.100","purchaseDate":1772366400000,"environment":"Xcode","signedDate":1772366401000}"#
                    .utf8), x5c: [xcode.leaf])
        let smuggled = try BundleAndEnvironmentTests.notification([
            "bundleId": Self.ours, "environment": "Xcode", "signedTransactionInfo": xcodeTransaction,
        ])
        #expect(try await service.verifyNotification(.init(signedPayload: smuggled)).reason == "signedTransactionInfo: invalidChain")
    }

    /// Xcode writes dates with fractions of a millisecond (`"purchaseDate": 1697679936049.7297`); Apple's libraries
    /// read them, and so does verification: floored to whole milliseconds, under `--allow-xcode` only.
    @Test func xcodeDatesWithFractionsOfAMillisecondVerify() async throws {
        let xcode = try JWSSigningPKI.xcodeStoreKitTesting()
        let transaction = try xcode.sign(
            payload: Array(
                #"{"transactionId":"0","originalTransactionId":"0","bundleId":"\#(Self.ours)","productId":"coins.100","type":"Consumable","purchaseDate":1697679936049.7297,"originalPurchaseDate":1697679936049.7297,"quantity":1,"environment":"Xcode","signedDate":1697679936052.951}"#
                    .utf8), x5c: [xcode.leaf])
        let allowed = try await Self.service(allowXcode: true).verifyTransaction(.init(signedTransaction: transaction))
        #expect(allowed.status == 0 && allowed.environment == "Xcode", "\(allowed)")
        #expect(allowed.transaction?["purchaseDate"]?.millisecondsValue == 1_697_679_936_049)
        let refused = try await Self.service(allowXcode: false).verifyTransaction(.init(signedTransaction: transaction))
        #expect(refused.status != 0 && refused.transaction == nil)

        // Renewal info as Xcode signs it, checked by the verifier itself (renewal info reaches the suite inside
        // notifications, which Xcode never sends).
        let renewal = try xcode.sign(
            payload: Array(
                #"{"originalTransactionId":"0","autoRenewProductId":"sub.premium","productId":"sub.premium","autoRenewStatus":1,"environment":"Xcode","signedDate":1697679936052.951,"recentSubscriptionStartDate":1697679936049.7297,"renewalDate":1700358336049.7297}"#
                    .utf8), x5c: [xcode.leaf])
        let verifier = SignedPayloadVerifier(roots: [], allowXcode: true)
        guard case .success(let info) = await verifier.verifiedObject(renewal) else {
            Issue.record("Xcode renewal info with fractional dates refused")
            return
        }
        #expect(info["renewalDate"]?.millisecondsValue == 1_700_358_336_049)
        guard case .failure = await SignedPayloadVerifier(roots: []).verifiedObject(renewal) else {
            Issue.record("accepted without allowXcode")
            return
        }
    }
}
