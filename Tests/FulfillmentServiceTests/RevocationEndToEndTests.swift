import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import Receipts
import SuiteTestSupport
import Testing

/// Online revocation checks through the whole suite: verification asks the simulator's OCSP responder (real HTTP)
/// about the certificates of every chain it has not checked yet; a revoked intermediate refuses what it signed.
@Suite struct RevocationEndToEndTests {
    @Test func aRevokedSimulatorIntermediateIsRefusedEndToEnd() async throws {
        var hardFail = RevocationChecker.Configuration()
        hardFail.hardFail = true  // every answer must verify, or nothing is granted
        try await SuiteFixture.with(ocsp: hardFail) { suite in
            let alice = try await suite.register("alice")
            // The receipt chain is asked about and good: granted.
            let coins = try await suite.buy("alice@icloud", "coins.100")
            #expect(try await suite.redeem(alice.session, receipt: coins.receiptData).results.map(\.outcome) == [.granted])

            // Apple revokes the intermediate that signs StoreKit 2 transactions.
            let revoked = try await suite.simulator.call(SimRevokeCertificate.self, .init(certificate: "jws-intermediate"))
            #expect(revoked.ocspURL?.hasSuffix("/ocsp") == true && !revoked.serialNumber.isEmpty)
            let pack = try await suite.buy("alice@icloud", "pack.castle")
            let refused = try await suite.redeem(alice.session, signed: [pack.signedTransaction])
            #expect(refused.results.map(\.outcome) == [.rejected] && refused.results.allSatisfy { !$0.finishable })
            #expect(refused.entitlements.isEmpty)

            #expect(try await suite.balance(alice.session) == 100)
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction") == 1)
        }
    }
}
