import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import Receipts
import SuiteTestSupport
import Testing

/// Apple's own App Store Server Library (Python, `app-store-server-library`, pinned in Tests/Judges/requirements.txt)
/// judges the simulator and the suite: `Tests/Judges/apple_library_judge.py` drives a live `appstore-sim` (the real
/// executable, its OCSP responder on) and checks what it signs and serves with Apple's verifier (strict, online),
/// API client, receipt utility and offer signature creators, and compares the suite's own offer JWS with the one
/// Apple's creator makes. The simulator runs in a process of its own: the judge keeps it busy for minutes, and in
/// this process its work would queue on the blocking pool every in-process service shares.
@Suite(.enabled(if: Judges.available)) struct AppleLibraryJudgeTests {
    @Test func applesLibraryAcceptsTheSimulatorAndTheSuitesOffers() async throws {
        let python = try #require(Judges.python, "no judges' virtual environment: run scripts/test (IAP_REQUIRE_JUDGES=1)")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apple-judge-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }

        // The suite's own offer JWS, for the comparison with Apple's creator.
        let offerFile = directory.appendingPathComponent("suite-offer.json")
        try await SuiteFixture.with { suite in
            let ann = try await suite.register("ann")
            // A purchase names her Apple customer: both JWS then name one of her transactions, as Apple's form does.
            let coins = try await suite.buy("ann@icloud", "coins.100", appAccountToken: ann.appAccountToken)
            _ = try await suite.redeem(ann.session, signed: [coins.signedTransaction])
            let signed = try await suite.fulfillment.call(
                FulfillmentSignOffer.self, .init(session: ann.session, productId: "sub.premium", offerId: "welcome"))
            let intro = try await suite.fulfillment.call(
                FulfillmentOfferEligibility.self, .init(session: ann.session, productId: "sub.premium"))
            // The same input for Apple's creator: the offer key the suite signs with (its simulator's).
            let key = try await suite.simulator.call(SimOfferKey.self, EmptyParams())
            let offer: JSONValue = [
                "productId": .string(signed.productId), "offerId": .string(signed.offerId), "jws": .string(signed.jws),
                "keyId": .string(key.keyId), "issuerId": .string(key.issuerId), "privateKey": .string(key.privateKey),
                "transactionId": .string(coins.transactionId), "introductoryOfferJWS": .string(try #require(intro.introductoryOfferJWS)),
                "allowIntroductoryOffer": .bool(intro.introductoryOfferEligible),
            ]
            try Data(JSONByteEncoder.encode(offer)).write(to: offerFile)
        }

        let (simPort, httpPort) = (try LoopbackPort.free(), try LoopbackPort.free())
        let sim = try Subprocess.spawn(
            BuiltExecutables.url("appstore-sim").path,
            [
                "--port", "\(simPort)", "--http-port", "\(httpPort)", "--data-dir", directory.appendingPathComponent("sim").path,
                "--log-level", "error",
            ], environment: BuiltExecutables.environment())
        defer { sim.kill(SIGKILL) }
        let client = RPCClient(host: "127.0.0.1", port: simPort, configuration: .init(connections: 1, callTimeout: .seconds(10)))
        let deadline = Date().addingTimeInterval(180)  // generous: CI starts many processes at once on two cores
        while (try? await client.call(RPCPing.self, EmptyParams())) == nil {
            try #require(sim.isRunning && Date() < deadline, "appstore-sim did not start")
            try await Task.sleep(nanoseconds: 50_000_000)  // polling a starting process, bounded by the deadline
        }
        await client.close()

        let run = try await Subprocess.run(
            python,
            [
                Judges.script("apple_library_judge.py"), "--sim", "127.0.0.1:\(simPort)", "--api", "http://127.0.0.1:\(httpPort)",
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
