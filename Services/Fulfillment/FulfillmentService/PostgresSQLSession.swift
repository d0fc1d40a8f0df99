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
///   the next statement that reads or counts, or at the end of the transaction (`flush`): a call of the connection's
///   own PL/pgSQL function for exactly that list of statements (`WriteFunctions`), or else `run_writes(statements,
///   values)`, a PL/pgSQL function of the schema (migration v9) that EXECUTEs each statement; either way with the one
///   array of values as its parameter (`HeldStatements`): no value is ever part of a statement's text;
/// - wallets read or written by this transaction are remembered (`wallets`);
/// - reads run as statements the connection prepared by name (`fetch`), so PostgreSQL plans each once per connection.
struct PostgresSQLSession: SQLSession {
    let session: PostgresSession
    let held = HeldWrites()
    let wallets: WalletMemo? = WalletMemo()
    var dialect: SQLDialect { .postgres }

    /// Reads run as statements the connection prepared (`PostgresSession.queryPrepared`); a text that leaves one of its
    /// arguments unnamed (whose type the server could not tell) runs unnamed.
    func fetch(_ sql: String, arguments: [SQLValue]) throws -> [SQLRow] {
        if session.alone != nil {
            // Alone (no transaction), only the first read before any write shares the writes' guarantees.
            guard held.writes.isEmpty, !held.read else { throw PostgresSession.NeedsTransaction() }
            held.read = true
        }
        try flush()
        let rows: [[PostgresCell]]
        if let text = try TypedReads.text(sql, arguments) {
            rows = try session.queryPrepared(text, arguments.map(Self.data))
        } else {
            rows = try session.query(Self.query(sql, arguments)).map { Array($0) }
        }
        return try rows.map { row in
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
        if session.alone != nil { throw PostgresSession.NeedsTransaction() }  // its count may steer what follows
        try flush(beforeAWrite: true)
        return try session.execute(Self.query(sql, arguments))
    }

    func executeLater(_ sql: String, arguments: [SQLValue]) throws {
        held.writes.append((sql, arguments))
    }

    /// Sends the held writes: one alone as itself, several as one call. Called before every other statement and by the
    /// store before the transaction commits.
    /// Without the account's lock (a first attempt), the attempt's first write yields to a writer that holds the lock
    /// or waits for it (`PostgresSession.yieldingTo`): inside the statement that writes, so the lock taken shared holds
    /// until that commits; once per attempt. `beforeAWrite`: a write sent by itself follows, so yield even with nothing
    /// held.
    func flush(beforeAWrite: Bool = false) throws {
        let yields = held.yielded ? [] : session.yieldingTo
        guard !held.writes.isEmpty || (beforeAWrite && !yields.isEmpty) else { return }
        var writes = held.writes
        held.writes = []
        if !yields.isEmpty {
            writes.insert(contentsOf: yields.map { (Self.yieldToLockHolders, [SQLValue.text($0)]) }, at: 0)
            held.yielded = true
        }
        // Several: the connection's function for the list, which may have to be created first (before the statement
        // that writes, which is when an attempt running alone starts to commit).
        var whole: [String] = []
        var function: String?
        if writes.count > 1 {
            let numbered = try writes.map { try HeldStatements.statement($0.sql, $0.arguments, values: &whole, numberedFromOne: false) }
            function = try WriteFunctions.body(numbered).flatMap { try session.writeFunction($0) }
        }
        if function == nil, writes.contains(where: { $0.sql.hasSuffix(WriteFunctions.mustWriteARow) }) {
            throw GuardedWriteNeedsFunction()  // nothing was sent
        }
        session.alone?.willWrite()
        if let function {
            try session.callWrites(function, values: whole)
            return
        }
        if writes.count == 1 {
            try session.execute(Self.query(writes[0].sql, writes[0].arguments))
            return
        }
        var values: [String] = []
        var counts: [Int64] = []
        let statements = try writes.map { write in
            let before = values.count
            defer { counts.append(Int64(values.count - before)) }
            return try HeldStatements.statement(write.sql, write.arguments, values: &values)
        }
        var binds = PostgresBindings(capacity: 3)
        try binds.append(statements)
        try binds.append(values)
        try binds.append(counts)
        try session.execute(PostgresQuery(unsafeSQL: "SELECT run_writes($1, $2, $3)", binds: binds))
    }

    /// Takes the key's advisory lock shared until the transaction ends, or fails with 40001 and `yieldHint` when a writer
    /// holds it or waits for it (migration v13).
    static let yieldToLockHolders = "SELECT yield_to_lock_holders(?1)"
    static let yieldHint = "yield_to_lock_holders"

    static func data(_ argument: SQLValue) -> PostgresData {
        switch argument {
        case .int(let v): PostgresData(int64: v)
        case .text(let v): PostgresData(string: v)
        case .bool(let v): PostgresData(bool: v)
        case .blob(let v): PostgresData(bytes: v)
        case .null: PostgresData.null
        }
    }

    static func query(_ sql: String, _ arguments: [SQLValue]) throws -> PostgresQuery {
        var binds = PostgresBindings(capacity: arguments.count)
        for argument in arguments { binds.append(data(argument)) }
        return PostgresQuery(unsafeSQL: dollarParameters(sql), binds: binds)
    }

    /// `dollarParameters`' answers, by statement: the statements are the service's own few hundred strings, rewritten
    /// once each instead of once per execution (measured at 3.6% of fulfillment's CPU under a spend load).
    private static let rewritten = PerStatement<String>()

    /// `?12` -> `$12` (our statements hold no `?` in literals or operators).
    static func dollarParameters(_ sql: String) -> String {
        if let known = rewritten[sql] { return known }
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
        rewritten[sql] = out
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

/// What was worked out once per statement text, kept for the process (locked: every pool thread reads it). Bounded, in
/// case a caller ever builds statements from data: past 2,048 texts it starts over.
final class PerStatement<Value: Sendable>: Sendable {
    private let known = NIOLockedValueBox<[String: Value]>([:])

    subscript(sql: String) -> Value? {
        get { known.withLockedValue { $0[sql] } }
        set {
            known.withLockedValue { cache in
                if cache.count >= 2_048 { cache.removeAll() }
                cache[sql] = newValue
            }
        }
    }
}

/// A read's text for `PostgresSession.queryPrepared`, which prepares it without parameter types.
package enum TypedReads {
    /// `sql` with each `?n` as `($n::type)` of the n-th argument's kind (a NULL's as `$n`, typed by the server from where
    /// it stands, as an unnamed statement's NULL is); nil when some argument is not named in the text.
    package static func text(_ sql: String, _ arguments: [SQLValue]) throws -> String? {
        var out = ""
        out.reserveCapacity(sql.utf8.count + 16 * arguments.count)
        var named = Set<Int>()
        for piece in HeldStatements.pieces(sql) {
            switch piece {
            case .text(let text): out += text
            case .parameter(let n):
                guard n >= 1, n <= arguments.count else { throw HeldStatements.UnboundParameter(sql: sql) }
                named.insert(n)
                switch arguments[n - 1] {
                case .int: out += "($\(n)::int8)"
                case .text: out += "($\(n)::text)"
                case .bool: out += "($\(n)::bool)"
                case .blob: out += "($\(n)::bytea)"
                case .null: out += "$\(n)"
                }
            }
        }
        return named.count == arguments.count ? out : nil
    }
}

/// A guarded write (`WriteFunctions.mustWriteARow`) could not go as a write function, the only way its check runs: nothing
/// was sent.
struct GuardedWriteNeedsFunction: Error {}

/// The writes a `PostgresSQLSession` holds until its next statement (one transaction attempt, one pool thread).
final class HeldWrites {
    var writes: [(sql: String, arguments: [SQLValue])] = []
    /// Whether the attempt has read (counted only when it runs alone, `PostgresSession.alone`).
    var read = false
    /// Whether the attempt's writes have yielded to the holders of their account's lock (`PostgresSQLSession.flush`).
    var yielded = false
}

/// A held write made to take its values from the one array `run_writes` passes to EXECUTE (`PostgresSQLSession.flush`).
package enum HeldStatements {
    /// `sql` with each `?n` replaced by `$1[k]` (the k-th of the values this statement appends to `values`, the n-th
    /// argument as text) cast back to the argument's kind, as a bound parameter of that kind would be typed; NULL as the
    /// keyword. Numbered from 1 in each statement, so one statement's text (and the plan `run_writes` prepares for it)
    /// does not depend on what was held before it. Padded with spaces and parentheses, so that nothing joins the text
    /// around it.
    /// `numberedFromOne` false: numbered on from the values before it instead, for one text of several statements that
    /// share the one array (`WriteFunctions`).
    package static func statement(
        _ sql: String, _ arguments: [SQLValue], values: inout [String], numberedFromOne: Bool = true
    ) throws -> String {
        var out = ""
        out.reserveCapacity(sql.utf8.count + 64)
        let base = numberedFromOne ? values.count : 0
        var index: [Int: Int] = [:]  // the argument's place among this statement's values, however often it is named
        for piece in pieces(sql) {
            switch piece {
            case .text(let text): out += text
            case .parameter(let n):
                guard n >= 1, n <= arguments.count else { throw UnboundParameter(sql: sql) }
                let argument = arguments[n - 1]
                if argument == .null {
                    out += " NULL "
                    continue
                }
                let k: Int
                if let known = index[n] {
                    k = known
                } else {
                    values.append(try text(argument))
                    k = values.count - base
                    index[n] = k
                }
                switch argument {
                case .int: out += " ($1[\(k)]::bigint) "
                case .bool: out += " ($1[\(k)]::boolean) "
                case .blob: out += " ($1[\(k)]::bytea) "
                case .text, .null: out += " ($1[\(k)]) "
                }
            }
        }
        return out
    }

    /// A statement's text between its parameters (`?n`), and the parameters' numbers.
    enum Piece: Sendable { case text(String), parameter(Int) }

    /// `pieces`' answers, by statement (splitting by Character cost 7.8% of fulfillment's CPU under a spend load).
    private static let split = PerStatement<[Piece]>()

    static func pieces(_ sql: String) -> [Piece] {
        if let known = split[sql] { return known }
        var pieces: [Piece] = []
        let bytes = Array(sql.utf8)
        var start = 0, i = 0
        while i < bytes.count {
            guard bytes[i] == UInt8(ascii: "?"), i + 1 < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i + 1]) else {
                i += 1
                continue
            }
            pieces.append(.text(String(decoding: bytes[start..<i], as: UTF8.self)))
            var j = i + 1, n = 0
            while j < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[j]), n < 1_000_000 {
                n = n * 10 + Int(bytes[j] - UInt8(ascii: "0"))
                j += 1
            }
            pieces.append(.parameter(n))
            start = j
            i = j
        }
        pieces.append(.text(String(decoding: bytes[start...], as: UTF8.self)))
        split[sql] = pieces
        return pieces
    }

    /// A value as the text its kind's input function reads back; NUL, which PostgreSQL text cannot hold, is refused as a
    /// bound value would be.
    static func text(_ value: SQLValue) throws -> String {
        switch value {
        case .int(let v): return String(v)
        case .bool(let v): return v ? "true" : "false"
        case .blob(let v): return "\\x" + v.map { String(format: "%02x", $0) }.joined()
        case .null: return ""
        case .text(let v):
            guard !v.utf8.contains(0) else { throw UnboundParameter(sql: "a text value holding NUL") }
            return v
        }
    }

    /// A statement naming a parameter it was not given, or a value PostgreSQL cannot hold.
    package struct UnboundParameter: Error, CustomStringConvertible {
        let sql: String
        package var description: String { "cannot send the parameters of \(sql.prefix(80))" }
    }
}
