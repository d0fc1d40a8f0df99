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

    /// Records `id` with the number of rows it read, as a body of fulfillment does: one read, then one write.
    @Sendable static func record(_ pool: PostgresPool, _ id: Int64, swallowingRefusals: Bool = false) async throws {
        try await pool.writeFirstOnTask(locking: ["seen"]) { s in
            let rows =
                swallowingRefusals
                ? (try? s.queryPrepared(Self.read, [PostgresData(int64: 0)])) : try s.queryPrepared(Self.read, [PostgresData(int64: 0)])
            let n = try rows?.first.map { try $0.get("n", as: Int64.self) } ?? -1
            var binds = PostgresBindings(capacity: 2)
            binds.append(id)
            binds.append(n)
            try s.execute(PostgresQuery(unsafeSQL: "INSERT INTO seen (id, count) VALUES ($1, $2)", binds: binds))
        }
    }

    static func recorded(_ pool: PostgresPool) async throws -> [Int64] {
        try await pool.read { s in try s.query("SELECT count FROM seen ORDER BY id").map { try $0[0].decode(Int64.self, context: .default) } }
    }

    /// A body that goes on past a read it was refused on the task (here it swallows the refusal, as a careless `try?` would)
    /// decided on nothing: nothing of it is sent from the task, and it runs on a pool thread, where the read is answered.
    @Test func aBodyThatGoesOnWithoutItsReadSendsNothingFromTheTask() async throws {
        let database = try await TestDatabase.make(label: "on-task-test")
        let pool = database.pool
        defer { pool.close() }
        try await pool.withSession { s in try s.execute("CREATE TABLE seen (id int8 PRIMARY KEY, count int8 NOT NULL)") }
        try await Self.record(pool, 1)  // the read prepared on the connection, on a pool thread
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
        let database = try await TestDatabase.make(label: "on-task-reads-test")
        let pool = database.pool
        defer { pool.close() }
        try await pool.withSession { s in try s.execute("CREATE TABLE seen (id int8 PRIMARY KEY, count int8 NOT NULL)") }
        try await Self.record(pool, 1)
        let onTask = pool.attemptsOnTask
        try await Self.record(pool, 2)
        #expect(pool.attemptsOnTask == onTask + 1, "the read prepared on the connection a task is given")
        let roundTrips = pool.roundTrips
        try await pool.writeFirstOnTask(locking: ["seen"]) { s in
            func count(from id: Int64) throws -> Int64 {
                try s.queryPrepared(Self.read, [PostgresData(int64: id)]).first?.get("n", as: Int64.self) ?? -1
            }
            let (all, later) = (try count(from: 0), try count(from: 2))
            var binds = PostgresBindings(capacity: 2)
            binds.append(Int64(3))
            binds.append(all * 10 + later)
            try s.execute(PostgresQuery(unsafeSQL: "INSERT INTO seen (id, count) VALUES ($1, $2)", binds: binds))
        }
        #expect(pool.attemptsOnTask == onTask + 1, "not on the task")
        #expect(pool.roundTrips == roundTrips + 4, "the first read from the task; both reads and the write on a pool thread")
        #expect(try await Self.recorded(pool) == [0, 1, 21], "two rows from 0, one from 2")
    }

    /// A first attempt on a task that fails in a way another may not (here a unique violation, every time) is the first of
    /// the pool's eight: the second runs on a pool thread under the lock, and the caller gets the same answer as before.
    @Test func aFailedFirstAttemptOnATaskIsTheFirstOfEight() async throws {
        let database = try await TestDatabase.make(label: "on-task-retry-test")
        let pool = database.pool
        defer { pool.close() }
        try await pool.withSession { s in try s.execute("CREATE TABLE seen (id int8 PRIMARY KEY, count int8 NOT NULL)") }
        try await Self.record(pool, 1)
        let (onTask, retries) = (pool.attemptsOnTask, pool.retries)
        await #expect(throws: RPCError.self) { try await Self.record(pool, 1) }
        do {
            try await Self.record(pool, 1)
        } catch let error as RPCError {
            #expect(error.data.reason == "storageUnavailable")
        }
        #expect(pool.attemptsOnTask == onTask + 2, "each call's first attempt on its task")
        #expect(pool.retries == retries + 14, "seven attempts run again per call, as on a pool thread alone")
        #expect(try await Self.recorded(pool) == [0])
    }
}
