import JSONRPC
import PostgresNIO

/// One step of a service's schema, applied once, in order, at start.
public struct PostgresMigration: Sendable {
    public let name: String
    public let sql: String

    public init(_ name: String, _ sql: String) {
        self.name = name
        self.sql = sql
    }
}

/// Migrations versioned in code, as GRDB's `DatabaseMigrator` does for SQLite: each service lists its steps;
/// `migrate` applies the ones not yet recorded in `<schema>.schema_migration`, each in its own transaction, under
/// an advisory lock so that instances starting together apply each step once. A database that has a step this
/// build does not know (a newer version ran on it) is refused: downgrading means restoring a backup.
extension PostgresPool {
    public struct SchemaTooNew: Error, CustomStringConvertible {
        public let unknown: [String]
        public var description: String {
            "the database has migrations this build does not know (\(unknown.joined(separator: ", "))): it was used by a newer "
                + "version; run that version or restore a backup taken before the upgrade"
        }
    }

    /// `migrate`, for a store opening on this pool: on failure the pool is closed (its threads and connections
    /// released) before the error is thrown.
    public func migrateOrClose(_ migrations: [PostgresMigration]) async throws {
        do {
            try await migrate(migrations)
        } catch {
            close()
            throw error
        }
    }

    public func migrate(_ migrations: [PostgresMigration]) async throws {
        let schema = self.schema
        try await withSession { session in
            try session.script("CREATE SCHEMA IF NOT EXISTS \(schema)")
            // The lock is per schema: instances of one service wait for each other, other services do not.
            try session.execute("SELECT pg_advisory_lock(hashtext(\("iap-migrations:" + schema)))")
            defer { _ = try? session.execute("SELECT pg_advisory_unlock(hashtext(\("iap-migrations:" + schema)))") }
            try session.script(
                """
                CREATE TABLE IF NOT EXISTS \(schema).schema_migration (
                    name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())
                """)
            let applied = Set(try session.query("SELECT name FROM \(unescaped: schema).schema_migration").map { try $0.get("name", as: String.self) })
            let known = Set(migrations.map(\.name))
            let unknown = applied.subtracting(known).sorted()
            guard unknown.isEmpty else { throw SchemaTooNew(unknown: unknown) }
            for migration in migrations where !applied.contains(migration.name) {
                try session.script("BEGIN")
                do {
                    try session.script(migration.sql)
                    try session.execute("INSERT INTO \(unescaped: schema).schema_migration (name) VALUES (\(migration.name))")
                    try session.script("COMMIT")
                } catch {
                    _ = try? session.script("ROLLBACK")
                    throw error
                }
            }
        }
    }
}
