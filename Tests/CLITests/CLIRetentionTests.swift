import Foundation
import IAPProtocol
import JSONRPC
import SuiteTestSupport
import Testing

/// `iap retention ...` (the catalog's rules, fulfillment's answer) and `iap appstore retention ...` (Apple's Retention
/// Messaging API with the team's key, here the simulated App Store's), run as the built binary against a live suite.
@Suite struct CLIRetentionTests {
    @Test func rulesAnswersAndApplesMessagingAPIFromTheCommandLine() async throws {
        try await SuiteFixture.with { suite in
            var env = suite.environment
            env["IAP_BUNDLE_IDS"] = SuiteFixture.bundleId
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("cli-retention-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: dir) }
            func iap(_ args: String...) async throws -> CLIStackTests.Run { try await CLIStackTests.iap(args, env: env) }

            // The team's key, as App Store Connect gives it: a .p8 file, its key id and issuer id.
            let key = try await suite.simulator.call(SimAPIKey.self, EmptyParams())
            let keyFile = dir.appendingPathComponent("key.p8").path
            try key.privateKey.write(toFile: keyFile, atomically: true, encoding: .utf8)
            let api = [
                "--key", keyFile, "--key-id", key.keyId, "--issuer-id", key.issuerId, "--api-url", "http://127.0.0.1:\(suite.simHTTPPort)",
                "--sandbox-api-url", "http://127.0.0.1:\(suite.simHTTPPort)/sandbox",
            ]
            let bought = try await suite.buy("cli-leaver@icloud", "sub.premium")
            let message = UUID().uuidString.lowercased()
            let uploaded = try await CLIStackTests.iap(
                ["appstore", "retention", "upload-message", message, "--header", "Stay", "--body", "Keep your castle."] + api, env: env)
            #expect(uploaded.status == 0 && uploaded.stdout.contains("PENDING"), "\(uploaded.stderr)")
            let notYet = try await CLIStackTests.iap(["appstore", "retention", "default", "sub.premium", "en-US", message] + api, env: env)
            #expect(notYet.status == 1 && notYet.stderr.contains("4030017"), "\(notYet.stderr)")
            #expect(try await iap("sim", "review", message, "APPROVED").status == 0)
            let listed = try await CLIStackTests.iap(["appstore", "retention", "messages"] + api, env: env)
            #expect(listed.stdout.contains("\(message)  APPROVED"), "\(listed.stdout)\(listed.stderr)")
            #expect(try await CLIStackTests.iap(["appstore", "retention", "default", "sub.premium", "en-US", message] + api, env: env).status == 0)

            // The catalog's rules from a file; fulfillment's answer to the simulator's signed request.
            let rules = dir.appendingPathComponent("rules.json").path
            try #"{"choices":[{"id":"stay","kind":"message","messageIdentifier":"\#(message)"}]}"#.write(
                toFile: rules, atomically: true, encoding: .utf8)
            let set = try await iap("retention", "set", "sub.premium", rules)
            #expect(set.status == 0 && set.stdout.contains("1 retention rule"), "\(set.stderr)")
            #expect(try await iap("retention", "show", "sub.premium").stdout.contains("stay: message \(message)"))
            let intent = try await suite.simulator.call(
                SimCancelIntent.self, .init(appleId: "cli-leaver@icloud", originalTransactionId: bought.originalTransactionId, locale: "en-US"))
            let verified = try await iap("verify", "realtime-request", intent.signedPayload)
            #expect(verified.status == 0 && verified.stdout.contains("VALID    Production sub.premium"), "\(verified.stdout)\(verified.stderr)")
            let answered = try await iap("retention", "answer", intent.signedPayload)
            #expect(answered.status == 0 && answered.stdout.contains("message \(message), rule stay"), "\(answered.stdout)\(answered.stderr)")
            #expect(try await iap("verify", "realtime-request", "a.b.c").status == 1)
        }
    }
}
