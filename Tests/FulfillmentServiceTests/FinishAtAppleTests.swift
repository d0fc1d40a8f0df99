import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

/// Fulfillment finishes at Apple (Finish Transaction) every transaction it records, through the outbox: once, after the
/// grant commits, so a purchase whose app died before its own `finish()` is not delivered to the device again.
@Suite struct FinishAtAppleTests {
    static func finishes(_ suite: SuiteFixture, _ transactionId: String) async throws -> Int {
        try await suite.simulator.call(SimServerFinishes.self, .init(transactionId: transactionId)).finishedAtMs.count
    }

    /// The transactions of the receipt the device gets on its next restore, as verification reads it.
    static func inRestoredReceipt(_ suite: SuiteFixture, _ appleId: String) async throws -> Set<String> {
        let restored = try await suite.simulator.call(SimRestore.self, .init(appleId: appleId, bundleId: SuiteFixture.bundleId))
        let verification = RPCClient(host: "127.0.0.1", port: suite.verificationPort)
        defer { Task { await verification.close() } }
        let answer = try await verification.call(VerificationVerifyReceipt.self, .init(receiptData: restored.receiptData, deviceIdentifier: nil))
        return Set(answer.receipt?.inApp.map(\.transactionId) ?? [])
    }

    @Test func aGrantIsFinishedAtAppleOnceAndOnlyTheUnfinishedComesBack() async throws {
        try await SuiteFixture.with(configure: { $0.finishAtApple = true }) { suite in
            let ava = try await suite.register("ava")
            let coins = try await suite.buy("ava@icloud", "coins.100", appAccountToken: ava.appAccountToken)
            let kept = try await suite.buy("ava@icloud", "coins.100", appAccountToken: ava.appAccountToken)  // never redeemed here
            #expect(try await Self.inRestoredReceipt(suite, "ava@icloud") == [coins.transactionId, kept.transactionId])
            #expect(try await suite.redeem(ava.session, signed: [coins.signedTransaction]).results.map(\.outcome) == [.granted])
            // Owed with the grant, in its transaction; nothing is finished before the worker delivers it.
            let owed = try await OutboxTests.outbox(suite)
            #expect(owed.items.map(\.kind) == ["finishTransaction"] && owed.items.map(\.key) == [coins.transactionId])
            #expect(try await Self.finishes(suite, coins.transactionId) == 0)
            #expect(try await suite.service.outbox.deliverOutbox() == 1)
            #expect(try await Self.finishes(suite, coins.transactionId) == 1)
            #expect(try await OutboxTests.outbox(suite).total == 0)
            // The app died before its own finish() and redeems the purchase again: already granted, not finished twice.
            #expect(try await suite.redeem(ava.session, signed: [coins.signedTransaction]).results.map(\.outcome) == [.alreadyGranted])
            #expect(try await suite.service.outbox.deliverOutbox() == 0)
            #expect(try await Self.finishes(suite, coins.transactionId) == 1)
            // The device's next restore: the finished consumable is gone, the unfinished one comes back.
            #expect(try await Self.inRestoredReceipt(suite, "ava@icloud") == [kept.transactionId])
        }
    }

    /// A batch whose answers come slowly starts no item past its lease's margin: the rest are due again at once, no attempt
    /// counted, so another instance claiming them after the lease never sends one this worker has in flight. Before, a
    /// batch of 100 went on item after item past its 60 s lease while another instance claimed and sent the same ones.
    @Test func aBatchRunningPastItsLeaseStartsNoMoreAndLeavesTheRestDue() async throws {
        try await SuiteFixture.with(configure: { $0.finishAtApple = true }, proxied: true) { suite in
            let ava = try await suite.register("ava")
            var ids: [String] = []
            for _ in 0..<3 {
                let coins = try await suite.buy("ava@icloud", "coins.100", appAccountToken: ava.appAccountToken)
                _ = try await suite.redeem(ava.session, signed: [coins.signedTransaction])
                ids.append(coins.transactionId)
            }
            let proxy = try #require(suite.proxies["verification"])
            proxy.mode = .slow(milliseconds: 2_000)  // the first item's answer takes two seconds
            let before = suite.clock.nowMs
            let worker = Task { try await suite.service.outbox.deliverOutbox() }
            // Claimed (each item leased from now): the service's clock then moves a lease on while the first is in flight.
            while try await OutboxTests.outbox(suite).items.contains(where: { $0.nextAttemptAtMs <= before }) { await Task.yield() }
            suite.clock.advance(ms: OutboxRetry.leaseMs)
            #expect(try await worker.value == 3)
            proxy.mode = .pass
            var finished = 0
            for id in ids { finished += try await Self.finishes(suite, id) }
            #expect(finished == 1, "only the item started within the lease")
            let left = try await OutboxTests.outbox(suite).items
            #expect(left.count == 2 && left.allSatisfy { $0.attempts == 0 && $0.nextAttemptAtMs == suite.clock.nowMs }, "\(left)")
        }
    }

    /// Turned off (a deployment without the App Store Server API): nothing is owed, nothing finished.
    @Test func offItOwesNothing() async throws {
        try await SuiteFixture.with { suite in
            let bo = try await suite.register("bo")
            let coins = try await suite.buy("bo@icloud", "coins.100", appAccountToken: bo.appAccountToken)
            #expect(try await suite.redeem(bo.session, signed: [coins.signedTransaction]).results.map(\.outcome) == [.granted])
            #expect(try await OutboxTests.outbox(suite).total == 0)
            #expect(try await suite.service.outbox.deliverOutbox() == 0)
            #expect(try await Self.finishes(suite, coins.transactionId) == 0)
        }
    }
}
