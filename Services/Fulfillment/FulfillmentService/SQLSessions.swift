import Foundation
import GRDB

/// `SQLSession` over one GRDB `Database` access (a write inside a transaction or savepoint, or a read). Statements
/// are prepared once per connection (`cachedStatement`); `?1`-style parameters are SQLite's own.
struct SQLiteSession: SQLSession {
    let db: Database
    var dialect: SQLDialect { .sqlite }

    func fetch(_ sql: String, arguments: [SQLValue]) throws -> [SQLRow] {
        let statement = try db.cachedStatement(sql: sql)
        let columns = statement.columnNames  // one array for every row of the answer
        return try Row.fetchAll(statement, arguments: Self.arguments(arguments)).map { row in
            SQLRow(columns: columns, values: row.databaseValues.map(Self.value))
        }
    }

    func execute(_ sql: String, arguments: [SQLValue]) throws -> Int {
        try db.cachedStatement(sql: sql).execute(arguments: Self.arguments(arguments))
        return db.changesCount
    }

    /// At once: SQLite has no round trips to save.
    func executeLater(_ sql: String, arguments: [SQLValue]) throws { _ = try execute(sql, arguments: arguments) }

    var wallets: WalletMemo? { nil }

    private static func arguments(_ values: [SQLValue]) -> StatementArguments {
        StatementArguments(
            values.map { value -> DatabaseValue in
                switch value {
                case .int(let v): v.databaseValue
                case .text(let v): v.databaseValue
                case .bool(let v): v.databaseValue
                case .blob(let v): Data(v).databaseValue
                case .null: .null
                }
            })
    }

    private static func value(_ value: DatabaseValue) -> SQLValue {
        switch value.storage {
        case .null: .null
        case .int64(let v): .int(v)
        case .double(let v): .text(String(v))  // no column of ours is REAL: read as an integer it fails, never truncated
        case .string(let v): .text(v)
        case .blob(let v): .blob([UInt8](v))
        }
    }
}
