import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import Receipts
import SuiteTestSupport
import Testing

/// A StoreKit 2 transaction signed the way Xcode's StoreKit testing signs it (its own self-signed P-256
/// certificate, alone in `x5c`), redeemed through the whole suite over TCP: granted only when verification
/// runs with `--allow-xcode`, and then only into the account's Sandbox scope, never production value.
@Suite struct XcodeSignedTransactionTests {
    static func xcodeTransaction(id: String, environment: String = "Xcode") throws -> String {
        let xcode = try JWSSigningPKI.xcodeStoreKitTesting()
        let payload: [String: Any] = [
            "transactionId": id, "originalTransactionId": id, "bundleId": SuiteFixture.bundleId, "productId": "coins.100",
            "type": "Consumable", "purchaseDate": 1_772_366_400_000, "originalPurchaseDate": 1_772_366_400_000, "quantity": 1,
            "inAppOwnershipType": "PURCHASED", "environment": environment, "signedDate": 1_772_366_401_000,
        ]
        return try xcode.sign(payload: Array(try JSONSerialization.data(withJSONObject: payload)), x5c: [xcode.leaf])
    }

    @Test func grantedIntoSandboxWithAllowXcode() async throws {
        try await SuiteFixture.with(allowXcode: true) { suite in
            let dev = try await suite.register("dev")
            let redeemed = try await suite.redeem(dev.session, signed: [try Self.xcodeTransaction(id: "0")])
            #expect(redeemed.results.map(\.outcome) == [.granted])
            #expect(try await suite.balance(dev.session, .sandbox) == 100)
            #expect(try await suite.balance(dev.session, .production) == 0)
            // The same self-signed certificate claiming a production purchase is refused.
            let forged = try await suite.redeem(dev.session, signed: [try Self.xcodeTransaction(id: "1", environment: "Production")])
            #expect(forged.results.map(\.outcome) == [.rejected])
            #expect(try await suite.balance(dev.session, .production) == 0)
        }
    }

    /// Xcode writes dates with fractions of a millisecond; they are read as Apple's libraries read them (floored).
    @Test func fractionalMillisecondDatesAreGrantedIntoSandboxWithAllowXcodeOnly() async throws {
        let xcode = try JWSSigningPKI.xcodeStoreKitTesting()
        let jws = try xcode.sign(
            payload: Array(
                #"{"transactionId":"7","originalTransactionId":"7","bundleId":"\#(SuiteFixture.bundleId)","productId":"pass.season","type":"Non-Renewing Subscription","purchaseDate":1697679936049.7297,"originalPurchaseDate":1697679936049.7297,"quantity":1,"inAppOwnershipType":"PURCHASED","environment":"Xcode","signedDate":1697679936052.951}"#
                    .utf8), x5c: [xcode.leaf])
        for allowXcode in [true, false] {
            try await SuiteFixture.with(allowXcode: allowXcode) { suite in
                let dev = try await suite.register("dev")
                let redeemed = try await suite.redeem(dev.session, signed: [jws])
                #expect(redeemed.results.map(\.outcome) == [allowXcode ? .granted : .rejected], "allowXcode \(allowXcode)")
                #expect(try await suite.entitlements(dev.session, .sandbox).map(\.entitlement) == (allowXcode ? ["season-pass"] : []))
                #expect(try await suite.entitlements(dev.session, .production).isEmpty)
            }
        }
    }

    @Test func refusedWithoutAllowXcode() async throws {
        try await SuiteFixture.with { suite in
            let dev = try await suite.register("dev")
            let redeemed = try await suite.redeem(dev.session, signed: [try Self.xcodeTransaction(id: "0")])
            #expect(redeemed.results.map(\.outcome) == [.rejected])
            #expect(try await suite.balance(dev.session, .sandbox) == 0)
        }
    }
}
