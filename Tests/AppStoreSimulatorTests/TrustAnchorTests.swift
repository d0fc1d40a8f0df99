import AppStoreSimulator
import Foundation
import IAPProtocol
import Testing
import VerificationService

/// `--trust-anchor-dir` on a simulator's own data directory (how compose/up.sh and compose.yaml point
/// verification at the simulator): its two roots, and nothing else, become trusted.
@Suite struct TrustAnchorTests {
    @Test func aSimulatorsPKIDirectoryYieldsItsTwoRoots() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("anchors-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let simulator = try AppStoreSimulator(directory: dir)
        let pki = dir.appendingPathComponent("sim-pki").path
        let files = TrustAnchors.rootFiles(in: pki)
        #expect(files.map { URL(fileURLWithPath: $0).lastPathComponent } == ["jws-root.der", "receipt-root.der"])  // not keys, not leaves

        let bought = try simulator.purchase(
            .init(
                appleId: "a@x", bundleId: "com.example.game", productId: "coins.100",
                productType: .consumable))
        var trusting = VerificationConfiguration()
        trusting.bundleIds = ["com.example.game"]
        trusting.extraRoots = try TrustAnchors.load(files)
        let verdict = try await VerificationService(configuration: trusting).verifyReceipt(.init(receiptData: bought.receiptData))
        #expect(verdict.status == 0)
        let jws = try await VerificationService(configuration: trusting).verifyTransaction(.init(signedTransaction: bought.signedTransaction))
        #expect(jws.status == 0)
        let appleOnly = try await VerificationService(configuration: .init()).verifyReceipt(.init(receiptData: bought.receiptData))
        #expect(appleOnly.status == 21003)

        #expect(TrustAnchors.rootFiles(in: dir.appendingPathComponent("missing").path).isEmpty)
        let key = pki + "/receipt-leaf.key"
        #expect(throws: TrustAnchors.Unreadable.self) { try TrustAnchors.load([key]) }
    }
}
