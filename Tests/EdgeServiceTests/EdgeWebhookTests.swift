import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import ServiceSupport
import SuiteTestSupport
import Testing

@testable import EdgeService

/// Apple's webhook through the edge into fulfillment's inbox: 200 only once the notification is on disk,
/// applied once however often it is delivered, and nothing lost while a service is down.
@Suite struct EdgeWebhookTests {
    static func deliver(_ base: String, _ payload: String) async throws -> Int {
        try await EdgeTests.post(base + "/v1/notifications/appstore", #"{"signedPayload":"\#(payload)"}"#).status
    }

    @Test func aRefundDeliveredThreeTimesIsAppliedOnceAndSurvivesFulfillmentBeingDown() async throws {
        try await EdgeTests.withEdge { suite, base in
            let alice = try await suite.register("alice")
            let first = try await suite.buy("alice@icloud", "coins.100")
            let second = try await suite.buy("alice@icloud", "coins.100")
            _ = try await suite.redeem(alice.session, signed: [first.signedTransaction, second.signedTransaction])
            #expect(try await suite.balance(alice.session) == 200)

            let refund = try #require(
                try await suite.simulator.call(SimRefund.self, .init(appleId: "alice@icloud", transactionId: first.transactionId)).signedPayload)
            for _ in 0..<3 { #expect(try await Self.deliver(base, refund) == 200) }
            #expect(try await suite.balance(alice.session) == 100)
            #expect(try await suite.count("SELECT COUNT(*) FROM ledger WHERE kind = 'reversal'") == 1)
            #expect(try await suite.count("SELECT COUNT(*) FROM notificationInbox WHERE state = 'applied'") == 1)

            // Fulfillment down: 503, so Apple keeps the notification and delivers it again.
            let secondRefund = try #require(
                try await suite.simulator.call(SimRefund.self, .init(appleId: "alice@icloud", transactionId: second.transactionId))
                    .signedPayload)
            await suite.stopService("fulfillment")
            #expect(try await Self.deliver(base, secondRefund) == 503)
            try await suite.restartService("fulfillment")
            // Apple's retry, twice over: applied once.
            #expect(try await Self.deliver(base, secondRefund) == 200)
            #expect(try await Self.deliver(base, secondRefund) == 200)
            #expect(try await suite.balance(alice.session) == 0)
            #expect(try await suite.count("SELECT COUNT(*) FROM ledger WHERE kind = 'reversal'") == 2)
        }
    }

    /// A renewal that arrives while catalog is down is still answered 200 (it is recorded), waits in the
    /// inbox, and is granted once catalog is back; one that keeps failing is parked, listed for admins and
    /// retried by them.
    @Test func notificationsThatCannotBeProcessedWaitInTheInboxNotInApplesQueue() async throws {
        // Grants are asked of the catalog every time: processing must need the catalog that is stopped below.
        try await EdgeTests.withEdge(fulfillment: { $0.catalogCacheMs = 0 }) { suite, base in
            let alice = try await suite.register("alice")
            let bought = try await suite.buy("alice@icloud", "sub.premium")
            _ = try await suite.redeem(alice.session, signed: [bought.signedTransaction])
            let renewals = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 31 * 86_400)).notifications
            let renewal = try #require(renewals.first)

            await suite.stopService("catalog")
            #expect(try await Self.deliver(base, renewal) == 200, "recorded, though it cannot be processed yet")
            let pending = try await suite.fulfillment.call(
                FulfillmentListNotifications.self, .init(adminToken: SuiteFixture.adminToken, state: .pending))
            #expect(pending.notifications.count == 1 && pending.notifications[0].attempts == 1)
            #expect(pending.notifications[0].lastError != nil)

            // Not due yet: the worker leaves it; past its backoff with catalog still down: attempt 2.
            #expect(try await suite.service.notifications.processDueNotifications() == 0)
            suite.clock.advance(ms: 5_000)
            #expect(try await suite.service.notifications.processDueNotifications() == 1)

            // Catalog back: the executable's inbox worker grants the renewal at its next due attempt, once.
            try await suite.restartService("catalog")
            suite.clock.advance(ms: 10_000)
            let worker = Task { try await InboxWorker(service: suite.service, interval: .milliseconds(20), logger: EdgeFixture.quiet).run() }
            defer { worker.cancel() }
            var state = NotificationState.pending
            for _ in 0..<1_000 where state == .pending {
                let listed = try await suite.fulfillment.call(FulfillmentListNotifications.self, .init(adminToken: SuiteFixture.adminToken))
                state = listed.notifications.first { $0.notificationType == "DID_RENEW" }?.state ?? .pending
                if state == .pending { await Task.yield() }
            }
            #expect(state == .applied)
            let applied = try await suite.fulfillment.call(
                FulfillmentListNotifications.self, .init(adminToken: SuiteFixture.adminToken, state: .applied))
            #expect(applied.notifications.map(\.notificationType).contains("DID_RENEW"))
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction") == 2)
            #expect(try await Self.deliver(base, renewal) == 200)
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction") == 2)
        }
    }

    @Test func aNotificationThatKeepsFailingIsParkedThenRetriedByAnAdmin() async throws {
        try await SuiteFixture.with(configure: {
            $0.inboxRetry.maxAttempts = 2
            $0.catalogCacheMs = 0  // processing must need the catalog that is stopped below
        }) { suite in
            var config = EdgeConfiguration()
            config.internalToken = SuiteFixture.internalToken  // the webhook presents it to fulfillment
            config.callTimeout = .seconds(30)
            config.webhookAnswersOnceRecorded = false
            let edge = EdgeService(
                accounts: suite.accounts, catalog: suite.catalog, fulfillment: suite.fulfillment, configuration: config,
                logger: EdgeFixture.quiet)
            try await EdgeFixture.serving(edge) { port in
                let base = "http://127.0.0.1:\(port)"
                let alice = try await suite.register("alice")
                _ = try await suite.redeem(alice.session, signed: [try await suite.buy("alice@icloud", "sub.premium").signedTransaction])
                let renewal = try #require(try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 31 * 86_400)).notifications.first)
                await suite.stopService("catalog")
                #expect(try await Self.deliver(base, renewal) == 200)
                suite.clock.advance(ms: 5_000)
                #expect(try await suite.service.notifications.processDueNotifications() == 1)
                let parked = try await suite.fulfillment.call(
                    FulfillmentListNotifications.self, .init(adminToken: SuiteFixture.adminToken, state: .parked))
                let uuid = try #require(parked.notifications.first?.notificationUUID)
                #expect(parked.notifications.count == 1 && parked.notifications[0].attempts == 2)
                // Parked is out of the worker's way: nothing is due however late it gets.
                suite.clock.advance(ms: 86_400_000)
                #expect(try await suite.service.notifications.processDueNotifications() == 0)

                try await suite.restartService("catalog")
                let badName = await rpcError {
                    try await suite.fulfillment.call(
                        FulfillmentRetryNotification.self, .init(adminToken: SuiteFixture.adminToken, notificationUUID: uuid, operatorName: "a b"))
                }
                #expect(badName?.reason == "invalidValue")
                // A retry whose audit cannot be written processes nothing: no grant without the operator's name on it.
                if try await suite.executeOnSQLite(
                    "CREATE TRIGGER no_audit BEFORE INSERT ON admin_audit BEGIN SELECT RAISE(ABORT, 'audit refused'); END")
                {
                    let unaudited = await rpcError {
                        try await suite.fulfillment.call(
                            FulfillmentRetryNotification.self, .init(adminToken: SuiteFixture.adminToken, notificationUUID: uuid, operatorName: "sam")
                        )
                    }
                    #expect(unaudited != nil)
                    #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction") == 1)
                    _ = try await suite.executeOnSQLite("DROP TRIGGER no_audit")
                }
                let retried = try await suite.fulfillment.call(
                    FulfillmentRetryNotification.self, .init(adminToken: SuiteFixture.adminToken, notificationUUID: uuid, operatorName: "sam"))
                #expect(retried.state == .applied && retried.attempts == 3)
                #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction") == 2)
                // Audited: who retried which, from which state, then about whose purchase and where it ended (once: the
                // refused try wrote nothing).
                let audit = try await suite.fulfillment.call(FulfillmentListAudit.self, .init(adminToken: SuiteFixture.adminToken))
                let entries = audit.entries.filter { $0.action == "retryNotification" }
                #expect(entries.count == 2 && entries.allSatisfy { $0.operatorName == "sam" })
                #expect(entries.contains { $0.reason.hasSuffix("retried while parked") })
                #expect(entries.contains { $0.accountId == alice.accountId && $0.reason.hasSuffix("parked -> applied") })
            }
        }
    }

    /// Apple delivers out of order: a renewal's notification arrives after the refund of that renewal was
    /// applied. Fulfillment asks Apple for the renewal's standing now (refunded), so the late notification grants
    /// nothing; without the App Store Server API (the notification's snapshot only), a notification signed before
    /// one already applied for the same purchase is superseded instead.
    @Test func aRenewalArrivingAfterItsRefundGrantsNothingWhicheverWayStateIsKnown() async throws {
        for withAPI in [true, false] {
            try await SuiteFixture.with(appStoreAPI: withAPI) { suite in
                let alice = try await suite.register("alice")
                let bought = try await suite.buy("alice@icloud", "sub.premium")
                _ = try await suite.redeem(alice.session, signed: [bought.signedTransaction])
                let renewal = try #require(try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 31 * 86_400)).notifications.first)
                let verification = RPCClient(host: "127.0.0.1", port: suite.verificationPort)
                let renewalId = try #require(
                    try await verification.call(
                        VerificationVerifyNotification.self, .init(signedPayload: renewal)
                    )
                    .notification?["data"]?["transactionInfo"]?["transactionId"]?.stringValue)
                await verification.close()
                // With the API, the renewal itself is refunded; without it, the original purchase (the snapshot-only
                // path orders notifications per original transaction).
                let refunded = withAPI ? renewalId : bought.transactionId
                let refund = try #require(
                    try await suite.simulator.call(SimRefund.self, .init(appleId: "alice@icloud", transactionId: refunded)).signedPayload)
                #expect(
                    try await suite.fulfillment.call(
                        FulfillmentReceiveNotification.self, .init(signedPayload: refund, internalToken: SuiteFixture.internalToken)
                    ).state == .applied)
                let late = try await suite.fulfillment.call(
                    FulfillmentReceiveNotification.self, .init(signedPayload: renewal, internalToken: SuiteFixture.internalToken))
                #expect(late.state == (withAPI ? .applied : .ignored), "with the API: \(withAPI)")
                let renewalGranted = try await suite.count(
                    "SELECT COUNT(*) FROM processedTransaction WHERE transactionId = '\(renewalId)' AND revokedAtMs IS NULL")
                #expect(renewalGranted == 0, "the late renewal granted nothing (with the API: \(withAPI))")
                if !withAPI {
                    #expect(try await suite.entitlements(alice.session).isEmpty)
                    let listed = try await suite.fulfillment.call(
                        FulfillmentListNotifications.self, .init(adminToken: SuiteFixture.adminToken, state: .ignored))
                    #expect(listed.notifications.first?.lastError?.hasPrefix("superseded") == true)
                }
            }
        }
    }

    /// By default the webhook answers Apple once the notification is recorded (`pending`), and fulfillment
    /// processes it right after, off the answer's path; if that process died first, the inbox worker takes it
    /// after its lease. Either way it is applied once.
    @Test func theWebhookAnswersOnceRecordedAndTheNotificationIsProcessedAfter() async throws {
        try await EdgeTests.withEdge(configure: { $0.webhookAnswersOnceRecorded = true }) { suite, base in
            let alice = try await suite.register("alice")
            let coins = try await suite.buy("alice@icloud", "coins.100")
            _ = try await suite.redeem(alice.session, signed: [coins.signedTransaction])
            let refund = try #require(
                try await suite.simulator.call(SimRefund.self, .init(appleId: "alice@icloud", transactionId: coins.transactionId)).signedPayload)
            #expect(try await Self.deliver(base, refund) == 200)
            #expect(try await suite.count("SELECT COUNT(*) FROM notificationInbox") == 1, "recorded before the answer")
            // Whatever the processor after the answer has done by now, the worker's pass after the lease ends the same.
            suite.clock.advance(ms: 61_000)
            _ = try await suite.service.notifications.processDueNotifications()
            #expect(try await suite.count("SELECT COUNT(*) FROM notificationInbox WHERE state = 'applied'") == 1)
            #expect(try await suite.balance(alice.session) == 0)
            #expect(try await suite.count("SELECT COUNT(*) FROM ledger WHERE kind = 'reversal'") == 1)
        }
    }

    /// A flood at the webhook (forgeries each cost a signature check) meets its own bucket: 429 with
    /// Retry-After once the burst is spent; an oversized body is 413 before anything is verified.
    @Test func theWebhookIsRateLimitedAndBodyCapped() async throws {
        try await EdgeTests.withEdge(configure: {
            $0.webhookBurst = 3
            $0.webhookRequestsPerSecond = 0.01
        }) { _, base in
            for _ in 0..<3 { #expect(try await Self.deliver(base, "a.b.c") == 400) }
            let limited = try await EdgeTests.post(base + "/v1/notifications/appstore", #"{"signedPayload":"a.b.c"}"#)
            #expect(limited.status == 429 && Int(limited.headers["retry-after"] ?? "") ?? 0 >= 1)
        }
        try await EdgeTests.withEdge { _, base in
            let big = #"{"signedPayload":""# + String(repeating: "a", count: 300 * 1024) + #""}"#
            let refused = try await EdgeTests.post(base + "/v1/notifications/appstore", big)
            #expect(refused.status == 413)
        }
    }
}
