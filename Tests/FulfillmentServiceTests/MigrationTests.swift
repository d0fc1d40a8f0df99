import Foundation
import GRDB
import IAPProtocol
import Testing

@testable import FulfillmentService

/// A v1 database (one wallet per account, `shortfall` for refunded spent coins) upgraded in place: nothing
/// is lost, the owed coins become debt in the Production scope, and the ledger stays append-only.
@Suite struct MigrationTests {
    /// A new SQLite file migrated up to `version` (nil: every migration); the caller removes `path`.
    static func database(upTo version: String?) throws -> (DatabaseQueue, path: String) {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("migrate-\(UUID().uuidString).sqlite").path
        let queue = try DatabaseQueue(path: path)
        if let version { try FulfillmentStore.migrator.migrate(queue, upTo: version) } else { try FulfillmentStore.migrator.migrate(queue) }
        return (queue, path)
    }

    @Test func aVersion1LedgerUpgradesWithItsDebtAndInvariantsIntact() async throws {
        let (queue, path) = try Self.database(upTo: "v1")
        defer { try? FileManager.default.removeItem(atPath: path) }
        try await queue.write { db in
            try db.execute(
                sql: """
                    INSERT INTO processedTransaction (environment, transactionId, originalTransactionId, accountId, productId, grantKind,
                                                      coinsGranted, purchaseDateMs, processedAtMs, revokedAtMs, revokeReason)
                    VALUES ('Production', 't1', 't1', 'alice', 'coins.100', 'coins', 100, 1, 1, 3, 'refunded');
                    INSERT INTO ownership (environment, originalTransactionId, accountId, productId, boundAtMs)
                    VALUES ('Production', 't1', 'alice', 'coins.100', 1);
                    INSERT INTO ledger (accountId, delta, balance, kind, environment, transactionId, idempotencyKey, memo, shortfall, createdAtMs)
                    VALUES ('alice', 100, 100, 'grant', 'Production', 't1', NULL, 'coins.100', 0, 1),
                           ('alice', -70, 30, 'spend', NULL, NULL, 'sword', NULL, 0, 2),
                           ('alice', -30, 0, 'reversal', 'Production', 't1', NULL, 'refunded: coins.100', 70, 3);
                    INSERT INTO wallet (accountId, balance, shortfall) VALUES ('alice', 0, 70);
                    """)
        }
        let store = try FulfillmentStore(writer: queue)
        #expect(try await store.ledgerMismatches().isEmpty)
        let wallet = try await store.balance(accountId: "alice")
        #expect(wallet.balance == 0 && wallet.owed == 70)
        let ledger = try await store.ledger(accountId: "alice", after: 0, limit: 10).entries
        #expect(ledger.map(\.kind) == [.grant, .spend, .reversal])
        #expect(ledger[2].shortfall == 70 && ledger[2].owed == 70)
        // The debt blocks spending and is repaid by the next grant, as for any new debt.
        #expect(try await store.spend(accountId: "alice", amount: 1, idempotencyKey: "k", memo: nil, nowMs: 4) == .owes(owed: 70, balance: 0))
        let grant = VerifiedPurchase(
            environment: "Production", transactionId: "t2", originalTransactionId: "t2", productId: "coins.100",
            purchaseDateMs: 5)
        let applied = try await store.apply(
            [.init(purchase: grant, rule: .coins(perUnit: 100))], accountId: "alice", appAccountToken: nil,
            mode: .redeem, policy: .refuse, nowMs: 5)
        #expect(applied.balance == 30 && applied.owed == 0)
        #expect(try await store.ledgerMismatches().isEmpty)
        // Still append-only.
        await #expect(throws: (any Error).self) { try await queue.write { db in try db.execute(sql: "DELETE FROM ledger") } }
        await #expect(throws: (any Error).self) { try await queue.write { db in try db.execute(sql: "UPDATE ledger SET delta = 0") } }
    }
}

/// The worker's batch of due notifications reads its index only, in order, and stops at the batch size: no row of
/// a backlog beyond the batch is read and nothing is sorted (before v8 every pending row was read and sorted for
/// each batch of 100, so draining a backlog cost its square).
@Suite struct InboxQueryPlanTests {
    @Test func dueNotificationsUseTheirIndex() async throws {
        let (queue, path) = try MigrationTests.database(upTo: nil)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let plan = try await queue.read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + InboxRecords.dueSQL[.sqlite]!, arguments: [0, 100]).map {
                $0["detail"] as String
            }
        }
        #expect(plan.contains { $0.contains("COVERING INDEX inbox_pending_order") }, "\(plan)")
        // The outer ORDER BY sorts the batch (at most `limit` rows); the inner one must not sort the backlog.
        #expect(plan.filter { $0.contains("TEMP B-TREE") }.count <= 1, "\(plan)")
        #expect(!plan.contains { $0.hasPrefix("SCAN") && !$0.contains("INDEX") }, "\(plan)")

        // And the batch is what it was: pending, due, in signed order, at most `limit`.
        let store = try FulfillmentStore(writer: queue)
        for (i, signed) in [30, 10, 20, 40].enumerated() {
            _ = try await store.recordNotification(
                InboxEntry(
                    notificationUUID: "n\(i)", notificationType: "REFUND", subtype: nil, signedDateMs: Int64(signed), signedPayload: "p",
                    notification: Array("{}".utf8), receivedAtMs: Int64(i), state: .pending, attempts: 0, nextAttemptAtMs: i == 3 ? 1_000 : 0,
                    lastError: nil, processedAtMs: nil, originalTransactionId: nil))
        }
        #expect(try await store.dueNotifications(nowMs: 500, limit: 2).map(\.notificationUUID) == ["n1", "n2"])
        #expect(try await store.dueNotifications(nowMs: 500, limit: 10).map(\.notificationUUID) == ["n1", "n2", "n0"])
    }

    /// v8 moves payloads out of the inbox row: an entry recorded before it comes back whole after it.
    @Test func aNotificationAppliedBeforeTheInboxExistedStaysApplied() async throws {
        let (queue, path) = try MigrationTests.database(upTo: "v1")
        defer { try? FileManager.default.removeItem(atPath: path) }
        try await queue.write { db in
            try db.execute(sql: "INSERT INTO appliedNotification (notificationUUID, notificationType, appliedAtMs) VALUES ('old', 'REFUND', 1)")
        }
        let store = try FulfillmentStore(writer: queue)
        #expect(try await store.notificationWasApplied("old"))
        #expect(try await store.notificationWasApplied("new") == false)
        // A database that never had the old table's rows answers without reading it.
        let (fresh, freshPath) = try MigrationTests.database(upTo: nil)
        defer { try? FileManager.default.removeItem(atPath: freshPath) }
        #expect(try await FulfillmentStore(writer: fresh).notificationWasApplied("old") == false)
    }

    @Test func anInboxEntryRecordedBeforeV8KeepsItsPayload() async throws {
        let (queue, path) = try MigrationTests.database(upTo: "v7-renewal-state-and-reinstatement")
        defer { try? FileManager.default.removeItem(atPath: path) }
        try await queue.write { db in
            try db.execute(
                sql: """
                    INSERT INTO notificationInbox (notificationUUID, notificationType, subtype, signedDateMs, signedPayload, notification,
                        receivedAtMs, state, attempts, nextAttemptAtMs, lastError, processedAtMs, originalTransactionId)
                    VALUES ('u1', 'REFUND', NULL, 5, 'header.payload.signature', X'7B7D', 6, 'parked', 10, 7, 'kept failing', NULL, 't1')
                    """)
        }
        let store = try FulfillmentStore(writer: queue)
        let entry = try #require(try await store.notification("u1"))
        #expect(entry.signedPayload == "header.payload.signature" && entry.notification == Array("{}".utf8))
        #expect(entry.state == .parked && entry.attempts == 10 && entry.lastError == "kept failing" && entry.originalTransactionId == "t1")
        try await store.settleNotification("u1", state: .applied, attempts: 11, nextAttemptAtMs: 8, lastError: nil, nowMs: 9)
        #expect(try await store.notifications(state: .applied, limit: 10).map(\.signedPayload) == ["header.payload.signature"])
    }

    @Test func aTieWaitingBeforeTheOutboxMovesIntoIt() async throws {
        let (queue, path) = try MigrationTests.database(upTo: "v8-inbox-payload-apart")
        defer { try? FileManager.default.removeItem(atPath: path) }
        try await queue.write { db in
            try db.execute(
                sql: """
                    INSERT INTO accountTokenOutbox (originalTransactionId, appAccountToken, attempts, nextAttemptAtMs, lastError)
                    VALUES ('t1', 'token-1', 3, 70, 'apple was down')
                    """)
        }
        let store = try FulfillmentStore(writer: queue)
        let listing = try await store.outbox(limit: 10)
        #expect(listing.total == 1 && listing.oldestCreatedAtMs == 70)
        let item = try #require(listing.items.first)
        #expect(item.kind == "appAccountToken" && item.key == "t1" && item.payload == "token-1" && item.attempts == 3)
        #expect(item.nextAttemptAtMs == 70 && item.lastError == "apple was down")
        #expect(try await store.dueOutbox(nowMs: 70, limit: 10).map(\.key) == ["t1"], "due, and claimed by the worker that asks")
    }
}
