import Foundation
import IAPProtocol
import PostgresSupport
import RPCTestSupport
import Testing

@testable import FulfillmentService

/// A write sent without its account's lock (a first attempt) yields to a writer that holds the lock or waits for it
/// (`PostgresSession.yieldingTo`, migration v13's `yield_to_lock_holders`), so a writer that lost once and queued on the
/// lock is not beaten again by writes that skip it. Here the other writer is a psql session holding the lock.
@Suite(.enabled(if: TestPostgres.isAvailable, "PostgreSQL is not installed"), .serialized)
struct LockYieldTests {
    static let key = PostgresFulfillmentStore.accountLock("erin")[0]

    /// Advisory locks of this test's database in `mode`, granted or waiting.
    static func locks(_ store: PostgresFulfillmentStore, mode: String, granted: Bool) async throws -> Int {
        try await store.count(
            """
            SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND mode = '\(mode)' AND granted = \(granted)
                AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            """)
    }

    /// Polls until `condition` holds (another process's lock seen in `pg_locks`), at most 10 s.
    static func until(_ what: String, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while try await !condition() {
            guard ContinuousClock.now < deadline else { throw Timeout(what: what) }
            try await Task.sleep(for: .milliseconds(5))
        }
    }
    struct Timeout: Error { let what: String }

    /// A session that takes the account's lock and keeps it for `seconds`, as another instance's writer after a conflict.
    static func holdLock(_ url: String, seconds: Double) -> Task<String, any Error> {
        Task { try await TestPostgres.psql(url, "SELECT pg_advisory_lock(hashtextextended('\(key)', 0)); SELECT pg_sleep(\(seconds))") }
    }

    /// While another session holds the account's lock, a spend's first attempt fails at its write (nothing written) and
    /// the spend runs again behind the lock: one retry, waiting until the holder's session ends. The same for a spend
    /// on a known wallet, whose yield is not counted as a wrong guess. (Seen failing without the yield: no retry, the
    /// spends written beside the holder.)
    @Test func aSpendYieldsToAWriterHoldingTheAccountsLock() async throws {
        let database = try await TestDatabase.make(schema: "fulfillment", connections: 2, label: "yield-test")
        let pool = database.pool
        let store = try await PostgresFulfillmentStore(pool: pool)
        defer { try? store.close() }
        try await KnownWalletSpendTests.redeem(store, "2000000300", account: "erin")
        for (round, key) in ["read", "guessed"].enumerated() {
            let holder = Self.holdLock(database.psqlURL, seconds: 60)
            try await Self.until("the lock held") { try await Self.locks(store, mode: "ExclusiveLock", granted: true) == 1 }
            let retries = pool.retries, outcomes = store.known.outcomes
            let spend = Task {
                try await store.spend(accountId: "erin", scope: .production, amount: 1, idempotencyKey: key, memo: nil, nowMs: 2)
            }
            // The spend's first attempt yields; its second waits for the lock, until the holder's session ends.
            try await Self.until("\(key): the spend waiting for the lock") {
                try await Self.locks(store, mode: "ExclusiveLock", granted: false) == 1
            }
            try await Self.endHolders(store, mode: "ExclusiveLock")
            #expect(try await spend.value == .spent(balance: Int64(99 - round)))
            #expect(pool.retries == retries + 1, "\(key): the first attempt yielded and the second waited for the lock")
            _ = try? await holder.value  // ended by the server
            if round == 1 {
                #expect(store.known.outcomes.wrong == outcomes.wrong, "a yield is not a wrong guess")
                #expect(store.known.outcomes.notTaken == outcomes.notTaken + 1)
            }
        }
        #expect(try await store.ledgerMismatches().isEmpty)
    }

    /// What the liveness rests on, in PostgreSQL's lock manager: a try for the lock shared fails not only while a writer
    /// holds it but also while one waits for it behind a shared holder (a request that would queue behind a waiting one
    /// it conflicts with is refused at once); so writes that skip the lock cannot keep its waiter waiting for ever.
    @Test func aWriterWaitingForTheLockMakesLaterWritesYield() async throws {
        let database = try await TestDatabase.make(schema: "fulfillment", connections: 1, label: "yield-queue-test")
        let store = try await PostgresFulfillmentStore(pool: database.pool)
        defer { try? store.close() }
        // From psql: the pool would run a refused statement again until its attempts ran out.
        @Sendable func yieldNow() async throws {
            _ = try await TestPostgres.psql(database.psqlURL, "SELECT fulfillment.yield_to_lock_holders('\(Self.key)')")
        }
        try await yieldNow()  // nobody holds it: taken shared and released with the statement
        let shared = Task {
            try await TestPostgres.psql(
                database.psqlURL, "BEGIN; SELECT pg_advisory_xact_lock_shared(hashtextextended('\(Self.key)', 0)); SELECT pg_sleep(60); COMMIT")
        }
        try await Self.until("a shared holder") { try await Self.locks(store, mode: "ShareLock", granted: true) == 1 }
        try await yieldNow()  // shared beside shared
        let waiter = Self.holdLock(database.psqlURL, seconds: 0)
        try await Self.until("a waiting writer") { try await Self.locks(store, mode: "ExclusiveLock", granted: false) == 1 }
        do {
            try await yieldNow()
            Issue.record("a write beside a waiting writer did not yield")
        } catch let error as TestPostgres.Failure {
            #expect(error.description.contains("holds its lock or waits for it"), "\(error)")
            #expect(error.description.contains("HINT:  yield_to_lock_holders"), "\(error)")
        }
        try await Self.endHolders(store, mode: "ShareLock")  // the waiter gets the lock, and lets go at once
        _ = try? await shared.value
        _ = try await waiter.value
        try await yieldNow()
    }

    /// Ends the sessions holding the key's lock in `mode` (their psql calls then fail).
    static func endHolders(_ store: PostgresFulfillmentStore, mode: String) async throws {
        _ = try await store.count(
            """
            SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND granted AND mode = '\(mode)'
                AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            """)
    }
}
