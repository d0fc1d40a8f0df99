import Crypto
import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

/// Webhooks over real HTTP to a receiver on a real port, from a whole suite: signed, in order per account, a failing
/// account's events waiting alone, retried on a moved clock, given up after three days and redelivered from a cursor,
/// never to a private address unless allowed, and never in the way of a redeem.
@Suite struct WebhookTests {
    static let admin = SuiteFixture.adminToken

    static func add(_ suite: SuiteFixture, _ url: String, allowPrivate: Bool? = true, types: [FulfillmentEventType]? = nil)
        async throws -> FulfillmentAddWebhook.Result
    {
        try await suite.fulfillment.call(
            FulfillmentAddWebhook.self, .init(adminToken: admin, url: url, types: types, allowPrivateAddress: allowPrivate))
    }

    /// Rounds of the worker until nothing more is due now, once the feed shows every committed event (on PostgreSQL a
    /// reader waits for the oldest transaction running in the cluster, and other suites' tests run beside these).
    static func deliver(_ suite: SuiteFixture) async throws {
        try await suite.eventFeedSettled()
        while try await suite.service.webhookWorker.deliverWebhooks().more {}
    }

    static func coins(_ suite: SuiteFixture, _ user: (session: String, accountId: String, appAccountToken: String), _ n: Int) async throws {
        let bought = try await suite.buy("\(user.accountId)@icloud", "coins.100", quantity: n)
        _ = try await suite.redeem(user.session, receipt: bought.receiptData)
    }

    static func feed(_ suite: SuiteFixture, account: String? = nil) async throws -> [FulfillmentEvent] {
        try await suite.fulfillment.call(FulfillmentListEvents.self, .init(adminToken: admin, limit: 1000, accountId: account)).events
    }

    /// A suite with one endpoint whose receiver fails alice's events: her first event has failed once and waits.
    static func withAliceWaiting(
        _ body: (SuiteFixture, (session: String, accountId: String, appAccountToken: String), FulfillmentAddWebhook.Result) async throws -> Void
    ) async throws {
        let receiver = try await WebhookReceiver.start()
        defer { receiver.stop() }
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let hook = try await add(suite, receiver.url)
            receiver.fail([alice.accountId])
            try await coins(suite, alice, 1)
            try await deliver(suite)
            try await body(suite, alice, hook)
        }
    }

    /// The endpoint's due items, claimed as a worker's round claims them (the round itself left out).
    static func claim(_ suite: SuiteFixture, _ hook: FulfillmentAddWebhook.Result) async throws -> [OutboxItem] {
        try await suite.store.dueWebhookItems(endpointId: hook.id, nowMs: suite.clock.nowMs, limit: 10, leaseMs: 60_000)
    }

    static func verify(_ r: WebhookReceiver.Received, secret: String) -> Bool {
        guard let key = Data(base64Encoded: String(secret.dropFirst("whsec_".count))) else { return false }
        let mac = HMAC<SHA256>.authenticationCode(for: Array("\(r.id).\(r.timestamp).".utf8) + r.body, using: SymmetricKey(data: key))
        return r.signature.split(separator: " ").contains { $0 == "v1," + Data(mac).base64EncodedString() }
    }

    @Test func privateAndLoopbackAddressesAreRefusedUnlessAllowed() async throws {
        try await SuiteFixture.with { suite in
            for url in ["http://127.0.0.1:9/x", "http://10.1.2.3/x", "http://localhost:9/x", "http://[::1]:9/x", "http://169.254.169.254/latest"] {
                do {
                    _ = try await Self.add(suite, url, allowPrivate: nil)
                    Issue.record("\(url) accepted")
                } catch let error as RPCError {
                    #expect(error.reason == "addressNotAllowed" && error.data.extra["field"] == .string("url"), "\(url): \(error)")
                }
            }
            for url in ["ftp://example.com/x", "http://user:pw@example.com/x", "not a url", "https:///nohost"] {
                await #expect(throws: RPCError.self, "\(url)") { _ = try await Self.add(suite, url, allowPrivate: true) }
            }
            let listed = try await suite.fulfillment.call(FulfillmentListWebhooks.self, .init(adminToken: Self.admin)).webhooks
            #expect(listed.isEmpty, "nothing refused was stored")
            await #expect(throws: RPCError.self) {
                _ = try await suite.fulfillment.call(
                    FulfillmentAddWebhook.self, .init(adminToken: "wrong", url: "http://10.0.0.1/", allowPrivateAddress: true))
            }
            let allowed = try await Self.add(suite, "http://10.1.2.3/x", allowPrivate: true)
            #expect(allowed.secret.hasPrefix("whsec_") && Data(base64Encoded: String(allowed.secret.dropFirst(6)))?.count == 32)
            let all = try await suite.fulfillment.call(FulfillmentListWebhooks.self, .init(adminToken: Self.admin)).webhooks
            #expect(all.map(\.id) == [allowed.id] && all[0].allowPrivateAddress)
            let listing = String(decoding: try JSONEncoder().encode(all), as: UTF8.self)
            #expect(!listing.contains(allowed.secret) && !listing.contains("whsec_"), "secrets are never listed")
        }
    }

    @Test func endpointsAreCappedEvenWhenAddedAtOnce() async throws {
        try await SuiteFixture.with(configure: { $0.webhooks.maxEndpoints = 2 }) { suite in
            let outcomes = try await withThrowingTaskGroup(of: String.self) { group in
                for i in 0..<6 {
                    group.addTask {
                        do {
                            _ = try await Self.add(suite, "http://10.0.0.\(i + 1)/hooks")
                            return "added"
                        } catch let error as RPCError {
                            return error.reason
                        }
                    }
                }
                return try await group.reduce(into: [String]()) { $0.append($1) }
            }
            #expect(outcomes.filter { $0 == "added" }.count == 2 && outcomes.filter { $0 == "tooManyWebhooks" }.count == 4, "\(outcomes)")
            #expect(try await suite.fulfillment.call(FulfillmentListWebhooks.self, .init(adminToken: Self.admin)).webhooks.count == 2)
            let audited = try await suite.fulfillment.call(FulfillmentListAudit.self, .init(adminToken: Self.admin, limit: 50))
            #expect(audited.entries.filter { $0.action == "addWebhook" }.count == 2, "a refused add leaves no audit entry")
        }
    }

    @Test func eventsArriveSignedInOrderPerAccountAsListEventsHasThem() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { receiver.stop() }
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice"), bob = try await suite.register("bob")
            try await Self.coins(suite, alice, 1)  // before the endpoint: not sent
            let hook = try await Self.add(suite, receiver.url)
            try await Self.coins(suite, alice, 2)
            try await Self.coins(suite, bob, 1)
            _ = try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: alice.session, amount: 50, idempotencyKey: "a1"))
            try await Self.coins(suite, alice, 3)
            try await Self.deliver(suite)
            let feed = try await Self.feed(suite)
            #expect(feed.count == 5)
            #expect(Set(receiver.events.map(\.id)) == Set(feed.dropFirst().map(\.id)), "every event from the endpoint's creation on")
            for e in receiver.events { #expect(feed.first { $0.id == e.id } == e, "the object listEvents answers") }
            for r in receiver.received {
                #expect(r.id == r.event.id && Self.verify(r, secret: hook.secret), "signed with the endpoint's secret")
                #expect(abs(Int64(r.timestamp)! - Int64(Date().timeIntervalSince1970)) < 300)
            }
            let aliceSequences = receiver.events.filter { $0.accountId == alice.accountId }.map(\.sequence)
            #expect(aliceSequences == [2, 3, 4])
            let last = receiver.events.last { $0.accountId == alice.accountId }
            #expect(last?.balance == 550 && last?.type == .purchaseGranted)
            let log = try await suite.fulfillment.call(FulfillmentListDeliveries.self, .init(adminToken: Self.admin, id: hook.id)).deliveries
            #expect(log.count == 4 && log.allSatisfy { $0.status == 204 && $0.error == nil })
            // Nothing is sent twice once delivered; the outbox holds nothing for the endpoint.
            try await Self.deliver(suite)
            #expect(receiver.received.count == 4)
            #expect(try await suite.fulfillment.call(FulfillmentListWebhooks.self, .init(adminToken: Self.admin)).webhooks[0].backlog == 0)
        }
    }

    @Test func aFailingAccountWaitsAloneIsRetriedAndGetsEverythingInOrderOnceTheReceiverRecovers() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { receiver.stop() }
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice"), bob = try await suite.register("bob")
            let hook = try await Self.add(suite, receiver.url)
            receiver.fail([alice.accountId])
            try await Self.coins(suite, alice, 1)
            try await Self.coins(suite, bob, 1)
            try await Self.coins(suite, alice, 2)
            try await Self.deliver(suite)
            #expect(receiver.events.map(\.accountId) == [bob.accountId], "bob's event flows; alice's wait")
            let outbox = try await suite.fulfillment.call(FulfillmentListOutbox.self, .init(adminToken: Self.admin)).items
            let waiting = try #require(outbox.first { $0.kind == "webhook" })
            #expect(waiting.key == "\(hook.id) \(alice.accountId)" && waiting.attempts == 1 && waiting.lastError?.contains("500") == true)
            #expect(waiting.nextAttemptAtMs - suite.clock.nowMs <= 1_000, "the first retry within a second")
            // Retried on its schedule, doubling: still failing, still waiting.
            var gaps: [Int64] = []
            for _ in 0..<6 {
                let item = try await suite.fulfillment.call(FulfillmentListOutbox.self, .init(adminToken: Self.admin)).items.first {
                    $0.kind == "webhook"
                }!
                gaps.append(item.nextAttemptAtMs - suite.clock.nowMs)
                suite.clock.advance(ms: item.nextAttemptAtMs - suite.clock.nowMs)
                try await Self.deliver(suite)
            }
            // Failure n waits half to all of 2^(n-1) seconds.
            for (n, gap) in gaps.enumerated() { #expect((500 << Int64(n))...(1_000 << Int64(n)) ~= gap, "\(gaps)") }
            let failures = try await suite.fulfillment.call(FulfillmentListDeliveries.self, .init(adminToken: Self.admin, id: hook.id)).deliveries
            #expect(failures.filter { $0.status == 500 }.count == 7 && failures.allSatisfy { $0.status == 500 ? $0.sequence == 1 : true })
            // Recovered: alice's two events, in order, on the next attempt.
            receiver.fail([])
            suite.clock.advance(ms: 3_600_000)
            try await Self.deliver(suite)
            #expect(receiver.events.filter { $0.accountId == alice.accountId }.map(\.sequence) == [1, 2])
            #expect(
                try await suite.fulfillment.call(FulfillmentListOutbox.self, .init(adminToken: Self.admin)).items.filter { $0.kind == "webhook" }
                    .isEmpty)
        }
    }

    /// After failures on the hourly schedule, a round that delivers some events and fails on the next starts the schedule
    /// again: the new failure is retried within a second (until 2026-11-30 it waited as the seventh failure).
    @Test func aFailureAfterProgressIsRetriedWithinASecond() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { receiver.stop() }
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            _ = try await Self.add(suite, receiver.url)
            receiver.fail([alice.accountId])
            try await Self.coins(suite, alice, 1)
            try await Self.coins(suite, alice, 1)
            try await Self.deliver(suite)
            func item() async throws -> OutboxEntry {
                try #require(
                    try await suite.fulfillment.call(FulfillmentListOutbox.self, .init(adminToken: Self.admin)).items.first { $0.kind == "webhook" })
            }
            for _ in 0..<6 {
                suite.clock.advance(ms: try await item().nextAttemptAtMs - suite.clock.nowMs)
                try await Self.deliver(suite)
            }
            let failing = try await item()
            #expect(failing.attempts == 7 && failing.nextAttemptAtMs - suite.clock.nowMs >= 32_000, "\(failing)")
            receiver.fail(alice.accountId, from: 2)
            suite.clock.advance(ms: try await item().nextAttemptAtMs - suite.clock.nowMs)
            try await Self.deliver(suite)
            #expect(receiver.events.map(\.sequence) == [1], "the first delivered, the second failed")
            let after = try await item()
            #expect(after.attempts == 1 && after.nextAttemptAtMs - suite.clock.nowMs <= 1_000, "\(after)")
        }
    }

    /// A worker that read the endpoint active before it was paused claims nothing of it after (until 2026-11-30 it went on
    /// delivering a round's worth after the pause was answered).
    @Test func aPausedEndpointsItemsAreNotClaimed() async throws {
        try await Self.withAliceWaiting { suite, alice, hook in
            _ = try await suite.fulfillment.call(FulfillmentPauseWebhook.self, .init(adminToken: Self.admin, id: hook.id, paused: true))
            suite.clock.advance(ms: 2_000)
            let claimed = try await Self.claim(suite, hook)
            #expect(claimed.isEmpty, "\(claimed)")
        }
    }

    /// A round in flight when an operator resumes a failing endpoint: its failure, counted from before the resume, does
    /// not mark the endpoint failing again (until 2026-11-30 it did, seconds after the resume was answered).
    @Test func aRoundInFlightDoesNotUndoAnOperatorsResumeNorOutliveADelete() async throws {
        try await Self.withAliceWaiting { suite, alice, hook in
            suite.clock.advance(ms: 4 * 86_400_000)
            let claimed = try #require(
                try await Self.claim(suite, hook).first)
            _ = try await suite.store.setWebhookState(hook.id, "active", nowMs: suite.clock.nowMs, leaseMs: 60_000)
            try await suite.store.settleWebhook(
                WebhookSettlement(
                    item: claimed, endpointId: hook.id, accountId: alice.accountId, deliveredSequence: 0, generation: 0, attempts: [],
                    failure: "HTTP 500", nextAttemptAtMs: suite.clock.nowMs + 3_600_000, more: false, progressed: false, givesUp: true),
                nowMs: suite.clock.nowMs)
            let listed = try await suite.fulfillment.call(FulfillmentListWebhooks.self, .init(adminToken: Self.admin)).webhooks
            #expect(listed.map(\.state) == ["active"], "\(listed.map(\.state))")
            // Deleted while a round is in flight: the round's attempts are not kept for an endpoint that is gone.
            suite.clock.advance(ms: 61_000)  // past the first round's lease
            let inFlight = try #require(
                try await Self.claim(suite, hook).first)
            _ = try await suite.fulfillment.call(FulfillmentDeleteWebhook.self, .init(adminToken: Self.admin, id: hook.id))
            let attempt = WebhookDelivery(
                eventId: "e", accountId: alice.accountId, sequence: 1, attemptedAtMs: suite.clock.nowMs, status: 500, latencyMs: 1, error: "HTTP 500")
            try await suite.store.settleWebhook(
                WebhookSettlement(
                    item: inFlight, endpointId: hook.id, accountId: alice.accountId, deliveredSequence: 0, generation: 0, attempts: [attempt],
                    failure: "HTTP 500", nextAttemptAtMs: suite.clock.nowMs + 1_000, more: false, progressed: false, givesUp: false),
                nowMs: suite.clock.nowMs)
            #expect(try await suite.store.webhookDeliveries(hook.id, limit: 10).isEmpty)
        }
    }

    @Test func threeDaysOfFailureMarkTheEndpointFailingUntilAnOperatorRedeliversFromACursor() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { receiver.stop() }
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice"), bob = try await suite.register("bob")
            let hook = try await Self.add(suite, receiver.url)
            try await Self.coins(suite, bob, 1)
            try await Self.deliver(suite)
            receiver.fail([alice.accountId])
            try await Self.coins(suite, alice, 1)
            try await Self.deliver(suite)
            // Two days and 23 hours of hourly attempts: still retried.
            for _ in 0..<71 {
                suite.clock.advance(ms: 3_600_000)
                try await Self.deliver(suite)
            }
            var endpoint = try await suite.fulfillment.call(FulfillmentListWebhooks.self, .init(adminToken: Self.admin)).webhooks[0]
            #expect(endpoint.state == "active" && endpoint.backlog == 1)
            suite.clock.advance(ms: 3_600_000 + 60_000)
            try await Self.deliver(suite)
            endpoint = try await suite.fulfillment.call(FulfillmentListWebhooks.self, .init(adminToken: Self.admin)).webhooks[0]
            #expect(endpoint.state == "failing", "three days without progress")
            // Failing: nothing more is sent, even to accounts that would take it, until an operator acts.
            receiver.fail([])
            try await Self.coins(suite, bob, 1)
            suite.clock.advance(ms: 3_600_000)
            try await Self.deliver(suite)
            #expect(receiver.events.count == 1)
            // Redelivered from the cursor of bob's first event: everything after it, alice's included, in order.
            let first = try #require(try await Self.feed(suite).first)
            let redelivered = try await suite.fulfillment.call(
                FulfillmentRedeliverWebhook.self, .init(adminToken: Self.admin, id: hook.id, after: first.cursor))
            #expect(redelivered.accounts == 2)
            try await Self.deliver(suite)
            let later = try await Self.feed(suite).dropFirst().map(\.id)
            #expect(receiver.events.count == 3 && Set(receiver.events.dropFirst().map(\.id)) == Set(later))
            #expect(receiver.events.filter { $0.accountId == alice.accountId }.map(\.sequence) == [1])
            #expect(receiver.events.filter { $0.accountId == bob.accountId }.map(\.sequence) == [1, 2])
            endpoint = try await suite.fulfillment.call(FulfillmentListWebhooks.self, .init(adminToken: Self.admin)).webhooks[0]
            #expect(endpoint.state == "active" && endpoint.backlog == 0)
            let audit = try await suite.fulfillment.call(FulfillmentListAudit.self, .init(adminToken: Self.admin)).entries.map(\.action)
            #expect(audit.contains("redeliverWebhook") && audit.contains("addWebhook"))
        }
    }

    @Test func pausedEndpointsKeepTheirEventsAndDeletedOnesForgetThem() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { receiver.stop() }
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let hook = try await Self.add(suite, receiver.url, types: [.coinsSpent])
            let paused = try await suite.fulfillment.call(FulfillmentPauseWebhook.self, .init(adminToken: Self.admin, id: hook.id))
            #expect(paused.state == "paused")
            try await Self.coins(suite, alice, 1)
            _ = try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: alice.session, amount: 5, idempotencyKey: "s"))
            try await Self.deliver(suite)
            #expect(receiver.received.isEmpty)
            _ = try await suite.fulfillment.call(FulfillmentPauseWebhook.self, .init(adminToken: Self.admin, id: hook.id, paused: false))
            try await Self.deliver(suite)
            #expect(receiver.events.map(\.type) == [.coinsSpent], "only the types it asked for")
            _ = try await suite.fulfillment.call(FulfillmentDeleteWebhook.self, .init(adminToken: Self.admin, id: hook.id))
            _ = try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: alice.session, amount: 5, idempotencyKey: "t"))
            try await Self.deliver(suite)
            #expect(receiver.received.count == 1)
            do {
                _ = try await suite.fulfillment.call(FulfillmentRotateWebhookSecret.self, .init(adminToken: Self.admin, id: hook.id))
                Issue.record("rotated a deleted endpoint")
            } catch let error as RPCError {
                #expect(error.reason == "webhookNotFound")
            }
        }
    }

    /// Accounts whose requests hang hold only their own slots: while the receiver holds every request, the worker has as
    /// many accounts in flight at once as its concurrency allows, not the HTTP client's default of 8 connections a host
    /// (which queued the rest behind the held ones until those timed out).
    @Test func heldRequestsHoldOnlyTheirOwnAccounts() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { receiver.stop() }
        let accounts = 12
        try await SuiteFixture.with(configure: {
            $0.webhooks.concurrency = accounts
            $0.webhooks.requestTimeoutMs = 50_000
        }) { suite in
            _ = try await Self.add(suite, receiver.url)
            for i in 0..<accounts { try await Self.coins(suite, try await suite.register("held\(i)"), 1) }
            receiver.hold(true)
            let worker = Task { try await WebhookWorkerService(service: suite.service, logger: .init(label: "webhooks")).run() }
            defer { worker.cancel() }
            let deadline = ContinuousClock.now + .seconds(20)  // far below the requests' timeout
            while receiver.waiting < accounts && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
            #expect(receiver.waiting == accounts, "every account's first event in flight at once")
            receiver.hold(false)
            while receiver.received.count < accounts && ContinuousClock.now < deadline + .seconds(20) { try await Task.sleep(for: .milliseconds(10)) }
            #expect(Set(receiver.events.map(\.accountId)).count == accounts)
        }
    }

    /// The worker runs beside the server (as in the executable); a receiver holding every request does not hold redeems.
    @Test func aReceiverThatDoesNotAnswerDoesNotSlowRedeems() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { receiver.stop() }
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            _ = try await Self.add(suite, receiver.url)
            receiver.hold(true)
            let worker = Task { try await WebhookWorkerService(service: suite.service, logger: .init(label: "webhooks")).run() }
            defer { worker.cancel() }
            try await Self.coins(suite, alice, 1)
            while receiver.waiting == 0 { await Task.yield() }  // the first delivery is now held by the receiver
            for i in 0..<10 { try await Self.coins(suite, alice, i + 1) }
            #expect(receiver.waiting == 1 && receiver.received.isEmpty, "ten redeems committed while a delivery is held")
            #expect(try await suite.balance(alice.session) == 5_600)
            receiver.hold(false)
        }
    }
}
