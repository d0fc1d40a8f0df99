import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

/// The real executable SIGKILLed while a webhook delivery is in flight: after a restart every event reaches the
/// receiver (at least once), each account's in order; the one whose answer was lost is sent again when its lease ends.
@Suite struct WebhookCrashTests {
    @Test func killedMidDeliveryItLosesNothing() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { receiver.stop() }
        try await SuiteFixture.with { suite in
            let process = CrashSafetyTests.FulfillmentProcess(
                port: try LoopbackPort.free(), dataDir: suite.directory.appendingPathComponent("webhook-crash"), suite: suite,
                extraArguments: ["--webhook-lease-s", "30", "--reconcile-interval-s", "0"])
            try await process.start()
            func client() -> RPCClient {
                RPCClient(host: "127.0.0.1", port: process.port, configuration: .init(connections: 1, callTimeout: .seconds(60)))
            }
            var fulfillment = client()
            _ = try await fulfillment.call(
                FulfillmentAddWebhook.self, .init(adminToken: SuiteFixture.adminToken, url: receiver.url, allowPrivateAddress: true))
            receiver.hold(true)
            let alice = try await suite.register("alice"), bob = try await suite.register("bob")
            for (user, n) in [(alice, 1), (bob, 1), (alice, 2), (bob, 2), (alice, 3)] {
                let bought = try await suite.buy("\(user.accountId)@icloud", "coins.100", quantity: n)
                _ = try await fulfillment.call(FulfillmentRedeem.self, .init(session: user.session, receiptData: bought.receiptData))
            }
            var deadline = Date().addingTimeInterval(60)
            while receiver.waiting == 0 {
                try #require(Date() < deadline, "no delivery started")
                try await Task.sleep(nanoseconds: 20_000_000)  // polling the worker, bounded by the deadline
            }
            await process.kill()
            await fulfillment.close()
            receiver.hold(false)  // what was in flight arrives; its answer goes nowhere

            try await process.start()
            fulfillment = client()
            defer { Task { [fulfillment] in await fulfillment.close() } }
            let feed = try await fulfillment.call(FulfillmentListEvents.self, .init(adminToken: SuiteFixture.adminToken)).events
            #expect(feed.count == 5)
            deadline = Date().addingTimeInterval(120)  // the lease (30 s) of what was in flight, then its retry
            while !Set(feed.map(\.id)).isSubset(of: Set(receiver.events.map(\.id))) {
                try #require(Date() < deadline, "not every event arrived after the restart: \(receiver.events.map(\.id))")
                try await Task.sleep(nanoseconds: 100_000_000)  // polling the receiver, bounded by the deadline
            }
            for user in [alice, bob] {
                var firstSeen: [Int64] = []
                for e in receiver.events where e.accountId == user.accountId && !firstSeen.contains(e.sequence) { firstSeen.append(e.sequence) }
                #expect(firstSeen == firstSeen.sorted(), "\(user.accountId): \(firstSeen)")
            }
            await process.kill()
        }
    }
}
