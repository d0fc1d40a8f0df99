import Foundation
import GRDB
import NIOCore
import PostgresNIO
import PostgresSupport

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

/// `SQLSession` over one PostgreSQL transaction of `PostgresPool` (each statement one round trip). Parameters
/// `?n` become PostgreSQL's `$n`.
struct PostgresSQLSession: SQLSession {
    let session: PostgresSession
    var dialect: SQLDialect { .postgres }

    func fetch(_ sql: String, arguments: [SQLValue]) throws -> [SQLRow] {
        try session.query(Self.query(sql, arguments)).map { row in
            var columns: [String] = []
            var values: [SQLValue] = []
            columns.reserveCapacity(row.count)
            values.reserveCapacity(row.count)
            for cell in row {
                columns.append(cell.columnName)
                values.append(try Self.value(cell))
            }
            return SQLRow(columns: columns, values: values)
        }
    }

    func execute(_ sql: String, arguments: [SQLValue]) throws -> Int {
        try session.execute(Self.query(sql, arguments))
    }

    static func query(_ sql: String, _ arguments: [SQLValue]) throws -> PostgresQuery {
        var binds = PostgresBindings(capacity: arguments.count)
        for argument in arguments {
            switch argument {
            case .int(let v): try binds.append(v)
            case .text(let v): try binds.append(v)
            case .bool(let v): try binds.append(v)
            case .blob(let v): try binds.append(ByteBuffer(bytes: v))
            case .null: binds.appendNull()
            }
        }
        return PostgresQuery(unsafeSQL: dollarParameters(sql), binds: binds)
    }

    /// `?12` -> `$12` (our statements hold no `?` in literals or operators).
    static func dollarParameters(_ sql: String) -> String {
        var out = ""
        out.reserveCapacity(sql.utf8.count)
        var previous: Character = " "
        for c in sql {
            if previous == "?" {
                out.append(c.isNumber ? "$" : "?")
            }
            if c != "?" { out.append(c) }
            previous = c
        }
        if previous == "?" { out.append("?") }
        return out
    }

    private static func value(_ cell: PostgresCell) throws -> SQLValue {
        guard cell.bytes != nil else { return .null }
        switch cell.dataType {
        case .int8, .int4, .int2: return .int(try cell.decode(Int64.self, context: .default))
        case .bool: return .bool(try cell.decode(Bool.self, context: .default))
        case .bytea: return .blob(Array(try cell.decode(ByteBuffer.self, context: .default).readableBytesView))
        case .numeric:
            // SUM of bigints is a numeric; ours are whole numbers.
            let text = try cell.decode(String.self, context: .default)
            guard let v = Int64(text) else { throw StoredValueInvalid(column: cell.columnName, value: text) }
            return .int(v)
        default: return .text(try cell.decode(String.self, context: .default))
        }
    }
}
