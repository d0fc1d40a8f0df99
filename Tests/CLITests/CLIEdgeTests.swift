import Foundation
import IAPProtocol
import JSONRPC
import SuiteTestSupport
import Testing

/// `iap --edge URL` as an app developer outside the private network uses it: public methods and content
/// downloads go through the edge (the services' own addresses point nowhere), admin and simulator
/// commands still use the service addresses.
@Suite struct CLIEdgeTests {
    @Test func publicCommandsAndResumedDownloadsGoThroughTheEdge() async throws {
        try await EdgeFixture.withContentEdge { suite, base in
            let home = FileManager.default.temporaryDirectory.appendingPathComponent("cli-edge-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: home) }
            var env = suite.environment
            env["IAP_CONFIG"] = home.appendingPathComponent("config.json").path
            env["HOME"] = home.path
            env["IAP_EDGE_URL"] = base
            // Nothing listens here: a public call that skipped the edge would fail with exit 2.
            for service in ["ACCOUNTS", "CATALOG", "FULFILLMENT"] { env["IAP_\(service)_ADDR"] = "127.0.0.1:1" }
            func iap(_ args: String...) async throws -> CLIStackTests.Run { try await CLIStackTests.iap(args, env: env) }

            let registered = try await iap("accounts", "register", "edgar", "--password", "correct horse battery", "--json")
            #expect(registered.status == 0, "\(registered.stderr)")
            #expect(try await iap("catalog", "list", "--json").status == 0)
            let pack = try await iap("sim", "buy", "pack.castle", "--type", "nonConsumable", "--apple-id", "edgar@icloud", "--json")
                .decode(SimPurchase.Result.self)
            let redeemed = try await iap("redeem", "--signed-transaction", pack.signedTransaction, "--json").decode(RedeemResult.self)
            #expect(redeemed.results.map(\.outcome) == [.granted])

            let link = try await iap("content", "url", SuiteFixture.contentId, "--json").decode(FulfillmentContentURL.Result.self)
            #expect(link.url.hasPrefix("/v1/content/") && link.size == Int64(suite.content.count))

            // A download interrupted after 1,000 bytes of this very file resumes from there (206)...
            let target = home.appendingPathComponent("castle.bin").path
            try Data(suite.content.prefix(1000)).write(to: URL(fileURLWithPath: target + ".part"))
            try "\"\(link.sha256)\"".write(toFile: target + ".part.etag", atomically: true, encoding: .utf8)
            let resumed = try await iap("content", "download", SuiteFixture.contentId, "--output", target, "--json")
            #expect(resumed.status == 0, "\(resumed.stderr)")
            #expect(try JSONValue.parseJSON(resumed.stdout)["resumedFrom"] == .int(1000))
            #expect(Array(try Data(contentsOf: URL(fileURLWithPath: target))) == suite.content)
            #expect(!FileManager.default.fileExists(atPath: target + ".part.etag"))

            // ...one written under another version of the file starts over (If-Range: a full 200), not a splice.
            try Data(repeating: 0xAA, count: 1000).write(to: URL(fileURLWithPath: target + ".part"))
            try "\"an-older-version\"".write(toFile: target + ".part.etag", atomically: true, encoding: .utf8)
            let restarted = try await iap("content", "download", SuiteFixture.contentId, "--output", target, "--json")
            #expect(restarted.status == 0, "\(restarted.stderr)")
            #expect(try JSONValue.parseJSON(restarted.stdout)["resumedFrom"] == .int(0))
            #expect(Array(try Data(contentsOf: URL(fileURLWithPath: target))) == suite.content)

            // An edge that is not there: exit 2, naming it.
            var gone = env
            gone["IAP_EDGE_URL"] = "http://127.0.0.1:1"
            let unreachable = try await CLIStackTests.iap(["balance"], env: gone)
            #expect(unreachable.status == 2 && unreachable.stderr.contains("cannot reach the edge"), "\(unreachable.stderr)")
        }
    }
}
