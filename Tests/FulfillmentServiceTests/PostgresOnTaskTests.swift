import JSONRPC
import Logging
import PostgresNIO
import PostgresSupport
import RPCTestSupport
import Testing

/// First attempts on their callers' tasks (`PostgresPool.writeFirstOnTask`): what they send is what a pool thread's first
/// attempt would have sent, decided on the same read.
@Suite(.enabled(if: TestPostgres.isAvailable, "PostgreSQL is not installed"), .serialized)
struct PostgresOnTaskTests {
    static let read = "SELECT count(*) AS n FROM seen WHERE id >= ($1::int8)"

    /// A pool of one connection on a new database with the table `seen`, and row 1 recorded on a pool thread (which
    /// prepares the read on the connection, so that the next attempts can run on their tasks).
    static func seenTable(_ label: String) async throws -> PostgresPool {
        let pool = try await TestDatabase.make(label: label).pool
        try await pool.withSession { s in try s.execute("CREATE TABLE seen (id int8 PRIMARY KEY, count int8 NOT NULL)") }
        try await record(pool, 1)
        return pool
    }

    /// Records `id` with the number of rows it read, as a body of fulfillment does: one read, then one write.
    @Sendable static func record(_ pool: PostgresPool, _ id: Int64, swallowingRefusals: Bool = false) async throws {
        try await pool.writeFirstOnTask(locking: ["seen"]) { s in
            let rows =
                swallowingRefusals
                ? (try? s.queryPrepared(Self.read, [PostgresData(int64: 0)])) : try s.queryPrepared(Self.read, [PostgresData(int64: 0)])
            try insert(id, count: try rows?.first.map { try $0.get("n", as: Int64.self) } ?? -1, in: s)
        }
    }

    static func insert(_ id: Int64, count: Int64, in s: PostgresSession) throws {
        var binds = PostgresBindings(capacity: 2)
        binds.append(id)
        binds.append(count)
        try s.execute(PostgresQuery(unsafeSQL: "INSERT INTO seen (id, count) VALUES ($1, $2)", binds: binds))
    }

    static func recorded(_ pool: PostgresPool) async throws -> [Int64] {
        try await pool.read { s in try s.query("SELECT count FROM seen ORDER BY id").map { try $0[0].decode(Int64.self, context: .default) } }
    }

    /// A body that goes on past a read it was refused on the task (here it swallows the refusal, as a careless `try?` would)
    /// decided on nothing: nothing of it is sent from the task, and it runs on a pool thread, where the read is answered.
    @Test func aBodyThatGoesOnWithoutItsReadSendsNothingFromTheTask() async throws {
        let pool = try await Self.seenTable("on-task-test")
        defer { pool.close() }
        let onTask = pool.attemptsOnTask
        let roundTrips = pool.roundTrips
        try await Self.record(pool, 2)
        #expect(pool.attemptsOnTask == onTask + 1, "on the task")
        #expect(pool.roundTrips == roundTrips + 2, "its read and its write")
        try await Self.record(pool, 3, swallowingRefusals: true)
        #expect(pool.attemptsOnTask == onTask + 1, "not on the task")
        #expect(try await Self.recorded(pool) == [0, 1, 2], "each decided on what it read")
    }

    /// A run of the body gets the answer to the read the caller sent once, for that statement with those values: a second
    /// read (here the same statement with another value) runs the attempt on a pool thread, where each read is answered.
    @Test func aSecondReadIsNotAnsweredWithTheFirstOnesRows() async throws {
        let pool = try await Self.seenTable("on-task-reads-test")
        defer { pool.close() }
        let onTask = pool.attemptsOnTask
        try await Self.record(pool, 2)
        #expect(pool.attemptsOnTask == onTask + 1, "the read prepared on the connection a task is given")
        let roundTrips = pool.roundTrips
        try await pool.writeFirstOnTask(locking: ["seen"]) { s in
            func count(from id: Int64) throws -> Int64 {
                try s.queryPrepared(Self.read, [PostgresData(int64: id)]).first?.get("n", as: Int64.self) ?? -1
            }
            let (all, later) = (try count(from: 0), try count(from: 2))
            try Self.insert(3, count: all * 10 + later, in: s)
        }
        #expect(pool.attemptsOnTask == onTask + 1, "not on the task")
        #expect(pool.roundTrips == roundTrips + 4, "the first read from the task; both reads and the write on a pool thread")
        #expect(try await Self.recorded(pool) == [0, 1, 21], "two rows from 0, one from 2")
    }

    /// A first attempt on a task that fails in a way another may not (here a unique violation, every time) is the first of
    /// the pool's eight: the second runs on a pool thread under the lock, and the caller gets the same answer as before.
    @Test func aFailedFirstAttemptOnATaskIsTheFirstOfEight() async throws {
        let pool = try await Self.seenTable("on-task-retry-test")
        defer { pool.close() }
        let (onTask, retries) = (pool.attemptsOnTask, pool.retries)
        for _ in 0..<2 {
            let error = try await #require(throws: RPCError.self) { try await Self.record(pool, 1) }
            #expect(error.data.reason == "storageUnavailable")
        }
        #expect(pool.attemptsOnTask == onTask + 2, "each call's first attempt on its task")
        #expect(pool.retries == retries + 14, "seven attempts run again per call, as on a pool thread alone")
        #expect(try await Self.recorded(pool) == [0])
    }

    /// A read the connection no longer has prepared (here dropped by DEALLOCATE; a newer schema does the same) fails on
    /// the task: the connection forgets it, and the second attempt prepares it again, once.
    @Test func aReadNoLongerPreparedOnTheConnectionIsPreparedAgainOnce() async throws {
        let pool = try await Self.seenTable("on-task-stale-test")
        defer { pool.close() }
        try await pool.withSession { s in try s.execute("DEALLOCATE ALL") }
        let (onTask, retries, prepared) = (pool.attemptsOnTask, pool.retries, pool.statementsPrepared)
        try await Self.record(pool, 2)
        #expect(pool.retries == retries + 1, "the task's read failed once, and the attempt after it did not")
        #expect(pool.statementsPrepared == prepared + 1)
        try await Self.record(pool, 3)
        #expect(pool.attemptsOnTask == onTask + 1, "the next one on its task again")
        #expect(try await Self.recorded(pool) == [0, 1, 2])
    }

    /// A write sent from the task whose connection is lost before its answer (here the write ends its own server session)
    /// may or may not have committed: the caller is told so (`storageOutcomeUnknown`), and it is not sent again.
    @Test func aWriteWhoseConnectionIsLostIsNeitherSuccessNorSentAgain() async throws {
        let pool = try await Self.seenTable("on-task-lost-test")
        defer { pool.close() }
        let (onTask, retries) = (pool.attemptsOnTask, pool.retries)
        let error = try await #require(throws: RPCError.self) {
            try await pool.writeFirstOnTask(locking: ["seen"]) { s in
                _ = try s.queryPrepared(Self.read, [PostgresData(int64: 0)])
                try s.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            }
        }
        #expect(error.data.reason == "storageOutcomeUnknown")
        #expect(pool.attemptsOnTask == onTask + 1 && pool.retries == retries, "sent once, from the task")
        try await Self.record(pool, 2)  // on a new connection
        #expect(try await Self.recorded(pool) == [0, 1])
    }
}
