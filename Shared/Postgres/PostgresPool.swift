import Foundation
import JSONRPC
import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PostgresNIO

/// Connections to one PostgreSQL database, each used by one thread at a time.
///
/// Why threads and blocking waits rather than `async` queries: the grant rules (`GrantRules`) are synchronous
/// functions over a transaction, so that SQLite (GRDB's synchronous write closures) and PostgreSQL run the very
/// same code, and so that nothing can interleave inside a rules transaction. A transaction here runs on one of
/// the pool's threads, which holds one connection for the whole transaction and waits for each answer; the
/// pool has as many threads as connections, so a caller never waits for a connection while holding one.
///
/// Failures: a serialization failure (SQLSTATE 40001), a deadlock (40P01), a unique violation that a concurrent
/// transaction caused (23505, which PostgreSQL may report instead of 40001) or a connection lost before COMMIT
/// run the whole transaction again on a fresh snapshot (the database rolled the first attempt back); a server
/// that cannot be reached answers `unavailable` (nothing was changed); a connection lost during COMMIT answers
/// `unavailable` with reason `storageOutcomeUnknown` (the change may or may not have committed: the caller
/// retries, and every write the services make is idempotent by transaction id, idempotency key or UUID).
public final class PostgresPool: Sendable {
    public let url: PostgresURL
    public let size: Int
    let configuration: PostgresConnection.Configuration
    private let threads: NIOThreadPool
    /// Connections not in use, each with the reads it prepared; nil once closed (a connection given back after `close` is
    /// closed at once).
    private let idle = NIOLockedValueBox<[PooledConnection]?>([])
    let ids = NIOLockedValueBox(0)
    let logger: Logger
    /// How often one transaction is attempted before its failure is answered.
    public let attempts = 8
    /// Statements sent and answered, each one round trip to the server (postgres-nio 1.33 does not pipeline): exported
    /// as `iap_postgres_round_trips_total{schema}`, read by `roundTrips` (tests, benchmarks).
    let roundTripCount: RoundTrips

    /// The PostgreSQL schema (namespace) this pool's tables live in: each service keeps its own, so the services
    /// can share one database or use one each.
    public let schema: String

    public init(url: PostgresURL, schema: String, connections: Int = 8, logger: Logger) throws {
        guard !schema.isEmpty, schema.allSatisfy({ ("a"..."z").contains($0) || $0 == "_" }) else {
            throw PostgresURL.Invalid(description: "a schema name is lowercase letters and underscores")
        }
        self.url = url
        self.schema = schema
        self.size = max(1, connections)
        self.configuration = try url.configuration()
        self.logger = logger
        self.threads = NIOThreadPool(numberOfThreads: size)
        self.roundTripCount = RoundTrips(schema: schema)
        threads.start()
    }

    /// Round trips to the server so far (every statement: BEGIN, each read and write, COMMIT, lock and unlock).
    public var roundTrips: Int { roundTripCount.total.withLockedValue { $0 } }
    /// Transactions run again so far (conflicts, lost connections): `iap_postgres_retries_total{schema}`.
    public var retries: Int { roundTripCount.retries.withLockedValue { $0 } }
    /// Reads prepared so far, one round trip each, not among `roundTrips`: `iap_postgres_statements_prepared_total{schema}`.
    public var statementsPrepared: Int { roundTripCount.preparedCount.withLockedValue { $0 } }

    /// Closes every connection and stops the threads; calls after it fail.
    public func close() {
        let connections = idle.withLockedValue { list in
            defer { list = nil }
            return list ?? []
        }
        for pooled in connections { discard(pooled.connection) }
        threads.shutdownGracefully { _ in }
    }

    /// Runs `body` in one SERIALIZABLE transaction, again from the start on the failures listed above.
    @discardableResult
    public func write<T: Sendable>(_ body: @escaping @Sendable (PostgresSession) throws -> T) async throws -> T {
        try await run(begin: "BEGIN ISOLATION LEVEL SERIALIZABLE", body)
    }

    /// A write that first waits for an advisory lock on each of `keys` (the account whose wallet it changes), held
    /// until the transaction has ended, and runs at REPEATABLE READ rather than SERIALIZABLE. Why: under load
    /// SERIALIZABLE's predicate locks on shared index pages made unrelated accounts' spends abort each other
    /// ("read/write dependencies among transactions") until the retries ran out (measured: 117 of 2,944 redeems
    /// and 260 of 4,738 spends answered `unavailable` with 32 in flight). What SERIALIZABLE bought here is kept:
    /// writers of one account queue on the lock (taken before BEGIN, so each snapshot sees the previous holder's
    /// commit); two transactions writing one row (a wallet changed by a refund without this lock) still fail with
    /// 40001 and run again; and every exactly-once rule rests on a unique index (one processed row per transaction,
    /// one owner per original, one grant per transaction, one spend per key), which no isolation level lets two
    /// transactions both pass: the second gets 23505 and runs again on the first one's row.
    ///
    /// `optimistically`: the first attempt takes no lock (two round trips fewer: the lock and its release), the later
    /// ones do. Only for callers whose transactions about one key cannot both commit at REPEATABLE READ anyway (they
    /// write a common row or a common unique key), so the lock only queues contenders after a first conflict. The first
    /// attempt's session names the keys it skipped (`PostgresSession.yieldingTo`): its writes must yield to a holder of
    /// their lock, or one that lost once could lose every later attempt to writers that skip the lock.
    ///
    /// `firstAlone` (with `optimistically`): the first attempt sends no BEGIN and no COMMIT (two round trips fewer): its
    /// statements each commit by themselves (`PostgresSession.alone`), for a caller whose body reads in ONE statement and
    /// then writes in ONE statement (one snapshot for everything it read; its writes all or nothing), and only where every
    /// change of what it read also writes a unique key its own writes name (fulfillment: every change of an account's
    /// money appends the account's next event, and the spend's event takes the number after the one it read): a change
    /// committed between the two then fails the writes (23505). Unlike REPEATABLE READ, a row changed in between WITHOUT
    /// such a key would be overwritten, not refused. A body that needs more throws `PostgresSession.NeedsTransaction`
    /// before writing anything, and runs again in a transaction. A body may also read nothing and send one write that
    /// checks what it was decided on itself (fulfillment's spend on a known wallet, `WriteFunctions.mustWriteARow`).
    ///
    /// `yieldingTo`: the keys an attempt without their locks yields to (`PostgresSession.yieldingTo`); nil: `keys`. For a
    /// caller that never takes the locks but must not beat their holders (a guessed spend).
    @discardableResult
    public func write<T: Sendable>(
        locking keys: [String], yieldingTo: [String]? = nil, optimistically: Bool = false, firstAlone: Bool = false,
        _ body: @escaping @Sendable (PostgresSession) throws -> T
    ) async throws -> T {
        try await run(
            begin: "BEGIN ISOLATION LEVEL REPEATABLE READ", locking: keys, yieldingTo: yieldingTo ?? keys, optimistically: optimistically,
            firstAlone: firstAlone, body)
    }

    /// Runs `body` in one read-only transaction over one snapshot (REPEATABLE READ).
    public func read<T: Sendable>(_ body: @escaping @Sendable (PostgresSession) throws -> T) async throws -> T {
        try await run(begin: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", body)
    }

    /// Runs `body` outside a transaction (each statement commits by itself): DDL with its own locking, LISTEN.
    @discardableResult
    public func withSession<T: Sendable>(_ body: @escaping @Sendable (PostgresSession) throws -> T) async throws -> T {
        try await run(begin: nil, body)
    }

    /// `write` on the calling thread, which must be one that may block (a server's blocking pool, never an event
    /// loop): for storage methods that are synchronous because they are on every request's hot path. Such callers
    /// may open connections beyond `size` (one per blocking thread at most).
    public func writeHere<T>(_ body: (PostgresSession) throws -> T) throws -> T {
        try blocking(begin: "BEGIN ISOLATION LEVEL SERIALIZABLE", body)
    }

    /// One statement (or several, each committing by itself) on the calling thread, like `writeHere`.
    public func withSessionHere<T>(_ body: (PostgresSession) throws -> T) throws -> T {
        try blocking(begin: nil, body)
    }

    func run<T: Sendable>(
        begin: String?, locking keys: [String] = [], yieldingTo: [String] = [], optimistically: Bool = false, firstAlone: Bool = false,
        afterAFailure: Bool = false, _ body: @escaping @Sendable (PostgresSession) throws -> T
    ) async throws -> T {
        do {
            return try await threads.runIfActive {
                try self.blocking(
                    begin: begin, locking: keys, yieldingTo: yieldingTo, optimistically: optimistically, firstAlone: firstAlone,
                    afterAFailure: afterAFailure, body)
            }
        } catch let error as NIOThreadPoolError.ThreadPoolInactive {
            _ = error
            throw RPCError.unavailable("the database pool is closed", reason: "storageUnavailable")
        }
    }

    /// On a pool thread: one connection, attempts until one commits or a failure is final. `afterAFailure`: a first attempt
    /// already failed elsewhere (`writeFirstOnTask`), so this one is the second.
    private func blocking<T>(
        begin transaction: String?, locking allKeys: [String] = [], yieldingTo: [String] = [], optimistically: Bool = false,
        firstAlone: Bool = false, afterAFailure: Bool = false, _ body: (PostgresSession) throws -> T
    ) throws -> T {
        let yields = Set(yieldingTo).sorted()
        var attempt = afterAFailure ? 1 : 0
        var alone = firstAlone && optimistically && transaction != nil
        while true {
            attempt += 1
            if attempt > 1 { alone = false }  // only a first attempt runs alone; the ones after a conflict in a transaction
            let keys = optimistically && attempt == 1 ? [] : allKeys
            let begin = alone ? nil : transaction
            let pooled = try checkout()
            let connection = pooled.connection
            let session = PostgresSession(
                connection: connection, logger: logger, roundTrips: roundTripCount, prepared: pooled.prepared,
                alone: alone ? PostgresSession.Alone() : nil, yieldingTo: keys.isEmpty ? yields : [])
            // Advisory locks end with the session, not the transaction: released before the connection is reused
            // (a connection that cannot release them is closed, which releases them). Every way out of an attempt
            // that keeps the connection goes through here.
            func checkin() {
                if !keys.isEmpty, (try? session.execute("SELECT pg_advisory_unlock_all()")) == nil {
                    discard(connection)
                } else {
                    self.checkin(pooled)
                }
            }
            var committing = false
            do {
                if !keys.isEmpty { try session.execute(Self.locking(keys)) }
                if let begin { try session.execute(PostgresQuery(unsafeSQL: begin)) }
                let value = try body(session)
                if begin != nil {
                    committing = true
                    try session.execute("COMMIT")
                }
                checkin()
                return value
            } catch is PostgresSession.NeedsTransaction where alone {
                // Nothing was written: the same attempt again, in a transaction.
                checkin()
                alone = false
                attempt -= 1
                continue
            } catch let error where Self.failure(error) != nil {
                let failure = Self.failure(error)!
                // Alone, the statement that writes commits by itself: the transaction's COMMIT.
                if session.alone?.writing == true { committing = true }
                if failure.connectionLost {
                    discard(connection)
                } else if begin != nil && !committing {
                    if (try? session.execute("ROLLBACK")) == nil {
                        discard(connection)
                    } else {
                        checkin()
                    }
                } else {
                    checkin()  // a failed COMMIT has ended the transaction
                }
                if failure.connectionLost && committing { throw outcomeUnknown() }
                let retryable = failure.connectionLost || failure.transient
                guard retryable, attempt < attempts else {
                    if retryable {
                        throw RPCError.unavailable(
                            "the database is busy or unreachable; nothing was changed, retry later", reason: "storageUnavailable")
                    }
                    logger.error("database statement failed", metadata: ["error": "\(Self.describe(error))"])
                    throw error
                }
                roundTripCount.retried()
                usleep(Self.pauseMicros(after: attempt))
            } catch {
                // The body's own error (a rule refusing): nothing of it may commit.
                if begin != nil, (try? session.execute("ROLLBACK")) == nil {
                    discard(connection)
                } else {
                    checkin()
                }
                throw error
            }
        }
    }

    /// An open connection nobody uses, if there is one (never a new one).
    func idleConnection() -> PooledConnection? {
        while let pooled = idle.withLockedValue({ $0?.popLast() }) {
            if !pooled.connection.isClosed { return pooled }
        }
        return nil
    }

    /// Contending transactions: a short, growing, jittered pause before the attempt after `attempt`.
    static func pauseMicros(after attempt: Int) -> UInt32 { UInt32.random(in: 0...(UInt32(200) << UInt32(min(attempt, 6)))) }

    /// The answer when the connection was lost while the change was committing (or, alone, while its write was sent).
    func outcomeUnknown() -> RPCError {
        logger.error("database connection lost during COMMIT", metadata: ["database": "\(url.redacted)"])
        return RPCError.unavailable(
            "the database connection was lost while committing; the change may or may not be recorded: retry it",
            reason: "storageOutcomeUnknown")
    }

    private func checkout() throws -> PooledConnection {
        while true {
            let (closed, pooled) = idle.withLockedValue { list in (list == nil, list?.popLast()) }
            if closed { throw RPCError.unavailable("the database pool is closed", reason: "storageUnavailable") }
            guard let pooled else { break }
            if !pooled.connection.isClosed { return pooled }
        }
        let id = ids.withLockedValue { id in
            id += 1
            return id
        }
        do {
            let connecting = PostgresConnection.connect(
                on: MultiThreadedEventLoopGroup.singleton.any(), configuration: configuration, id: id, logger: logger)
            let connection = try PostgresSession.bounded(connecting, deadline: .seconds(10)) {
                connecting.whenSuccess { self.discard($0) }  // a connection that arrives after the deadline is closed
            }
            do {
                // A statement that hangs (a lock held by a stuck client) ends rather than holding a thread forever; the
                // schema's tables by their plain names. And this session ends soon after its client is gone: the server
                // probes an idle connection after 30 s (10 s apart, 3 unanswered ends it; the OS default is about two
                // hours), and ends one idle inside a transaction for a minute (ours last milliseconds). Either way the
                // account locks it holds are released, which writers of those accounts on every instance wait or yield for.
                // One statement, one round trip.
                let session = PostgresSession(connection: connection, logger: logger, roundTrips: roundTripCount, prepared: nil)
                try session.execute(
                    PostgresQuery(
                        unsafeSQL: """
                            SELECT set_config('statement_timeout', '15s', false), set_config('search_path', '\(schema)', false),
                                set_config('tcp_keepalives_idle', '30', false), set_config('tcp_keepalives_interval', '10', false),
                                set_config('tcp_keepalives_count', '3', false),
                                set_config('idle_in_transaction_session_timeout', '60s', false)
                            """))
            } catch {
                discard(connection)
                throw error
            }
            return PooledConnection(connection: connection, prepared: PreparedReads())
        } catch {
            let described = Self.describe(error)
            var metadata: Logger.Metadata = ["database": "\(url.redacted)", "error": "\(described)"]
            if described.hasPrefix("28P01") || described.hasPrefix("28000") {
                // Since 2026-11-30 each service signs in as a login of its own, which a server made before lacks.
                metadata["hint"] = "each service signs in as its own login: run compose/postgres-roles.sh on the server (docs/configuration.md)"
            }
            logger.warning("cannot connect to the database", metadata: metadata)
            throw RPCError.unavailable("the database could not be reached; nothing was changed, retry later", reason: "storageUnavailable")
        }
    }

    /// Connections being closed: kept referenced until their close completes (postgres-nio asserts that a
    /// connection is closed before it is released), and never waited for: a connection the server dropped may
    /// never finish closing, and a pool thread must not hang on it. Process-wide, so a pool released without
    /// `close` can still hand its connections over here.
    private static let closing = NIOLockedValueBox<[ObjectIdentifier: PostgresConnection]>([:])

    func discard(_ connection: PostgresConnection) { Self.discard(connection) }

    static func discard(_ connection: PostgresConnection) {
        let key = ObjectIdentifier(connection)
        closing.withLockedValue { $0[key] = connection }
        let closed: EventLoopFuture<Void> = connection.close()
        closed.whenComplete { _ in
            // Released on the next event-loop tick, after postgres-nio's own callbacks for the close have run.
            connection.eventLoop.execute { _ = closing.withLockedValue { $0.removeValue(forKey: key) } }
        }
    }

    /// A pool released without `close` (a caller's mistake) still closes its connections and stops its threads.
    deinit {
        for pooled in idle.withLockedValue({ $0 ?? [] }) { Self.discard(pooled.connection) }
        threads.shutdownGracefully { _ in }
    }

    func checkin(_ pooled: PooledConnection) {
        guard !pooled.connection.isClosed else { return }
        let kept = idle.withLockedValue { list in
            guard list != nil else { return false }
            list!.append(pooled)
            return true
        }
        if !kept { discard(pooled.connection) }
    }

    /// One statement taking the advisory lock of every key, in sorted order, so two transactions wanting the same keys
    /// cannot wait for each other (PostgreSQL evaluates a select list left to right; were it ever not to, it would detect
    /// the deadlock, 40P01, and the transaction would run again). One round trip, however many keys; the server's
    /// `statement_timeout` (15 s) bounds the wait for all of them together.
    package static func locking(_ keys: [String]) -> PostgresQuery {
        let sorted = Set(keys).sorted()
        var binds = PostgresBindings(capacity: sorted.count)
        for key in sorted { binds.append(key) }
        let locks = sorted.indices.map { "pg_advisory_lock(hashtextextended($\($0 + 1), 0))" }
        return PostgresQuery(unsafeSQL: "SELECT " + locks.joined(separator: ", "), binds: binds)
    }

    /// A statement that got no answer within `PostgresSession.deadline`: its connection is given up.
    struct StatementTimedOut: Error {}

    /// What the pool makes of a statement's failure: nil for an error that is not the database's (the body's own).
    static func failure(_ error: any Error) -> (connectionLost: Bool, transient: Bool)? {
        switch error {
        case is StatementTimedOut: return (true, false)
        case is WriteFunctionMissing: return (false, true)
        case let error as PSQLError: return (isConnectionFailure(error), isTransient(error))
        case let error as PreparedReadFailed:
            return (error.connectionLost, error.staleStatement || transientStates.contains(error.sqlState ?? ""))
        default: return nil
        }
    }

    /// serialization_failure, deadlock_detected, unique_violation (a concurrent insert), admin/crash shutdown,
    /// cannot_connect_now (starting up), query_canceled (statement_timeout).
    static let transientStates: Set<String> = ["40001", "40P01", "23505", "57P01", "57P02", "57P03", "57014"]

    /// SQLSTATEs after which running the transaction again may succeed.
    static func isTransient(_ error: PSQLError) -> Bool {
        guard error.code == .server, let state = error.serverInfo?[.sqlState] else { return false }
        return transientStates.contains(state)
    }

    static func isConnectionFailure(_ error: PSQLError) -> Bool {
        [.serverClosedConnection, .clientClosedConnection, .connectionError, .uncleanShutdown, .sslUnsupported]
            .contains(error.code)
            || (error.code == .server && ["57P01", "57P02"].contains(error.serverInfo?[.sqlState] ?? ""))
    }

    /// An error for a log line: the SQLSTATE and server message, never the statement's bound values.
    public static func describe(_ error: any Error) -> String {
        if let error = error as? PreparedReadFailed { return "\(error.sqlState ?? "?"): \(error.message)" }
        guard let error = error as? PSQLError else { return "\(error)" }
        if let info = error.serverInfo {
            return "\(info[.sqlState] ?? "?"): \(info[.message] ?? "")\(info[.detail].map { " (\($0))" } ?? "")"
        }
        return "\(error.code)"
    }
}

/// A pool's count of round trips and of transactions run again, and their metrics.
final class RoundTrips: Sendable {
    let total = NIOLockedValueBox(0)
    let counter: Counter
    let retries = NIOLockedValueBox(0)
    let retriesCounter: Counter
    let preparedCount = NIOLockedValueBox(0)
    /// First attempts running on their callers' tasks now, and so far (`PostgresPool.writeFirstOnTask`).
    let onTask = NIOLockedValueBox((inFlight: 0, total: 0))
    let preparedCounter: Counter

    init(schema: String) {
        counter = Counter(label: "iap_postgres_round_trips_total", dimensions: [("schema", schema)])
        retriesCounter = Counter(label: "iap_postgres_retries_total", dimensions: [("schema", schema)])
        preparedCounter = Counter(label: "iap_postgres_statements_prepared_total", dimensions: [("schema", schema)])
    }

    /// A connection prepared a read (`PostgresSession.queryPrepared`): one round trip, counted apart from the statements.
    func prepared() {
        preparedCount.withLockedValue { $0 += 1 }
        preparedCounter.increment()
    }

    func one() {
        total.withLockedValue { $0 += 1 }
        counter.increment()
    }

    /// A transaction's attempt failed in a way another may not (a conflict, a lost connection) and runs again.
    func retried() {
        retries.withLockedValue { $0 += 1 }
        retriesCounter.increment()
    }
}

/// One connection inside one transaction (or none, for `withSession`), used from a pool thread: each call
/// waits for PostgreSQL's answer.
public struct PostgresSession {
    let connection: PostgresConnection
    let logger: Logger
    let roundTrips: RoundTrips
    /// The reads this connection prepared (`queryPrepared`); nil: every read unnamed.
    let prepared: PreparedReads?
    /// Set when the attempt runs without a transaction (`PostgresPool.write(locking:optimistically:firstAlone:)`): each
    /// statement commits by itself.
    public let alone: Alone?
    /// The keys of an attempt that runs without their locks (an optimistic first attempt): its statement that writes must
    /// take each key's lock shared for its transaction, without waiting, and fail with 40001 when it cannot (a later attempt
    /// holds the lock or waits for it). So a writer that lost once and now queues on the lock never loses again to writers
    /// that skip it; they yield and queue behind it. Fulfillment does it in its held writes' call (`yield_to_lock_holders`).
    public let yieldingTo: [String]
    /// Set when the attempt runs on its caller's task rather than a pool thread (`PostgresPool.writeFirstOnTask`): its
    /// read and its write are sent by the caller, not here.
    let onTask: OnTask?

    init(
        connection: PostgresConnection, logger: Logger, roundTrips: RoundTrips, prepared: PreparedReads?, alone: Alone? = nil,
        yieldingTo: [String] = [], onTask: OnTask? = nil
    ) {
        self.connection = connection
        self.logger = logger
        self.roundTrips = roundTrips
        self.prepared = prepared
        self.alone = alone
        self.yieldingTo = yieldingTo
        self.onTask = onTask
    }

    /// An attempt without a transaction: its caller says when it sends the statement that writes (from then on, a lost
    /// connection leaves the outcome unknown, as during a COMMIT).
    public final class Alone {
        public private(set) var writing = false
        init() {}
        public func willWrite() { writing = true }
    }

    /// Thrown by a body running alone that needs a transaction after all (a second read, a read after a write): it must
    /// not have written anything; the pool runs the attempt again in a transaction.
    public struct NeedsTransaction: Error {
        public init() {}
    }

    /// How long one statement may take before the connection is given up (the server's own statement_timeout is
    /// 15 s; this bound also covers a server that stopped answering altogether).
    static let deadline = TimeAmount.seconds(20)

    /// Every row of the answer.
    public func query(_ query: PostgresQuery) throws -> [PostgresRandomAccessRow] {
        if let onTask { throw onTask.needsThread() }  // only prepared reads are sent from a task
        roundTrips.one()
        return try bounded(connection.query(query, logger: logger)).rows.map { $0.makeRandomAccess() }
    }

    /// Waits for `future`, at most `deadline`; past it the connection is closed and the wait fails.
    func bounded<T: Sendable>(_ future: EventLoopFuture<T>) throws -> T {
        let connection = self.connection
        return try Self.bounded(future, deadline: Self.deadline) {
            let closing: EventLoopFuture<Void> = connection.close()
            _ = closing
        }
    }

    /// Waits for `future` at most `deadline`; past it `onTimeout` runs and the wait fails with `StatementTimedOut`.
    static func bounded<T: Sendable>(
        _ future: EventLoopFuture<T>, deadline: TimeAmount, onTimeout: @escaping @Sendable () -> Void
    ) throws -> T {
        let (answer, timer) = deadlined(future, deadline: deadline, onTimeout: onTimeout)
        defer { timer.cancel() }
        return try answer.wait()
    }

    /// `bounded` for a caller on a task (`PostgresPool.writeFirstOnTask`): awaits rather than waits.
    static func bounded<T: Sendable>(
        _ future: EventLoopFuture<T>, deadline: TimeAmount, onTimeout: @escaping @Sendable () -> Void
    ) async throws -> T {
        let (answer, timer) = deadlined(future, deadline: deadline, onTimeout: onTimeout)
        defer { timer.cancel() }
        return try await answer.get()
    }

    /// `future`'s answer, or `StatementTimedOut` once `deadline` passed (then `onTimeout` runs); cancel the timer after.
    private static func deadlined<T: Sendable>(
        _ future: EventLoopFuture<T>, deadline: TimeAmount, onTimeout: @escaping @Sendable () -> Void
    ) -> (EventLoopFuture<T>, Scheduled<Void>) {
        let promise = future.eventLoop.makePromise(of: T.self)
        future.cascade(to: promise)
        let timer = future.eventLoop.scheduleTask(in: deadline) {
            promise.fail(PostgresPool.StatementTimedOut())
            onTimeout()
        }
        return (promise.futureResult, timer)
    }

    /// The first row of the answer, if any.
    public func one(_ query: PostgresQuery) throws -> PostgresRandomAccessRow? {
        try self.query(query).first
    }

    /// Runs a statement; answers how many rows it changed.
    @discardableResult
    public func execute(_ query: PostgresQuery) throws -> Int {
        if let onTask {
            // The attempt's one write: its caller sends it once the body has returned.
            guard onTask.write == nil else { throw onTask.needsThread() }
            onTask.write = query
            return 0
        }
        roundTrips.one()
        return try bounded(connection.query(query, logger: logger)).metadata.rows ?? 0
    }

    /// Several statements in one string, without parameters (migrations), run one after another.
    public func script(_ sql: String) throws {
        for statement in Self.statements(sql) { try execute(PostgresQuery(unsafeSQL: statement)) }
    }

    /// Splits SQL at the semicolons that end statements: not inside quotes, `$$` bodies or `--` comments.
    package static func statements(_ sql: String) -> [String] {
        var statements: [String] = []
        var current = ""
        var inQuote = false, inDollar = false, inComment = false
        var characters = Array(sql)[...]
        while let c = characters.popFirst() {
            if inComment {
                if c == "\n" { inComment = false }
                current.append(c)
                continue
            }
            if !inQuote && !inDollar && c == "-" && characters.first == "-" { inComment = true }
            if !inDollar && c == "'" { inQuote.toggle() }
            if !inQuote && c == "$" && characters.first == "$" {
                inDollar.toggle()
                current.append(c)
                current.append(characters.removeFirst())
                continue
            }
            if c == ";" && !inQuote && !inDollar {
                statements.append(current)
                current = ""
                continue
            }
            current.append(c)
        }
        statements.append(current)
        return statements.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.filter { statement in
            // Keep statements with something besides comments.
            !statement.split(separator: "\n").allSatisfy { $0.trimmingCharacters(in: .whitespaces).hasPrefix("--") || $0.isEmpty }
        }
    }
}

extension PostgresRandomAccessRow {
    /// The column `name` decoded as `T` (an optional type for a nullable column).
    public func get<T: PostgresDecodable>(_ name: String, as type: T.Type = T.self) throws -> T {
        try self[name].decode(T.self, context: .default)
    }
}
