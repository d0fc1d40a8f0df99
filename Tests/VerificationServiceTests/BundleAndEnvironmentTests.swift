import AppStoreServerAPI
import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import Receipts
import Testing

@testable import VerificationService

/// Trust boundaries in verification (docs/security.md): only the configured apps' purchases, receipt
/// types mapped to environments without defaults, notifications checked down to their nested payloads,
/// and an executable that will not start without knowing its app.
@Suite struct BundleAndEnvironmentTests {
    static let ours = "com.example.game"
    static let theirs = "com.attacker.freecoins"

    static func service(_ configure: (inout VerificationConfiguration) -> Void = { $0.bundleIds = [ours] }) -> VerificationService {
        var config = VerificationConfiguration()
        config.extraRoots = [VerificationFixture.receiptPKI.root, VerificationFixture.jwsPKI.root]
        configure(&config)
        return VerificationService(configuration: config)
    }

    static func transaction(bundle: String = ours, environment: String = "Production", id: String = "2000000123") throws -> String {
        try VerificationFixture.jwsPKI.sign(
            payload: Array(
                #"{"transactionId":"\#(id)","originalTransactionId":"\#(id)","bundleId":"\#(bundle)","productId":"coins.100","type":"Consumable","purchaseDate":1772366400000,"quantity":1,"environment":"\#(environment)","signedDate":1772366401000}"#
                    .utf8))
    }

    static func notification(_ data: [String: Any]?, section: String = "data") throws -> String {
        var root: [String: Any] = [
            "notificationType": "REFUND", "notificationUUID": UUID().uuidString.lowercased(), "version": "2.0",
            "signedDate": 1_772_366_500_000,
        ]
        if let data { root[section] = data }
        return try VerificationFixture.jwsPKI.sign(payload: Array(try JSONSerialization.data(withJSONObject: root, options: [.sortedKeys])))
    }

    static func receipt(type: String?, bundle: String = ours) throws -> String {
        var r = VerificationFixture.receipt(purchases: 1)
        r.receiptType = type
        r.bundleId = bundle
        r.bundleIdDER = [0x0C, UInt8(bundle.utf8.count)] + Array(bundle.utf8)
        return Data(try VerificationFixture.receiptPKI.sign(r)).base64EncodedString()
    }

    @Test func anotherAppsTransactionIsRefusedAndACallerCannotWidenTheBundleSet() async throws {
        let service = Self.service()
        let foreign = try Self.transaction(bundle: Self.theirs)
        #expect(try await service.verifyTransaction(.init(signedTransaction: foreign)).reason == "bundleMismatch")
        #expect(try await service.verifyTransaction(.init(signedTransaction: foreign, expectedBundleId: Self.theirs)).reason == "bundleMismatch")
        #expect(try await service.verifyTransaction(.init(signedTransaction: try Self.transaction())).status == 0)
        let foreignReceipt = try Self.receipt(type: "Production", bundle: Self.theirs)
        #expect(try await service.verifyReceipt(.init(receiptData: foreignReceipt)).reason == "bundleMismatch")
        #expect(try await service.verifyReceipt(.init(receiptData: foreignReceipt, expectedBundleId: Self.theirs)).reason == "bundleMismatch")
    }

    @Test func withoutABundleIdNothingIsAcceptedUnlessAnyIsAskedFor() async throws {
        let unconfigured = Self.service { _ in }
        #expect(try await unconfigured.verifyTransaction(.init(signedTransaction: try Self.transaction())).reason == "bundleMismatch")
        #expect(try await unconfigured.verifyReceipt(.init(receiptData: try Self.receipt(type: "Production"))).reason == "bundleMismatch")
        let any = Self.service { $0.acceptAnyBundleId = true }
        #expect(try await any.verifyTransaction(.init(signedTransaction: try Self.transaction(bundle: Self.theirs))).status == 0)
    }

    @Test func receiptTypesMapToEnvironmentsAndUnknownOnesAreRefused() async throws {
        let service = Self.service()
        for (type, environment) in [
            ("Production", "Production"), ("ProductionVPP", "Production"), ("ProductionSandbox", "Sandbox"),
            ("ProductionVPPSandbox", "Sandbox"),
        ] {
            let answer = try await service.verifyReceipt(.init(receiptData: try Self.receipt(type: type)))
            #expect(answer.status == 0 && answer.environment == environment, "\(type)")
        }
        for type in ["Staging", "production", nil] as [String?] {
            let answer = try await service.verifyReceipt(.init(receiptData: try Self.receipt(type: type)))
            #expect(answer.status == 21002 && answer.reason == "unknownEnvironment", "\(type ?? "none")")
        }
        #expect(
            try await service.verifyTransaction(.init(signedTransaction: try Self.transaction(environment: "Staging"))).reason
                == "unknownEnvironment")
    }

    @Test func notificationsAreCheckedDownToTheirNestedPayloads() async throws {
        let service = Self.service()
        let ok = try Self.notification(["bundleId": Self.ours, "environment": "Production", "signedTransactionInfo": try Self.transaction()])
        #expect(try await service.verifyNotification(.init(signedPayload: ok)).status == 0)
        // About another app.
        let foreign = try Self.notification([
            "bundleId": Self.theirs, "environment": "Production",
            "signedTransactionInfo": try Self.transaction(bundle: Self.theirs),
        ])
        #expect(try await service.verifyNotification(.init(signedPayload: foreign)).reason == "bundleMismatch")
        // Ours on the outside, another app's transaction inside.
        let smuggled = try Self.notification([
            "bundleId": Self.ours, "environment": "Production",
            "signedTransactionInfo": try Self.transaction(bundle: Self.theirs),
        ])
        #expect(try await service.verifyNotification(.init(signedPayload: smuggled)).reason == "signedTransactionInfo: bundleMismatch")
        // A Sandbox transaction inside a notification that says Production.
        let relabelled = try Self.notification([
            "bundleId": Self.ours, "environment": "Production",
            "signedTransactionInfo": try Self.transaction(environment: "Sandbox"),
        ])
        #expect(try await service.verifyNotification(.init(signedPayload: relabelled)).reason == "signedTransactionInfo: environmentMismatch")
        // Renewal info about another app.
        let renewal = try VerificationFixture.jwsPKI.sign(
            payload: Array(#"{"bundleId":"\#(Self.theirs)","environment":"Production","productId":"sub","signedDate":1772366401000}"#.utf8))
        let foreignRenewal = try Self.notification(["bundleId": Self.ours, "environment": "Production", "signedRenewalInfo": renewal])
        let renewalAnswer = try await service.verifyNotification(.init(signedPayload: foreignRenewal))
        #expect(renewalAnswer.reason == "signedRenewalInfo: bundleMismatch", "\(renewalAnswer)")
        // Naming no app at all.
        #expect(try await service.verifyNotification(.init(signedPayload: try Self.notification(nil))).reason == "bundleMismatch")
        // A summary notification (mass renewal extension) names its app in `summary`.
        let summary = try Self.notification(["bundleId": Self.ours, "environment": "Production", "requestIdentifier": "r"], section: "summary")
        #expect(try await service.verifyNotification(.init(signedPayload: summary)).status == 0)

        // The inline path (answered on the event loop once every chain is known) agrees with the full one in each
        // case; a service that has validated no chain yet has no inline answer.
        for payload in [ok, foreign, smuggled, relabelled, foreignRenewal, summary] {
            let full = try await service.verifyNotification(.init(signedPayload: payload))
            #expect(service.verifyNotificationFromMemory(.init(signedPayload: payload)) == full)
        }
        #expect(Self.service().verifyNotificationFromMemory(.init(signedPayload: ok)) == nil)
    }

    static func start(_ executable: String, _ arguments: [String], env: [String: String] = [:]) async throws -> Subprocess.Output {
        try await BuiltExecutables.run(executable, arguments, env: env)
    }

    @Test func theExecutablesRefuseToStartWithoutABundleIdOrWithShortTokens() async throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("start-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: data) }
        let noBundle = try await Self.start("verification-service", ["--port", "0", "--data-dir", data])
        #expect(noBundle.status != 0)
        #expect(noBundle.stderr.contains("--bundle-id"), "\(noBundle.stderr)")
        let missingDir = try await Self.start(
            "verification-service", ["--port", "0", "--bundle-id", Self.ours, "--trust-anchor-dir", data + "/none"])
        #expect(missingDir.status != 0)
        #expect(missingDir.stderr.contains("holds no"), "\(missingDir.stderr)")
        let shortToken = try await Self.start("fulfillment-service", ["--port", "0", "--data-dir", data], env: ["IAP_ADMIN_TOKEN": "hunter2"])
        #expect(shortToken.status != 0)
        #expect(shortToken.stderr.contains("at least 32 bytes"), "\(shortToken.stderr)")
        let emptyToken = try await Self.start("accounts-service", ["--port", "0", "--data-dir", data, "--internal-token", ""])
        #expect(emptyToken.status != 0)
        #expect(emptyToken.stderr.contains("at least 32 bytes"), "\(emptyToken.stderr)")
    }
}

/// A transaction fetched from Apple whose chain's revocation status could not be learnt (hard-fail OCSP) is no
/// verdict on the purchase: retryable `unavailable`, never an invalid purchase; a revoked chain is refused for good.
@Suite struct AppStoreAPIRevocationTests {
    @Test func revocationUnknownIsRetryableAndRevokedIsNot() {
        let unknown = VerificationService.rpcError(AppStoreAPIError.verification(.revocationUnknown), transactionId: "1")
        #expect(unknown.knownCode == .unavailable && unknown.reason == "revocationUnknown")
        let revoked = VerificationService.rpcError(AppStoreAPIError.verification(.revoked), transactionId: "1")
        #expect(revoked.knownCode == .invalidReceipt && revoked.reason == "revoked")
    }
}
