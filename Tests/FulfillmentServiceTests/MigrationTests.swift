import Foundation
import GRDB
import IAPProtocol
import Testing

@testable import FulfillmentService

/// The database the eleven steps from 2026-11-22 to 2026-11-26 made, now that they are squashed into one
/// (`FulfillmentStore.steps`, merged). `Fixtures/fulfillment-2026-11-26.sqlite` was made by commit 61f9297's steps from rows
/// written at the step each belonged to: a v1 ledger (one wallet per account, `shortfall` for refunded spent coins), a
/// notification applied before the inbox, an inbox entry from before v8 (payload in its row), a tie waiting in the
/// outbox of v6. It opens untouched, whole, with the squashed schema; a database stopped before the last step is refused.
@Suite struct MigrationTests {
    /// A new SQLite file with every migration (or those up to `upTo`); the caller removes `path`.
    static func database(upTo last: String? = nil) throws -> (DatabaseQueue, path: String) {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("migrate-\(UUID().uuidString).sqlite").path
        let queue = try DatabaseQueue(path: path)
        if let last { try FulfillmentStore.migrator.migrate(queue, upTo: last) } else { try FulfillmentStore.migrator.migrate(queue) }
        return (queue, path)
    }

    /// Every migration after the merged one, as a file the steps made gets them.
    static let since = [
        "v2-content-deliveries", "v3-events", "v4-adjustments", "v5-retention", "v6-play", "v7-transaction-claim", "v8-webhook-start",
        "v9-early-refund-share", "v10-signed-standing",
    ]
    /// The schema every migration makes on a new file: what a file the steps made must end with too.
    static func current() async throws -> Set<String> {
        let (all, allPath) = try database()
        defer { try? FileManager.default.removeItem(atPath: allPath) }
        return Set(try await schema(all))
    }

    /// A copy of the database the steps made.
    static func madeByTheSteps() throws -> (DatabaseQueue, path: String) {
        let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/fulfillment-2026-11-26.sqlite")
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("stepped-\(UUID().uuidString).sqlite").path
        try FileManager.default.copyItem(atPath: fixture.path, toPath: path)
        return (try DatabaseQueue(path: path), path)
    }

    /// `sqlite_master`, each statement without quotes, comments or layout: what SQLite does with the schema.
    static func schema(_ queue: DatabaseQueue) async throws -> [String] {
        try await queue.read { db in
            try Row.fetchAll(db, sql: "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name != 'grdb_migrations'").map { row in
                let sql = (row["sql"] as String?)?.replacing(/--[^\n]*/, with: "").replacing("\"", with: "")
                    .replacing(/\s+/, with: " ").replacing(/\s*([(),;])\s*/) { $0.output.1 }
                return "\(row["type"] as String) \(row["name"] as String) on \(row["tbl_name"] as String): \(sql ?? "-")"
            }.sorted()
        }
    }

    @Test func theSquashedSchemaIsTheOneTheStepsMade() async throws {
        let (stepped, path) = try Self.madeByTheSteps()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let (fresh, freshPath) = try Self.database(upTo: "v1-2026-11-26")
        defer { try? FileManager.default.removeItem(atPath: freshPath) }
        let (old, new) = (try await Self.schema(stepped), try await Self.schema(fresh))
        #expect(old.count > 30, "the schema was read: \(old.count) objects")
        #expect(Set(old).subtracting(new).isEmpty, "only in the stepped database:\n\(Set(old).subtracting(new).sorted().joined(separator: "\n"))")
        #expect(Set(new).subtracting(old).isEmpty, "only in the squashed schema:\n\(Set(new).subtracting(old).sorted().joined(separator: "\n"))")
    }

    @Test func aDatabaseTheStepsMadeOpensWhole() async throws {
        let (queue, path) = try Self.madeByTheSteps()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let store = try FulfillmentStore(writer: queue)
        // The v1 ledger: the owed coins became debt in the Production scope.
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
        // The purchase processed before claims existed has its claim (the migration's), the new one its own.
        let claims = try await queue.read { db in try String.fetchAll(db, sql: "SELECT transaction_id FROM transaction_claim ORDER BY 1") }
        #expect(claims == ["t1", "t2"])
        // Still append-only.
        await #expect(throws: (any Error).self) { try await queue.write { db in try db.execute(sql: "DELETE FROM ledger") } }
        await #expect(throws: (any Error).self) { try await queue.write { db in try db.execute(sql: "UPDATE ledger SET delta = 0") } }

        // A notification applied before the inbox existed stays applied.
        #expect(try await store.notificationWasApplied("old"))
        #expect(try await store.notificationWasApplied("new") == false)

        // An inbox entry recorded before v8 keeps its payload.
        let entry = try #require(try await store.notification("u1"))
        #expect(entry.signedPayload == "header.payload.signature" && entry.notification == Array("{}".utf8))
        #expect(entry.state == .parked && entry.attempts == 10 && entry.lastError == "kept failing" && entry.originalTransactionId == "t1")
        try await store.settleNotification("u1", state: .applied, attempts: 11, nextAttemptAtMs: 8, lastError: nil, nowMs: 9)
        #expect(try await store.notifications(state: .applied, limit: 10).map(\.signedPayload) == ["header.payload.signature"])

        // A tie waiting before the outbox moved into it.
        let listing = try await store.outbox(limit: 10)
        #expect(listing.total == 1 && listing.oldestCreatedAtMs == 70)
        let item = try #require(listing.items.first)
        #expect(item.kind == "appAccountToken" && item.key == "t1" && item.payload == "token-1" && item.attempts == 3)
        #expect(item.nextAttemptAtMs == 70 && item.lastError == "apple was down")
        #expect(try await store.dueOutbox(nowMs: 70, limit: 10).map(\.key) == ["t1"], "due, and claimed by the worker that asks")

        // A new database has no notification from before the inbox, and answers without reading the old table.
        let (fresh, freshPath) = try Self.database(upTo: "v1-2026-11-26")
        defer { try? FileManager.default.removeItem(atPath: freshPath) }
        #expect(try await FulfillmentStore(writer: fresh).notificationWasApplied("old") == false)
    }

    /// A database stopped before the last step (here at v9, as a build of 2026-11-25 left it) is refused with what to do,
    /// and not changed.
    @Test func aDatabaseStoppedBeforeTheLastStepIsRefusedUnchanged() async throws {
        let (queue, path) = try Self.madeByTheSteps()
        defer { try? FileManager.default.removeItem(atPath: path) }
        try await queue.write { db in
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier IN ('v10-one-vocabulary', 'v11-scope-checks')")
        }
        let before = try await Self.schema(queue)
        let refusal = #expect(throws: FulfillmentStore.SchemaTooOld.self) { try FulfillmentStore(writer: queue) }
        #expect(refusal?.description.contains("stopped at v9-outbox") == true && refusal?.description.contains("61f9297") == true)
        #expect(try await Self.schema(queue) == before)
        #expect(try await queue.read { db in try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations") }.count == 9)
        // With the last step, it opens and its steps' names give way to the merged one.
        try await queue.write { db in try db.execute(sql: "INSERT INTO grdb_migrations VALUES ('v10-one-vocabulary'), ('v11-scope-checks')") }
        _ = try FulfillmentStore(writer: queue)
        #expect(
            try await queue.read { db in try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations") } == ["v1-2026-11-26"] + Self.since)
        let (after, now) = (Set(try await Self.schema(queue)), try await Self.current())
        #expect(after == now, "only after the steps:\n\(after.subtracting(now).sorted())\nonly new:\n\(now.subtracting(after).sorted())")
        #expect(before.count > 30)
    }

    /// A file that also went through the name a step had for minutes on 2026-11-23 opens like the others.
    @Test func aStepsRetiredNameIsNotANewerBuilds() async throws {
        let (queue, path) = try Self.madeByTheSteps()
        defer { try? FileManager.default.removeItem(atPath: path) }
        try await queue.write { db in try db.execute(sql: "INSERT INTO grdb_migrations VALUES ('v8-inbox-pending-order')") }
        _ = try FulfillmentStore(writer: queue)
        #expect(
            try await queue.read { db in try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations") } == ["v1-2026-11-26"] + Self.since)
    }

    /// A database a newer build migrated is refused, unchanged, rather than run on a schema this build does not know.
    @Test func aDatabaseANewerBuildMigratedIsRefused() async throws {
        let (queue, path) = try Self.database()
        defer { try? FileManager.default.removeItem(atPath: path) }
        try await queue.write { db in try db.execute(sql: "INSERT INTO grdb_migrations VALUES ('v2-from-the-future')") }
        let refusal = #expect(throws: FulfillmentStore.SchemaTooNew.self) { try FulfillmentStore(writer: queue) }
        #expect(refusal?.unknown == ["v2-from-the-future"])
    }
}

/// The worker's batch of due notifications reads its index only, in order, and stops at the batch size: no row of
/// a backlog beyond the batch is read and nothing is sorted (before v8 every pending row was read and sorted for
/// each batch of 100, so draining a backlog cost its square).
@Suite struct InboxQueryPlanTests {
    @Test func dueNotificationsUseTheirIndex() async throws {
        let (queue, path) = try MigrationTests.database()
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
}
