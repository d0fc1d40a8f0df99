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
/// Every write runs `GrantRules` (redeems and spends at REPEATABLE READ per account, `write(locking:)`, or as one read and
/// one write without a transaction, `writeAfterOneRead`, or one guarded write, `writeOnKnownWallet`; notifications
/// SERIALIZABLE, `PostgresPool.write`): two instances redeeming one receipt, or spending with one key, at the same moment
/// cannot both commit; the loser runs again on the winner's result. Tables live in the `fulfillment` schema.
public final class PostgresFulfillmentStore: FulfillmentDatabase, FulfillmentStorage, FulfillmentInvariants {
    package let pool: PostgresPool
    /// What this instance last knew of wallets, for spends that skip their read (`writeOnKnownWallet`).
    let known: KnownWallets
    /// Writes about one account take turns on this instance (`write(locking:)`, `writeAfterOneRead`).
    let turns = WriteTurns<String>()

    /// Brings the schema up to date (`migrations`); on failure the pool is closed and the error thrown.
    public init(pool: PostgresPool) async throws {
        self.pool = pool
        self.known = KnownWallets()
        try await pool.migrateOrClose(Self.migrations)
    }

    public func close() throws { pool.close() }

    // MARK: the engine (FulfillmentDatabase): transactions on the server

    public func read<T: Sendable>(_ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
        try await pool.read { s in try Self.run(body, in: PostgresSQLSession(session: s)) }
    }

    /// One SERIALIZABLE transaction (`PostgresPool.write`); with `locking` keys, REPEATABLE READ whose first attempt takes
    /// no lock, and whose later attempts an advisory lock per key (`PostgresPool.write(locking:optimistically:)`). Why the
    /// first needs none: every change of an account's money or access appends its event with the account's next sequence
    /// (UNIQUE (account_id, sequence); `writeAfterOneRead` depends on it: a writer of a wallet that appended no event
    /// would be overwritten by a spend sent alone), and everything granted once rests on a unique index,
    /// so two transactions about one account cannot both commit at REPEATABLE READ: the second fails (40001 or 23505) and
    /// runs again, then behind the lock, which is there to queue contenders rather than let them fail over and over.
    /// The held writes (`PostgresSQLSession.flush`) are sent before COMMIT. Writes with the same keys take turns on this
    /// instance (`WriteTurns`), so two of them never conflict here; other writers of the account (spends, refunds,
    /// notifications, other instances) still can.
    public func write<T: Sendable>(locking keys: [String], _ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
        if keys.isEmpty { return try await pool.write { s in try Self.run(body, in: PostgresSQLSession(session: s)) } }
        defer { forgetKnownWallets(keys) }
        return try await turns.inTurn(keys) {
            try await pool.write(locking: keys, optimistically: true) { s in try Self.run(body, in: PostgresSQLSession(session: s)) }
        }
    }

    /// `write(locking:)` whose first attempt runs without a transaction (`PostgresPool.write(locking:optimistically:firstAlone:)`):
    /// its one read and its held writes are two statements, without BEGIN and COMMIT, sent from the caller's task
    /// (`PostgresPool.writeFirstOnTask`). The body must read the account's last event sequence in that read
    /// (`WalletMemo.sequences`), so that its event takes the next one by number: a change of the account committed between
    /// the read and the writes then fails them (23505), as at REPEATABLE READ.
    public func writeAfterOneRead<T: Sendable>(locking keys: [String], _ body: @escaping @Sendable (any SQLSession) throws -> T)
        async throws -> T
    {
        defer { forgetKnownWallets(keys) }
        return try await turns.inTurn(keys) {
            try await pool.writeFirstOnTask(locking: keys) { s in try Self.run(body, in: PostgresSQLSession(session: s)) }
        }
    }

    public var writesAloneAfterOneRead: Bool { true }

    /// Outside a transaction: the one statement commits by itself, at the server's READ COMMITTED.
    public func claimWrite<T: Sendable>(_ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
        try await pool.withSession { s in try Self.run(body, in: PostgresSQLSession(session: s)) }
    }

    /// `writeAfterOneRead` that first tries without its read, on what this instance last knew of the holder's wallet and
    /// its account's last event (`KnownWallets`): ONE statement, the held writes' call, whose event insert checks that the
    /// account's last event is still the known one and fails the whole call otherwise (`WriteFunctions.mustWriteARow`).
    /// Measured 2026-11-29 (Benchmarks/README.md): the read is a round trip and a statement of a spend's two. The guess
    /// is only a guess: an answer other than a write (a refusal, a replay) is read again; a wrong guess (the account
    /// moved, the key was used: the call fails, nothing written) is read again, and the holder is not guessed for a while
    /// (another instance is writing it); nothing guessed ever runs in a transaction or after a failure of its own.
    /// Spends of one holder take turns on an instance (`KnownWallets.begin`): they never conflict with each other here (24
    /// at once on one instance ran again 15 times before, none since; measured 2026-11-29). Across instances they conflict
    /// and run again; a guessed write yields to a writer holding the account's lock (`PostgresSession.yieldingTo`), so the
    /// one that lost and queued on it is not beaten again.
    public func writeOnKnownWallet<T: Sendable>(
        _ holder: Holder, locking keys: [String], wrote: @escaping @Sendable (T) -> Bool,
        _ body: @escaping @Sendable (any SQLSession) throws -> T
    ) async throws -> T {
        if let guess = await known.begin(holder) {
            do {
                // Never with the account's lock, but yielding to a writer that holds it (`PostgresSession.yieldingTo`).
                let (value, after) = try await pool.write(locking: [], yieldingTo: keys, optimistically: true, firstAlone: true) { session in
                    guard session.alone != nil else { throw GuessNotTaken() }  // an attempt after a failure reads
                    let s = PostgresSQLSession(session: session)
                    s.wallets?.known[holder] = guess.wallet
                    s.wallets?.sequences[holder.accountId] = guess.sequence
                    s.wallets?.guessed = holder
                    let value: T
                    do { value = try body(s) } catch { throw GuessNotTaken() }
                    guard wrote(value) else { throw GuessNotTaken() }  // nothing was sent
                    // Only writes that check the guess themselves go out on it.
                    guard s.held.writes.contains(where: { $0.sql.hasSuffix(WriteFunctions.mustWriteARow) }) else { throw GuessNotTaken() }
                    do {
                        try s.flush()
                    } catch let error as PSQLError where error.code == .server && !["57P01", "57P02"].contains(error.serverInfo?[.sqlState] ?? "") {
                        // One statement failed whole (the server answered it): nothing was written. The ledger's unique key
                        // is a key used before, which the read answers; anything else, the account moved (or a deadlock or
                        // a timeout, which a read and a new attempt settle as well).
                        if error.serverInfo?[.sqlState] == "23505", error.serverInfo?[.tableName] == "ledger" { throw GuessNotTaken() }
                        // A writer of the account holds its lock: not a sign that the guess was wrong.
                        if error.serverInfo?[.hint] == PostgresSQLSession.yieldHint { throw GuessNotTaken() }
                        throw WrongGuess()
                    } catch is WriteFunctionMissing {
                        throw GuessNotTaken()
                    } catch is GuardedWriteNeedsFunction {
                        throw GuessNotTaken()
                    }
                    return (value, Self.known(holder, in: s))
                }
                known.end(holder, state: after ?? guess)
                return value
            } catch is GuessNotTaken {
                known.giveBack(holder)
            } catch is WrongGuess {
                known.wrongGuess(holder)
            } catch {
                known.wrongGuess(holder)  // the outcome may be unknown (a connection lost while writing): forget it
                known.end(holder, state: nil)
                throw error
            }
        }
        do {
            let (value, after) = try await pool.writeFirstOnTask(locking: keys) { session in
                let s = PostgresSQLSession(session: session)
                return (try Self.run(body, in: s), Self.known(holder, in: s))
            }
            known.end(holder, state: after)
            return value
        } catch {
            known.end(holder, state: nil)
            throw error
        }
    }

    /// The holder's wallet and its account's last event as this attempt read and then wrote them.
    private static func known(_ holder: Holder, in s: PostgresSQLSession) -> KnownWallets.Guess? {
        guard let wallet = s.wallets?.known[holder], let sequence = s.wallets?.sequences[holder.accountId] else { return nil }
        return KnownWallets.Guess(wallet: wallet, sequence: sequence)
    }

    /// Writes that change an account's money here otherwise than by `writeOnKnownWallet` (a redeem, an adjustment).
    private func forgetKnownWallets(_ keys: [String]) {
        let prefix = Self.accountLock("")[0]
        for key in keys where key.hasPrefix(prefix) { known.forget(accountId: String(key.dropFirst(prefix.count))) }
    }

    /// A guess not used: its answer was not a write, or it could not be checked; read instead.
    private struct GuessNotTaken: Error {}
    /// A guess whose guarded write failed: the account moved since.
    private struct WrongGuess: Error {}

    private static func run<T>(_ body: (any SQLSession) throws -> T, in s: PostgresSQLSession) throws -> T {
        let session = s.session
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
