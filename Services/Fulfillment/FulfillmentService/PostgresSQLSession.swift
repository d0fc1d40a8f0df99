import Foundation
import NIOConcurrencyHelpers
import NIOCore
import PostgresNIO
import PostgresSupport

/// `SQLSession` over one attempt of one PostgreSQL transaction of `PostgresPool`. Parameters `?n` become PostgreSQL's
/// `$n`. Every statement is a round trip (postgres-nio 1.33 does not pipeline), and a round trip costs more CPU, on both
/// sides, than the statement itself (measured 2026-11-27: fulfillment spent ~80% of its time in postgres-nio's and
/// NIO's per-message work), so this session saves them where the answer allows:
/// - writes whose answer nobody reads (`executeLater`) are held and sent together, in order, as ONE statement before
///   the next statement that reads or counts, or at the end of the transaction (`flush`): `run_writes(script)`, a
///   PL/pgSQL function of the schema that EXECUTEs the script (migration v9); the values are inlined as SQL literals
///   (`SQLLiterals`), since a script has no parameters;
/// - wallets read or written by this transaction are remembered (`wallets`).
struct PostgresSQLSession: SQLSession {
    let session: PostgresSession
    let held = HeldWrites()
    let wallets: WalletMemo? = WalletMemo()
    var dialect: SQLDialect { .postgres }

    func fetch(_ sql: String, arguments: [SQLValue]) throws -> [SQLRow] {
        try flush()
        return try session.query(Self.query(sql, arguments)).map { row in
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
        try flush()
        return try session.execute(Self.query(sql, arguments))
    }

    func executeLater(_ sql: String, arguments: [SQLValue]) throws {
        held.writes.append((sql, arguments))
    }

    /// Sends the held writes: one alone as itself, several as one script. Called before every other statement and by
    /// the store before the transaction commits.
    func flush() throws {
        guard !held.writes.isEmpty else { return }
        let writes = held.writes
        held.writes = []
        if writes.count == 1 {
            try session.execute(Self.query(writes[0].sql, writes[0].arguments))
            return
        }
        let script = try writes.map { try SQLLiterals.inlined($0.sql, $0.arguments) }.joined(separator: ";\n")
        var binds = PostgresBindings(capacity: 1)
        try binds.append(script)
        try session.execute(PostgresQuery(unsafeSQL: "SELECT run_writes($1)", binds: binds))
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

    /// `dollarParameters`' answers, by statement: the statements are the service's own few hundred strings, rewritten
    /// once each instead of once per execution (measured at 3.6% of fulfillment's CPU under a spend load). Bounded, in
    /// case a caller ever builds statements from data.
    private static let rewritten = NIOLockedValueBox<[String: String]>([:])

    /// `?12` -> `$12` (our statements hold no `?` in literals or operators).
    static func dollarParameters(_ sql: String) -> String {
        if let known = rewritten.withLockedValue({ $0[sql] }) { return known }
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
        rewritten.withLockedValue { cache in
            if cache.count >= 2_048 { cache.removeAll() }
            cache[sql] = out
        }
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

/// The writes a `PostgresSQLSession` holds until its next statement (one transaction attempt, one pool thread).
final class HeldWrites {
    var writes: [(sql: String, arguments: [SQLValue])] = []
}

/// A held write's values as PostgreSQL literals (`PostgresSQLSession.flush`), a script having no parameters.
package enum SQLLiterals {
    /// `sql` with each `?n` replaced by the n-th argument as a literal (`literal`), padded with spaces so that no
    /// literal can join the text around it (`-` then `-5`, an `E` before a quote).
    package static func inlined(_ sql: String, _ arguments: [SQLValue]) throws -> String {
        var out = ""
        out.reserveCapacity(sql.utf8.count + 64)
        var characters = sql[...]
        while let c = characters.popFirst() {
            guard c == "?", let first = characters.first, first.isNumber else {
                out.append(c)
                continue
            }
            let digits = characters.prefix(while: \.isNumber)
            characters = characters.dropFirst(digits.count)
            guard let n = Int(digits), (1...arguments.count).contains(n) else { throw UnboundParameter(sql: sql) }
            out += " \(try literal(arguments[n - 1])) "
        }
        return out
    }

    /// A value as a PostgreSQL literal. Text is quoted with every `'` doubled, which is the whole of quoting when
    /// `standard_conforming_strings` is on (the pool sets it on every connection: backslashes are then plain
    /// characters); NUL, which PostgreSQL text cannot hold, is refused as a bound value would be.
    package static func literal(_ value: SQLValue) throws -> String {
        switch value {
        case .int(let v): return v < 0 ? "(\(v))" : "\(v)"
        case .bool(let v): return v ? "TRUE" : "FALSE"
        case .null: return "NULL"
        case .blob(let v): return "'\\x" + v.map { String(format: "%02x", $0) }.joined() + "'::bytea"
        case .text(let v):
            guard !v.utf8.contains(0) else { throw UnboundParameter(sql: "a text value holding NUL") }
            return "'" + v.replacingOccurrences(of: "'", with: "''") + "'"
        }
    }

    /// A statement naming a parameter it was not given, or a value no literal can carry.
    package struct UnboundParameter: Error, CustomStringConvertible {
        let sql: String
        package var description: String { "cannot inline the parameters of \(sql.prefix(80))" }
    }
}
