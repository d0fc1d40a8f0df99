import AccountsService
import Foundation
import GRDB
import ServiceSupport

/// The console's records in SQLite (`console.sqlite` in the data directory, 0600): operators, sessions by the SHA-256 of
/// their token, sign-in throttle counters, and the console's append-only audit log.
public final class ConsoleStore: ConsoleStorage, Sendable {
    let writer: DatabaseQueue

    public static func open(directory: URL) throws -> ConsoleStore {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var config = Configuration()
        config.busyMode = .timeout(5)
        let queue = try DatabaseQueue(
            path: try PrivateFiles.databaseFile(directory.appendingPathComponent("console.sqlite").path), configuration: config)
        try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL") }
        try Self.migrator.migrate(queue)
        return ConsoleStore(writer: queue)
    }

    init(writer: DatabaseQueue) { self.writer = writer }

    public func close() throws { try writer.close() }

    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE operator (
                        name TEXT PRIMARY KEY NOT NULL,
                        role TEXT NOT NULL CHECK (role IN ('viewer', 'support', 'admin')),
                        password_hash TEXT NOT NULL,
                        totp_secret BLOB NOT NULL,
                        last_totp_step INTEGER NOT NULL DEFAULT 0,
                        created_at_ms INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE operator_session (
                        token_hash BLOB PRIMARY KEY NOT NULL CHECK (length(token_hash) = 32),
                        operator_name TEXT NOT NULL REFERENCES operator(name) ON DELETE CASCADE,
                        csrf_token TEXT NOT NULL,
                        created_at_ms INTEGER NOT NULL,
                        expires_at_ms INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE INDEX operator_session_by_operator ON operator_session (operator_name);
                    CREATE TABLE sign_in_throttle (
                        key TEXT PRIMARY KEY NOT NULL,
                        failures INTEGER NOT NULL CHECK (failures >= 0),
                        window_start_ms INTEGER NOT NULL,
                        locked_until_ms INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE INDEX sign_in_throttle_window ON sign_in_throttle (window_start_ms);
                    CREATE TABLE console_audit (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        at_ms INTEGER NOT NULL,
                        operator_name TEXT NOT NULL,
                        action TEXT NOT NULL,
                        detail TEXT NOT NULL,
                        address TEXT);
                    CREATE INDEX console_audit_by_operator ON console_audit (operator_name, id);
                    CREATE TRIGGER console_audit_no_update BEFORE UPDATE ON console_audit
                        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
                    CREATE TRIGGER console_audit_no_delete BEFORE DELETE ON console_audit
                        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
                    """)
        }
        return m
    }

    public func addOperator(_ record: OperatorRecord) async throws {
        try await writer.write { db in
            try db.execute(
                sql: """
                    INSERT INTO operator (name, role, password_hash, totp_secret, last_totp_step, created_at_ms) VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT (name) DO NOTHING
                    """,
                arguments: [record.name, record.role.rawValue, record.passwordHash, Data(record.totpSecret), record.lastTotpStep, record.createdAtMs])
            guard db.changesCount == 1 else { throw OperatorExists(name: record.name) }
        }
    }

    public func operatorRecord(_ name: String) async throws -> OperatorRecord? {
        try await writer.read { db in try Row.fetchOne(db, sql: "SELECT * FROM operator WHERE name = ?", arguments: [name]).map(Self.record) }
    }

    public func operators() async throws -> [OperatorRecord] {
        try await writer.read { db in try Row.fetchAll(db, sql: "SELECT * FROM operator ORDER BY name").map(Self.record) }
    }

    public func setRole(_ name: String, role: OperatorRole) async throws -> Bool {
        try await writer.write { db in
            try db.execute(sql: "UPDATE operator SET role = ? WHERE name = ?", arguments: [role.rawValue, name])
            guard db.changesCount == 1 else { return false }
            try db.execute(sql: "DELETE FROM operator_session WHERE operator_name = ?", arguments: [name])
            return true
        }
    }

    public func removeOperator(_ name: String) async throws -> Bool {
        try await writer.write { db in
            try db.execute(sql: "DELETE FROM operator_session WHERE operator_name = ?", arguments: [name])
            try db.execute(sql: "DELETE FROM operator WHERE name = ?", arguments: [name])
            return db.changesCount == 1
        }
    }

    static func record(_ row: Row) -> OperatorRecord {
        OperatorRecord(
            name: row["name"], role: OperatorRole(rawValue: row["role"]) ?? .viewer, passwordHash: row["password_hash"],
            totpSecret: Array(row["totp_secret"] as Data), lastTotpStep: row["last_totp_step"], createdAtMs: row["created_at_ms"])
    }

    public func acceptTotpStep(_ name: String, step: Int64) async throws -> Bool {
        try await writer.write { db in
            try db.execute(sql: "UPDATE operator SET last_totp_step = ? WHERE name = ? AND last_totp_step < ?", arguments: [step, name, step])
            return db.changesCount == 1
        }
    }

    public func createSession(tokenHash: [UInt8], operatorName: String, csrfToken: String, nowMs: Int64, expiresAtMs: Int64) async throws {
        try await writer.write { db in
            // Ended sessions go as new ones begin: the table holds live sessions only.
            try db.execute(sql: "DELETE FROM operator_session WHERE expires_at_ms <= ?", arguments: [nowMs])
            try db.execute(
                sql: "INSERT INTO operator_session (token_hash, operator_name, csrf_token, created_at_ms, expires_at_ms) VALUES (?, ?, ?, ?, ?)",
                arguments: [Data(tokenHash), operatorName, csrfToken, nowMs, expiresAtMs])
        }
    }

    public func session(tokenHash: [UInt8], nowMs: Int64, idleMs: Int64, absoluteMs: Int64) async throws -> OperatorSession? {
        try await writer.write { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT s.*, o.role FROM operator_session s JOIN operator o ON o.name = s.operator_name
                        WHERE s.token_hash = ? AND s.expires_at_ms > ?
                        """, arguments: [Data(tokenHash), nowMs])
            else { return nil }
            let created: Int64 = row["created_at_ms"]
            let expires = min(nowMs + idleMs, created + absoluteMs)
            try db.execute(sql: "UPDATE operator_session SET expires_at_ms = ? WHERE token_hash = ?", arguments: [expires, Data(tokenHash)])
            return OperatorSession(
                operatorName: row["operator_name"], role: OperatorRole(rawValue: row["role"]) ?? .viewer, csrfToken: row["csrf_token"],
                expiresAtMs: expires)
        }
    }

    public func deleteSession(tokenHash: [UInt8]) async throws {
        try await writer.write { db in try db.execute(sql: "DELETE FROM operator_session WHERE token_hash = ?", arguments: [Data(tokenHash)]) }
    }

    public func deleteSessions(operatorName: String) async throws -> Int {
        try await writer.write { db in
            try db.execute(sql: "DELETE FROM operator_session WHERE operator_name = ?", arguments: [operatorName])
            return db.changesCount
        }
    }

    public func admitAttempt(keys: [String], policy: LoginThrottlePolicy, nowMs: Int64) async throws -> Int64 {
        try await writer.write { db in
            // Counters whose window ended and whose lock passed go first: the table does not grow with every new name.
            try db.execute(
                sql: "DELETE FROM sign_in_throttle WHERE window_start_ms < ? AND locked_until_ms <= ?", arguments: [nowMs - policy.windowMs, nowMs])
            let admission = policy.admitting(try keys.map { ($0, try Self.throttle($0, db)) }, nowMs: nowMs)
            for (key, state) in admission.next { try Self.save(key, state, db) }
            return admission.waitMs
        }
    }

    public func signInSucceeded(nameKeys: [String], addressKey: String?, policy: LoginThrottlePolicy) async throws {
        try await writer.write { db in
            for key in nameKeys { try Self.save(key, nil, db) }
            if let addressKey { try Self.save(addressKey, policy.returningAttempt(try Self.throttle(addressKey, db), key: addressKey), db) }
        }
    }

    static func throttle(_ key: String, _ db: Database) throws -> ThrottleState? {
        try Row.fetchOne(db, sql: "SELECT * FROM sign_in_throttle WHERE key = ?", arguments: [key]).map {
            ThrottleState(failures: $0["failures"], windowStartMs: $0["window_start_ms"], lockedUntilMs: $0["locked_until_ms"])
        }
    }

    static func save(_ key: String, _ state: ThrottleState?, _ db: Database) throws {
        guard let state else { return try db.execute(sql: "DELETE FROM sign_in_throttle WHERE key = ?", arguments: [key]) }
        try db.execute(
            sql: """
                INSERT INTO sign_in_throttle (key, failures, window_start_ms, locked_until_ms) VALUES (?, ?, ?, ?)
                ON CONFLICT (key) DO UPDATE SET failures = excluded.failures, window_start_ms = excluded.window_start_ms,
                    locked_until_ms = excluded.locked_until_ms
                """, arguments: [key, state.failures, state.windowStartMs, state.lockedUntilMs])
    }

    public func recordAudit(operatorName: String, action: String, detail: String, address: String?, nowMs: Int64) async throws {
        try await writer.write { db in
            try db.execute(
                sql: "INSERT INTO console_audit (at_ms, operator_name, action, detail, address) VALUES (?, ?, ?, ?, ?)",
                arguments: [nowMs, operatorName, action, detail, address])
        }
    }

    public func audit(operatorName: String?, action: String?, limit: Int) async throws -> [ConsoleAuditEntry] {
        try await writer.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM console_audit WHERE (?1 IS NULL OR operator_name = ?1) AND (?2 IS NULL OR action = ?2)
                    ORDER BY id DESC LIMIT ?3
                    """, arguments: [operatorName, action, limit]
            ).map {
                ConsoleAuditEntry(
                    id: $0["id"], atMs: $0["at_ms"], operatorName: $0["operator_name"], action: $0["action"], detail: $0["detail"],
                    address: $0["address"])
            }
        }
    }
}
