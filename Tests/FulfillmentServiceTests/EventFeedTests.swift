import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import PostgresSupport
import RPCTestSupport
import SuiteTestSupport
import Testing

/// The event feed on both engines: every kind of change appends exactly one event, in the change's own transaction,
/// with the state after it; nothing else does; and a reader following the cursor never passes an event that commits
/// later (PostgreSQL, where ids are handed out before commit).
/// Serialized: one test holds a transaction open on purpose, and PostgreSQL's feed waits for the oldest running
/// transaction of the whole cluster.
@Suite(.serialized) struct EventFeedTests {
    static func purchase(
        _ id: String, original: String? = nil, product: String, at ms: Int64 = 1, expires: Int64? = nil, cancelled: Int64? = nil
    ) -> VerifiedPurchase {
        VerifiedPurchase(
            environment: "Production", transactionId: id, originalTransactionId: original ?? id, productId: product, purchaseDateMs: ms,
            expiresDateMs: expires, cancellationDateMs: cancelled)
    }

    /// An active endpoint for a private test address (nothing is sent to it here).
    static func addEndpoint(_ store: any FulfillmentStorage, _ id: String) async throws {
        let hook = WebhookRecord(
            id: id, url: "http://10.0.0.1/", types: nil, environments: nil, allowPrivateAddress: true, secret: WebhookSender.newSecret(),
            state: "active", createdAtMs: 0, dispatched: .start)
        #expect(try await store.addWebhook(hook, maxEndpoints: 20))
    }

    /// One coin purchase redeemed per entry of `accounts`, transaction ids counting up from `first`, at 1 s.
    static func redeemCoins(_ store: any FulfillmentStorage, for accounts: [String], from first: Int) async throws {
        for (i, account) in accounts.enumerated() {
            _ = try await store.apply(
                [coins(String(first + i))], accountId: account, appAccountToken: nil, mode: .redeem, policy: .refuse, nowMs: 1_000)
        }
    }

    static func all(_ store: any FulfillmentStorage, account: String? = nil) async throws -> [FulfillmentEvent] {
        try await SuiteFixture.eventFeedSettled(store)
        var out: [FulfillmentEvent] = []
        var after = EventPosition.start
        while true {
            let page = try await store.events(after: after, limit: 7, accountId: account, types: nil)
            out += page
            guard let last = page.last else { return out }
            after = EventPosition(cursor: last.cursor)!
        }
    }

    /// What the feed grew by during `body`.
    static func appended(_ store: any FulfillmentStorage, _ body: () async throws -> Void) async throws -> [FulfillmentEvent] {
        let before = try await all(store).count
        try await body()
        return Array(try await all(store).dropFirst(before))
    }

    @Test(arguments: StoreEngine.available)
    func everyKindOfChangeAppendsOneEventWithTheStateAfterIt(engine: StoreEngine) async throws {
        try await engine.open().with { db in
            let store = db.first
            func apply(_ p: VerifiedPurchase, _ rule: GrantRule, account: String = "alice", policy: OwnershipPolicy = .refuse, now: Int64 = 10)
                async throws -> [FulfillmentEvent]
            {
                try await Self.appended(store) {
                    _ = try await store.apply(
                        [PlannedPurchase(purchase: p, rule: rule)], accountId: account, appAccountToken: nil, mode: .redeem, policy: policy,
                        nowMs: now)
                }
            }
            // Coins: granted, spent, refunded with debt, repaid by the next grant, the refund reversed.
            var e = try await apply(Self.purchase("1001", product: "coins.100"), .coins(perUnit: 100))
            #expect(e.map(\.type) == [.purchaseGranted] && e[0].balance == 100 && e[0].delta == 100 && e[0].transactionId == "1001")
            #expect(e[0].sequence == 1 && e[0].store == "appStore" && e[0].environment == "Production" && e[0].id == "evt_alice_1")
            e = try await Self.appended(store) {
                _ = try await store.spend(accountId: "alice", scope: .production, amount: 70, idempotencyKey: "k1", memo: "sword", nowMs: 11)
            }
            #expect(e.map(\.type) == [.coinsSpent] && e[0].balance == 30 && e[0].delta == -70 && e[0].reason == "sword")
            e = try await Self.appended(store) { _ = try await store.revoke(transactionId: "1001", reason: "refunded", nowMs: 12) }
            #expect(e.map(\.type) == [.purchaseRefunded] && e[0].balance == 0 && e[0].owed == 70 && e[0].delta == -30 && e[0].debt == 70)
            e = try await apply(Self.purchase("1002", product: "coins.100"), .coins(perUnit: 100))
            #expect(e.map(\.type) == [.purchaseGranted, .debtRecovered])
            #expect(e[0].balance == 100 && e[0].owed == 70 && e[1].balance == 30 && e[1].owed == 0 && e[1].recovered == 70)
            e = try await Self.appended(store) { _ = try await store.reinstate(transactionId: "1001", nowMs: 13) }
            #expect(e.map(\.type) == [.purchaseReinstated] && e[0].balance == 130 && e[0].delta == 100)

            // A permanent unlock; a subscription started, renewed, moved to another plan, extended, revoked.
            e = try await apply(Self.purchase("2001", product: "unlock"), .permanent(entitlement: "levels"))
            #expect(e.map(\.type) == [.purchaseGranted] && e[0].entitlement == "levels" && e[0].entitlementEndsAtMs == nil)
            e = try await apply(Self.purchase("3001", product: "sub.basic", expires: 1_000), .subscription(entitlement: "pro"))
            #expect(e.map(\.type) == [.subscriptionStarted] && e[0].entitlementEndsAtMs == 1_000 && e[0].originalTransactionId == "3001")
            e = try await apply(
                Self.purchase("3002", original: "3001", product: "sub.basic", at: 1_000, expires: 2_000), .subscription(entitlement: "pro"))
            #expect(e.map(\.type) == [.subscriptionRenewed] && e[0].entitlementEndsAtMs == 2_000 && e[0].transactionId == "3002")
            e = try await apply(
                Self.purchase("3003", original: "3001", product: "sub.premium", at: 1_500, expires: 3_000), .subscription(entitlement: "pro"))
            #expect(e.map(\.type) == [.subscriptionPlanChanged] && e[0].productId == "sub.premium" && e[0].entitlementEndsAtMs == 3_000)
            e = try await Self.appended(store) { _ = try await store.extendEntitlement(originalTransactionId: "3001", expiresAtMs: 4_000, nowMs: 14) }
            #expect(e.map(\.type) == [.subscriptionExtended] && e[0].entitlementEndsAtMs == 4_000)

            // Renewal states: auto-renew off and on, grace, recovery, billing retry, expiry.
            func renewal(_ signed: Int64, autoRenew: Bool = true, retry: Bool = false, grace: Int64? = nil, intent: Int? = nil) async throws
                -> [FulfillmentEventType]
            {
                try await Self.appended(store) {
                    _ = try await store.recordRenewal(
                        RenewalState(
                            originalTransactionId: "3001", autoRenew: autoRenew, inBillingRetry: retry, gracePeriodExpiresAtMs: grace,
                            expirationIntent: intent, signedDateMs: signed), nowMs: 15)
                }.map(\.type)
            }
            #expect(try await renewal(100) == [], "the first state, renewing as ever: nothing changed")
            #expect(try await renewal(101, autoRenew: false) == [.subscriptionAutoRenewDisabled])
            #expect(try await renewal(99, autoRenew: true) == [], "an older signed state is not kept")
            #expect(try await renewal(102) == [.subscriptionAutoRenewEnabled])
            #expect(try await renewal(103, retry: true, grace: 5_000) == [.subscriptionGracePeriodEntered])
            #expect(try await renewal(104) == [.subscriptionRecovered])
            #expect(try await renewal(105, retry: true) == [.subscriptionBillingRetryEntered])
            #expect(try await renewal(106, autoRenew: false, intent: 2) == [.subscriptionExpired])
            #expect(try await renewal(107, autoRenew: false, intent: 2) == [], "the same state again")

            e = try await Self.appended(store) { _ = try await store.revoke(transactionId: "3003", reason: "revoked", nowMs: 16) }
            #expect(e.map(\.type) == [.purchaseRevoked] && e[0].entitlementEndsAtMs == 16 && e[0].reason == "revoked")

            // Moved to another account (the transfer policy): restored there, transferred away here.
            e = try await apply(
                Self.purchase("2002", original: "2001", product: "unlock"), .permanent(entitlement: "levels"), account: "bob", policy: .transfer)
            #expect(e.map(\.type) == [.purchaseRestored, .purchaseTransferred])
            #expect(e[0].accountId == "bob" && e[0].otherAccountId == "alice" && e[0].sequence == 1 && e[0].entitlementEndsAtMs == nil)
            #expect(e[1].accountId == "alice" && e[1].otherAccountId == "bob" && e[1].entitlementEndsAtMs == 10)
            // Refunded after the move: about the account that holds it now, not the first buyer (development's transfer only).
            e = try await Self.appended(store) { _ = try await store.revoke(transactionId: "2001", reason: "refunded", nowMs: 16) }
            #expect(e.map(\.type) == [.purchaseRefunded] && e[0].accountId == "bob" && e[0].entitlementEndsAtMs == 16)

            // An operator's audited action about an account.
            e = try await Self.appended(store) {
                try await store.recordAudit(
                    action: "grantOrder", accountId: "alice", transactionId: "MX1", reason: "lost purchase", credential: "admin", operatorName: nil,
                    nowMs: 17)
            }
            #expect(e.map(\.type) == [.supportActionTaken] && e[0].action == "grantOrder" && e[0].reason == "lost purchase")

            // Nothing changed, nothing appended: a replayed grant, a replayed spend, a refused spend, an audit about no account.
            e = try await apply(Self.purchase("1002", product: "coins.100"), .coins(perUnit: 100))
            #expect(e.isEmpty)
            e = try await Self.appended(store) {
                _ = try await store.spend(accountId: "alice", scope: .production, amount: 70, idempotencyKey: "k1", memo: "sword", nowMs: 18)
                _ = try await store.spend(accountId: "alice", scope: .production, amount: 1_000_000, idempotencyKey: "k2", memo: nil, nowMs: 18)
                try await store.recordAudit(
                    action: "reconcile", accountId: nil, transactionId: nil, reason: "", credential: "admin", operatorName: nil, nowMs: 18)
            }
            #expect(e.isEmpty)

            // A change that fails rolls its event back with it.
            e = try await Self.appended(store) {
                await #expect(throws: (any Error).self) {
                    var huge = Self.purchase("1003", product: "coins.100")
                    huge.quantity = 1_000_000_000
                    _ = try await store.apply(
                        [coins("1004"), PlannedPurchase(purchase: huge, rule: .coins(perUnit: 1_000_000_000))], accountId: "alice",
                        appAccountToken: nil, mode: .redeem, policy: .refuse, nowMs: 19)
                }
            }
            #expect(e.isEmpty, "\(e.map(\.type))")

            // Sequences run 1, 2, 3, ... per account, cursors only forward, ids stable.
            let everything = try await Self.all(store)
            for account in ["alice", "bob"] {
                #expect(
                    everything.filter { $0.accountId == account }.map(\.sequence)
                        == Array(1...Int64(everything.filter { $0.accountId == account }.count)))
            }
            let positions = everything.map { EventPosition(cursor: $0.cursor)! }
            #expect(positions == positions.sorted() && Set(positions.map(\.cursor)).count == positions.count)
            #expect(Set(everything.map(\.id)).count == everything.count)
            // The filters.
            #expect(try await Self.all(store, account: "bob").map(\.type) == [.purchaseRestored, .purchaseRefunded])
            let spends = try await store.events(after: .start, limit: 100, accountId: nil, types: [.coinsSpent, .debtRecovered])
            #expect(spends.map(\.type) == [.coinsSpent, .debtRecovered])
        }
    }

    /// A pass refunded while another waits behind it: the refund, then the waiting pass moved up.
    @Test(arguments: StoreEngine.available)
    func aPassQueuedBehindARefundedOneIsRescheduled(engine: StoreEngine) async throws {
        try await engine.open().with { db in
            let store = db.first
            for id in ["7001", "7002"] {
                _ = try await store.apply(
                    [PlannedPurchase(purchase: Self.purchase(id, product: "pass.week"), rule: .timeLimited(entitlement: "vip", durationDays: 7))],
                    accountId: "alice", appAccountToken: nil, mode: .redeem, policy: .refuse, nowMs: 1_000)
            }
            let week: Int64 = 7 * 86_400_000
            let e = try await Self.appended(store) { _ = try await store.revoke(transactionId: "7001", reason: "refunded", nowMs: 2_000) }
            #expect(e.map(\.type) == [.purchaseRefunded, .purchaseRescheduled])
            #expect(e[0].entitlementEndsAtMs == 2_000 && e[1].originalTransactionId == "7002" && e[1].entitlementEndsAtMs == 2_000 + week)
        }
    }

    /// Retention drops old events, but never an account's latest (its sequence goes on) nor one an endpoint still owes.
    @Test(arguments: StoreEngine.available)
    func retentionKeepsEachAccountsLatestAndWhatAnEndpointStillOwes(engine: StoreEngine) async throws {
        try await engine.open().with { db in
            let store = db.first
            try await Self.addEndpoint(store, "wh-test")
            try await Self.redeemCoins(store, for: ["alice", "alice", "alice", "bob", "bob"], from: 8_000_000)
            try await SuiteFixture.eventFeedSettled(store)
            let endpoint = try #require(try await store.webhook("wh-test"))
            #expect(try await store.dispatchEvents(to: endpoint, limit: 100, nowMs: 1_000) == 5)
            // Bob's events went out; alice's still wait.
            let items = try await store.dueWebhookItems(endpointId: "wh-test", nowMs: 1_000, limit: 10, leaseMs: 60_000)
            let bobs = try #require(items.first { $0.key == "wh-test bob" })
            try await store.settleWebhook(
                WebhookSettlement(
                    item: bobs, endpointId: "wh-test", accountId: "bob", deliveredSequence: 2, generation: 0, attempts: [], failure: nil,
                    nextAttemptAtMs: 0, more: false, progressed: true, givesUp: false), nowMs: 1_000)
            _ = try await store.apply([coins("8000009")], accountId: "carol", appAccountToken: nil, mode: .redeem, policy: .refuse, nowMs: 9_000)
            #expect(try await store.trimEvents(beforeMs: 5_000) == 1)
            let kept = try await Self.all(store).map { "\($0.accountId) \($0.sequence)" }
            #expect(kept == ["alice 1", "alice 2", "alice 3", "bob 2", "carol 1"])
            _ = try await store.deleteWebhook("wh-test")
            #expect(try await store.trimEvents(beforeMs: 5_000) == 2, "once no endpoint owes them, alice's older two go")
        }
    }

    /// An endpoint filtered by type holds back only what it takes: an account's later events of other types go with
    /// retention (before, every event after the last one delivered to it was kept for good).
    @Test(arguments: StoreEngine.available)
    func retentionIsNotHeldBackByEventsAFilteredEndpointDoesNotTake(engine: StoreEngine) async throws {
        try await engine.open().with { db in
            let store = db.first
            let hook = WebhookRecord(
                id: "wh-grants", url: "http://10.0.0.1/", types: [.purchaseGranted], environments: ["Production"], allowPrivateAddress: true,
                secret: WebhookSender.newSecret(), state: "active", createdAtMs: 0, dispatched: .start)
            #expect(try await store.addWebhook(hook, maxEndpoints: 20))
            try await Self.redeemCoins(store, for: ["alice", "alice"], from: 8_300_000)
            for id in ["8300000", "8300001"] { _ = try await store.revoke(transactionId: id, reason: "refunded", nowMs: 2_000) }
            try await SuiteFixture.eventFeedSettled(store)
            let endpoint = try #require(try await store.webhook("wh-grants"))
            #expect(try await store.dispatchEvents(to: endpoint, limit: 100, nowMs: 3_000) == 4)
            let item = try #require(try await store.dueWebhookItems(endpointId: "wh-grants", nowMs: 3_000, limit: 10, leaseMs: 60_000).first)
            try await store.settleWebhook(
                WebhookSettlement(
                    item: item, endpointId: "wh-grants", accountId: "alice", deliveredSequence: 2, generation: 0, attempts: [], failure: nil,
                    nextAttemptAtMs: 0, more: false, progressed: true, givesUp: false), nowMs: 3_000)
            #expect(try await store.trimEvents(beforeMs: 5_000) == 3, "the two grants delivered, the first refund it never takes")
            #expect(try await Self.all(store).map(\.sequence) == [4])
        }
    }

    /// Retention keeps what an endpoint's dispatch has not reached yet (a long transaction elsewhere holds the feed's
    /// horizon back past the retention): before, only accounts with delivery progress were kept, and the rest of their
    /// events were dropped before any endpoint was given them.
    @Test(arguments: StoreEngine.available)
    func retentionKeepsWhatNoDispatchHasReachedYet(engine: StoreEngine) async throws {
        try await engine.open().with { db in
            let store = db.first
            try await Self.addEndpoint(store, "wh-held")
            try await Self.redeemCoins(store, for: ["alice", "alice", "alice"], from: 8_200_000)
            try await SuiteFixture.eventFeedSettled(store)
            #expect(try await store.trimEvents(beforeMs: 5_000) == 0, "not yet dispatched to the endpoint")
            let endpoint = try #require(try await store.webhook("wh-held"))
            #expect(try await store.dispatchEvents(to: endpoint, limit: 100, nowMs: 1_000) == 3)
            let owed = try await store.undeliveredEvents(endpointId: "wh-held", accountId: "alice", limit: 10)
            #expect(owed?.events.map(\.sequence) == [1, 2, 3])
        }
    }

    /// Made active again (a resume, a redelivery), an endpoint's items waiting long after failures are due at once, but an
    /// item claimed and in flight keeps its lease: claimed again, its account's events would go out twice at once, out of
    /// order. (Seen failing with every item made due, as before 2026-11-30.)
    @Test(arguments: StoreEngine.available)
    func aResumeLeavesAClaimedItemToItsDelivery(engine: StoreEngine) async throws {
        try await engine.open().with { db in
            let store = db.first
            try await Self.addEndpoint(store, "wh-lease")
            try await Self.redeemCoins(store, for: ["alice", "bob"], from: 8_100_000)
            try await SuiteFixture.eventFeedSettled(store)
            let endpoint = try #require(try await store.webhook("wh-lease"))
            #expect(try await store.dispatchEvents(to: endpoint, limit: 100, nowMs: 1_000) == 2)
            let items = try await store.dueWebhookItems(endpointId: "wh-lease", nowMs: 1_000, limit: 10, leaseMs: 60_000)
            #expect(items.map(\.key).sorted() == ["wh-lease alice", "wh-lease bob"])
            // Bob's delivery failed and waits an hour; alice's is still in flight.
            let bobs = try #require(items.first { $0.key == "wh-lease bob" })
            try await store.settleWebhook(
                WebhookSettlement(
                    item: bobs, endpointId: "wh-lease", accountId: "bob", deliveredSequence: 0, generation: 0, attempts: [],
                    failure: "answered HTTP 500", nextAttemptAtMs: 3_601_000, more: false, progressed: false, givesUp: false), nowMs: 1_000)
            #expect(try await store.setWebhookState("wh-lease", "paused", nowMs: 2_000, leaseMs: 60_000))
            #expect(try await store.setWebhookState("wh-lease", "active", nowMs: 3_000, leaseMs: 60_000))
            func due(_ nowMs: Int64) async throws -> [String] {
                try await store.dueWebhookItems(endpointId: "wh-lease", nowMs: nowMs, limit: 10, leaseMs: 60_000).map(\.key)
            }
            #expect(try await due(3_000) == ["wh-lease bob"])
            #expect(try await due(61_000) == ["wh-lease alice"], "alice's when its lease ends")
        }
    }

    /// A round that outlived its lease (a slow settle, a clock behind) and settles after another instance claimed the item
    /// leaves that claim's lease alone: before, its failure made the item due again at its own retry time, and a third
    /// instance claimed it beside the second, sending the account's events twice at once, out of order.
    @Test(arguments: StoreEngine.available)
    func aRoundPastItsLeaseLeavesTheNextClaimAlone(engine: StoreEngine) async throws {
        try await engine.open().with { db in
            let store = db.first
            try await Self.addEndpoint(store, "wh-late")
            try await Self.redeemCoins(store, for: ["alice"], from: 8_400_000)
            try await SuiteFixture.eventFeedSettled(store)
            let endpoint = try #require(try await store.webhook("wh-late"))
            #expect(try await store.dispatchEvents(to: endpoint, limit: 100, nowMs: 1_000) == 1)
            func claim(_ nowMs: Int64) async throws -> OutboxItem? {
                try await store.dueWebhookItems(endpointId: "wh-late", nowMs: nowMs, limit: 10, leaseMs: 60_000).first
            }
            let first = try #require(try await claim(1_000))
            let second = try #require(try await claim(61_000), "the first round's lease ended")
            try await store.settleWebhook(
                WebhookSettlement(
                    item: first, endpointId: "wh-late", accountId: "alice", deliveredSequence: 0, generation: 0, attempts: [],
                    failure: "answered HTTP 500", nextAttemptAtMs: 62_000, more: false, progressed: false, givesUp: false), nowMs: 61_500)
            try await store.releaseWebhookItem(first, nowMs: 61_500)
            #expect(try await claim(62_000) == nil, "the second claim holds it to its lease's end")
            // Nor does its success end the item under the second claim: a new event owed then would make a fresh item due
            // at once beside the one still being sent.
            try await store.settleWebhook(
                WebhookSettlement(
                    item: first, endpointId: "wh-late", accountId: "alice", deliveredSequence: 1, generation: 0, attempts: [],
                    failure: nil, nextAttemptAtMs: 0, more: false, progressed: true, givesUp: false), nowMs: 61_600)
            try await Self.redeemCoins(store, for: ["alice"], from: 8_400_001)
            try await SuiteFixture.eventFeedSettled(store)
            #expect(try await store.dispatchEvents(to: try #require(try await store.webhook("wh-late")), limit: 100, nowMs: 61_700) == 1)
            #expect(try await claim(62_000) == nil, "still the second claim's")
            #expect(try await claim(121_000)?.id == second.id)
        }
    }

    /// The ledger and the feed agree: replaying the feed's coin events per scope ends at every wallet's balance and debt.
    @Test(arguments: StoreEngine.available)
    func theLastEventOfEachAccountCarriesItsWallet(engine: StoreEngine) async throws {
        try await engine.open(instances: 2).with { db in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<40 {
                    group.addTask {
                        let account = "acct\(i % 8)"
                        _ = try await db[i].apply(
                            [coins(String(5_000_000 + i))], accountId: account, appAccountToken: nil, mode: .redeem, policy: .refuse, nowMs: 10)
                        _ = try await db[i + 1].spend(
                            accountId: account, scope: .production, amount: 30, idempotencyKey: "s\(i)", memo: nil, nowMs: 11)
                    }
                }
                try await group.waitForAll()
            }
            let events = try await Self.all(db.first)
            #expect(events.count == 80)
            for i in 0..<8 {
                let mine = events.filter { $0.accountId == "acct\(i)" }
                #expect(mine.map(\.sequence) == Array(1...10))
                #expect(mine.last.map(\.balance) == 350)
                #expect(mine.reduce(0) { $0 + ($1.delta ?? 0) } == 5 * 70, "the deltas add up to the balance")
            }
        }
    }

    /// An event's stored body, as a test writes it straight into the table.
    static func storedBody(account: String) -> String {
        #"{"id":"","cursor":"","accountId":"\#(account)","sequence":0,"type":"coins.spent","occurredAtMs":1,"store":"appStore","environment":"Production","scope":"Production","balance":0,"owed":0}"#
    }

    /// On PostgreSQL an event's id is handed out before its transaction commits: a slow transaction's event (lower id)
    /// becomes visible after a quick one's (higher id). A reader given the quick one first and moving its cursor past it
    /// would never see the slow one. The feed holds back events of transactions younger than the oldest running one.
    @Test(.enabled(if: TestPostgres.isAvailable, "PostgreSQL is not installed"))
    func aReaderNeverPassesAnEventThatCommitsLater() async throws {
        try await StoreEngine.postgres.open().with { db in
            guard let store = db.first as? PostgresFulfillmentStore else { return }
            let release = DispatchSemaphore(value: 0)
            let (inserted, insertedSignal) = AsyncStream<Void>.makeStream()
            let insert = "INSERT INTO event (account_id, sequence, type, occurred_at_ms, environment, balance, owed, body)"
            let body = Self.storedBody(account: "slow")
            let slow = Task.detached {
                try await store.write(locking: []) { s in
                    _ = try s.execute("\(insert) VALUES ('slow', 1, 'coins.spent', 1, 'Production', 0, 0, ?1)", arguments: [.text(body)])
                    insertedSignal.yield()
                    release.wait()  // holds the transaction open (a pool thread), as a slow commit would
                }
            }
            for await _ in inserted { break }
            _ = try await store.apply([coins("6000001")], accountId: "quick", appAccountToken: nil, mode: .redeem, policy: .refuse, nowMs: 2)
            #expect(try await store.events(after: .start, limit: 100, accountId: nil, types: nil).isEmpty, "the quick event is held back")
            release.signal()
            try await slow.value
            // The horizon is the server's (every database's running transactions count): under the test passes' load another
            // test's transaction, begun between the two, may hold back the quick event (or both) a moment longer. Never the
            // quick event alone, then both in order.
            var seen = try await store.events(after: .start, limit: 100, accountId: nil, types: nil)
            let deadline = Date().addingTimeInterval(30)
            while seen.count < 2, Date() < deadline {
                #expect(seen.map(\.accountId) == Array(["slow", "quick"].prefix(seen.count)), "never the later event first")
                try await Task.sleep(nanoseconds: 20_000_000)  // polling the feed, bounded by the deadline
                seen = try await store.events(after: .start, limit: 100, accountId: nil, types: nil)
            }
            #expect(seen.map(\.accountId) == ["slow", "quick"], "the slow transaction's event comes first: it is older")
        }
    }

    /// An endpoint gets exactly what commits after it was added, even while another transaction holds the feed's horizon
    /// back (PostgreSQL): nothing committed before the add, and the event of a transaction still running at the add when
    /// it commits, although its position is before events committed earlier. (Until 2026-11-30 the endpoint started
    /// after the last event committed at the add, and that event was never given to it: seen failing so.)
    @Test(.enabled(if: TestPostgres.isAvailable))
    func anEndpointGetsWhatCommitsAfterItsAddAndNothingFromBefore() async throws {
        try await StoreEngine.postgres.open().with { db in
            guard let store = db.first as? PostgresFulfillmentStore else { return }
            let release = DispatchSemaphore(value: 0)
            let (held, heldSignal) = AsyncStream<Void>.makeStream()
            let holder = Task.detached {
                try await store.write(locking: []) { s in
                    // Takes an xid (the horizon stays before it) and appends an event that commits only after the add.
                    _ = try s.execute(
                        """
                        INSERT INTO event (account_id, sequence, type, occurred_at_ms, environment, balance, owed, body)
                        VALUES ('running', 1, 'coins.spent', 1, 'Production', 0, 0, ?1)
                        """, arguments: [.text(Self.storedBody(account: "running"))])
                    heldSignal.yield()
                    release.wait()  // holds the transaction open (a pool thread), as a slow commit would
                }
            }
            for await _ in held { break }
            _ = try await store.apply([coins("6100001")], accountId: "before", appAccountToken: nil, mode: .redeem, policy: .refuse, nowMs: 2)
            try await Self.addEndpoint(store, "wh-late")
            _ = try await store.apply([coins("6100002")], accountId: "after", appAccountToken: nil, mode: .redeem, policy: .refuse, nowMs: 3)
            release.signal()
            try await holder.value
            try await SuiteFixture.eventFeedSettled(store)
            var endpoint = try #require(try await store.webhook("wh-late"))
            while try await store.dispatchEvents(to: endpoint, limit: 100, nowMs: 4) > 0 {
                endpoint = try #require(try await store.webhook("wh-late"))
            }
            let owed = try await store.dueWebhookItems(endpointId: "wh-late", nowMs: 4, limit: 10, leaseMs: 60_000).map(\.key).sorted()
            #expect(owed == ["wh-late after", "wh-late running"], "\(owed)")
            #expect(endpoint.startSnapshot == nil, "dispatched past the add's snapshot, the skip is no longer read")
        }
    }
}
