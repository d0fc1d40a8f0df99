import AsyncHTTPClient
import Foundation
import IAPProtocol
import JSONRPC
import NIOCore
import RPCTestSupport
import SuiteTestSupport
import Testing

/// The Standard Webhooks reference library (Python's `standardwebhooks`, pinned in Tests/Judges/requirements.txt)
/// verifies what the suite's webhooks send, as a customer's backend would (`Tests/Judges/standard_webhooks_judge.py`):
/// before a secret rotation with the one secret, during the 24 hours after it with the old and the new one alike,
/// and after them with the new one only; a body changed by one byte verifies with none.
@Suite(.enabled(if: Judges.available)) struct StandardWebhooksJudgeTests {
    struct Result: Decodable {
        var id: String?
        var eventId: String?
        var verifiedBy: [String]
        var tamperedVerifies: Bool
    }

    @Test func theReferenceLibraryVerifiesEveryDeliveryBeforeDuringAndAfterARotation() async throws {
        let python = try #require(Judges.python, "no judges' virtual environment: run scripts/test (IAP_REQUIRE_JUDGES=1)")
        let port = try LoopbackPort.free()
        let judge = try Subprocess.spawn(python, [Judges.script("standard_webhooks_judge.py"), "--port", "\(port)"])
        defer { judge.kill(SIGKILL) }
        func call(_ post: Bool, _ path: String, _ body: [String: String]? = nil) async throws -> [UInt8] {
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)")
            request.method = post ? .POST : .GET
            if let body { request.body = .bytes(ByteBuffer(bytes: try JSONEncoder().encode(body))) }
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
            return Array(buffer: try await response.body.collect(upTo: 1 << 20))
        }
        let deadline = Date().addingTimeInterval(60)
        while (try? await call(false, "/results")) == nil {
            try #require(judge.isRunning && Date() < deadline, "the judge did not start")
            try await Task.sleep(nanoseconds: 50_000_000)  // polling a starting process, bounded by the deadline
        }
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let hook = try await WebhookTests.add(suite, "http://127.0.0.1:\(port)/hooks")
            _ = try await call(true, "/secrets", ["old": hook.secret])
            try await WebhookTests.coins(suite, alice, 1)
            try await WebhookTests.deliver(suite)

            let rotated = try await suite.fulfillment.call(FulfillmentRotateWebhookSecret.self, .init(adminToken: WebhookTests.admin, id: hook.id))
            #expect(rotated.secret != hook.secret && rotated.previousSecretValidUntilMs == suite.clock.nowMs + 86_400_000)
            _ = try await call(true, "/secrets", ["old": hook.secret, "new": rotated.secret])
            try await WebhookTests.coins(suite, alice, 2)
            try await WebhookTests.deliver(suite)

            suite.clock.advance(ms: 86_400_000 + 1)
            try await WebhookTests.coins(suite, alice, 3)
            try await WebhookTests.deliver(suite)

            let results = try JSONDecoder().decode([Result].self, from: Data(try await call(false, "/results")))
            let feed = try await WebhookTests.feed(suite)
            #expect(results.map(\.eventId) == feed.map(\.id) && results.map(\.id) == feed.map(\.id))
            #expect(results.map(\.verifiedBy) == [["old"], ["new", "old"], ["new"]], "before, during and after the rotation")
            #expect(results.allSatisfy { !$0.tamperedVerifies })
            let log = try await suite.fulfillment.call(FulfillmentListDeliveries.self, .init(adminToken: WebhookTests.admin, id: hook.id))
            #expect(log.deliveries.map(\.status) == [204, 204, 204])
        }
    }
}
