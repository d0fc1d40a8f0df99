import Foundation
import FulfillmentService
import GRDB
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

/// Spending, idempotency, paging, admin revocation, and the invariants the schema itself enforces.
@Suite struct LedgerTests {
    /// Runs `body` with a suite where `alice` holds `coins` coins; the suite is stopped however `body` ends.
    static func withFunded(
        _ coins: Int = 300,
        _ body: (SuiteFixture, (session: String, accountId: String, appAccountToken: String)) async throws -> Void
    ) async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let bought = try await suite.buy("alice@icloud", "coins.100", quantity: coins / 100)
            _ = try await suite.redeem(alice.session, receipt: bought.receiptData)
            try await body(suite, alice)
        }
    }

    func spend(_ suite: SuiteFixture, _ session: String, _ amount: Int64, key: String, memo: String? = nil) async throws -> Int64 {
        try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: session, amount: amount, idempotencyKey: key, memo: memo)).balance
    }

    @Test func aSpendIsAppliedOncePerIdempotencyKey() async throws {
        try await Self.withFunded() { suite, alice in
            #expect(try await spend(suite, alice.session, 120, key: "sword-1", memo: "sword") == 180)
            // The same key and params: the first answer, nothing spent again.
            #expect(try await spend(suite, alice.session, 120, key: "sword-1", memo: "sword") == 180)
            #expect(try await suite.balance(alice.session) == 180)
            // The same key with other params is a conflict.
            let reused = await rpcError { try await spend(suite, alice.session, 5, key: "sword-1", memo: "sword") }
            #expect(reused?.code == RPCErrorCode.conflict.rawValue && reused?.reason == "idempotencyKeyReused")
            let otherMemo = await rpcError { try await spend(suite, alice.session, 120, key: "sword-1", memo: "shield") }
            #expect(otherMemo?.code == RPCErrorCode.conflict.rawValue)
            // Another account may use the same key for its own spend.
            let bob = try await suite.register("bob")
            let bobs = await rpcError { try await spend(suite, bob.session, 1, key: "sword-1") }
            #expect(bobs?.code == RPCErrorCode.insufficientFunds.rawValue)
            #expect(try await suite.ledger(alice.session).map(\.kind) == [.grant, .spend])
        }
    }

    @Test func theBalanceNeverGoesBelowZero() async throws {
        try await Self.withFunded(100) { suite, alice in
            let tooMuch = await rpcError { try await spend(suite, alice.session, 101, key: "k1") }
            #expect(tooMuch?.code == RPCErrorCode.insufficientFunds.rawValue)
            #expect(tooMuch?.data.extra["balance"] == .int(100))
            #expect(try await spend(suite, alice.session, 100, key: "k2") == 0)
            // The refused key was not consumed: it works once funds are there.
            let bought = try await suite.buy("alice@icloud", "coins.100", quantity: 2)
            _ = try await suite.redeem(alice.session, receipt: bought.receiptData)
            #expect(try await spend(suite, alice.session, 101, key: "k1") == 99)
            for (amount, field) in [(Int64(0), "amount"), (-5, "amount")] {
                let bad = await rpcError { try await spend(suite, alice.session, amount, key: "k3") }
                #expect(bad?.code == RPCErrorCode.invalidParams.rawValue && bad?.data.extra["field"] == .string(field))
            }
            let noKey = await rpcError { try await spend(suite, alice.session, 1, key: "") }
            #expect(noKey?.data.extra["field"] == .string("idempotencyKey"))
            #expect(try await suite.ledgerIsConsistent())
        }
    }

    @Test func twoHundredConcurrentSpendsWithOneKeyApplyOnce() async throws {
        try await Self.withFunded(1000) { suite, alice in
            let balances = try await withThrowingTaskGroup(of: Int64.self) { group in
                for _ in 0..<200 { group.addTask { try await spend(suite, alice.session, 7, key: "once") } }
                var all: [Int64] = []
                for try await b in group { all.append(b) }
                return all
            }
            #expect(Set(balances) == [993])
            #expect(try await suite.count("SELECT COUNT(*) FROM ledger WHERE kind = 'spend'") == 1)
            // And 200 concurrent spends with distinct keys against 1000 coins: exactly 142 succeed (7 each).
            let outcomes = await withTaskGroup(of: Bool.self) { group in
                for i in 0..<200 { group.addTask { (try? await spend(suite, alice.session, 7, key: "many-\(i)")) != nil } }
                var ok = 0
                for await o in group where o { ok += 1 }
                return ok
            }
            #expect(outcomes == 141)
            #expect(try await suite.balance(alice.session) == 993 - 141 * 7)
            #expect(try await suite.ledgerIsConsistent())
        }
    }

    @Test func theLedgerPagesOldestFirst() async throws {
        try await Self.withFunded(500) { suite, alice in
            for i in 0..<7 { _ = try await spend(suite, alice.session, 10, key: "p\(i)", memo: "item \(i)") }
            var seen: [LedgerEntry] = []
            var after: Int64? = nil
            repeat {
                let page = try await suite.fulfillment.call(FulfillmentListLedger.self, .init(session: alice.session, after: after, limit: 3))
                #expect(page.entries.count <= 3)
                seen += page.entries
                after = page.next
            } while after != nil
            #expect(seen.count == 8)
            #expect(seen.map(\.id) == seen.map(\.id).sorted())
            #expect(seen.map(\.balance) == [500, 490, 480, 470, 460, 450, 440, 430])
            #expect(seen.last?.memo == "item 6")
            let badLimit = await rpcError { try await suite.fulfillment.call(FulfillmentListLedger.self, .init(session: alice.session, limit: 0)) }
            #expect(badLimit?.data.extra["field"] == .string("limit"))
            // Another account sees only its own (empty) ledger.
            let bob = try await suite.register("bob")
            #expect(try await suite.ledger(bob.session).isEmpty)
        }
    }

    @Test func adminRevocationNeedsTheTokenAndReversesTheGrant() async throws {
        try await Self.withFunded(200) { suite, alice in
            let txid = try #require(try await suite.ledger(alice.session).first?.transactionId)
            for token in ["", "wrong", SuiteFixture.adminToken + "x"] {
                let refused = await rpcError {
                    try await suite.fulfillment.call(
                        FulfillmentRevokeTransaction.self, .init(adminToken: token, transactionId: txid, reason: "fraud"))
                }
                #expect(refused?.code == RPCErrorCode.forbidden.rawValue)
            }
            #expect(try await suite.balance(alice.session) == 200)
            _ = try await suite.fulfillment.call(
                FulfillmentRevokeTransaction.self,
                .init(
                    adminToken: SuiteFixture.adminToken, transactionId: txid,
                    reason: "chargeback"))
            #expect(try await suite.balance(alice.session) == 0)
            // Revoking again changes nothing; an unknown transaction is notFound.
            _ = try await suite.fulfillment.call(
                FulfillmentRevokeTransaction.self,
                .init(
                    adminToken: SuiteFixture.adminToken, transactionId: txid,
                    reason: "chargeback"))
            #expect(try await suite.ledger(alice.session).map(\.kind) == [.grant, .reversal])
            // The customer reads their ledger: the administrator's reason (an internal note, perhaps) is not in it.
            #expect(try await suite.ledger(alice.session).last?.memo == "revoked by support: coins.100")
            let unknown = await rpcError {
                try await suite.fulfillment.call(
                    FulfillmentRevokeTransaction.self,
                    .init(
                        adminToken: SuiteFixture.adminToken, transactionId: "999999",
                        reason: "x"))
            }
            #expect(unknown?.code == RPCErrorCode.notFound.rawValue)
            // A store's own words are not an administrator's reason: a later word from the store could undo them.
            for reason in ["refunded", "revoked"] {
                let taken = await rpcError {
                    try await suite.fulfillment.call(
                        FulfillmentRevokeTransaction.self, .init(adminToken: SuiteFixture.adminToken, transactionId: txid, reason: reason))
                }
                #expect(taken?.code == RPCErrorCode.invalidParams.rawValue && taken?.data.extra["field"]?.stringValue == "reason")
            }
        }
    }

    // The same refusals on PostgreSQL: PostgresStoreTests.theSchemaRefusesWhatTheCodeMustNeverDo.
    @Test(.disabled(if: TestPostgres.suiteUsesPostgres, "the SQLite file's own schema"))
    func theSchemaRefusesWhatTheCodeMustNeverDo() async throws {
        try await Self.withFunded(100) { suite, alice in
            let path = suite.fulfillmentSQLitePath
            let db = try DatabaseQueue(path: path)
            try await db.write { db in
                #expect(throws: DatabaseError.self) { try db.execute(sql: "UPDATE ledger SET delta = 1000") }
                #expect(throws: DatabaseError.self) { try db.execute(sql: "DELETE FROM ledger") }
                #expect(throws: DatabaseError.self) { try db.execute(sql: "UPDATE wallet SET balance = -1") }
                // A second grant for the same transaction, a second owner of one original, a second processed row.
                #expect(throws: DatabaseError.self) {
                    try db.execute(
                        sql: """
                            INSERT INTO ledger (account_id, delta, balance, kind, environment, transaction_id, created_at_ms)
                            SELECT account_id, delta, balance, kind, environment, transaction_id, created_at_ms FROM ledger WHERE kind = 'grant'
                            """)
                }
                #expect(throws: DatabaseError.self) {
                    try db.execute(sql: "INSERT INTO ownership SELECT environment, original_transaction_id, 'other', product_id, 0 FROM ownership")
                }
                #expect(throws: DatabaseError.self) {
                    try db.execute(
                        sql: """
                            INSERT INTO processed_transaction (environment, transaction_id, original_transaction_id, account_id, product_id, grant_kind,
                                                              purchase_date_ms, processed_at_ms)
                            SELECT environment, transaction_id, original_transaction_id, 'other', product_id, grant_kind, 0, 0 FROM processed_transaction
                            """)
                }
                // A spend without an idempotency key, or a positive one.
                #expect(throws: DatabaseError.self) {
                    try db.execute(sql: "INSERT INTO ledger (account_id, delta, balance, kind, created_at_ms) VALUES ('x', -1, 0, 'spend', 0)")
                }
            }
            #expect(try await suite.balance(alice.session) == 100)
        }
    }

    @Test func fulfillmentWritesWithSynchronousFull() async throws {
        try await Self.withFunded(100) { suite, _ in
            // The service's own connection settings, read through the store's pool.
            if let postgres = suite.store as? PostgresFulfillmentStore {
                #expect(try await postgres.setting("synchronous_commit") == "on")  // commits wait for the WAL flush
                // A client gone without a word (a crashed host, a partition) loses its session, and the account locks it
                // held, within about a minute rather than the OS's two hours.
                #expect(try await postgres.setting("tcp_keepalives_idle") == "30")
                #expect(try await postgres.setting("tcp_keepalives_count") == "3")
                #expect(try await postgres.setting("idle_in_transaction_session_timeout") == "1min")
            } else {
                let mode = try await #require(suite.store as? FulfillmentStore).synchronousMode()
                #expect(mode == 2)  // FULL
            }
        }
    }

    @Test func savepointJournalsStayInMemory() async throws {
        // Group commit's savepoints would otherwise spill their statement journal to a temporary file.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try FulfillmentStore.open(directory: directory)
        defer { try? store.close() }
        let modes = try await store.tempStoreModes()
        #expect(modes.writer == 2)  // MEMORY
        #expect(modes.reader == 2)
    }
}
