import Foundation
import IAPProtocol
import JSONRPC
import Testing
import VerificationService

/// Runs the built `iap` executable (SwiftPM builds it with the tests) as a person would.
@Suite struct ReceiptInspectTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let fixtures = root.appendingPathComponent("Tests/ReceiptsTests/Fixtures")

    static func iap(_ args: [String]) throws -> (status: Int32, output: String) {
        let binDir = ProcessInfo.processInfo.environment["IAP_BIN_DIR"].map { URL(fileURLWithPath: $0) }
            ?? URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let process = Process()
        process.executableURL = binDir.appendingPathComponent("iap")
        process.arguments = args
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, output)
    }

    @Test func inspectPrintsWhatTheServiceWouldAnswer() async throws {
        let file = Self.fixtures.appendingPathComponent("xcode-subscription.receipt")
        let (status, output) = try Self.iap(["receipt", "inspect", file.path, "--allow-xcode", "--json"])
        #expect(status == 0)
        var config = VerificationConfiguration()
        config.allowXcode = true
        let expected = try await VerificationService(configuration: config).verifyReceipt(
            .init(receiptData: try Data(contentsOf: file).base64EncodedString()))
        let printed = try JSONDecoder().decode(VerifyReceiptResponse.self, from: Data(output.utf8))
        #expect(printed == expected)
        #expect(printed.receipt?.inApp.first?.productId == "com.rd.eehelper.pro_subscription")
    }

    @Test func inspectSummarizesAndRefusesWithExitCodeOne() throws {
        let file = Self.fixtures.appendingPathComponent("xcode-with-transaction.receipt").path
        let valid = try Self.iap(["receipt", "inspect", file, "--allow-xcode"])
        #expect(valid.status == 0)
        #expect(valid.output.hasPrefix("VALID    environment Xcode"))
        #expect(valid.output.contains("pass.premium"))
        let refused = try Self.iap(["receipt", "inspect", file])
        #expect(refused.status == 1)
        #expect(refused.output.contains("REFUSED  status 21003 (xcodeNotAllowed)"))
        let missing = try Self.iap(["receipt", "inspect", "/nonexistent/receipt"])
        #expect(missing.status == 64)
    }
}
