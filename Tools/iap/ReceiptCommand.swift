import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC
import Receipts
import VerificationService

struct ReceiptCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "receipt", abstract: "Work with app receipt files.", subcommands: [Inspect.self, Verify.self])

    struct Inspect: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Decode and verify a receipt file offline (no service needed).",
            discussion: """
                Prints what verification.verifyReceipt would answer for it: a summary by default, the exact \
                object with --json. The file may hold the receipt's bytes or their base64. Exit code 1 when the \
                receipt is refused.
                """)

        @Argument(help: "Receipt file (binary PKCS#7, or base64 text).") var file: String
        @Flag(name: .customLong("allow-xcode"), help: "Accept Xcode StoreKit-testing receipts.") var allowXcode = false
        @Option(name: .customLong("trust-anchor"), help: "Also trust this root certificate (DER or PEM). Repeatable.")
        var trustAnchors: [String] = []
        @Option(name: .customLong("bundle-id"), help: "Expected bundle id.") var bundleId: String?
        @Option(name: .customLong("device-identifier"), help: "Check the device hash against this identifier.")
        var deviceIdentifier: String?
        @Flag(help: "Print the verifyReceipt-compatible object as JSON.") var json = false

        func run() async throws {
            guard let data = FileManager.default.contents(atPath: file) else {
                throw ValidationError("cannot read \(file)")
            }
            let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            let base64 = Data(base64Encoded: text) != nil && !text.isEmpty ? text : data.base64EncodedString()
            // An inspection tool, not a server: any bundle unless --bundle-id names the expected one.
            var config = VerificationConfiguration()
            config.acceptAnyBundleId = true
            config.allowXcode = allowXcode
            for path in trustAnchors {
                guard let bytes = FileManager.default.contents(atPath: path),
                    let cert = try? ReceiptTrust.certificate(from: Array(bytes))
                else {
                    throw ValidationError("--trust-anchor \(path): not a readable DER or PEM certificate")
                }
                config.extraRoots.append(cert)
            }
            let answer = try await VerificationService(configuration: config).verifyReceipt(
                .init(receiptData: base64, expectedBundleId: bundleId, deviceIdentifier: deviceIdentifier))
            if json {
                print(String(decoding: try JSONByteEncoder.encode(answer), as: UTF8.self))
            } else {
                print(Self.summary(answer))
            }
            if answer.status != 0 { throw ExitCodes.refused }
        }

        static func summary(_ a: VerifyReceiptResponse) -> String {
            guard a.status == 0, let r = a.receipt else {
                return "REFUSED  status \(a.status) (\(a.reason ?? "unknown"))"
            }
            var lines = [
                "VALID    environment \(a.environment ?? "?")",
                "bundle   \(r.bundleId)  version \(r.applicationVersion ?? "-")",
                "created  \(r.receiptCreationDate ?? "-")",
                "in-app   \(r.inApp.count) purchase\(r.inApp.count == 1 ? "" : "s")",
            ]
            if !r.inApp.isEmpty {
                let rows =
                    [["product", "transaction", "original", "qty", "purchased", "expires"]]
                    + r.inApp.map {
                        [
                            $0.productId, $0.transactionId, $0.originalTransactionId ?? "-", $0.quantity, $0.purchaseDate ?? "-",
                            $0.expiresDate ?? "-",
                        ]
                    }
                let widths = (0..<6).map { c in rows.map { $0[c].count }.max()! }
                for row in rows {
                    let line =
                        "  "
                        + row.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }
                        .joined(separator: "  ")
                    lines.append(String(line.reversed().drop { $0 == " " }.reversed()))
                }
            }
            return lines.joined(separator: "\n")
        }
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Ask the running verification service about a receipt (verification.verifyReceipt).",
            discussion: "Exit code 1 when the receipt is refused.")
        @Argument(help: "Receipt file (base64 or binary; - for standard input).") var file: String
        @Option(name: .customLong("bundle-id"), help: "Expected bundle id.") var bundleId: String?
        @Option(name: .customLong("device-identifier"), help: "Check the device hash against this identifier.") var deviceIdentifier: String?
        @Option(help: "local (default), remote or auto.") var mode: String?
        @OptionGroup var client: ClientOptions

        func run() async throws {
            let verificationMode = try mode.map { m -> VerificationMode in
                guard let parsed = VerificationMode(rawValue: m) else { throw ValidationError("--mode must be local, remote or auto") }
                return parsed
            }
            let answer = await ServiceCall(options: client).run(
                .verification, VerificationVerifyReceipt.self,
                .init(
                    receiptData: try receiptBase64(file), expectedBundleId: bundleId, deviceIdentifier: deviceIdentifier, mode: verificationMode),
                human: Inspect.summary)
            if answer.status != 0 { throw ExitCodes.refused }
        }
    }
}
