import Foundation
import IAPProtocol
import PostgresNIO
import PostgresSupport

/// The accounts database on PostgreSQL (`--database-url`), for several accounts instances on one database: the
/// same records as `AccountsStore` (SQLite) in the `accounts` schema. Sessions and the login-throttle counters
/// live here, so every instance sees a sign-out (through the session cache's NOTIFY, below) and a guesser cannot spread attempts over instances:
/// `admitAttempt` reads and counts in one transaction holding the advisory locks of its keys, so two instances cannot
/// both admit the attempt that reaches a limit.
///
/// Sessions read lately are kept in `sessions` while a `PostgresListener` on `revocationsChannel` feeds it: a trigger
/// on `session` sends `NOTIFY` with the account id of every session deleted, when the deleting transaction commits
/// (migration v4), and each revocation made here forgets the sessions it ended before it returns.
public final class PostgresAccountsStore: AccountsStorage, Sendable {
    package let pool: PostgresPool
    public let sessions: SessionCache
    /// Where revocations are announced: the payload is the account id.
    public static let revocationsChannel = "iap_sessions_revoked"

    /// Brings the schema up to date; on failure the pool is closed and the error thrown.
    public init(pool: PostgresPool, sessions: SessionCache = SessionCache()) async throws {
        self.pool = pool
        self.sessions = sessions
        try await pool.migrateOrClose(Self.migrations)
    }

    public func close() throws { pool.close() }

    /// The listener that feeds `sessions` (the cache is used only while it hears its own probe, every 2 s); run it
    /// beside the server. `also` hears its events too (tests).
    public func revocationsListener(also: @escaping @Sendable (PostgresListenerEvent) -> Void = { _ in }) throws -> PostgresListener {
        try PostgresListener(pool: pool, channel: Self.revocationsChannel) { [sessions] event in
            sessions.heard(event)
            also(event)
        }
    }

    static let migrations: [PostgresMigration] = [
        PostgresMigration(
            "v1",
            """
            CREATE TABLE account (
                id TEXT PRIMARY KEY,
                username TEXT NOT NULL,
                username_key TEXT NOT NULL UNIQUE,
                password_hash TEXT NOT NULL,
                app_account_token TEXT NOT NULL UNIQUE,
                created_at_ms BIGINT NOT NULL,
                consumption_consent BOOLEAN NOT NULL DEFAULT false);
            -- Sessions by the SHA-256 of their token only.
            CREATE TABLE session (
                token_hash BYTEA PRIMARY KEY CHECK (length(token_hash) = 32),
                account_id TEXT NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                device_name TEXT,
                created_at_ms BIGINT NOT NULL,
                last_seen_at_ms BIGINT NOT NULL,
                expires_at_ms BIGINT NOT NULL);
            CREATE INDEX session_by_account ON session (account_id);
            CREATE TABLE login_throttle (
                key TEXT PRIMARY KEY,
                failures BIGINT NOT NULL CHECK (failures >= 0),
                window_start_ms BIGINT NOT NULL,
                locked_until_ms BIGINT NOT NULL);
            """),
        // Counters expire with their window (`expireThrottle`), oldest first.
        PostgresMigration("v2-throttle-expiry", "CREATE INDEX login_throttle_window ON login_throttle (window_start_ms);"),
        PostgresMigration(
            "v3-app-transactions",
            """
            CREATE TABLE app_transaction_link (
                account_id TEXT NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                app_transaction_id TEXT NOT NULL,
                environment TEXT NOT NULL,
                linked_at_ms BIGINT NOT NULL,
                PRIMARY KEY (account_id, app_transaction_id));
            CREATE INDEX app_transaction_link_by_customer ON app_transaction_link (app_transaction_id);
            """),
        // Every statement that deletes sessions (a sign-out, a password change, support's revoke, the per-account cap,
        // an account's deletion, a hand-made DELETE) announces each account it touched when it commits: the session
        // caches of every instance forget those accounts (`SessionCache`).
        PostgresMigration(
            "v4-session-revocations",
            """
            CREATE FUNCTION announce_session_revocations() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_notify('\(revocationsChannel)', account_id) FROM (SELECT DISTINCT account_id FROM ended) AS accounts;
                RETURN NULL;
            END $$;
            CREATE TRIGGER session_revocations AFTER DELETE ON session REFERENCING OLD TABLE AS ended
                FOR EACH STATEMENT EXECUTE FUNCTION announce_session_revocations();
            """),
    ]

    // MARK: accounts

    /// At REPEATABLE READ: the username is taken once by its unique key, and a new account's first session has nothing to
    /// agree with. (SERIALIZABLE's predicate locks on the few index pages a fresh database has made unrelated
    /// registrations abort each other; measured 2026-11-30.)
    public func createAccount(_ account: AccountRow, usernameKey: String, session: NewSession, nowMs: Int64) async throws -> CreateOutcome {
        try await pool.write(locking: []) { db in
            // ON CONFLICT rather than catching 23505: a unique violation is what the pool retries as a race.
            let inserted = try db.execute(
                """
                INSERT INTO account (id, username, username_key, password_hash, app_account_token, created_at_ms)
                VALUES (\(account.id), \(account.username), \(usernameKey), \(account.passwordHash), \(account.appAccountToken), \(nowMs))
                ON CONFLICT (username_key) DO NOTHING
                """)
            guard inserted == 1 else { return .usernameTaken }
            try Self.insert(session, accountId: account.id, db)
            return .created
        }
    }

    public func account(usernameKey: String) async throws -> AccountRow? {
        // One statement, its own snapshot: no transaction around it (two round trips fewer on every sign-in).
        try await pool.withSession { db in
            try db.one("SELECT id, username, password_hash, app_account_token FROM account WHERE username_key = \(usernameKey)")
                .map(Self.accountRow)
        }
    }

    /// Behind the account's sessions lock, as a sign-in: one that committed first is deleted here; one that comes after
    /// is a new sign-in.
    public func deleteSessions(accountId: String) async throws -> Int {
        defer { sessions.forget(accountId: accountId) }
        return try await pool.write(locking: Self.sessionsLock(accountId)) { db in
            try db.execute("DELETE FROM session WHERE account_id = \(accountId)")
        }
    }

    /// What sign-ins, password changes and "sign out everywhere" of one account take turns on.
    static func sessionsLock(_ accountId: String) -> [String] { ["accounts:sessions:" + accountId] }

    public func account(id: String) async throws -> AccountRow? {
        try await pool.read { db in
            try db.one("SELECT id, username, password_hash, app_account_token FROM account WHERE id = \(id)").map(Self.accountRow)
        }
    }

    public func accountId(appAccountToken: String) async throws -> String? {
        try await pool.read { db in
            try db.one("SELECT id FROM account WHERE app_account_token = \(appAccountToken)").map { try $0.get("id", as: String.self) }
        }
    }

    public func replacePasswordHash(accountId: String, expected: String, new: String) async throws {
        try await pool.write { db in
            try db.execute("UPDATE account SET password_hash = \(new) WHERE id = \(accountId) AND password_hash = \(expected)")
        }
    }

    /// Behind the account's sessions lock: a sign-in that checked the old password either committed first (its session is
    /// deleted here) or reads the new hash and adds nothing (`addSession`).
    public func changePassword(accountId: String, expected: String, new: String, keepSession keep: Data) async throws -> Bool {
        defer { sessions.forget(accountId: accountId) }
        return try await pool.write(locking: Self.sessionsLock(accountId)) { db in
            guard try db.execute("UPDATE account SET password_hash = \(new) WHERE id = \(accountId) AND password_hash = \(expected)") == 1
            else { return false }
            try db.execute("DELETE FROM session WHERE account_id = \(accountId) AND token_hash != \(keep)")
            return true
        }
    }

    public func setConsumptionConsent(accountId: String, consent: Bool) async throws {
        try await pool.write { db in
            try db.execute("UPDATE account SET consumption_consent = \(consent) WHERE id = \(accountId)")
        }
    }

    public func consumptionProfile(accountId: String) async throws -> (consent: Bool, createdAtMs: Int64, appAccountToken: String)? {
        try await pool.read { db in
            try db.one("SELECT consumption_consent, created_at_ms, app_account_token FROM account WHERE id = \(accountId)").map {
                (
                    try $0.get("consumption_consent", as: Bool.self), try $0.get("created_at_ms", as: Int64.self),
                    try $0.get("app_account_token", as: String.self)
                )
            }
        }
    }

    public func linkAppTransaction(accountId: String, appTransactionId: String, environment: String, nowMs: Int64) async throws {
        try await pool.write { db in
            try db.execute(
                """
                INSERT INTO app_transaction_link (account_id, app_transaction_id, environment, linked_at_ms)
                VALUES (\(accountId), \(appTransactionId), \(environment), \(nowMs))
                ON CONFLICT (account_id, app_transaction_id) DO NOTHING
                """)
        }
    }

    public func appTransactionLinks(accountId: String?, appTransactionId: String?) async throws -> [AppTransactionLink] {
        try await pool.read { db in
            let rows =
                if let accountId {
                    try db.query(
                        """
                        SELECT l.account_id, a.username, l.app_transaction_id, l.environment, l.linked_at_ms
                        FROM app_transaction_link l JOIN account a ON a.id = l.account_id
                        WHERE l.app_transaction_id IN (SELECT app_transaction_id FROM app_transaction_link WHERE account_id = \(accountId))
                        ORDER BY l.linked_at_ms, l.account_id LIMIT 1000
                        """)
                } else {
                    try db.query(
                        """
                        SELECT l.account_id, a.username, l.app_transaction_id, l.environment, l.linked_at_ms
                        FROM app_transaction_link l JOIN account a ON a.id = l.account_id
                        WHERE l.app_transaction_id = \(appTransactionId ?? "") ORDER BY l.linked_at_ms, l.account_id LIMIT 1000
                        """)
                }
            return try rows.map {
                AppTransactionLink(
                    accountId: try $0.get("account_id", as: String.self), username: try $0.get("username", as: String.self),
                    appTransactionId: try $0.get("app_transaction_id", as: String.self),
                    environment: try $0.get("environment", as: String.self), linkedAtMs: try $0.get("linked_at_ms", as: Int64.self))
            }
        }
    }

    private static func accountRow(_ row: PostgresRandomAccessRow) throws -> AccountRow {
        AccountRow(
            id: try row.get("id"), username: try row.get("username"), passwordHash: try row.get("password_hash"),
            appAccountToken: try row.get("app_account_token"))
    }

    // MARK: sessions

    /// Sign-ins of one account take turns on its advisory lock (REPEATABLE READ, the lock taken before the snapshot), so the
    /// cap is kept exactly; sign-ins of different accounts never meet. (At SERIALIZABLE, 64 sign-ins of 64 accounts at once
    /// ran again 19-37 times: predicate locks on the session index's shared pages; measured 2026-11-30.)
    public func addSession(_ session: NewSession, accountId: String, passwordHash: String, nowMs: Int64, cap: Int = .max) async throws -> Bool {
        defer { sessions.forget(accountId: accountId) }
        return try await pool.write(locking: Self.sessionsLock(accountId)) { db in
            guard try db.one("SELECT password_hash FROM account WHERE id = \(accountId)")?.get("password_hash", as: String.self) == passwordHash
            else { return false }
            try db.execute("DELETE FROM session WHERE account_id = \(accountId) AND expires_at_ms <= \(nowMs)")
            try Self.insert(session, accountId: accountId, db)
            // The new session always stays; of the others, the newest cap - 1 do.
            try db.execute(
                """
                DELETE FROM session WHERE token_hash IN (
                    SELECT token_hash FROM session WHERE account_id = \(accountId) AND token_hash != \(session.tokenHash)
                    ORDER BY created_at_ms DESC, last_seen_at_ms DESC OFFSET \(Int64(max(0, min(cap, Int(Int32.max)) - 1))))
                """)
            return true
        }
    }

    private static func insert(_ s: NewSession, accountId: String, _ db: PostgresSession) throws {
        try db.execute(
            """
            INSERT INTO session (token_hash, account_id, device_name, created_at_ms, last_seen_at_ms, expires_at_ms)
            VALUES (\(s.tokenHash), \(accountId), \(s.deviceName), \(s.createdAtMs), \(s.createdAtMs), \(s.expiresAtMs))
            """)
    }

    /// The kept row (`sessions`), else one indexed lookup on the calling thread (the server's blocking pool; see
    /// `AccountsService.authenticate`), prepared once per connection: every request makes it, and planning it cost 113
    /// of its 142 µs unprepared (2026-11-27).
    public func session(tokenHash: Data) throws -> SessionRow? {
        if let kept = sessions.session(tokenHash) { return kept }
        let ticket = sessions.ticket()
        let row = try pool.withSessionHere { db in
            try db.queryPrepared(
                """
                SELECT s.token_hash, s.account_id, a.username, a.app_account_token, s.device_name, s.created_at_ms,
                       s.last_seen_at_ms, s.expires_at_ms
                FROM session s JOIN account a ON a.id = s.account_id
                WHERE s.token_hash = ($1::bytea)
                """, [PostgresData(bytes: tokenHash)]
            ).first.map(Self.sessionRow)
        }
        if let row { sessions.keep(row, readUnder: ticket) }
        return row
    }

    /// The kept row; otherwise a round trip to the server, never on an event loop.
    public func sessionWithoutWaiting(tokenHash: Data) -> SessionReadWithoutWaiting {
        sessions.session(tokenHash).map { .found($0) } ?? .notNow
    }

    public func touchSession(tokenHash: Data, nowMs: Int64, expiresAtMs: Int64) throws -> Bool {
        // One statement: atomic by itself, no transaction needed (and no serialization retries on a hot row).
        let touched = try pool.withSessionHere { db in
            try db.execute(
                """
                UPDATE session SET last_seen_at_ms = \(nowMs), expires_at_ms = \(expiresAtMs)
                WHERE token_hash = \(tokenHash) AND expires_at_ms > \(nowMs)
                """)
        }
        if touched > 0 {
            sessions.touched(tokenHash, lastSeenAtMs: nowMs, expiresAtMs: expiresAtMs)
        } else {
            sessions.forget(tokenHash: tokenHash)
        }
        return touched > 0
    }

    public func deleteSession(tokenHash: Data) throws {
        defer { sessions.forget(tokenHash: tokenHash) }
        try pool.withSessionHere { db in try db.execute("DELETE FROM session WHERE token_hash = \(tokenHash)") }
    }

    public func sessions(accountId: String, nowMs: Int64) throws -> [SessionRow] {
        try pool.withSessionHere { db in
            try db.query(
                """
                SELECT s.token_hash, s.account_id, a.username, a.app_account_token, s.device_name, s.created_at_ms,
                       s.last_seen_at_ms, s.expires_at_ms
                FROM session s JOIN account a ON a.id = s.account_id
                WHERE s.account_id = \(accountId) AND s.expires_at_ms > \(nowMs)
                ORDER BY s.created_at_ms, s.device_name, s.token_hash
                """
            ).map { try Self.sessionRow(Array($0)) }
        }
    }

    private static func sessionRow(_ row: [PostgresCell]) throws -> SessionRow {
        SessionRow(
            tokenHash: try row.get("token_hash"), accountId: try row.get("account_id"), username: try row.get("username"),
            appAccountToken: try row.get("app_account_token"), deviceName: try row.get("device_name"),
            createdAtMs: try row.get("created_at_ms"), lastSeenAtMs: try row.get("last_seen_at_ms"),
            expiresAtMs: try row.get("expires_at_ms"))
    }

    // MARK: login throttle

    public func admitAttempt(
        keys: [String], wait: @escaping @Sendable (String, ThrottleState?) -> Int64,
        record: @escaping @Sendable (String, ThrottleState?) -> ThrottleState
    ) async throws -> Int64 {
        // A key already locked out refuses at once, without queueing for its lock: a flood on a locked name or address
        // (the abuse this exists for) is answered in parallel instead of one transaction at a time. A read that is a
        // moment stale can only show a lock that held a moment ago; an unlocked key goes on to the locked check below.
        // One statement (its own snapshot), one round trip.
        let alreadyLocked = try await pool.withSession { db in
            let states = try Self.throttleStates(keys, db)
            return keys.map { wait($0, states[$0]) }.max() ?? 0
        }
        if alreadyLocked > 0 { return alreadyLocked }
        return try await pool.write(locking: keys.map { "accounts:throttle:" + $0 }) { db in
            let states = try Self.throttleStates(keys, db)
            let longest = keys.map { wait($0, states[$0]) }.max() ?? 0
            guard longest == 0 else { return longest }
            try Self.saveThrottle(keys.map { ($0, record($0, states[$0])) }, db)
            return 0
        }
    }

    public func updateThrottle(keys: [String], _ update: @escaping @Sendable (String, ThrottleState?) -> ThrottleState?) async throws {
        try await pool.write(locking: keys.map { "accounts:throttle:" + $0 }) { db in
            let states = try Self.throttleStates(keys, db)
            try Self.saveThrottle(keys.map { ($0, update($0, states[$0])) }, db)
        }
    }

    public func expireThrottle(windowEndedBeforeMs: Int64, nowMs: Int64, maxRows: Int) async throws -> Int {
        try await pool.write { db in
            try db.execute("DELETE FROM login_throttle WHERE window_start_ms < \(windowEndedBeforeMs) AND locked_until_ms <= \(nowMs)")
            let remaining = Int(try db.one("SELECT COUNT(*) AS n FROM login_throttle")?.get("n", as: Int64.self) ?? 0)
            guard remaining > maxRows else { return remaining }
            try db.execute(
                """
                DELETE FROM login_throttle WHERE key IN
                  (SELECT key FROM login_throttle ORDER BY window_start_ms LIMIT \(Int64(remaining - maxRows)))
                """)
            return maxRows
        }
    }

    /// The counters of `keys` that exist, in one statement. Every throttled attempt reads two or three keys while holding
    /// their locks, and each round trip there queues every other attempt on the same name or address behind it.
    private static func throttleStates(_ keys: [String], _ db: PostgresSession) throws -> [String: ThrottleState] {
        var states: [String: ThrottleState] = [:]
        for row in try db.query("SELECT key, failures, window_start_ms, locked_until_ms FROM login_throttle WHERE key = ANY(\(keys))") {
            states[try row.get("key")] = ThrottleState(
                failures: Int(try row.get("failures", as: Int64.self)), windowStartMs: try row.get("window_start_ms"),
                lockedUntilMs: try row.get("locked_until_ms"))
        }
        return states
    }

    /// Writes every key's next state (nil: deleted) in at most two statements.
    private static func saveThrottle(_ next: [(key: String, state: ThrottleState?)], _ db: PostgresSession) throws {
        var seen = Set<String>()  // one row per key (an upsert may not touch a row twice): the last state given wins
        let next = next.reversed().filter { seen.insert($0.key).inserted }
        let kept = next.compactMap { item in item.state.map { (item.key, $0) } }
        if !kept.isEmpty {
            try db.execute(
                """
                INSERT INTO login_throttle (key, failures, window_start_ms, locked_until_ms)
                SELECT * FROM unnest(\(kept.map(\.0))::text[], \(kept.map { Int64($0.1.failures) })::int8[],
                                     \(kept.map(\.1.windowStartMs))::int8[], \(kept.map(\.1.lockedUntilMs))::int8[])
                ON CONFLICT (key) DO UPDATE SET failures = excluded.failures, window_start_ms = excluded.window_start_ms,
                                                locked_until_ms = excluded.locked_until_ms
                """)
        }
        let dropped = next.filter { $0.state == nil }.map(\.key)
        if !dropped.isEmpty { try db.execute("DELETE FROM login_throttle WHERE key = ANY(\(dropped))") }
    }
}
