import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import Receipts
import SuiteTestSupport
import Testing

/// Apple's own App Store Server Library (Python, `app-store-server-library`, pinned in Tests/Judges/requirements.txt)
/// judges the simulator and the suite: `Tests/Judges/apple_library_judge.py` drives the live simulator (OCSP
/// responder on) and checks what it signs and serves with Apple's verifier (strict, online), API client, receipt
/// utility and offer signature creators, and compares the suite's own offer JWS with the one Apple's creator makes.
@Suite(.enabled(if: Judges.available)) struct AppleLibraryJudgeTests {
    @Test func applesLibraryAcceptsTheSimulatorAndTheSuitesOffers() async throws {
        let python = try #require(Judges.python, "no judges' virtual environment: run scripts/test (IAP_REQUIRE_JUDGES=1)")
        try await SuiteFixture.with(ocsp: RevocationChecker.Configuration()) { suite in
            let ann = try await suite.register("ann")
            let signed = try await suite.fulfillment.call(
                FulfillmentSignOffer.self, .init(session: ann.session, productId: "sub.premium", offerId: "welcome"))
            let offerFile = suite.directory.appendingPathComponent("suite-offer.json")
            let offer: JSONValue = ["productId": .string(signed.productId), "offerId": .string(signed.offerId), "jws": .string(signed.jws)]
            try Data(JSONByteEncoder.encode(offer)).write(to: offerFile)
            let run = try await Subprocess.run(
                python,
                [
                    Judges.script("apple_library_judge.py"), "--sim", suite.simulator.address, "--api", "http://127.0.0.1:\(suite.simHTTPPort)",
                    "--bundle-id", SuiteFixture.bundleId, "--suite-offer", offerFile.path,
                ])
            let failures = run.stdout.split(separator: "\n").filter { $0.hasPrefix("FAIL") }
            #expect(run.status == 0 && failures.isEmpty, "\(failures.joined(separator: "\n"))\n\(run.stderr.suffix(4_000))")
            // Every part ran: over a hundred checks (transactions, notifications, API calls, receipts, offers).
            let summary = run.stdout.split(separator: "\n").last { $0.hasPrefix("apple-judge: ") } ?? ""
            let count = Int(summary.dropFirst("apple-judge: ".count).prefix { $0.isNumber }) ?? 0
            #expect(count >= 120, "\(summary)")
        }
    }
}
