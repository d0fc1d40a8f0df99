import AccountsService
import CatalogService
import Foundation
import FulfillmentService
import GRDB
import PostgresSupport
import RPCTestSupport
import Testing

/// Both engines hold the same records, for each service that has both (fulfillment, accounts, catalog): the same
/// tables, columns (and whether each may be NULL), primary keys, unique keys, CHECK constraints (counted per table) and
/// which tables triggers guard, read from `sqlite_master` / SQLite's
/// pragmas and from PostgreSQL's catalog. Fulfillment's two schemas use one vocabulary (snake_case) and are compared
/// name for name; accounts' and catalog's SQLite tables still name columns in camelCase, compared in snake_case.
@Suite(.enabled(if: TestPostgres.isAvailable, "PostgreSQL is not installed"))
struct SchemaParityTests {
    /// One engine's schema, names in snake_case: "table.column nullable|not null", "table key(a,b)", "table unique(a,b)".
    typealias Schema = Set<String>

    /// Each engine's own bookkeeping, and the SQLite table kept only for databases from before the inbox.
    static let engineOnly: Set<String> = ["grdb_migrations", "schema_migration", "applied_notification"]

    static func snake(_ name: String) -> String {
        name.replacing(/([a-z0-9])([A-Z])/) { "\($0.output.1)_\($0.output.2)" }.lowercased()
    }

    /// A primary key that holds a unique key admits the same rows as that unique key alone (SQLite's older tables
    /// kept `(environment, id)` as their key when `id` alone became unique): compared as the unique key.
    static func normalized(_ schema: Schema) -> Schema {
        var out = schema
        for key in schema where key.contains(" key(") {
            let table = String(key.prefix { $0 != " " })
            let keyColumns = Set(key.split(separator: "(")[1].dropLast().split(separator: ","))
            for unique in schema where unique.hasPrefix(table + " unique(") && !unique.hasSuffix("partial") {
                let columns = Set(unique.split(separator: "(")[1].dropLast().split(separator: ","))
                if columns.isStrictSubset(of: keyColumns) {
                    out.remove(key)
                    out.remove(unique)
                    out.insert(unique.replacingOccurrences(of: " unique(", with: " key("))
                }
            }
        }
        return out
    }

    static func sqliteSchema(_ make: (URL) throws -> Void, file: String, namesAsStored: Bool = false) async throws -> Schema {
        @Sendable func snake(_ name: String) -> String { namesAsStored ? name : Self.snake(name) }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("schema-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        try make(dir)
        let queue = try DatabaseQueue(path: dir.appendingPathComponent(file).path)
        return try await queue.read { db in
            var schema = Schema()
            let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
            for table in tables where !engineOnly.contains(Self.snake(table)) {
                let t = snake(table)
                var key: [(Int, String)] = []
                for column in try Row.fetchAll(db, sql: "SELECT name, \"notnull\", pk FROM pragma_table_info(?)", arguments: [table]) {
                    let name = snake(column["name"])
                    let pk: Int = column["pk"]
                    let notNull = (column["notnull"] as Int) == 1 || pk > 0
                    schema.insert("\(t).\(name) \(notNull ? "not null" : "nullable")")
                    if pk > 0 { key.append((pk, name)) }
                }
                if key.isEmpty, try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = 'id'", arguments: [table]) == 1 {
                    key = [(1, "id")]
                }
                schema.insert("\(t) key(\(key.sorted { $0.0 < $1.0 }.map(\.1).joined(separator: ",")))")
                for index in try Row.fetchAll(db, sql: "SELECT name, \"unique\", origin FROM pragma_index_list(?)", arguments: [table])
                where (index["unique"] as Int) == 1 && (index["origin"] as String) != "pk" {
                    let columns = try Row.fetchAll(
                        db, sql: "SELECT name FROM pragma_index_info(?) ORDER BY seqno", arguments: [index["name"] as String]
                    ).map { snake($0["name"]) }
                    let partial =
                        try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE name = ?", arguments: [index["name"] as String])?
                        .contains(" WHERE ") ?? false
                    schema.insert("\(t) unique(\(columns.joined(separator: ",")))\(partial ? " partial" : "")")
                }
                // CHECK constraints, counted (their text is each engine's dialect), and whether triggers guard the table.
                let sql = try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", arguments: [table]) ?? ""
                let checks = sql.matches(of: /\bCHECK\s*\(/).count
                if checks > 0 { schema.insert("\(t) checks \(checks)") }
                if try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?", arguments: [table])
                    ?? 0 > 0
                {
                    schema.insert("\(t) triggers")
                }
            }
            return schema
        }
    }

    static func postgresSchema(_ name: String, _ open: (PostgresPool) async throws -> Void) async throws -> Schema {
        let url = try await TestPostgres.newDatabase()
        let pool = try PostgresPool(url: try PostgresURL(url), schema: name, connections: 1, logger: .init(label: "schema-parity"))
        try await open(pool)
        defer { pool.close() }
        let psqlURL = url.replacingOccurrences(of: "postgres://", with: "postgresql://")
        var schema = Schema()
        let columns = try await TestPostgres.psql(
            psqlURL,
            "SELECT table_name || '.' || column_name || ' ' || CASE is_nullable WHEN 'YES' THEN 'nullable' ELSE 'not null' END "
                + "FROM information_schema.columns WHERE table_schema = '\(name)'")
        for line in columns.split(separator: "\n") where !engineOnly.contains(String(line.prefix { $0 != "." })) {
            schema.insert(String(line))
        }
        let keys = try await TestPostgres.psql(
            psqlURL,
            """
            SELECT c.relname || CASE x.contype WHEN 'p' THEN ' key(' ELSE ' unique(' END
                || string_agg(a.attname, ',' ORDER BY k.ord) || ')'
            FROM pg_constraint x JOIN pg_class c ON c.oid = x.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            CROSS JOIN LATERAL unnest(x.conkey) WITH ORDINALITY AS k(attnum, ord)
            JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
            WHERE n.nspname = '\(name)' AND x.contype IN ('p', 'u') GROUP BY c.relname, x.conname, x.contype
            UNION ALL
            SELECT t.relname || ' unique(' || string_agg(a.attname, ',' ORDER BY k.ord) || ')'
                || CASE WHEN i.indpred IS NULL THEN '' ELSE ' partial' END
            FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace
            CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
            JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
            WHERE n.nspname = '\(name)' AND i.indisunique AND NOT i.indisprimary
                AND NOT EXISTS (SELECT 1 FROM pg_constraint x WHERE x.conindid = i.indexrelid)
            GROUP BY t.relname, i.indexrelid, i.indpred
            """)
        for line in keys.split(separator: "\n") where !engineOnly.contains(String(line.prefix { $0 != " " })) {
            schema.insert(String(line))
        }
        let guards = try await TestPostgres.psql(
            psqlURL,
            """
            SELECT c.relname || ' checks ' || COUNT(*) FROM pg_constraint x JOIN pg_class c ON c.oid = x.conrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '\(name)' AND x.contype = 'c' GROUP BY c.relname
            UNION ALL
            SELECT DISTINCT c.relname || ' triggers' FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '\(name)' AND NOT t.tgisinternal
                AND (t.tgtype & 2) <> 0  -- BEFORE: a guard (an AFTER trigger announces, as accounts' session revocations)
            """)
        for line in guards.split(separator: "\n") where !engineOnly.contains(String(line.prefix { $0 != " " })) {
            schema.insert(String(line))
        }
        return schema
    }

    static func compare(_ sqlite: Schema, _ postgres: Schema) {
        let (sqlite, postgres) = (normalized(sqlite), normalized(postgres))
        let onlySQLite = sqlite.subtracting(postgres).sorted()
        let onlyPostgres = postgres.subtracting(sqlite).sorted()
        #expect(onlySQLite.isEmpty, "only in SQLite:\n\(onlySQLite.joined(separator: "\n"))")
        #expect(onlyPostgres.isEmpty, "only in PostgreSQL:\n\(onlyPostgres.joined(separator: "\n"))")
        #expect(sqlite.count > 10, "the schema was read: \(sqlite.count) facts")
    }

    @Test func fulfillmentsEnginesHoldTheSameTablesColumnsAndKeys() async throws {
        Self.compare(
            try await Self.sqliteSchema({ _ = try FulfillmentStore.open(directory: $0) }, file: "fulfillment.sqlite", namesAsStored: true),
            try await Self.postgresSchema("fulfillment") { _ = try await PostgresFulfillmentStore(pool: $0) })
    }

    @Test func accountsEnginesHoldTheSameTablesColumnsAndKeys() async throws {
        Self.compare(
            try await Self.sqliteSchema({ _ = try AccountsStore.open(directory: $0) }, file: "accounts.sqlite"),
            try await Self.postgresSchema("accounts") { _ = try await PostgresAccountsStore(pool: $0) })
    }

    @Test func catalogsEnginesHoldTheSameTablesColumnsAndKeys() async throws {
        Self.compare(
            try await Self.sqliteSchema({ _ = try CatalogStore.open(directory: $0) }, file: "catalog.sqlite"),
            try await Self.postgresSchema("catalog") { _ = try await PostgresCatalogStore(pool: $0) })
    }
}
