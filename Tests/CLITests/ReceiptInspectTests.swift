import Foundation
import IAPProtocol
import JSONRPC
import Testing
import VerificationService

/// Runs the built `iap` executable (SwiftPM builds it with the tests) as a person would.
@Suite struct ReceiptInspectTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let fixtures = root.appendingPathComponent("Tests/ReceiptsTests/Fixtures")

    static func iap(_ args: [String]) async throws -> (status: Int32, output: String) {
        let run = try await CLIStackTests.iap(args, env: [:])
        return (run.status, run.stdout + run.stderr)
    }

    @Test func inspectPrintsWhatTheServiceWouldAnswer() async throws {
        let file = Self.fixtures.appendingPathComponent("xcode-subscription.receipt")
        let (status, output) = try await Self.iap(["receipt", "inspect", file.path, "--allow-xcode", "--json"])
        #expect(status == 0)
        var config = VerificationConfiguration()
        config.acceptAnyBundleId = true
        config.allowXcode = true
        let expected = try await VerificationService(configuration: config).verifyReceipt(
            .init(receiptData: try Data(contentsOf: file).base64EncodedString()))
        let printed = try JSONDecoder().decode(VerifyReceiptResponse.self, from: Data(output.utf8))
        #expect(printed == expected)
        #expect(printed.receipt?.inApp.first?.productId == "com.rd.eehelper.pro_subscription")
    }

    @Test func inspectSummarizesAndRefusesWithExitCodeOne() async throws {
        let file = Self.fixtures.appendingPathComponent("xcode-with-transaction.receipt").path
        let valid = try await Self.iap(["receipt", "inspect", file, "--allow-xcode"])
        #expect(valid.status == 0)
        #expect(valid.output.hasPrefix("VALID    environment Xcode"))
        #expect(valid.output.contains("pass.premium"))
        let refused = try await Self.iap(["receipt", "inspect", file])
        #expect(refused.status == 1)
        #expect(refused.output.contains("REFUSED  status 21003 (xcodeNotAllowed)"))
        let missing = try await Self.iap(["receipt", "inspect", "/nonexistent/receipt"])
        #expect(missing.status == 64)
    }
}
