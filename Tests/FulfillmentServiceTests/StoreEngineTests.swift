import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import Logging
import PostgresSupport
import RPCTestSupport
import Testing

/// A fulfillment database on one engine, opened by `instances` stores at once: instances of the service
/// sharing it (several pools on one SQLite file, or several pools on one PostgreSQL database).
enum StoreEngine: String, Sendable, CustomTestStringConvertible {
    case sqlite, postgres

    /// PostgreSQL when a server is configured or installed (`TestPostgres`).
    static var available: [StoreEngine] { TestPostgres.isAvailable ? [.sqlite, .postgres] : [.sqlite] }

    var testDescription: String { rawValue }

    func open(instances: Int = 1) async throws -> StoreInstances {
        switch self {
        case .sqlite:
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("store-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            return StoreInstances(stores: try (0..<instances).map { _ in try FulfillmentStore.open(directory: dir) }, directory: dir, url: nil)
        case .postgres:
            let url = try PostgresURL(try await TestPostgres.newDatabase())
            var stores: [any FulfillmentStorage & FulfillmentInvariants] = []
            for _ in 0..<instances {
                let pool = try PostgresPool(url: url, schema: "fulfillment", connections: 6, logger: Logger(label: "store-test"))
                stores.append(try await PostgresFulfillmentStore(pool: pool))
            }
            return StoreInstances(stores: stores, directory: nil, url: url)
        }
    }
}

struct StoreInstances: Sendable {
    let stores: [any FulfillmentStorage & FulfillmentInvariants]
    let directory: URL?
    let url: PostgresURL?

    var first: any FulfillmentStorage & FulfillmentInvariants { stores[0] }
    subscript(i: Int) -> any FulfillmentStorage & FulfillmentInvariants { stores[i % stores.count] }

    func close() {
        for store in stores { try? store.close() }
        if let directory { try? FileManager.default.removeItem(at: directory) }
    }

    func with<T>(_ body: (StoreInstances) async throws -> T) async throws -> T {
        do {
            let result = try await body(self)
            close()
            return result
        } catch {
            close()
            throw error
        }
    }
}

func coins(_ transactionId: String, original: String? = nil, at ms: Int64 = 1) -> PlannedPurchase {
    PlannedPurchase(
        purchase: VerifiedPurchase(
            environment: "Production", transactionId: transactionId, originalTransactionId: original ?? transactionId,
            productId: "coins.100", purchaseDateMs: ms),
        rule: .coins(perUnit: 100))
}

/// The store contract on both engines: what the grant rules and the schema keep true when instances race.
@Suite struct StoreEngineTests {
    /// Workers of several instances take due outbox items concurrently: each item is claimed by one of them, and is
    /// due again only when the claim's lease ends (a worker that died mid-delivery).
    @Test(arguments: StoreEngine.available)
    func outboxItemsAreClaimedByOneWorkerAtATime(engine: StoreEngine) async throws {
        try await engine.open(instances: 3).with { db in
            _ = try await db.first.apply(
                (0..<30).map { coins(String(2_000_000_100 + $0)) }, accountId: "alice", appAccountToken: "tok", owed: .ties,
                mode: .redeem, policy: .refuse, answerScope: .production, nowMs: 10)
            let claimed = try await withThrowingTaskGroup(of: [Int64].self) { group in
                for i in 0..<3 {
                    group.addTask {
                        var mine: [Int64] = []
                        for _ in 0..<20 {  // bounded: 30 items in batches of 4 need at most 8 rounds in all
                            let batch = try await db[i].dueOutbox(nowMs: 100, limit: 4)
                            if batch.isEmpty { break }
                            mine += batch.map(\.id)
                        }
                        return mine
                    }
                }
                return try await group.reduce(into: [Int64]()) { $0 += $1 }
            }
            #expect(claimed.count == 30 && Set(claimed).count == 30, "each item claimed once: \(claimed.count) claims")
            // On PostgreSQL a claim skips what another holds, without aborting either (READ COMMITTED, `claimWrite`).
            let retries = (0..<3).compactMap { (db[$0] as? PostgresFulfillmentStore)?.pool.retries }.reduce(0, +)
            #expect(retries == 0, "claims ran again \(retries) times")
            #expect(try await db.first.dueOutbox(nowMs: 100 + OutboxRetry.leaseMs - 1, limit: 100).isEmpty)
            #expect(try await db.first.dueOutbox(nowMs: 100 + OutboxRetry.leaseMs, limit: 100).count == 30, "due again after the lease")
        }
    }

    @Test(arguments: StoreEngine.available)
    func concurrentRedeemsOfOneReceiptFromTwoAccountsThroughThreeInstancesGrantOnce(engine: StoreEngine) async throws {
        try await engine.open(instances: 3).with { db in
            let outcomes = try await withThrowingTaskGroup(of: RedeemOutcome.self) { group in
                for i in 0..<200 {
                    group.addTask {
                        try await db[i].apply(
                            [coins("2000000001")], accountId: i % 2 == 0 ? "alice" : "bob", appAccountToken: nil, mode: .redeem,
                            policy: .refuse, answerScope: .production, nowMs: 10
                        ).results[0].outcome
                    }
                }
                return try await group.reduce(into: [RedeemOutcome]()) { $0.append($1) }
            }
            #expect(outcomes.filter { $0 == .granted }.count == 1)
            #expect(outcomes.allSatisfy { [.granted, .alreadyGranted, .ownedByAnotherAccount].contains($0) })
            let alice = try await db.first.balance(accountId: "alice", scope: .production).balance
            let bob = try await db.first.balance(accountId: "bob", scope: .production).balance
            #expect(alice + bob == 100 && (alice == 0 || bob == 0))
            #expect(try await db.first.ledgerMismatches().isEmpty)
        }
    }

    @Test(arguments: StoreEngine.available)
    func concurrentSpendsWithOneKeyThroughThreeInstancesSpendOnce(engine: StoreEngine) async throws {
        try await engine.open(instances: 3).with { db in
            for i in 0..<10 {
                _ = try await db.first.apply(
                    [coins("300000000\(i)")], accountId: "alice", appAccountToken: nil, mode: .redeem, policy: .refuse,
                    answerScope: .production, nowMs: 1)
            }
            let outcomes = try await withThrowingTaskGroup(of: SpendOutcome.self) { group in
                for i in 0..<200 {
                    group.addTask {
                        try await db[i].spend(
                            accountId: "alice", scope: .production, amount: 10, idempotencyKey: "sword", memo: "a sword", nowMs: 20)
                    }
                }
                return try await group.reduce(into: [SpendOutcome]()) { $0.append($1) }
            }
            #expect(outcomes.filter { $0 == .spent(balance: 990) }.count == 1)
            #expect(outcomes.filter { $0 == .replayed(balance: 990) }.count == 199)
            #expect(try await db.first.balance(accountId: "alice", scope: .production).balance == 990)
            let ledger = try await db.first.ledger(accountId: "alice", scope: .production, after: 0, limit: 1000).entries
            #expect(ledger.filter { $0.kind == .spend }.count == 1)
            #expect(try await db.first.ledgerMismatches().isEmpty)
            // The same key with other terms is a conflict, never a second spend.
            #expect(
                try await db[1].spend(accountId: "alice", scope: .production, amount: 11, idempotencyKey: "sword", memo: "a sword", nowMs: 21)
                    == .keyConflict)
        }
    }

    @Test(arguments: StoreEngine.available)
    func refundsReversalsAndDebtAddUp(engine: StoreEngine) async throws {
        try await engine.open(instances: 2).with { db in
            _ = try await db[0].apply(
                [coins("2000000010")], accountId: "alice", appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production,
                nowMs: 1)
            #expect(
                try await db[1].spend(accountId: "alice", scope: .production, amount: 70, idempotencyKey: "k", memo: nil, nowMs: 2)
                    == .spent(balance: 30))
            #expect(try await db[0].revoke(transactionId: "2000000010", reason: "refunded", nowMs: 3) == .revoked)
            #expect(try await db[1].revoke(transactionId: "2000000010", reason: "refunded", nowMs: 4) == .alreadyRevoked)
            #expect(try await db[0].balance(accountId: "alice", scope: .production) == Wallet(balance: 0, owed: 70))
            #expect(
                try await db[1].spend(accountId: "alice", scope: .production, amount: 1, idempotencyKey: "k2", memo: nil, nowMs: 5)
                    == .owes(owed: 70, balance: 0))
            #expect(try await db[1].reinstate(transactionId: "2000000010", nowMs: 6))
            #expect(try await db[0].reinstate(transactionId: "2000000010", nowMs: 7) == false)
            #expect(try await db[0].balance(accountId: "alice", scope: .production) == Wallet(balance: 30, owed: 0))
            #expect(try await db[0].revoke(transactionId: "unknown", reason: "refunded", nowMs: 8) == .notFound)
            #expect(try await db.first.duplicateLedgerEffects().isEmpty)
            #expect(try await db.first.ledgerMismatches().isEmpty)
        }
    }

    /// An administrator's revocation (fraud, a chargeback) stays: a store's later word about the purchase, Apple's current
    /// state or a refund reversal, gives back only what a store's own refund or revocation took. Before, any later
    /// notification carrying Apple's answer (a delayed ONE_TIME_CHARGE, the hourly reconciliation) gave the coins back.
    @Test(arguments: StoreEngine.available)
    func aStoresLaterWordGivesBackOnlyWhatAStoreTook(engine: StoreEngine) async throws {
        try await engine.open(instances: 2).with { db in
            _ = try await db[0].apply(
                [coins("2000000040"), coins("2000000041")], accountId: "alice", appAccountToken: nil, mode: .redeem, policy: .refuse,
                answerScope: .production, nowMs: 1)
            #expect(try await db[0].revoke(transactionId: "2000000040", reason: "fraud", nowMs: 2) == .revoked)
            #expect(try await db[1].revoke(transactionId: "2000000041", reason: "refunded", nowMs: 2) == .revoked)
            #expect(try await db[1].processed(transactionId: "2000000040")?.revokeReason == "fraud")
            #expect(try await db[1].reinstate(transactionId: "2000000040", nowMs: 3) == false)
            #expect(try await db[0].reinstate(transactionId: "2000000041", nowMs: 3))
            #expect(try await db[0].balance(accountId: "alice", scope: .production) == Wallet(balance: 100, owed: 0))
            #expect(try await db.first.ledgerMismatches().isEmpty)
        }
    }

    /// The refund of last month's renewal, on both engines' SQL: the paid period after it keeps its access; the current
    /// period's refund ends it.
    @Test(arguments: StoreEngine.available)
    func aRefundOfAnEarlierPeriodLeavesTheLaterPaidOne(engine: StoreEngine) async throws {
        try await engine.open(instances: 2).with { db in
            func period(_ id: String, from start: Int64) -> PlannedPurchase {
                PlannedPurchase(
                    purchase: VerifiedPurchase(
                        environment: "Production", transactionId: id, originalTransactionId: "3000000050", productId: "sub.premium",
                        purchaseDateMs: start, expiresDateMs: start + 100),
                    rule: .subscription(entitlement: "premium"))
            }
            for (i, id) in ["3000000050", "3000000051", "3000000052"].enumerated() {
                _ = try await db[i % 2].apply(
                    [period(id, from: Int64(i) * 100)], accountId: "alice", appAccountToken: nil, mode: .redeem, policy: .refuse,
                    answerScope: .production, nowMs: Int64(i) * 100 + 50)
            }
            @Sendable func now(_ ms: Int64) async throws -> [Entitlement] {
                try await db[1].apply(
                    [], accountId: "alice", appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production, nowMs: ms
                ).entitlements
            }
            #expect(try await db[0].revoke(transactionId: "3000000051", reason: "refunded", nowMs: 260) == .revoked)
            #expect(try await now(270).map(\.expiresAtMs) == [300])
            #expect(try await db[1].revoke(transactionId: "3000000052", reason: "refunded", nowMs: 280) == .revoked)
            #expect(try await now(290).isEmpty)
            #expect(try await db.first.ledgerMismatches().isEmpty)
        }
    }

    /// A later period is judged by purchase order on both engines' SQL (`laterPeriodHeld`): after an upgrade from a yearly
    /// plan to a monthly one, a refund of the replaced yearly period leaves the monthly access, and a refund of the monthly
    /// period ends it (the yearly one ends later but was bought first). Google Play's orders share their token's start
    /// time: there the later end decides, as before. (Until 2026-11-30 by expiry alone: seen failing so.)
    /// Apple's refunds of a purchase not redeemed yet, remembered on both engines' SQL: a prorated one's share, then the
    /// whole (or the whole first): the whole wins, and the first redeem of a copy signed before the refunds takes it all;
    /// two prorated ones keep the first share. (Until 2026-11-30 the first share stayed, and such a redeem kept coins Apple
    /// had refunded whole.)
    @Test(arguments: StoreEngine.available)
    func aWholeRefundRememberedWinsOverAProratedShare(engine: StoreEngine) async throws {
        try await engine.open().with { db in
            let store = db.first
            func redeem(_ id: String) async throws -> (RedeemOutcome?, Int64) {
                let applied = try await store.apply(
                    [
                        PlannedPurchase(
                            purchase: VerifiedPurchase(
                                environment: "Production", transactionId: id, originalTransactionId: id, productId: "coins.100", quantity: 3,
                                purchaseDateMs: 1),
                            rule: .coins(perUnit: 100))
                    ], accountId: "alice", appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production, nowMs: 10)
                return (applied.results.first?.outcome, applied.balance)
            }
            for (id, shares) in [("4000000070", [33_333, nil]), ("4000000071", [nil, 33_333])] as [(String, [Int64?])] {
                for (i, share) in shares.enumerated() {
                    try await store.recordEarlyRevocation(transactionId: id, reason: "refunded", refundShareMilli: share, nowMs: Int64(i + 1))
                }
                let (outcome, balance) = try await redeem(id)
                #expect(outcome == .revoked && balance == 0, "\(id): \(String(describing: outcome)), \(balance)")
            }
            try await store.recordEarlyRevocation(transactionId: "4000000072", reason: "refunded", refundShareMilli: 33_333, nowMs: 1)
            try await store.recordEarlyRevocation(transactionId: "4000000072", reason: "refunded", refundShareMilli: 66_667, nowMs: 2)
            let (outcome, balance) = try await redeem("4000000072")
            #expect(outcome == .granted && balance == 200, "\(String(describing: outcome)), \(balance)")
        }
    }

    @Test(arguments: StoreEngine.available)
    func laterPeriodsAreJudgedByPurchaseOrderAndEqualStartsByTheirEnd(engine: StoreEngine) async throws {
        try await engine.open().with { db in
            let store = db.first
            func apply(_ id: String, product: String, _ entitlement: String, at start: Int64, ends: Int64, original: String) async throws
                -> [Entitlement]
            {
                try await store.apply(
                    [
                        PlannedPurchase(
                            purchase: VerifiedPurchase(
                                environment: "Production", transactionId: id, originalTransactionId: original, productId: product,
                                purchaseDateMs: start, expiresDateMs: ends),
                            rule: .subscription(entitlement: entitlement))
                    ], accountId: "alice", appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production, nowMs: start + 1
                ).entitlements
            }
            @Sendable func now(_ ms: Int64) async throws -> [String] {
                try await store.apply(
                    [], accountId: "alice", appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production, nowMs: ms
                )
                .entitlements.map(\.entitlement)
            }
            _ = try await apply("3000000060", product: "basic.yearly", "basic", at: 0, ends: 36_500, original: "3000000060")
            #expect(
                try await apply("3000000061", product: "premium.monthly", "premium", at: 3_000, ends: 6_000, original: "3000000060").map(
                    \.entitlement) == ["premium"])
            #expect(try await store.revoke(transactionId: "3000000060", reason: "refunded", nowMs: 4_000) == .revoked)
            #expect(try await now(4_100) == ["premium"], "the replaced yearly period's refund leaves the upgrade's access")
            #expect(try await store.revoke(transactionId: "3000000061", reason: "refunded", nowMs: 4_200) == .revoked)
            #expect(try await now(4_300).isEmpty, "the current period's refund ends the access")
            // Two orders of one Play token, bought "at" its start: the earlier order's refund leaves the later one's access.
            _ = try await apply("GPA.0000-0001", product: "sub.premium", "pro", at: 10_000, ends: 13_000, original: "play-token-1")
            _ = try await apply("GPA.0000-0001..0", product: "sub.premium", "pro", at: 10_000, ends: 16_000, original: "play-token-1")
            #expect(try await store.revoke(transactionId: "GPA.0000-0001", reason: "refunded", nowMs: 14_000) == .revoked)
            #expect(try await now(14_100) == ["pro"])
            #expect(try await store.revoke(transactionId: "GPA.0000-0001..0", reason: "refunded", nowMs: 14_200) == .revoked)
            #expect(try await now(14_300).isEmpty)
            // An administrator revokes a past period; a store's refund of the current one is then reversed: the access stays
            // ended (the administrator's revocation of any period ends it; before 2026-11-30 the reversal gave it back).
            _ = try await apply("3000000070", product: "sub.premium", "vip", at: 20_000, ends: 23_000, original: "3000000070")
            _ = try await apply("3000000071", product: "sub.premium", "vip", at: 23_000, ends: 26_000, original: "3000000070")
            #expect(try await store.revoke(transactionId: "3000000070", reason: "chargeback fraud", nowMs: 24_000) == .revoked)
            #expect(try await now(24_100).contains("vip") == false)
            #expect(try await store.revoke(transactionId: "3000000071", reason: "refunded", nowMs: 24_200) == .revoked)
            #expect(try await store.reinstate(transactionId: "3000000071", nowMs: 24_300))
            #expect(try await now(24_400).contains("vip") == false, "the administrator's revocation holds")
            #expect(try await store.ledgerMismatches().isEmpty)
        }
    }

    /// A refund that came before the redeem, on both engines' SQL: the redeem records the purchase refunded, and the refund's
    /// reversal gives it back whole; reversed before any redeem, the redeem grants it; either way a second refund takes it back.
    @Test(arguments: StoreEngine.available)
    func aRefundBeforeTheRedeemAndItsReversalEndAsIfNeitherHappened(engine: StoreEngine) async throws {
        try await engine.open(instances: 2).with { db in
            @Sendable func redeem(_ id: String) async throws -> AppliedPurchases {
                try await db[0].apply(
                    [coins(id)], accountId: "alice", appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production, nowMs: 3)
            }
            try await db[1].recordEarlyRevocation(transactionId: "2000000030", reason: "refunded", refundShareMilli: nil, nowMs: 1)
            #expect(try await redeem("2000000030").results.map(\.outcome) == [.revoked])
            #expect(try await db[1].reinstate(transactionId: "2000000030", nowMs: 4))
            #expect(try await db[0].balance(accountId: "alice", scope: .production) == Wallet(balance: 100, owed: 0))
            try await db[1].recordEarlyRevocation(transactionId: "2000000031", reason: "refunded", refundShareMilli: nil, nowMs: 5)
            #expect(try await db[0].reinstate(transactionId: "2000000031", nowMs: 6))
            #expect(try await redeem("2000000031").results.map(\.outcome) == [.granted])
            #expect(try await db[0].balance(accountId: "alice", scope: .production) == Wallet(balance: 200, owed: 0))
            for id in ["2000000030", "2000000031"] { #expect(try await db[1].revoke(transactionId: id, reason: "refunded", nowMs: 7) == .revoked) }
            #expect(try await db[0].balance(accountId: "alice", scope: .production) == Wallet(balance: 0, owed: 0))
            #expect(try await db.first.ledgerMismatches().isEmpty)
            #expect(try await db.first.claimMismatches().isEmpty)
        }
    }

    @Test(arguments: StoreEngine.available)
    func theInboxKeepsOneRowPerNotificationUUID(engine: StoreEngine) async throws {
        try await engine.open(instances: 3).with { db in
            let entry = InboxEntry(
                notificationUUID: "uuid-1", notificationType: "REFUND", subtype: nil, signedDateMs: 5, signedPayload: "payload",
                notification: Array("{\"a\":1}".utf8), receivedAtMs: 6, nextAttemptAtMs: 6, originalTransactionId: "2000000020")
            let fresh = try await withThrowingTaskGroup(of: Bool.self) { group in
                for i in 0..<30 { group.addTask { try await db[i].recordNotification(entry).isNew } }
                return try await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
            }
            #expect(fresh == 1)
            let stored = try #require(try await db[2].notification("uuid-1"))
            #expect(stored == entry)
            #expect(try await db[1].dueNotifications(nowMs: 6, limit: 10).map(\.notificationUUID) == ["uuid-1"])
            try await db[0].settleNotification("uuid-1", state: .applied, attempts: 1, nextAttemptAtMs: 6, lastError: nil, nowMs: 7)
            #expect(try await db[1].dueNotifications(nowMs: 100, limit: 10).isEmpty)
            #expect(try await db[2].latestAppliedSignedDate(originalTransactionId: "2000000020", types: ["REFUND", "REVOKE"]) == 5)
            // Only the types asked about count (news about renewal preferences supersedes no refund).
            #expect(try await db[2].latestAppliedSignedDate(originalTransactionId: "2000000020", types: ["DID_RENEW"]) == nil)
            #expect(try await db[2].notifications(state: .applied, limit: 10).map(\.processedAtMs) == [7])
            #expect(try await db[2].notifications(state: .parked, limit: 10).isEmpty)
        }
    }
}
