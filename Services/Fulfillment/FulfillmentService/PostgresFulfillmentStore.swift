import Foundation
import IAPProtocol
import JSONRPC
import NIOCore
import PostgresNIO
import PostgresSupport

/// The fulfillment database on PostgreSQL (`--database-url`), for several fulfillment instances on one
/// database. The same records and the same rules in the schema as `FulfillmentStore` (SQLite): one processed
/// row per transaction id and one owner and one entitlement per original whatever the environment, one grant
/// and one recovery ledger row per transaction, one spend per (account, scope, idempotency key), balances and
/// debt CHECKed >= 0, the ledger and the audit log append-only (triggers), the inbox keyed by UUID.
///
/// Every write runs `GrantRules` (redeems and spends at REPEATABLE READ per account, `write(locking:)`; notifications
/// SERIALIZABLE, `PostgresPool.write`): two instances redeeming one receipt, or spending with one key, at the same moment
/// cannot both commit; the loser runs again on the winner's result. Tables live in the `fulfillment` schema.
public final class PostgresFulfillmentStore: FulfillmentDatabase, FulfillmentStorage, FulfillmentInvariants {
    let pool: PostgresPool

    /// Brings the schema up to date (`migrations`); on failure the pool is closed and the error thrown.
    public init(pool: PostgresPool) async throws {
        self.pool = pool
        try await pool.migrateOrClose(Self.migrations)
    }

    public func close() throws { pool.close() }

    // MARK: the engine (FulfillmentDatabase): transactions on the server

    public func read<T: Sendable>(_ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
        try await pool.read { s in try Self.run(body, in: s) }
    }

    /// One SERIALIZABLE transaction (`PostgresPool.write`); with `locking` keys, REPEATABLE READ whose first attempt takes
    /// no lock, and whose later attempts an advisory lock per key (`PostgresPool.write(locking:optimistically:)`). Why the
    /// first needs none: every change of an account's money or access appends its event with the account's next sequence
    /// (UNIQUE (account_id, sequence); `writeAfterOneRead` depends on it: a writer of a wallet that appended no event
    /// would be overwritten by a spend sent alone), and everything granted once rests on a unique index,
    /// so two transactions about one account cannot both commit at REPEATABLE READ: the second fails (40001 or 23505) and
    /// runs again, then behind the lock, which is there to queue contenders rather than let them fail over and over.
    /// The held writes (`PostgresSQLSession.flush`) are sent before COMMIT.
    public func write<T: Sendable>(locking keys: [String], _ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
        if keys.isEmpty { return try await pool.write { s in try Self.run(body, in: s) } }
        return try await pool.write(locking: keys, optimistically: true) { s in try Self.run(body, in: s) }
    }

    /// `write(locking:)` whose first attempt runs without a transaction (`PostgresPool.write(locking:optimistically:firstAlone:)`):
    /// its one read and its held writes are two statements, without BEGIN and COMMIT. The body must read the account's
    /// last event sequence in that read (`WalletMemo.sequences`), so that its event takes the next one by number: a change
    /// of the account committed between the read and the writes then fails them (23505), as at REPEATABLE READ.
    public func writeAfterOneRead<T: Sendable>(locking keys: [String], _ body: @escaping @Sendable (any SQLSession) throws -> T)
        async throws -> T
    {
        try await pool.write(locking: keys, optimistically: true, firstAlone: true) { s in try Self.run(body, in: s) }
    }

    public var writesAloneAfterOneRead: Bool { true }

    private static func run<T>(_ body: (any SQLSession) throws -> T, in session: PostgresSession) throws -> T {
        let s = PostgresSQLSession(session: session)
        let value: T
        do {
            value = try body(s)
        } catch let error where session.alone != nil {
            // Alone, nothing was sent yet: a refusal stands as it is; NeedsTransaction runs the body again in a transaction.
            throw error
        } catch {
            // A rule's refusal may rest on a first attempt's stale snapshot whose held writes would fail: their failure
            // (a conflict, run again) comes first; else the refusal stands and the transaction rolls back.
            try s.flush()
            throw error
        }
        try s.flush()
        return value
    }

    /// Always false: the table of notifications applied before the inbox existed belongs to SQLite databases of v1.
    public func notificationWasApplied(_ uuid: String) async throws -> Bool { false }

    // MARK: for tests

    /// A server setting as this store's connections see it (`SHOW name`).
    package func setting(_ name: String) async throws -> String? {
        try await pool.read { s in try s.one(PostgresQuery(unsafeSQL: "SHOW \(name)"))?[0].decode(String.self, context: .default) }
    }

    /// The first column of the first row of `sql`, a count (tests' questions about what was recorded).
    package func count(_ sql: String) async throws -> Int {
        // As a bigint: PostgreSQL's SUM of bigints is a numeric.
        try await pool.read { s in
            try s.one(PostgresQuery(unsafeSQL: "SELECT (\(sql))::bigint")).map { try $0[0].decode(Int?.self, context: .default) ?? 0 } ?? 0
        }
    }
}
