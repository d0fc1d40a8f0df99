import FulfillmentService
import IAPProtocol
import Logging
import PostgresNIO
import PostgresSupport
import RPCTestSupport
import Testing

/// The pool's connections between transactions: fulfillment's reads run as statements each connection prepared by name
/// (`PostgresSession.queryPrepared`), parsed and planned once per connection, their rows decoded as what they are, and a
/// statement a newer schema no longer fits is prepared again rather than failing the transaction; a connection goes back
/// to the pool without the advisory locks its transaction took, however the transaction ended.
@Suite(.enabled(if: TestPostgres.isAvailable, "PostgreSQL is not installed"), .serialized)
struct PostgresPoolConnectionTests {
    /// Redeems on one connection prepare their reads once: later redeems prepare nothing more, and the server runs the
    /// reads on a generic plan (planned once, not at each execution).
    @Test func redeemsPrepareTheirReadsOnceAndTheServerPlansThemOnce() async throws {
        let database = try await TestDatabase.make(schema: "fulfillment", label: "prepared-reads-test")
        let pool = database.pool
        let store = try await PostgresFulfillmentStore(pool: pool)
        defer { try? store.close() }
        func redeem(_ i: Int) async throws {
            _ = try await store.apply(
                [coins("\(2_200_000_000 + i)")], accountId: "acct\(i % 3)", appAccountToken: nil, mode: .redeem, policy: .refuse,
                answerScope: .production, nowMs: 1)
        }
        for i in 0..<3 { try await redeem(i) }
        let preparedFirst = pool.statementsPrepared
        #expect(preparedFirst > 0, "the reads are prepared")
        for i in 3..<23 { try await redeem(i) }
        #expect(pool.statementsPrepared == preparedFirst, "twenty more redeems prepared \(pool.statementsPrepared - preparedFirst) more")
        let generic = try await pool.withSession { db in
            try db.one(
                "SELECT count(*) AS n FROM pg_prepared_statements WHERE NOT from_sql AND generic_plans > 0 AND statement LIKE 'SELECT%'"
            )?.get("n", as: Int64.self) ?? 0
        }
        #expect(generic > 0, "no prepared read runs on a generic plan")
    }

    /// A prepared `SELECT *` whose table gained a column (a newer instance's migration) fails at the server ("cached plan
    /// must not change result type"): the connection forgets the statement and the pool runs the read again, which
    /// prepares it afresh. The values come back decoded as their types (binary), not as text.
    @Test func aPreparedReadIsPreparedAgainAfterItsTableChanged() async throws {
        let database = try await TestDatabase.make(label: "prepared-reads-test")
        let pool = database.pool
        defer { pool.close() }
        try await pool.withSession { db in
            try db.execute("CREATE TABLE gadget (id bigint PRIMARY KEY)")
            try db.execute("INSERT INTO gadget VALUES (7)")
        }
        let sql = "SELECT * FROM gadget WHERE id = ($1::int8)"
        let first = try await pool.read { db in try db.queryPrepared(sql, [PostgresData(int64: 7)]) }
        #expect(first.count == 1 && first.first?.count == 1)
        #expect(try first.first?.first?.decode(Int64.self, context: .default) == 7)
        let psqlURL = database.psqlURL
        _ = try await TestPostgres.psql(psqlURL, "ALTER TABLE gadget ADD COLUMN label text NOT NULL DEFAULT 'blue'")
        let retriesBefore = pool.retries
        let second = try await pool.read { db in try db.queryPrepared(sql, [PostgresData(int64: 7)]) }
        #expect(second.first?.count == 2)
        #expect(try second.first?.last?.decode(String.self, context: .default) == "blue")
        #expect(pool.retries == retriesBefore + 1, "the read ran again once")
        #expect(try await pool.read { db in try db.queryPrepared(sql, [PostgresData(int64: 7)]) }.first?.count == 2)
        #expect(pool.retries == retriesBefore + 1)
    }

    /// A connection prepares at most `PreparedReads.limit` (256) texts; past it, reads still answer, unprepared.
    @Test func aConnectionPreparesABoundedNumberOfReads() async throws {
        let database = try await TestDatabase.make(label: "prepared-reads-test")
        let pool = database.pool
        defer { pool.close() }
        let answers = try await pool.read { db in
            try (0..<260).map { i in
                try db.queryPrepared("SELECT ($1::int8) + \(i) AS n", [PostgresData(int64: 1)]).first?.first?.decode(Int64.self, context: .default)
            }
        }
        #expect(answers == (0..<260).map { Int64($0 + 1) })
        #expect(pool.statementsPrepared == 256)
    }

    /// A write holding an account's advisory lock that its own rules refuse, or that the server refuses, releases the lock
    /// before its connection is reused: another writer of the account does not wait for it.
    @Test func aLockedWriteThatFailsLeavesNoLockBehind() async throws {
        let database = try await TestDatabase.make(label: "lock-release-test")
        let pool = database.pool
        defer { pool.close() }
        let psqlURL = database.psqlURL
        struct Refused: Error {}
        // pg_locks covers the whole cluster, where other tests' databases take advisory locks of their own.
        let advisoryLocksHere =
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        await #expect(throws: Refused.self) { try await pool.write(locking: ["acct-1"]) { _ in throw Refused() } }
        #expect(try await TestPostgres.psql(psqlURL, advisoryLocksHere) == "0")
        await #expect(throws: (any Error).self) { try await pool.write(locking: ["acct-1"]) { db in try db.execute("SELECT 1 / 0") } }
        #expect(try await TestPostgres.psql(psqlURL, advisoryLocksHere) == "0")
    }

    /// Several keys are locked in one statement, in sorted order: writers naming overlapping keys in any order all
    /// commit (none waits for another forever), and a write that fails after taking them leaves none behind.
    @Test func severalKeysAreLockedTogetherAndReleasedTogether() async throws {
        let database = try await TestDatabase.make(connections: 4, label: "lock-keys-test")
        let pool = database.pool
        defer { pool.close() }
        try await pool.withSession { db in try db.execute("CREATE TABLE tally (n bigint NOT NULL)") }
        let orders = [["k1", "k2", "k3"], ["k3", "k2", "k1"], ["k2", "k3"], ["k3", "k1"]]
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<40 {
                group.addTask {
                    let keys = orders[i % orders.count]
                    _ = try await pool.write(locking: keys) { db in try db.execute("INSERT INTO tally VALUES (1)") }
                }
            }
            try await group.waitForAll()
        }
        let total = try await pool.read { db in try db.one("SELECT count(*) AS n FROM tally")?.get("n", as: Int64.self) }
        #expect(total == 40)
        let held = try await pool.write(locking: ["k3", "k1", "k2", "k1"]) { db in
            try db.one("SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()")?
                .get("n", as: Int64.self)
        }
        #expect(held == 3, "every distinct key is locked by the one statement")
        let psqlURL = database.psqlURL
        let advisoryLocksHere =
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE l.locktype = 'advisory' AND d.datname = current_database()"
        await #expect(throws: (any Error).self) { try await pool.write(locking: ["k2", "k1", "k3"]) { db in try db.execute("SELECT 1 / 0") } }
        #expect(try await TestPostgres.psql(psqlURL, advisoryLocksHere) == "0")
        #expect(
            PostgresPool.locking(["b", "a", "c", "a"]).sql == "SELECT "
                + (1...3).map { "pg_advisory_lock(hashtextextended($\($0), 0))" }.joined(separator: ", "))
    }
}
