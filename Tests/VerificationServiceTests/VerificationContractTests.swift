import Foundation
import IAPProtocol
import JSONRPC
import Logging
import RPCTestSupport
import RPCTransport
import Receipts
import Testing
import VerificationService

/// A verification service trusting Apple's roots plus a test PKI minted for this run, with Xcode
/// receipts allowed; and the receipts and signed payloads the contract files use as `${...}`.
enum VerificationFixture {
    static let receiptPKI = try! ReceiptSigningPKI.generate()
    static let jwsPKI = try! JWSSigningPKI.generate()
    static let forgedJWS = try! JWSSigningPKI.generate(name: "Forged")
    static let forgedReceipts = try! ReceiptSigningPKI.generate(
        {
            var o = ReceiptSigningPKI.Options(); o.name = "Forged"; return o
        }())

    static func start(allowXcode: Bool = true) async throws -> ContractTarget {
        var config = VerificationConfiguration()
        config.bundleIds = ["com.example.game", "com.example.naturelab.backyardbirds.example"]
        config.extraRoots = [receiptPKI.root, jwsPKI.root]
        config.allowXcode = allowXcode
        // The App Store Server API methods' gate; the API itself is not configured here (RedeemByTransactionIdTests use it).
        config.internalToken = "internal-token-for-contracts-0123456789abcdef"
        var logger = Logger(label: "verification-test")
        logger.logLevel = .critical
        let server = RPCServer(
            configuration: .init(serviceName: "verification"),
            router: VerificationService(configuration: config).router(), logger: logger)
        try await server.start()
        return ContractTarget(port: server.localPort!, stop: { await server.shutdown() })
    }

    static func receipt(purchases: Int) -> Receipt {
        var r = Receipt()
        r.receiptType = "ProductionSandbox"
        r.appItemId = 0
        r.bundleId = "com.example.game"
        r.applicationVersion = "3"
        r.opaqueValue = Array(0..<16)
        r.sha1Hash = Array(repeating: 7, count: 20)
        r.creationDateMs = 1_772_366_400_000  // 2026-03-01T12:00:00Z
        r.inApp = (0..<purchases).map { i in
            var p = InAppPurchaseReceipt()
            p.quantity = 1
            p.productId = "coins.100"
            p.transactionId = "\(2_000_000_100 + i)"
            p.originalTransactionId = "\(2_000_000_100 + i)"
            p.purchaseDateMs = 1_772_366_000_000 + Int64(i) * 1000
            p.originalPurchaseDateMs = p.purchaseDateMs
            p.productType = 1
            return p
        }
        return r
    }

    static func variables() throws -> [String: JSONValue] {
        let minted = try receiptPKI.sign(receipt(purchases: 1))
        var tampered = minted
        let needle = Array("coins.100".utf8)
        let at = (0...(tampered.count - needle.count)).first { Array(tampered[$0..<($0 + needle.count)]) == needle }!
        tampered[at + 6] = UInt8(ascii: "9")
        let xcode = try Data(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("ReceiptsTests/Fixtures/xcode-with-transaction.receipt"))
        let transaction = Array(
            #"{"transactionId":"2000000123","originalTransactionId":"2000000100","bundleId":"com.example.game","productId":"coins.100","type":"Consumable","purchaseDate":1772366400000,"quantity":1,"environment":"Sandbox","storefront":"USA","signedDate":1772366401000}"#
                .utf8)
        let signedTransaction = try jwsPKI.sign(payload: transaction)
        let notification = try JSONSerialization.data(
            withJSONObject: [
                "notificationType": "REFUND", "notificationUUID": "6b2bd1a4-4b0c-4d37-9c8b-1c3e5a9a2f10", "version": "2.0",
                "signedDate": 1_772_366_500_000,
                "data": ["bundleId": "com.example.game", "environment": "Sandbox", "signedTransactionInfo": signedTransaction],
            ] as [String: Any], options: [.sortedKeys])
        let appTransaction = Array(
            #"{"appAppleId":1234567890,"appTransactionId":"700000000001","applicationVersion":"3","bundleId":"com.example.game","originalApplicationVersion":"1","originalPlatform":"iOS","originalPurchaseDate":1772366000000,"receiptCreationDate":1772366400000,"receiptType":"Production"}"#
                .utf8)
        return [
            "signedAppTransaction": .string(try jwsPKI.sign(payload: appTransaction)),
            "forgedAppTransaction": .string(try forgedJWS.sign(payload: appTransaction)),
            "stagingAppTransaction": .string(
                try jwsPKI.sign(
                    payload: Array(
                        #"{"appTransactionId":"700000000001","bundleId":"com.example.game","receiptCreationDate":1772366400000,"receiptType":"Staging"}"#
                            .utf8))),
            "bothAppTransaction": .string(
                try jwsPKI.sign(
                    payload: Array(
                        #"{"appTransactionId":"700000000001","bundleId":"com.example.game","environment":"Sandbox","receiptCreationDate":1772366400000,"receiptType":"Production"}"#
                            .utf8))),
            "mintedReceipt": .string(Data(minted).base64EncodedString()),
            "sha1Receipt": .string(Data(try receiptPKI.sign(receipt(purchases: 2), digest: .sha1)).base64EncodedString()),
            "tamperedReceipt": .string(Data(tampered).base64EncodedString()),
            "forgedReceipt": .string(Data(try forgedReceipts.sign(receipt(purchases: 1))).base64EncodedString()),
            "truncatedReceipt": .string(Data(minted.prefix(minted.count / 2)).base64EncodedString()),
            "xcodeReceipt": .string(xcode.base64EncodedString()),
            "signedTransaction": .string(signedTransaction),
            "noneTransaction": .string(try jwsPKI.sign(payload: transaction, alg: "none")),
            "forgedTransaction": .string(try forgedJWS.sign(payload: transaction)),
            "signedNotification": .string(try jwsPKI.sign(payload: Array(notification))),
            "forgedNotification": .string(try forgedJWS.sign(payload: Array(notification))),
            "internalToken": "internal-token-for-contracts-0123456789abcdef",
        ]
    }
}

@Suite struct VerificationContractTests {
    @Test func everyVerificationMethodKeepsItsContract() async throws {
        let failures = try await ContractHarness.run(
            service: "verification", declared: ContractMethods.verification,
            variables: try VerificationFixture.variables()
        ) {
            try await VerificationFixture.start()
        }
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
    }

    @Test func xcodeReceiptsAreRefusedUnlessAllowed() async throws {
        let target = try await VerificationFixture.start(allowXcode: false)
        defer { Task { await target.stop() } }
        let client = RPCClient(host: "127.0.0.1", port: target.port, configuration: .patient)
        let xcode = try VerificationFixture.variables()["xcodeReceipt"]!.stringValue!
        let answer = try await client.call(VerificationVerifyReceipt.self, .init(receiptData: xcode))
        #expect(answer.status == 21003)
        #expect(answer.reason == "xcodeNotAllowed")
        #expect(answer.receipt == nil)
        await client.close()
    }
}

@Suite struct SignedPayloadRootTests {
    @Test func signedPayloadsAnchorOnlyAtG3ByDefault() async throws {
        // A JWS chained to Apple's RSA root (or G2) is not accepted: StoreKit 2 chains end at G3.
        let config = VerificationConfiguration()
        #expect(config.signedPayloadRoots.count == 1)
        #expect(config.signedPayloadRoots.first == ShippedTrust.certificate(ShippedTrust.appleRootCAG3DER))
        #expect(config.receiptRoots.count == 3)
        let service = VerificationService(configuration: config)
        let jws = try VerificationFixture.jwsPKI.sign(payload: Array(#"{"signedDate":1772366401000}"#.utf8))
        let answer = try await service.verifyTransaction(.init(signedTransaction: jws))
        #expect(answer.status == 21003)
        #expect(answer.reason == "untrustedChain")
    }
}
