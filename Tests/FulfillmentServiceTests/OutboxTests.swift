import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

/// The outbox: what fulfillment owes outside parties after a commit (today the ties at Apple) is written with the
/// change, tried at once, retried on a schedule for as long as it takes, never dropped, and visible to operators.
@Suite struct OutboxTests {
    static func outbox(_ suite: SuiteFixture) async throws -> FulfillmentListOutbox.Result {
        try await suite.fulfillment.call(FulfillmentListOutbox.self, .init(adminToken: SuiteFixture.adminToken))
    }

    static func tokenAtApple(_ suite: SuiteFixture, _ transactionId: String) async throws -> String? {
        let client = RPCClient(host: "127.0.0.1", port: suite.verificationPort)
        defer { Task { await client.close() } }
        return try await client.call(
            VerificationTransactionInfo.self, .init(internalToken: SuiteFixture.internalToken, transactionId: transactionId)
        ).transaction?["appAccountToken"]?.stringValue
    }

    @Test func anItemWhoseReceiverFailsForHoursIsDeliveredWhenItRecovers() async throws {
        try await SuiteFixture.with { suite in
            let ivy = try await suite.register("ivy")
            let pack = try await suite.buy("ivy@icloud", "pack.castle")
            #expect(try await suite.redeem(ivy.session, receipt: pack.receiptData).results.map(\.outcome) == [.granted])
            await suite.stopVerification()
            // Two hours of failures (the outbox before 2026-11-25 dropped an item after its tenth).
            let start = suite.clock.nowMs
            var failures = 0
            while suite.clock.nowMs - start < 2 * 3_600_000 {
                #expect(try await suite.service.outbox.deliverOutbox() == 1)
                failures += 1
                let item = try #require(try await Self.outbox(suite).items.first)
                #expect(
                    item.attempts == failures && item.lastError != nil && item.kind == "appAccountToken" && item.key == pack.originalTransactionId)
                #expect(try await suite.service.outbox.deliverOutbox() == 0, "not due before its next attempt")
                suite.clock.advance(ms: item.nextAttemptAtMs - suite.clock.nowMs)
            }
            #expect(failures > 10)
            let waiting = try await Self.outbox(suite)
            #expect(waiting.total == 1 && (waiting.oldestAgeMs ?? 0) >= 2 * 3_600_000)
            // Hourly at most: the receiver is back, the next attempt delivers.
            #expect(try #require(waiting.items.first).nextAttemptAtMs - suite.clock.nowMs <= 3_600_000)
            try await suite.restartVerification()
            #expect(try await suite.service.outbox.deliverOutbox() == 1)
            #expect(try await Self.tokenAtApple(suite, pack.transactionId) == ivy.appAccountToken.lowercased())
            let after = try await Self.outbox(suite)
            #expect(after.total == 0 && after.items.isEmpty && after.oldestAgeMs == nil)
        }
    }

    @Test func aCommitThatOwesSomethingWakesTheWorker() async throws {
        try await SuiteFixture.with { suite in
            let jay = try await suite.register("jay")
            let pack = try await suite.buy("jay@icloud", "pack.castle")
            _ = try await suite.redeem(jay.session, receipt: pack.receiptData)
            // The redeem signalled: the worker's wait ends at once rather than after its interval.
            let waited = try await ContinuousClock().measure { await suite.service.outboxWakeup.wait(upTo: .seconds(120)) }
            #expect(waited < .seconds(60))
            // A redeem that owes nothing (the purchase carries the account's token) does not.
            let tokened = try await suite.buy("jay@icloud", "coins.100", appAccountToken: jay.appAccountToken)
            _ = try await suite.redeem(jay.session, signed: [tokened.signedTransaction])
            let idle = try await ContinuousClock().measure { await suite.service.outboxWakeup.wait(upTo: .milliseconds(300)) }
            #expect(idle >= .milliseconds(300))
        }
    }

    /// Without the App Store Server API nothing can be tied: a backlog of ties must wait (asked again in ten
    /// minutes), not stay due and keep the worker spinning on it instead of the inbox.
    @Test func withoutTheAppStoreServerAPITiesWaitInsteadOfStayingDue() async throws {
        try await SuiteFixture.with(appStoreAPI: false) { suite in
            let lou = try await suite.register("lou")
            for i in 0..<3 {
                let pack = try await suite.buy("lou\(i)@icloud", "coins.100")
                _ = try await suite.redeem(lou.session, receipt: pack.receiptData)
            }
            #expect(try await suite.service.outbox.deliverOutbox() == 3)
            #expect(try await suite.service.outbox.deliverOutbox() == 0, "nothing due again at once")
            let waiting = try await Self.outbox(suite)
            #expect(waiting.total == 3 && waiting.items.allSatisfy { $0.lastError?.contains("not configured") == true })
            #expect(waiting.items.allSatisfy { $0.nextAttemptAtMs - suite.clock.nowMs == OutboxRetry.whileNotConfiguredMs })
        }
    }

    @Test func theRetryScheduleDoublesToHourlyAndNeverEnds() {
        let now: Int64 = 1_000
        #expect((1...6).map { OutboxRetry.nextAttemptAtMs(failures: $0, nowMs: now) - now } == [5_000, 10_000, 20_000, 40_000, 80_000, 160_000])
        #expect(OutboxRetry.nextAttemptAtMs(failures: 11, nowMs: now) - now == 3_600_000)
        #expect(OutboxRetry.nextAttemptAtMs(failures: 10_000, nowMs: now) - now == 3_600_000)
    }
}
