import Foundation
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import PostgresSupport
import RPCTestSupport
import Testing

@testable import FulfillmentService

/// What only the PostgreSQL engine has: its schema's refusals, versioned migrations, a server restart under load.
/// (The contract both engines share is `StoreEngineTests`.)
@Suite(.enabled(if: TestPostgres.isAvailable, "PostgreSQL is not installed"), .serialized)
struct PostgresStoreTests {
    /// Statements per redeem and per spend, counted by the server (`pg_stat_statements`, preloaded on the test cluster) and
    /// by the pool (its round trips: each statement is one, postgres-nio does not pipeline), in steady state (connections
    /// made first). The bounds are today's: the test fails if a change makes either grow; lower them when one cuts them.
    @Test func statementsPerRedeemAndPerSpendDoNotGrow() async throws {
        let database = try await TestDatabase.make(schema: "fulfillment", label: "statements-test")
        let pool = database.pool
        let store = try await PostgresFulfillmentStore(pool: pool)
        defer { try? store.close() }
        let psqlURL = database.psqlURL
        let thisDatabase = "(SELECT oid FROM pg_database WHERE datname = current_database())"
        // On the tests' own cluster the server counts too; a server someone runs (IAP_TEST_POSTGRES_URL) may not preload it.
        let serverCounts =
            (try? await TestPostgres.psql(psqlURL, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT 1 FROM pg_stat_statements LIMIT 1"))
            != nil
        func redeem(_ i: Int) async throws {
            _ = try await store.apply(
                [coins("\(2_100_000_000 + i)")], accountId: "acct\(i % 5)", appAccountToken: nil, mode: .redeem, policy: .refuse,
                answerScope: .production, nowMs: 1)
        }
        // The connection made, its session set up, its write functions for the three lists created (`WriteFunctions`): a
        // redeem's, a spend's after its read, a spend's on what the store knew of the wallet (`writeOnKnownWallet`).
        try await redeem(-1)
        for key in ["warm", "warm2"] {
            _ = try await store.spend(accountId: "acct-1", scope: .production, amount: 1, idempotencyKey: key, memo: nil, nowMs: 2)
        }
        func measured(_ n: Int, _ body: () async throws -> Void) async throws -> (server: Double?, client: Double) {
            if serverCounts { _ = try await TestPostgres.psql(psqlURL, "SELECT pg_stat_statements_reset(0, \(thisDatabase), 0)") }
            let before = pool.roundTrips
            try await body()
            let client = Double(pool.roundTrips - before) / Double(n)
            guard serverCounts else { return (nil, client) }
            let server = try await TestPostgres.psql(
                psqlURL,
                "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE dbid = \(thisDatabase) AND query NOT LIKE '%pg_stat_statements%'")
            // Every operation's held writes ran as a call of the connection's own function, not through `run_writes`.
            let functionCalls = try await TestPostgres.psql(
                psqlURL,
                "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE dbid = \(thisDatabase) AND query LIKE 'SELECT pg_temp.iap_writes_%'")
            #expect(Int(functionCalls) == n, "held writes run as write functions: \(functionCalls) of \(n)")
            return (Double(Int(server) ?? -1) / Double(n), client)
        }
        func spend(_ i: Int) async throws {
            _ = try await store.spend(accountId: "acct\(i % 5)", scope: .production, amount: 1, idempotencyKey: "k\(i)", memo: nil, nowMs: 2)
        }
        let onTaskBefore = pool.attemptsOnTask
        let redeems = try await measured(20) { for i in 0..<20 { try await redeem(i) } }
        let spendsAfterARedeem = try await measured(5) { for i in 0..<5 { try await spend(i) } }
        // Their first attempts ran on the callers' tasks, no pool thread waiting (`PostgresPool.writeFirstOnTask`).
        #expect(pool.attemptsOnTask - onTaskBefore == 25, "first attempts on a task: \(pool.attemptsOnTask - onTaskBefore) of 25")
        let spends = try await measured(20) { for i in 5..<25 { try await spend(i) } }
        print("statements per redeem: \(redeems); per spend: \(spends), after a redeem \(spendsAfterARedeem) (server, client)")
        if serverCounts {
            #expect(
                redeems.server == redeems.client && spends.server == spends.client && spendsAfterARedeem.server == spendsAfterARedeem.client,
                "every round trip is one statement the server ran")
        }
        #expect(redeems.client <= Self.statementsPerRedeem, "statements per redeem grew: \(redeems.client)")
        #expect(spends.client <= Self.statementsPerSpend, "statements per spend grew: \(spends.client)")
        #expect(spendsAfterARedeem.client <= Self.statementsPerSpendAfterARedeem, "statements per spend grew: \(spendsAfterARedeem.client)")
    }

    /// Measured (a coin purchase redeemed by a new transaction id; a one-coin spend with a new key): 15 and 10 on
    /// 2026-11-26 (the account's lock and its release, BEGIN, each read and write, COMMIT); 5 and 4 since 2026-11-27:
    /// BEGIN, one read of what is stored (`FulfillmentRecords.stored` or `spend`, the wallets with it), the held writes
    /// in one statement (`PostgresSQLSession.flush`), for a redeem the answer's entitlements, COMMIT; the lock only
    /// after a first conflict (`PostgresFulfillmentStore.write`). A spend 2 since 2026-11-28: its read and its held writes
    /// without BEGIN and COMMIT on a first attempt (`PostgresFulfillmentStore.writeAfterOneRead`); a redeem of one coin
    /// purchase 2 since 2026-11-29, the same way (its one read also takes the answer's entitlements). A spend of a wallet
    /// this instance wrote last 1 since 2026-11-29 (evening): the held writes alone, on what the store knew
    /// (`PostgresFulfillmentStore.writeOnKnownWallet`); after another kind of write of the account here (a redeem), 2.
    static let statementsPerRedeem = 2.0
    static let statementsPerSpend = 1.0
    static let statementsPerSpendAfterARedeem = 2.0

    /// `run_writes` remembers the statements its connection prepared in a session setting, which a rolled-back transaction
    /// forgets while the statement stays prepared: the next transaction on the connection runs it without preparing it
    /// twice (which PostgreSQL refuses).
    @Test func heldWritesPreparedInARolledBackTransactionRunAgain() async throws {
        let database = try await TestDatabase.make(schema: "fulfillment", label: "held-rollback-test")
        let pool = database.pool
        let store = try await PostgresFulfillmentStore(pool: pool)
        defer { try? store.close() }
        @Sendable func held(_ db: PostgresSession) throws {
            try db.execute(
                "SELECT run_writes(ARRAY['UPDATE wallet SET owed = owed WHERE account_id = ($1[1])'], ARRAY['nobody'], ARRAY[1]::BIGINT[])")
        }
        await #expect(throws: (any Error).self) {
            try await pool.write { db in
                try held(db)
                try db.execute("SELECT 1 / 0")  // the transaction fails after the statement was prepared
            }
        }
        try await pool.write { db in try held(db) }
        try await pool.write { db in try held(db) }
    }

    /// A connection whose write functions are gone (a pooler in transaction mode handing the call another server session;
    /// here the session drops its temporary objects) runs the spend again, through `run_writes` from then on: it spends
    /// once, and nothing is lost.
    @Test func aMissingWriteFunctionRunsTheWritesAgainTheGenericWay() async throws {
        let database = try await TestDatabase.make(schema: "fulfillment", label: "write-function-test")
        let pool = database.pool
        let store = try await PostgresFulfillmentStore(pool: pool)
        defer { try? store.close() }
        for (id, account) in [("2000000099", "dave"), ("2000000098", "erin")] {
            _ = try await store.apply(
                [coins(id)], accountId: account, appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production, nowMs: 1)
        }
        func spend(_ key: String, _ account: String = "erin") async throws -> SpendOutcome {
            try await store.spend(accountId: account, scope: .production, amount: 1, idempotencyKey: key, memo: nil, nowMs: 2)
        }
        // Dave's spend makes the function of a spend's writes; erin's, after her redeem, has no known wallet to go on.
        #expect(try await spend("a", "dave") == .spent(balance: 99))
        try await pool.withSession { db in try db.execute("DISCARD TEMP") }  // the pool's one connection
        let retries = pool.retries
        #expect(try await spend("b") == .spent(balance: 99))
        #expect(pool.retries == retries + 1, "the spend ran again")
        // On what the store knew of erin's wallet: a guarded write needs a write function, so these read first.
        #expect(try await spend("b") == .replayed(balance: 99))
        #expect(try await spend("c") == .spent(balance: 98))
        #expect(try await store.balance(accountId: "erin", scope: .production).balance == 98)
        // A guessed spend whose write function is gone reads and runs again the generic way too.
        try await pool.withSession { db in try db.execute("DISCARD TEMP") }
        let notTaken = store.known.outcomes.notTaken
        #expect(try await spend("a2", "dave") == .spent(balance: 98))
        #expect(store.known.outcomes.notTaken == notTaken + 1)
        #expect(try await store.ledgerMismatches().isEmpty)
    }

    /// What counts as a missing write function: on a server session that never made a temporary object, calling one
    /// fails with 3F000 (no `pg_temp` schema), and once there is one, with 42883; either is `WriteFunctionMissing`. An
    /// error raised by a statement inside a function that is there is that error, even when it is also 42883.
    @Test func aWriteFunctionIsMissingOnlyWhenTheCallItselfFails() async throws {
        let database = try await TestDatabase.make(label: "write-function-missing-test")
        let pool = database.pool
        @Sendable func call(_ name: String) async throws -> String {
            try await pool.withSession { db in  // the pool's one connection, each time
                do {
                    try db.callWrites(name, values: [])
                    return "called"
                } catch is WriteFunctionMissing {
                    return "missing"
                } catch {
                    return PostgresPool.describe(error)
                }
            }
        }
        #expect(try await call("pg_temp.iap_writes_absent") == "missing", "no temporary schema yet")
        try await pool.withSession { db in
            try db.execute(
                "CREATE FUNCTION pg_temp.iap_writes_inner(TEXT[]) RETURNS VOID LANGUAGE plpgsql AS $$ BEGIN PERFORM no_such_function(); END $$")
        }
        #expect(try await call("pg_temp.iap_writes_absent") == "missing", "a temporary schema without it")
        let inner = try await call("pg_temp.iap_writes_inner")
        #expect(inner.hasPrefix("42883"), "an error from inside the function is that error: \(inner)")
    }

    /// A spend's ledger row, wallet and event are held and sent as one statement (`PostgresSQLSession.flush`) whose
    /// values travel as one array parameter: text an attacker chooses (quotes, a quote followed by a combining mark,
    /// backslashes, parameter and comment markers, dollar quotes) is stored exactly, and read back by a bound statement
    /// (the replay finds the same key); text with NUL, which PostgreSQL cannot store, is refused and changes nothing.
    @Test func heldWritesStoreAnyTextExactly() async throws {
        try await StoreEngine.postgres.open().with { db in
            let store = db.first
            _ = try await store.apply(
                [coins("2000000077")], accountId: "mallory", appAccountToken: nil, mode: .redeem, policy: .refuse,
                answerScope: .production, nowMs: 1)
            let hostile = [
                "it's", #"back\slash \' quote"#, "$1 ?1 ?2 $$ $x$ $2", "--comment", "'; DROP TABLE ledger; --", "E'\\x41'",
                "/* open", "日本語 🎉 \u{2028}", "?99", "x'\u{301}y; DELETE FROM wallet; SELECT '\u{301}", "'\u{200D}", "'\u{FE0F}",
            ]
            for (i, text) in hostile.enumerated() {
                let key = "key-\(i)-" + text
                #expect(
                    try await store.spend(accountId: "mallory", scope: .production, amount: 1, idempotencyKey: key, memo: text, nowMs: 2)
                        == .spent(balance: Int64(99 - i)))
                #expect(
                    try await store.spend(accountId: "mallory", scope: .production, amount: 1, idempotencyKey: key, memo: text, nowMs: 3)
                        == .replayed(balance: Int64(99 - i)))
            }
            let memos = try await store.ledger(accountId: "mallory", scope: .production, after: 0, limit: 100).entries.compactMap {
                $0.kind == .spend ? $0.memo : nil
            }
            #expect(memos == hostile)
            await #expect(throws: (any Error).self) {
                _ = try await store.spend(accountId: "mallory", scope: .production, amount: 1, idempotencyKey: "nul", memo: "a\u{0}b", nowMs: 4)
            }
            #expect(try await store.balance(accountId: "mallory", scope: .production).balance == Int64(100 - hostile.count))
            #expect(try await store.ledgerMismatches().isEmpty)
        }
    }

    /// 24 spends of one account with 24 keys at once, on 8 connections of one instance: they take turns in the instance
    /// (`KnownWallets.begin`), so none conflicts with another and none runs again (counted: `iap_postgres_retries_total`;
    /// until 2026-11-29 they all began at once without the account's lock, and 15 ran again); each spends once.
    @Test func concurrentSpendsOfOneAccountTakeTurnsAndEachSpendsOnce() async throws {
        let database = try await TestDatabase.make(schema: "fulfillment", connections: 8, label: "optimistic-test")
        let pool = database.pool
        let store = try await PostgresFulfillmentStore(pool: pool)
        defer { try? store.close() }
        _ = try await store.apply(
            [coins("2000000088")], accountId: "carol", appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production,
            nowMs: 1)
        let outcomes = try await withThrowingTaskGroup(of: SpendOutcome.self) { group in
            for i in 0..<24 {
                group.addTask {
                    try await store.spend(accountId: "carol", scope: .production, amount: 1, idempotencyKey: "c\(i)", memo: nil, nowMs: 2)
                }
            }
            return try await group.reduce(into: [SpendOutcome]()) { $0.append($1) }
        }
        #expect(outcomes.count == 24)
        #expect(outcomes.allSatisfy { if case .spent = $0 { true } else { false } })
        #expect(try await store.balance(accountId: "carol", scope: .production).balance == 76)
        #expect(try await store.ledgerMismatches().isEmpty)
        #expect(pool.retries == 0, "spends of one account took turns: \(pool.retries) ran again")
    }

    /// 24 redeems of one account (24 purchases) at once on one instance take turns there (`WriteTurns`): none runs again
    /// (until 2026-11-29 they began at once without the account's lock and conflicted on its next event).
    @Test func concurrentRedeemsOfOneAccountTakeTurnsAndEachGrantsOnce() async throws {
        let database = try await TestDatabase.make(schema: "fulfillment", connections: 8, label: "redeem-turns-test")
        let pool = database.pool
        let store = try await PostgresFulfillmentStore(pool: pool)
        defer { try? store.close() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<24 {
                group.addTask {
                    _ = try await store.apply(
                        [coins("\(2_000_000_200 + i)")], accountId: "dana", appAccountToken: nil, mode: .redeem, policy: .refuse,
                        answerScope: .production, nowMs: 1)
                }
            }
            try await group.waitForAll()
        }
        #expect(try await store.balance(accountId: "dana", scope: .production).balance == 2_400)
        #expect(try await store.ledgerMismatches().isEmpty)
        #expect(pool.retries == 0, "redeems of one account took turns: \(pool.retries) ran again")
    }

    /// `unavailable` ("nothing was changed, retry later") after the pool's attempts, as a writer without the account's
    /// lock (a refund's) may answer when 30 writers contend for one account: its callers (the inbox, a client with its
    /// key) do as it says.
    @Sendable static func retried<T>(_ body: @Sendable () async throws -> T) async throws -> T {
        for _ in 0..<20 {
            do { return try await body() } catch let error as RPCError where error.reason == "storageUnavailable" { continue }
        }
        return try await body()
    }

    /// The other writers of an account beside its alone writes: three refunds (of transactions 2000000100-102, SERIALIZABLE
    /// without the lock) and three support adjustments of +5 (REPEATABLE READ).
    static func refundsAndAdjustments(
        of accountId: String, in store: PostgresFulfillmentStore, into group: inout ThrowingTaskGroup<Void, any Error>, nowMs: Int64
    ) {
        let audit = AuditFacts(action: "adjustCoins", reason: "test", credential: "admin", operatorName: nil)
        for i in 0..<3 {
            group.addTask { _ = try await retried { try await store.revoke(transactionId: "\(2_000_000_100 + i)", reason: "refund", nowMs: nowMs) } }
            group.addTask {
                _ = try await retried {
                    try await store.adjust(
                        Holder(accountId: accountId, scope: .production), delta: 5, idempotencyKey: "a\(i)", audit: audit, nowMs: nowMs + 1)
                }
            }
        }
    }

    /// A spend's first attempt is two statements without a transaction (`writeAfterOneRead`); other writers of the same
    /// account (refunds, SERIALIZABLE without the lock; support adjustments, REPEATABLE READ) commit between its read and
    /// its writes. Nothing is lost: every change lands once, the wallet agrees with the ledger, and the account's events
    /// are numbered 1...n without a gap. (Seen failing with the spend's event numbered by the insert itself: the balance
    /// and the ledger disagreed in three runs of three.)
    @Test func spendsWithoutATransactionLoseNothingBesideOtherWritersOfTheAccount() async throws {
        let database = try await TestDatabase.make(schema: "fulfillment", connections: 8, label: "alone-test")
        let store = try await PostgresFulfillmentStore(pool: database.pool)
        defer { try? store.close() }
        let purchases = (0..<10).map { coins("\(2_000_000_100 + $0)") }
        _ = try await store.apply(
            purchases, accountId: "dave", appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production, nowMs: 1)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<24 {
                group.addTask {
                    let outcome = try await Self.retried {
                        try await store.spend(accountId: "dave", scope: .production, amount: 1, idempotencyKey: "d\(i)", memo: nil, nowMs: 2)
                    }
                    guard case .spent = outcome else { throw CancellationError() }
                }
            }
            Self.refundsAndAdjustments(of: "dave", in: store, into: &group, nowMs: 3)
            try await group.waitForAll()
        }
        #expect(try await store.balance(accountId: "dave", scope: .production).balance == 1_000 - 24 - 300 + 15)
        #expect(try await store.ledgerMismatches().isEmpty)
        let events = try await store.count("SELECT COUNT(*) FROM fulfillment.event WHERE account_id = 'dave'")
        let last = try await store.count("SELECT MAX(sequence) FROM fulfillment.event WHERE account_id = 'dave'")
        #expect(events == last && events >= 1 + 24 + 3 + 3, "\(events) events, the last numbered \(last)")
    }

    /// A redeem of one coin purchase is two statements without a transaction, like a spend (its read also takes the
    /// account's last event and the answer's entitlements). Beside spends, refunds and adjustments of the same account, and
    /// another account redeeming the same purchases at once, nothing is lost or granted twice; its answer lists the
    /// entitlements the account holds; a refunded one (which reads again to revoke) runs in a transaction.
    @Test func coinRedeemsWithoutATransactionLoseNothingBesideOtherWritersOfTheAccount() async throws {
        let database = try await TestDatabase.make(schema: "fulfillment", connections: 8, label: "alone-redeem-test")
        let store = try await PostgresFulfillmentStore(pool: database.pool)
        defer { try? store.close() }
        let unlock = PlannedPurchase(
            purchase: VerifiedPurchase(
                environment: "Production", transactionId: "2000000999", originalTransactionId: "2000000999", productId: "pro",
                purchaseDateMs: 1),
            rule: .permanent(entitlement: "pro"))
        _ = try await store.apply(
            [unlock] + (0..<10).map { coins("\(2_000_000_100 + $0)") }, accountId: "hana", appAccountToken: nil, mode: .redeem,
            policy: .refuse, answerScope: .production, nowMs: 1)
        var before = database.pool.roundTrips
        let one = try await store.apply(
            [coins("2000000200")], accountId: "hana", appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production, nowMs: 2)
        #expect(database.pool.roundTrips - before == 2, "the read and the writes, alone")
        #expect(one.results.map(\.outcome) == [.granted] && one.balance == 1_100 && one.entitlements.map(\.entitlement) == ["pro"])
        before = database.pool.roundTrips
        let refunded = PlannedPurchase(
            purchase: VerifiedPurchase(
                environment: "Production", transactionId: "2000000201", originalTransactionId: "2000000201", productId: "coins.100",
                purchaseDateMs: 1, cancellationDateMs: 2),
            rule: .coins(perUnit: 100))
        let revoked = try await store.apply(
            [refunded], accountId: "hana", appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production, nowMs: 2)
        #expect(revoked.results.map(\.outcome) == [.revoked] && revoked.balance == 1_100)
        #expect(database.pool.roundTrips - before > 2, "a refunded purchase reads again: it ran in a transaction")
        let granted = NIOLockedValueBox(0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<16 {
                for account in ["hana", "ivan"] {  // ivan redeems hana's purchases at the same moment: one of them gets each
                    group.addTask {
                        let answer = try await Self.retried {
                            try await store.apply(
                                [coins("\(2_000_000_300 + i)")], accountId: account, appAccountToken: nil, mode: .redeem, policy: .refuse,
                                answerScope: .production, nowMs: 3)
                        }
                        let outcome = answer.results.first?.outcome
                        guard outcome == .granted || outcome == .ownedByAnotherAccount else { throw CancellationError() }
                        if account == "hana" && outcome == .granted { granted.withLockedValue { $0 += 1 } }
                        if account == "hana" { #expect(answer.entitlements.map(\.entitlement) == ["pro"]) }
                    }
                }
                group.addTask {
                    let outcome = try await Self.retried {
                        try await store.spend(accountId: "hana", scope: .production, amount: 1, idempotencyKey: "h\(i)", memo: nil, nowMs: 4)
                    }
                    guard case .spent = outcome else { throw CancellationError() }
                }
            }
            Self.refundsAndAdjustments(of: "hana", in: store, into: &group, nowMs: 5)
            try await group.waitForAll()
        }
        let hanaGrants = Int64(granted.withLockedValue { $0 })
        let ivan = try await store.balance(accountId: "ivan", scope: .production).balance
        #expect(hanaGrants * 100 + ivan == 1_600, "each of the 16 purchases granted once: hana \(hanaGrants), ivan \(ivan / 100)")
        #expect(
            try await store.balance(accountId: "hana", scope: .production).balance == 1_100 + hanaGrants * 100 - 16 - 300 + 15)
        #expect(try await store.ledgerMismatches().isEmpty)
        for account in ["hana", "ivan"] {
            let events = try await store.count("SELECT COUNT(*) FROM fulfillment.event WHERE account_id = '\(account)'")
            let last = try await store.count("SELECT COALESCE(MAX(sequence), 0) FROM fulfillment.event WHERE account_id = '\(account)'")
            #expect(events == last, "\(account): \(events) events, the last numbered \(last)")
        }
    }

    /// A body given to `writeAfterOneRead` that needs more than one read, or reads after writing, runs in a transaction
    /// after all: its first attempt stops before it writes anything (the round trips say where it ran).
    @Test func aBodyThatNeedsMoreThanOneReadRunsInATransaction() async throws {
        let database = try await TestDatabase.make(schema: "fulfillment", label: "alone-fallback-test")
        let store = try await PostgresFulfillmentStore(pool: database.pool)
        defer { try? store.close() }
        let insert = "INSERT INTO wallet (account_id, scope, balance, owed) VALUES (?1, 'Production', 7, 0)"
        _ = try await store.balance(accountId: "warm", scope: .production)  // the connection made
        var before = database.pool.roundTrips
        try await store.writeAfterOneRead(locking: ["fulfillment:account:erin"]) { s in
            _ = try s.fetch("SELECT 1", arguments: [])
            _ = try s.fetch("SELECT 2", arguments: [])
            try s.executeLater(insert, arguments: [.text("erin")])
        }
        // Alone: the first read; then BEGIN, two reads, the write, COMMIT.
        #expect(database.pool.roundTrips - before == 6)
        before = database.pool.roundTrips
        try await store.writeAfterOneRead(locking: ["fulfillment:account:fay"]) { s in
            _ = try s.fetch("SELECT 1", arguments: [])
            try s.executeLater(insert, arguments: [.text("fay")])
            _ = try s.fetch("SELECT 2", arguments: [])
        }
        // Alone: the first read, nothing written; then BEGIN, the read, the write, the read, COMMIT.
        #expect(database.pool.roundTrips - before == 6)
        // The first time the connection meets this list of writes, its first attempt on the task sends the read, then
        // leaves the rest to a pool thread, which creates the list's write function (`PostgresPool.writeFirstOnTask`).
        for name in ["gil", "hal"] {
            before = database.pool.roundTrips
            try await store.writeAfterOneRead(locking: ["fulfillment:account:\(name)"]) { s in
                _ = try s.fetch("SELECT 1", arguments: [])
                try s.executeLater(insert, arguments: [.text(name)])
            }
            #expect(database.pool.roundTrips - before == (name == "gil" ? 3 : 2))  // the read and the write, alone
        }
        for name in ["erin", "fay", "gil", "hal"] {
            #expect(try await store.balance(accountId: name, scope: .production).balance == 7)
        }
    }

    @Test func theSchemaRefusesWhatTheCodeMustNeverDo() async throws {
        try await StoreEngine.postgres.open().with { db in
            _ = try await db.first.apply(
                [coins("2000000001")], accountId: "alice", appAccountToken: nil, mode: .redeem, policy: .refuse,
                answerScope: .production, nowMs: 1)
            let url = try #require(db.url).description.replacingOccurrences(of: "postgres://", with: "postgresql://")
            func refused(_ sql: String) async -> Bool {
                do {
                    _ = try await TestPostgres.psql(url, sql)
                    return false
                } catch { return true }
            }
            // The ledger and the audit log are append-only, whoever connects.
            #expect(await refused("UPDATE fulfillment.ledger SET delta = 1000"))
            #expect(await refused("DELETE FROM fulfillment.ledger"))
            #expect(await refused("TRUNCATE fulfillment.ledger"))
            #expect(
                await refused(
                    "INSERT INTO fulfillment.admin_audit (at_ms, action, reason, credential) VALUES (1, 'a', 'r', 'c'); DELETE FROM fulfillment.admin_audit"
                ))
            #expect(await refused("UPDATE fulfillment.wallet SET balance = -1"))
            #expect(await refused("UPDATE fulfillment.wallet SET owed = -1"))
            // A second processed row, owner or grant for one transaction, under any environment.
            #expect(
                await refused(
                    """
                    INSERT INTO fulfillment.processed_transaction SELECT transaction_id, 'Sandbox', original_transaction_id, 'bob', scope,
                    product_id, grant_kind, coins_granted, purchase_date_ms, expires_date_ms, processed_at_ms FROM fulfillment.processed_transaction
                    """))
            #expect(
                await refused(
                    "INSERT INTO fulfillment.ownership SELECT original_transaction_id, 'Sandbox', 'bob', scope, product_id, 0 FROM fulfillment.ownership"
                ))
            #expect(
                await refused(
                    """
                    INSERT INTO fulfillment.ledger (account_id, scope, delta, balance, kind, transaction_id, created_at_ms)
                    VALUES ('bob', 'Production', 100, 100, 'grant', '2000000001', 0)
                    """))
            // A spend without its key, a grant that takes.
            #expect(
                await refused(
                    "INSERT INTO fulfillment.ledger (account_id, scope, delta, balance, kind, created_at_ms) VALUES ('x', 'Production', -1, 0, 'spend', 0)"
                ))
            #expect(try await db.first.balance(accountId: "alice", scope: .production).balance == 100)
            #expect(try await db.first.ledgerMismatches().isEmpty)
        }
    }

    @Test func migrationsRunOnceAndANewerSchemaIsRefused() async throws {
        let url = try PostgresURL(try await TestPostgres.newDatabase())
        // Three instances starting at once: each migration is applied once.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<3 {
                group.addTask {
                    let pool = try PostgresPool(url: url, schema: "fulfillment", connections: 2, logger: Logger(label: "t"))
                    try await PostgresFulfillmentStore(pool: pool).close()
                }
            }
            try await group.waitForAll()
        }
        let admin = url.description.replacingOccurrences(of: "postgres://", with: "postgresql://")
        #expect(
            try await TestPostgres.psql(admin, "SELECT string_agg(name, ',' ORDER BY name) FROM fulfillment.schema_migration")
                == "v1,v10-play,v11-held-writes-known,v12-transaction-claim,v13-yield-to-lock-holders,v14-webhook-start,v15-early-refund-share,v16-signed-standing,v2-inbox-pending-order,v3-outbox,v4-inbox-payload-apart,v5-content-deliveries,v6-events,v7-adjustments,v8-retention,v9-held-writes"
        )
        // A database a newer build migrated: this build refuses it rather than run on a schema it does not know.
        _ = try await TestPostgres.psql(admin, "INSERT INTO fulfillment.schema_migration (name) VALUES ('v99-from-the-future')")
        await #expect(throws: PostgresPool.SchemaTooNew.self) {
            _ = try await PostgresFulfillmentStore(
                pool: try PostgresPool(url: url, schema: "fulfillment", connections: 2, logger: Logger(label: "t")))
        }
    }

    @Test func anUnreachableDatabaseAnswersUnavailableAndChangesNothing() async throws {
        // Nothing listens on port 1.
        let pool = try PostgresPool(
            url: PostgresURL(host: "127.0.0.1", port: 1, username: "postgres", database: "nowhere"), schema: "fulfillment",
            connections: 1, logger: Logger(label: "t"))
        defer { pool.close() }
        let error = await #expect(throws: RPCError.self) { try await pool.write { s in try s.execute("SELECT 1") } }
        #expect(error?.knownCode == .unavailable && error?.reason == "storageUnavailable")
    }

    /// A PostgreSQL restart in the middle of spending through three instances: calls during it answer `unavailable`
    /// (or succeed), every spend retried with its key after the restart lands exactly once, nothing is lost or doubled.
    @Test(.enabled(if: TestPostgres.binDirectory != nil, "starts a PostgreSQL server of its own"))
    func aDatabaseRestartMidLoadGivesUnavailableThenRecoveryWithNothingLostOrDoubled() async throws {
        let server = TestPostgresServer(own: true)
        defer { Task { await server.shutdown() } }
        let url = try PostgresURL(try await server.newDatabase())
        var stores: [any FulfillmentStorage & FulfillmentInvariants] = []
        for _ in 0..<3 {
            stores.append(
                try await PostgresFulfillmentStore(
                    pool: try PostgresPool(url: url, schema: "fulfillment", connections: 6, logger: Logger(label: "restart-test"))))
        }
        try await StoreInstances(stores: stores, directory: nil, url: url).with { db in
            for i in 0..<20 {
                _ = try await db.first.apply(
                    [coins("40000000\(i + 10)")], accountId: "alice", appAccountToken: nil, mode: .redeem, policy: .refuse,
                    answerScope: .production, nowMs: 1)
            }
            let spends = 120
            let (started, startedNow) = AsyncStream<Void>.makeStream()
            let restart = Task {
                var iterator = started.makeAsyncIterator()
                _ = await iterator.next()  // once spending is under way
                try await server.stop()
                try await server.start()
            }
            // Each key is tried once while the server goes down and comes back; what failed is retried afterwards.
            let failed = try await withThrowingTaskGroup(of: Int?.self) { group in
                for i in 0..<spends {
                    group.addTask {
                        if i == 10 { startedNow.yield() }
                        do {
                            let outcome = try await db[i].spend(
                                accountId: "alice", scope: .production, amount: 10, idempotencyKey: "key-\(i)", memo: nil, nowMs: 2)
                            guard case .spent = outcome else { Issue.record("key-\(i): \(outcome)"); return nil }
                            return nil
                        } catch let error as RPCError {
                            #expect(error.knownCode == .unavailable, "key-\(i): \(error)")
                            return i
                        }
                    }
                }
                return try await group.reduce(into: [Int]()) { if let i = $1 { $0.append(i) } }
            }
            try await restart.value
            var unavailable = 0
            for i in failed {
                var outcome: SpendOutcome?
                for _ in 0..<50 where outcome == nil {
                    do {
                        outcome = try await db[i].spend(
                            accountId: "alice", scope: .production, amount: 10, idempotencyKey: "key-\(i)", memo: nil, nowMs: 3)
                    } catch let error as RPCError where error.knownCode == .unavailable {
                        unavailable += 1
                        try await Task.sleep(for: .milliseconds(100))  // the server is still starting: back off, as a client would
                    }
                }
                // A spend whose first COMMIT outcome was unknown may have landed: then it replays, never spends twice.
                #expect(outcome == .spent(balance: outcome.flatMap { if case .spent(let b) = $0 { b } else { nil } } ?? -1) || isReplay(outcome))
            }
            let wallet = try await db.first.balance(accountId: "alice", scope: .production)
            #expect(wallet.balance == 2000 - Int64(spends) * 10)
            let ledger = try await db.first.ledger(accountId: "alice", scope: .production, after: 0, limit: 1000).entries
            #expect(ledger.filter { $0.kind == .spend }.count == spends)
            #expect(try await db.first.ledgerMismatches().isEmpty)
            FileHandle.standardError.write(
                Data("restart mid-load: \(failed.count) of \(spends) spends answered unavailable during the restart; \(unavailable) retries\n".utf8))
        }
    }
}

private func isReplay(_ outcome: SpendOutcome?) -> Bool {
    if case .replayed = outcome { return true }
    return false
}
