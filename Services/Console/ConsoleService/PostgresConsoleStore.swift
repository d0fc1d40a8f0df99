import AccountsService
import Foundation
import PostgresNIO
import PostgresSupport

/// The console's records on PostgreSQL (`--database-url`, schema `console`): the same as `ConsoleStore`, so several
/// console instances share operators, sessions (a sign-out ends them everywhere at once) and the sign-in limits.
public final class PostgresConsoleStore: ConsoleStorage, Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) async throws {
        self.pool = pool
        try await pool.migrateOrClose(Self.migrations)
    }

    public func close() throws { pool.close() }

    static let migrations: [PostgresMigration] = [
        PostgresMigration(
            "v1",
            """
            CREATE TABLE operator (
                name TEXT PRIMARY KEY,
                role TEXT NOT NULL CHECK (role IN ('viewer', 'support', 'admin')),
                password_hash TEXT NOT NULL,
                totp_secret BYTEA NOT NULL,
                last_totp_step BIGINT NOT NULL DEFAULT 0,
                created_at_ms BIGINT NOT NULL);
            CREATE TABLE operator_session (
                token_hash BYTEA PRIMARY KEY CHECK (length(token_hash) = 32),
                operator_name TEXT NOT NULL REFERENCES operator(name) ON DELETE CASCADE,
                csrf_token TEXT NOT NULL,
                created_at_ms BIGINT NOT NULL,
                expires_at_ms BIGINT NOT NULL);
            CREATE INDEX operator_session_by_operator ON operator_session (operator_name);
            CREATE TABLE sign_in_throttle (
                key TEXT PRIMARY KEY,
                failures BIGINT NOT NULL CHECK (failures >= 0),
                window_start_ms BIGINT NOT NULL,
                locked_until_ms BIGINT NOT NULL);
            CREATE INDEX sign_in_throttle_window ON sign_in_throttle (window_start_ms);
            CREATE TABLE console_audit (
                id BIGSERIAL PRIMARY KEY,
                at_ms BIGINT NOT NULL,
                operator_name TEXT NOT NULL,
                action TEXT NOT NULL,
                detail TEXT NOT NULL,
                address TEXT);
            CREATE INDEX console_audit_by_operator ON console_audit (operator_name, id);
            CREATE FUNCTION console_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION '% is append-only', TG_TABLE_NAME; END $$;
            CREATE TRIGGER console_audit_append_only BEFORE UPDATE OR DELETE ON console_audit
                FOR EACH ROW EXECUTE FUNCTION console_refuse_change();
            """)
    ]

    public func addOperator(_ record: OperatorRecord) async throws {
        let inserted = try await pool.write { db in
            try db.execute(
                """
                INSERT INTO operator (name, role, password_hash, totp_secret, last_totp_step, created_at_ms)
                VALUES (\(record.name), \(record.role.rawValue), \(record.passwordHash), \(Data(record.totpSecret)), \(record.lastTotpStep),
                        \(record.createdAtMs))
                ON CONFLICT (name) DO NOTHING
                """)
        }
        guard inserted == 1 else { throw OperatorExists(name: record.name) }
    }

    public func operatorRecord(_ name: String) async throws -> OperatorRecord? {
        try await pool.read { db in try db.one("SELECT * FROM operator WHERE name = \(name)").map(Self.record) }
    }

    public func operators() async throws -> [OperatorRecord] {
        try await pool.read { db in try db.query("SELECT * FROM operator ORDER BY name").map(Self.record) }
    }

    public func setRole(_ name: String, role: OperatorRole) async throws -> Bool {
        try await pool.write { db in
            guard try db.execute("UPDATE operator SET role = \(role.rawValue) WHERE name = \(name)") == 1 else { return false }
            _ = try db.execute("DELETE FROM operator_session WHERE operator_name = \(name)")
            return true
        }
    }

    public func removeOperator(_ name: String) async throws -> Bool {
        try await pool.write { db in
            _ = try db.execute("DELETE FROM operator_session WHERE operator_name = \(name)")
            return try db.execute("DELETE FROM operator WHERE name = \(name)") == 1
        }
    }

    static func record(_ row: PostgresRandomAccessRow) throws -> OperatorRecord {
        OperatorRecord(
            name: try row.get("name"), role: OperatorRole(rawValue: try row.get("role")) ?? .viewer,
            passwordHash: try row.get("password_hash"), totpSecret: Array(try row.get("totp_secret", as: Data.self)),
            lastTotpStep: try row.get("last_totp_step"), createdAtMs: try row.get("created_at_ms"))
    }

    public func acceptTotpStep(_ name: String, step: Int64) async throws -> Bool {
        try await pool.write { db in
            try db.execute("UPDATE operator SET last_totp_step = \(step) WHERE name = \(name) AND last_totp_step < \(step)") == 1
        }
    }

    public func createSession(tokenHash: [UInt8], operatorName: String, csrfToken: String, nowMs: Int64, expiresAtMs: Int64) async throws {
        _ = try await pool.write { db in
            // Ended sessions go as new ones begin: the table holds live sessions only.
            _ = try db.execute("DELETE FROM operator_session WHERE expires_at_ms <= \(nowMs)")
            return try db.execute(
                """
                INSERT INTO operator_session (token_hash, operator_name, csrf_token, created_at_ms, expires_at_ms)
                VALUES (\(Data(tokenHash)), \(operatorName), \(csrfToken), \(nowMs), \(expiresAtMs))
                """)
        }
    }

    public func session(tokenHash: [UInt8], nowMs: Int64, idleMs: Int64, absoluteMs: Int64) async throws -> OperatorSession? {
        try await pool.write { db in
            guard
                let row = try db.one(
                    """
                    UPDATE operator_session s SET expires_at_ms = LEAST(\(nowMs + idleMs), s.created_at_ms + \(absoluteMs))
                    FROM operator o WHERE o.name = s.operator_name AND s.token_hash = \(Data(tokenHash)) AND s.expires_at_ms > \(nowMs)
                    RETURNING s.operator_name, s.csrf_token, s.expires_at_ms, o.role
                    """)
            else { return nil }
            return OperatorSession(
                operatorName: try row.get("operator_name"), role: OperatorRole(rawValue: try row.get("role")) ?? .viewer,
                csrfToken: try row.get("csrf_token"), expiresAtMs: try row.get("expires_at_ms"))
        }
    }

    public func deleteSession(tokenHash: [UInt8]) async throws {
        _ = try await pool.write { db in try db.execute("DELETE FROM operator_session WHERE token_hash = \(Data(tokenHash))") }
    }

    public func deleteSessions(operatorName: String) async throws -> Int {
        try await pool.write { db in try db.execute("DELETE FROM operator_session WHERE operator_name = \(operatorName)") }
    }

    public func admitAttempt(keys: [String], policy: LoginThrottlePolicy, nowMs: Int64) async throws -> Int64 {
        try await pool.write(locking: keys.map { "console:throttle:" + $0 }) { db in
            // Counters whose window ended and whose lock passed go first: the table does not grow with every new name.
            _ = try db.execute("DELETE FROM sign_in_throttle WHERE window_start_ms < \(nowMs - policy.windowMs) AND locked_until_ms <= \(nowMs)")
            let admission = policy.admitting(try keys.map { ($0, try Self.throttle($0, db)) }, nowMs: nowMs)
            for (key, state) in admission.next { try Self.save(key, state, db) }
            return admission.waitMs
        }
    }

    public func signInSucceeded(nameKeys: [String], addressKey: String?, policy: LoginThrottlePolicy) async throws {
        let keys = nameKeys + (addressKey.map { [$0] } ?? [])
        try await pool.write(locking: keys.map { "console:throttle:" + $0 }) { db in
            for key in nameKeys { try Self.save(key, nil, db) }
            if let addressKey { try Self.save(addressKey, policy.returningAttempt(try Self.throttle(addressKey, db), key: addressKey), db) }
        }
    }

    static func throttle(_ key: String, _ db: PostgresSession) throws -> ThrottleState? {
        try db.one("SELECT failures, window_start_ms, locked_until_ms FROM sign_in_throttle WHERE key = \(key)").map {
            ThrottleState(
                failures: Int(try $0.get("failures", as: Int64.self)), windowStartMs: try $0.get("window_start_ms"),
                lockedUntilMs: try $0.get("locked_until_ms"))
        }
    }

    static func save(_ key: String, _ state: ThrottleState?, _ db: PostgresSession) throws {
        guard let state else {
            _ = try db.execute("DELETE FROM sign_in_throttle WHERE key = \(key)")
            return
        }
        _ = try db.execute(
            """
            INSERT INTO sign_in_throttle (key, failures, window_start_ms, locked_until_ms)
            VALUES (\(key), \(Int64(state.failures)), \(state.windowStartMs), \(state.lockedUntilMs))
            ON CONFLICT (key) DO UPDATE SET failures = excluded.failures, window_start_ms = excluded.window_start_ms,
                locked_until_ms = excluded.locked_until_ms
            """)
    }

    public func recordAudit(operatorName: String, action: String, detail: String, address: String?, nowMs: Int64) async throws {
        _ = try await pool.write { db in
            try db.execute(
                """
                INSERT INTO console_audit (at_ms, operator_name, action, detail, address)
                VALUES (\(nowMs), \(operatorName), \(action), \(detail), \(address))
                """)
        }
    }

    public func audit(operatorName: String?, action: String?, limit: Int) async throws -> [ConsoleAuditEntry] {
        try await pool.read { db in
            try db.query(
                """
                SELECT * FROM console_audit WHERE (\(operatorName)::text IS NULL OR operator_name = \(operatorName))
                    AND (\(action)::text IS NULL OR action = \(action))
                ORDER BY id DESC LIMIT \(Int64(limit))
                """
            ).map {
                ConsoleAuditEntry(
                    id: try $0.get("id"), atMs: try $0.get("at_ms"), operatorName: try $0.get("operator_name"), action: try $0.get("action"),
                    detail: try $0.get("detail"), address: try $0.get("address"))
            }
        }
    }
}
