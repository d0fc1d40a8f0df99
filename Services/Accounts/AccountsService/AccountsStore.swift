import Foundation
import GRDB
import IAPProtocol
import ServiceSupport
import Synchronization

/// The accounts database: accounts, sessions (by token hash only), and login-throttle counters.
/// All SQL of the service lives here, behind intention-named methods.
public final class AccountsStore: AccountsStorage, Sendable {
    private let writer: any DatabaseWriter
    /// A connection of its own for `sessionWithoutWaiting` (event loops), used by one thread at a time
    /// (`inlineReaderBusy`). Not one of the pool's readers: the pool's own bookkeeping (dispatch queues shared by
    /// every reader) made event loops and the blocking pool wake each other on every read, 50k -> 38k
    /// authenticates/s under rpcload 16 x 16. Nil for a database opened as a queue (tests): never inline then.
    private let inlineReader: DatabaseQueue?
    private let inlineReaderBusy = Atomic<Bool>(false)

    /// Opens (creating if needed) `accounts.sqlite` in `directory`, in WAL mode with `synchronous=FULL`, as fulfillment's:
    /// an account is the appAccountToken purchases are bound to, so one acknowledged must survive a power cut (with
    /// GRDB's WAL default, NORMAL, every account since the last checkpoint could vanish while fulfillment kept coins
    /// bound to it), and so must a sign-out everywhere or a password change. Its cost is one WAL fsync per commit:
    /// registrations, sign-ins, and a session's touch at most once a minute; `authenticate` only reads.
    public static func open(directory: URL) throws -> AccountsStore {
        var config = Configuration()
        config.foreignKeysEnabled = true
        config.busyMode = .timeout(5)
        let path = directory.appendingPathComponent("accounts.sqlite").path
        let pool = try DatabasePool(path: try PrivateFiles.databaseFile(path), configuration: config)
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        var readOnly = config
        readOnly.readonly = true
        // On an event loop nothing may wait: a busy database (rare in WAL mode: recovery after a crash) is an error
        // here at once, and the read goes to the blocking pool, which waits as usual.
        readOnly.busyMode = .immediateError
        return try AccountsStore(writer: pool, inlineReader: try DatabaseQueue(path: path, configuration: readOnly))
    }

    /// Closes the database: the WAL is checkpointed and removed, so nothing is left needing recovery.
    /// Called once, after the server has drained (a `ClosingService` in the executable's group).
    public func close() throws {
        try inlineReader?.close()
        if let pool = writer as? DatabasePool { try pool.close() } else if let queue = writer as? DatabaseQueue { try queue.close() }
    }

    /// `PRAGMA synchronous` of the writing connection (2 = FULL).
    package func synchronousMode() async throws -> Int {
        try await writer.write { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    public init(writer: any DatabaseWriter, inlineReader: DatabaseQueue? = nil) throws {
        self.writer = writer
        self.inlineReader = inlineReader
        try Self.migrator.migrate(writer)
    }

    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE account (
                        id TEXT PRIMARY KEY NOT NULL,
                        username TEXT NOT NULL,
                        usernameKey TEXT NOT NULL UNIQUE,
                        passwordHash TEXT NOT NULL,
                        appAccountToken TEXT NOT NULL UNIQUE,
                        createdAtMs INTEGER NOT NULL
                    );
                    CREATE TABLE session (
                        tokenHash BLOB PRIMARY KEY NOT NULL CHECK (length(tokenHash) = 32),
                        accountId TEXT NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                        deviceName TEXT,
                        createdAtMs INTEGER NOT NULL,
                        lastSeenAtMs INTEGER NOT NULL,
                        expiresAtMs INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    CREATE INDEX session_by_account ON session(accountId);
                    CREATE TABLE loginThrottle (
                        key TEXT PRIMARY KEY NOT NULL,
                        failures INTEGER NOT NULL CHECK (failures >= 0),
                        windowStartMs INTEGER NOT NULL,
                        lockedUntilMs INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    """)
        }
        m.registerMigration("v2-consumption-consent") { db in
            // Whether the customer agreed that consumption data about their purchases may be sent to Apple
            // when they ask Apple for a refund (Send Consumption Information). Off until they say so.
            try db.execute(sql: "ALTER TABLE account ADD COLUMN consumptionConsent INTEGER NOT NULL DEFAULT 0")
        }
        m.registerMigration("v3-throttle-expiry") { db in
            // Counters expire with their window (`expireThrottle`), oldest first.
            try db.execute(sql: "CREATE INDEX loginThrottle_window ON loginThrottle(windowStartMs)")
        }
        m.registerMigration("v4-app-transactions") { db in
            // Accounts linked to Apple customers by their app transaction (`accounts.linkAppTransaction`).
            try db.execute(
                sql: """
                    CREATE TABLE appTransactionLink (
                        accountId TEXT NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                        appTransactionId TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        linkedAtMs INTEGER NOT NULL,
                        PRIMARY KEY (accountId, appTransactionId)
                    ) WITHOUT ROWID;
                    CREATE INDEX appTransactionLink_by_customer ON appTransactionLink(appTransactionId);
                    """)
        }
        return m
    }

    // MARK: accounts

    public func setConsumptionConsent(accountId: String, consent: Bool) async throws {
        try await writer.write { db in
            try db.execute(sql: "UPDATE account SET consumptionConsent = ? WHERE id = ?", arguments: [consent, accountId])
        }
    }

    public func consumptionProfile(accountId: String) async throws -> (consent: Bool, createdAtMs: Int64, appAccountToken: String)? {
        try await writer.read { db in
            try Row.fetchOne(db, sql: "SELECT consumptionConsent, createdAtMs, appAccountToken FROM account WHERE id = ?", arguments: [accountId])
                .map { ($0["consumptionConsent"], $0["createdAtMs"], $0["appAccountToken"]) }
        }
    }

    public func linkAppTransaction(accountId: String, appTransactionId: String, environment: String, nowMs: Int64) async throws {
        try await writer.write { db in
            try db.execute(
                sql: """
                    INSERT INTO appTransactionLink (accountId, appTransactionId, environment, linkedAtMs) VALUES (?, ?, ?, ?)
                    ON CONFLICT (accountId, appTransactionId) DO NOTHING
                    """, arguments: [accountId, appTransactionId, environment, nowMs])
        }
    }

    public func appTransactionLinks(accountId: String?, appTransactionId: String?) async throws -> [AppTransactionLink] {
        let select = """
            SELECT l.accountId, a.username, l.appTransactionId, l.environment, l.linkedAtMs
            FROM appTransactionLink l JOIN account a ON a.id = l.accountId
            """
        let (filter, argument) =
            accountId.map { ("l.appTransactionId IN (SELECT appTransactionId FROM appTransactionLink WHERE accountId = ?)", $0) }
            ?? ("l.appTransactionId = ?", appTransactionId ?? "")
        return try await writer.read { db in
            try Row.fetchAll(db, sql: "\(select) WHERE \(filter) ORDER BY l.linkedAtMs, l.accountId LIMIT 1000", arguments: [argument]).map {
                AppTransactionLink(
                    accountId: $0["accountId"], username: $0["username"], appTransactionId: $0["appTransactionId"],
                    environment: $0["environment"], linkedAtMs: $0["linkedAtMs"])
            }
        }
    }

    /// Creates the account and its first session in one transaction.
    public func createAccount(_ account: AccountRow, usernameKey: String, session: NewSession, nowMs: Int64) async throws -> CreateOutcome {
        try await writer.write { db in
            do {
                try db.execute(
                    sql: """
                        INSERT INTO account (id, username, usernameKey, passwordHash, appAccountToken, createdAtMs)
                        VALUES (?, ?, ?, ?, ?, ?)
                        """, arguments: [account.id, account.username, usernameKey, account.passwordHash, account.appAccountToken, nowMs])
            } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_CONSTRAINT_UNIQUE {
                return .usernameTaken
            }
            try Self.insert(session, accountId: account.id, db: db)
            return .created
        }
    }

    public func account(usernameKey: String) async throws -> AccountRow? {
        try await writer.read { db in
            try Row.fetchOne(
                db, sql: "SELECT id, username, passwordHash, appAccountToken FROM account WHERE usernameKey = ?",
                arguments: [usernameKey]
            ).map(Self.accountRow)
        }
    }

    public func account(id: String) async throws -> AccountRow? {
        try await writer.read { db in
            try Row.fetchOne(
                db, sql: "SELECT id, username, passwordHash, appAccountToken FROM account WHERE id = ?",
                arguments: [id]
            ).map(Self.accountRow)
        }
    }

    public func accountId(appAccountToken: String) async throws -> String? {
        try await writer.read { db in
            try String.fetchOne(db, sql: "SELECT id FROM account WHERE appAccountToken = ?", arguments: [appAccountToken])
        }
    }

    /// Replaces a password hash only if it is still `expected` (a concurrent change wins otherwise).
    public func replacePasswordHash(accountId: String, expected: String, new: String) async throws {
        try await writer.write { db in
            try db.execute(
                sql: "UPDATE account SET passwordHash = ? WHERE id = ? AND passwordHash = ?",
                arguments: [new, accountId, expected])
        }
    }

    /// Sets a new password hash and revokes every session of the account except `keep`, atomically.
    /// Returns false if the hash changed since it was read (a concurrent password change).
    public func changePassword(accountId: String, expected: String, new: String, keepSession keep: Data) async throws -> Bool {
        try await writer.write { db in
            try db.execute(
                sql: "UPDATE account SET passwordHash = ? WHERE id = ? AND passwordHash = ?",
                arguments: [new, accountId, expected])
            guard db.changesCount == 1 else { return false }
            try db.execute(sql: "DELETE FROM session WHERE accountId = ? AND tokenHash != ?", arguments: [accountId, keep])
            return true
        }
    }

    private static func accountRow(_ row: Row) -> AccountRow {
        AccountRow(id: row["id"], username: row["username"], passwordHash: row["passwordHash"], appAccountToken: row["appAccountToken"])
    }

    // MARK: sessions

    /// Adds a session, drops the account's expired ones, and evicts the oldest beyond `cap`, while the password hash is
    /// still `passwordHash` (`AccountsStorage.addSession`).
    public func addSession(_ session: NewSession, accountId: String, passwordHash: String, nowMs: Int64, cap: Int = .max) async throws -> Bool {
        try await writer.write { db in
            guard try String.fetchOne(db, sql: "SELECT passwordHash FROM account WHERE id = ?", arguments: [accountId]) == passwordHash
            else { return false }
            try db.execute(sql: "DELETE FROM session WHERE accountId = ? AND expiresAtMs <= ?", arguments: [accountId, nowMs])
            try Self.insert(session, accountId: accountId, db: db)
            // The new session always stays; of the others, the newest cap - 1 do.
            try db.execute(
                sql: """
                    DELETE FROM session WHERE tokenHash IN (
                        SELECT tokenHash FROM session WHERE accountId = ? AND tokenHash != ?
                        ORDER BY createdAtMs DESC, lastSeenAtMs DESC LIMIT -1 OFFSET ?)
                    """, arguments: [accountId, session.tokenHash, max(0, cap - 1)])
            return true
        }
    }

    private static func insert(_ s: NewSession, accountId: String, db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO session (tokenHash, accountId, deviceName, createdAtMs, lastSeenAtMs, expiresAtMs)
                VALUES (?, ?, ?, ?, ?, ?)
                """, arguments: [s.tokenHash, accountId, s.deviceName, s.createdAtMs, s.createdAtMs, s.expiresAtMs])
    }

    /// The session with this token hash, with its account: one indexed lookup, run synchronously
    /// (callers are on a blocking pool; see `AccountsService.authenticate`).
    public func session(tokenHash: Data) throws -> SessionRow? {
        // No BEGIN/COMMIT around it (`unsafeRead`): one SELECT is atomic on its own, and the
        // transaction was ~10% of the call (perf).
        try writer.unsafeRead { db in try Self.session(tokenHash: tokenHash, db) }
    }

    /// The same lookup on the inline reader, when no other thread is using it.
    public func sessionWithoutWaiting(tokenHash: Data) -> SessionReadWithoutWaiting {
        guard let inlineReader, inlineReaderBusy.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged
        else { return .notNow }
        defer { inlineReaderBusy.store(false, ordering: .releasing) }
        // Any failure here (busy, I/O) is answered by the blocking pool's read instead, which reports it as usual.
        do {
            return try inlineReader.inDatabase { db in try Self.session(tokenHash: tokenHash, db) }.map { .found($0) } ?? .absent
        } catch {
            return .notNow
        }
    }

    private static func session(tokenHash: Data, _ db: Database) throws -> SessionRow? {
        // Cached statement: this is the hot path of every account-scoped call in the suite.
        try Row.fetchOne(
            db.cachedStatement(
                sql: """
                    SELECT s.tokenHash, s.accountId, a.username, a.appAccountToken, s.deviceName, s.createdAtMs,
                           s.lastSeenAtMs, s.expiresAtMs
                    FROM session s JOIN account a ON a.id = s.accountId
                    WHERE s.tokenHash = ?
                    """), arguments: [tokenHash]
        ).map(Self.sessionRow)
    }

    /// Records use of a session and slides its expiry, unless it was revoked or expired meanwhile (false then).
    public func touchSession(tokenHash: Data, nowMs: Int64, expiresAtMs: Int64) throws -> Bool {
        try writer.write { db in
            try db.execute(
                sql: "UPDATE session SET lastSeenAtMs = ?, expiresAtMs = ? WHERE tokenHash = ? AND expiresAtMs > ?",
                arguments: [nowMs, expiresAtMs, tokenHash, nowMs])
            return db.changesCount > 0
        }
    }

    public func deleteSessions(accountId: String) async throws -> Int {
        try await writer.write { db in
            try db.execute(sql: "DELETE FROM session WHERE accountId = ?", arguments: [accountId])
            return db.changesCount
        }
    }

    public func deleteSession(tokenHash: Data) throws {
        try writer.write { db in
            try db.execute(sql: "DELETE FROM session WHERE tokenHash = ?", arguments: [tokenHash])
        }
    }

    public func sessions(accountId: String, nowMs: Int64) throws -> [SessionRow] {
        try writer.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT s.tokenHash, s.accountId, a.username, a.appAccountToken, s.deviceName, s.createdAtMs,
                           s.lastSeenAtMs, s.expiresAtMs
                    FROM session s JOIN account a ON a.id = s.accountId
                    WHERE s.accountId = ? AND s.expiresAtMs > ?
                    ORDER BY s.createdAtMs, s.deviceName, s.tokenHash
                    """, arguments: [accountId, nowMs]
            ).map(Self.sessionRow)
        }
    }

    private static func sessionRow(_ row: Row) -> SessionRow {
        SessionRow(
            tokenHash: row["tokenHash"], accountId: row["accountId"], username: row["username"],
            appAccountToken: row["appAccountToken"], deviceName: row["deviceName"], createdAtMs: row["createdAtMs"],
            lastSeenAtMs: row["lastSeenAtMs"], expiresAtMs: row["expiresAtMs"])
    }

    // MARK: login throttle

    /// In one write transaction: when `wait` says any key is locked, answers the longest wait and changes
    /// nothing; otherwise counts this attempt against every key (`record`) and answers 0. Counting before
    /// the password is checked is what stops a batch or many connections from racing the limit.
    public func admitAttempt(
        keys: [String], wait: @escaping @Sendable (String, ThrottleState?) -> Int64,
        record: @escaping @Sendable (String, ThrottleState?) -> ThrottleState
    ) async throws -> Int64 {
        try await writer.write { db in
            var states: [String: ThrottleState] = [:]
            for key in keys { states[key] = try Self.throttleState(key, db) }
            let longest = keys.map { wait($0, states[$0]) }.max() ?? 0
            guard longest == 0 else { return longest }
            for key in keys { try Self.saveThrottle(key, record(key, states[key]), db) }
            return 0
        }
    }

    private static func throttleState(_ key: String, _ db: Database) throws -> ThrottleState? {
        try Row.fetchOne(db, sql: "SELECT failures, windowStartMs, lockedUntilMs FROM loginThrottle WHERE key = ?", arguments: [key]).map {
            ThrottleState(failures: $0["failures"], windowStartMs: $0["windowStartMs"], lockedUntilMs: $0["lockedUntilMs"])
        }
    }

    private static func saveThrottle(_ key: String, _ next: ThrottleState?, _ db: Database) throws {
        if let next {
            try db.execute(
                sql: """
                    INSERT INTO loginThrottle (key, failures, windowStartMs, lockedUntilMs) VALUES (?, ?, ?, ?)
                    ON CONFLICT(key) DO UPDATE SET failures = excluded.failures, windowStartMs = excluded.windowStartMs,
                                                   lockedUntilMs = excluded.lockedUntilMs
                    """, arguments: [key, next.failures, next.windowStartMs, next.lockedUntilMs])
        } else {
            try db.execute(sql: "DELETE FROM loginThrottle WHERE key = ?", arguments: [key])
        }
    }

    /// Applies `update` to each key's state (nil when absent) in one transaction.
    public func updateThrottle(keys: [String], _ update: @escaping @Sendable (String, ThrottleState?) -> ThrottleState?) async throws {
        try await writer.write { db in
            for key in keys { try Self.saveThrottle(key, update(key, try Self.throttleState(key, db)), db) }
        }
    }

    public func expireThrottle(windowEndedBeforeMs: Int64, nowMs: Int64, maxRows: Int) async throws -> Int {
        try await writer.write { db in
            try db.execute(
                sql: "DELETE FROM loginThrottle WHERE windowStartMs < ? AND lockedUntilMs <= ?", arguments: [windowEndedBeforeMs, nowMs])
            let remaining = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM loginThrottle") ?? 0
            guard remaining > maxRows else { return remaining }
            try db.execute(
                sql: "DELETE FROM loginThrottle WHERE key IN (SELECT key FROM loginThrottle ORDER BY windowStartMs LIMIT ?)",
                arguments: [remaining - maxRows])
            return maxRows
        }
    }
}
