import Crypto
import Foundation
import NIOConcurrencyHelpers
import PostgresNIO

/// A list of writes run as ONE call of a PL/pgSQL function made for exactly that list, on the connection that runs it
/// (`pg_temp`: it lives and dies with the server session, like a prepared statement). PL/pgSQL plans each of the
/// function's statements once per session and keeps the plans, so a call costs the statements themselves. The generic
/// alternative, the schema's `run_writes`, EXECUTEs each statement of its list dynamically (a set_config, a parse and
/// a plan of the EXECUTE per statement): measured 2026-11-29 under StoreKit 2 redeems (`pg_stat_statements` with
/// `track=all`), about half of its time went to that dynamic work around its eight statements.
package enum WriteFunctions {
    /// Each list's function name, for the process (worked out once per list). The name is a digest of the body, so one
    /// name always means one body: on every connection, in every process and version (behind a pooler that hands one
    /// server session to several clients, a function found under the name is the same function). Bounded: past it,
    /// lists go to `run_writes`.
    private static let names = NIOLockedValueBox<[String: String]>([:])
    static let limit = 512

    /// The function's body for `statements` (each one INSERT, UPDATE or DELETE whose parameters are elements of the
    /// one TEXT[] argument, `$1[k]`, or a SELECT run for its effect, its rows discarded: PL/pgSQL's PERFORM); nil when a
    /// statement is of another kind or could not stand in a PL/pgSQL body as it is (a result to return, a semicolon,
    /// the body's own quote). A name in a statement is always a column, never one of PL/pgSQL's own variables
    /// (`FOUND`); each statement ends on a line of its own, after any comment.
    package static func body(_ statements: [String]) -> String? {
        var body = "#variable_conflict use_column\nBEGIN\n"
        for statement in statements {
            guard fits(statement) else { return nil }
            if let rest = selected(statement) {
                body += "PERFORM" + rest
            } else {
                body += statement
            }
            body += "\n;\n"
            if statement.hasSuffix(mustWriteARow) { body += mustWriteARowCheck }
        }
        return body + "END"
    }

    /// Ends a statement that must write at least one row, or fail the whole call with serialization_failure (40001),
    /// nothing written: a guarded write (its WHERE checks that what it was decided on still holds). Only a write
    /// function can check that: a list holding one is never sent another way (`PostgresSQLSession.flush`).
    package static let mustWriteARow = "-- must write a row"
    static let mustWriteARowCheck =
        "IF NOT FOUND THEN RAISE EXCEPTION 'a guarded write found what it was decided on changed' USING ERRCODE = '40001'; END IF;\n"

    /// Whether `statement` can stand in the body: it starts with INSERT, UPDATE, DELETE or SELECT and holds no
    /// semicolon, no RETURNING and not the body's quote (`$iap_writes$`, any case). On its bytes: this runs at every
    /// flush, and Foundation's case-insensitive search cost fulfillment 0.36-0.46 ms per operation (measured 2026-11-29).
    static func fits(_ statement: String) -> Bool {
        let bytes = start(statement)
        guard ["INSERT", "UPDATE", "DELETE", "SELECT"].contains(where: { startsWord(bytes, $0) }) else { return false }
        var index = bytes.startIndex
        while index != bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: ";") || byte == UInt8(ascii: "$") && startsWord(bytes[index...], "$IAP_WRITES$") { return false }
            if byte | 0x20 == UInt8(ascii: "r") && startsWord(bytes[index...], "RETURNING") { return false }
            index = bytes.index(after: index)
        }
        return true
    }

    /// What follows a statement's leading SELECT (a statement run for its effect); nil for a write.
    static func selected(_ statement: String) -> Substring? {
        let bytes = start(statement)
        guard startsWord(bytes, "SELECT") else { return nil }
        return Substring(bytes.dropFirst(6))
    }

    /// The statement's bytes from its first one that is not a space, tab or line break.
    private static func start(_ statement: String) -> Substring.UTF8View {
        var bytes = statement.utf8[...]
        while let first = bytes.first, first == 0x20 || first == 0x0A || first == 0x09 || first == 0x0D { bytes = bytes.dropFirst() }
        return bytes
    }

    /// Whether `bytes` start with `word` (ASCII, any case).
    private static func startsWord(_ bytes: Substring.UTF8View, _ word: StaticString) -> Bool {
        var index = bytes.startIndex
        for i in 0..<word.utf8CodeUnitCount {
            guard index != bytes.endIndex else { return false }
            let expected = word.utf8Start[i]
            let byte = bytes[index]
            guard byte == expected || (expected >= 0x41 && expected <= 0x5A && byte == expected | 0x20) else { return false }
            index = bytes.index(after: index)
        }
        return true
    }

    static let quote = "$iap_writes$"
    /// How every write function's name begins.
    static let prefix = "pg_temp.iap_writes_"

    /// What every write function is besides its body: the digest covers it too, so a name means one whole function.
    static let signature = "(TEXT[]) RETURNS VOID LANGUAGE plpgsql"

    /// `body`'s function, schema-qualified (`pg_temp`, searched for functions only when named); nil once the process
    /// knows `limit` lists.
    static func name(_ body: String) -> String? {
        names.withLockedValue { names in
            if let known = names[body] { return known }
            guard names.count < limit else { return nil }
            let digest = SHA256.hash(data: Array((signature + "\n" + body).utf8)).prefix(16).map { String(format: "%02x", $0) }
            let name = prefix + digest.joined()
            names[body] = name
            return name
        }
    }

    /// Whether `error`, the answer to a call of a write function, says the function is not there: undefined_function
    /// (42883), or invalid_schema_name (3F000: a server session that never made a temporary object has no `pg_temp`),
    /// raised by the call itself, not by a statement inside the function (whose errors carry PL/pgSQL's context).
    static func isMissing(_ error: PSQLError) -> Bool {
        guard error.code == .server, let info = error.serverInfo, ["42883", "3F000"].contains(info[.sqlState] ?? "") else {
            return false
        }
        return info[.locationContext] == nil
    }
}

/// A write function this connection was thought to have is missing (a pooler in transaction mode gave the call another
/// server session, which may have no temporary schema at all, or the session dropped its temporary objects): nothing
/// was written; the connection runs its writes through `run_writes` from now on, and the transaction runs again.
package struct WriteFunctionMissing: Error, CustomStringConvertible {
    package var description: String { "the connection's write function is missing" }
}

extension PostgresSession {
    /// The name of the function (`WriteFunctions`) that runs `body` on this connection, creating it first when the
    /// connection has not and the attempt runs without a transaction (`alone`: the CREATE commits by itself, so the
    /// connection surely has the function afterwards; inside a transaction a rollback would take it away again). Nil:
    /// run the writes another way. Creating is one round trip, the first time a connection meets the list (counted
    /// with the prepared statements, `iap_postgres_statements_prepared_total`). Only attempts sent without a transaction
    /// (a spend, a redeem of one purchase) create functions; any attempt on the connection then calls them.
    package func writeFunction(_ body: String) throws -> String? {
        guard let prepared, let name = WriteFunctions.name(body) else { return nil }
        guard let known = prepared.functions.withLockedValue({ $0 }) else { return nil }
        if known.contains(name) { return name }
        if let onTask { throw onTask.needsThread() }  // created on a pool thread, once per connection
        guard let alone, !alone.writing else { return nil }
        roundTrips.prepared()
        do {
            let quote = WriteFunctions.quote
            let create = "CREATE OR REPLACE FUNCTION \(name)\(WriteFunctions.signature) AS \(quote)\n\(body)\n\(quote)"
            _ = try bounded(connection.query(PostgresQuery(unsafeSQL: create), logger: logger))
        } catch let error as PSQLError where !PostgresPool.isConnectionFailure(error) {
            // The server refused: these writes go the generic way. A role without the TEMP privilege (42501) is refused
            // every time, so the connection stops asking; anything else (a statement timeout) only this once.
            logger.warning("cannot create a write function; using run_writes", metadata: ["error": "\(PostgresPool.describe(error))"])
            if error.serverInfo?[.sqlState] == "42501" { prepared.functions.withLockedValue { $0 = nil } }
            return nil
        }
        prepared.functions.withLockedValue { _ = $0?.insert(name) }
        return name
    }

    /// Calls `function` (from `writeFunction`) with the list's values.
    package func callWrites(_ function: String, values: [String]) throws {
        var binds = PostgresBindings(capacity: 1)
        try binds.append(values)
        do {
            try execute(PostgresQuery(unsafeSQL: "SELECT \(function)($1)", binds: binds))
        } catch let error as PSQLError where WriteFunctions.isMissing(error) {
            // The statement failed whole, so nothing of it was written.
            logger.warning("a write function is missing; using run_writes", metadata: ["error": "\(PostgresPool.describe(error))"])
            prepared?.functions.withLockedValue { $0 = nil }
            throw WriteFunctionMissing()
        }
    }
}
