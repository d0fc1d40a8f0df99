import NIOConcurrencyHelpers
import NIOCore
import PostgresNIO

/// A pool's connection and the reads it has prepared (`PostgresSession.queryPrepared`): prepared statements belong to
/// one server session, so they live and die with the connection.
struct PooledConnection: Sendable {
    let connection: PostgresConnection
    let prepared: PreparedReads
}

/// The statements one connection has prepared, by their text. Used by the one pool thread holding the connection at a
/// time; locked all the same (uncontended), so it can travel with the connection between threads.
final class PreparedReads: Sendable {
    private let known = NIOLockedValueBox<[String: PreparedQuery]>([:])

    /// How many texts one connection prepares; past it, reads go unprepared. Fulfillment reads fewer than a hundred texts;
    /// the bound is for a caller that ever builds texts from data (an `IN` list of every length).
    static let limit = 256

    subscript(sql: String) -> PreparedQuery? { known.withLockedValue { $0[sql] } }

    var isFull: Bool { known.withLockedValue { $0.count >= Self.limit } }

    func keep(_ statement: PreparedQuery, for sql: String) { known.withLockedValue { $0[sql] = statement } }

    /// A statement the server no longer runs as prepared: the next use prepares it again (the old one stays on the server
    /// until the connection closes).
    func forget(_ sql: String) { _ = known.withLockedValue { $0.removeValue(forKey: sql) } }

    /// The write functions this connection created (`PostgresSession.writeFunction`), by name; nil once the server
    /// refused to create one or lost one (no TEMP privilege, a pooler): its held writes all go through `run_writes`.
    let functions = NIOLockedValueBox<Set<String>?>([])
}

/// A prepared read that failed, as the pool's retry rules read it (postgres-nio's prepared statements answer its older
/// `PostgresError`, not `PSQLError`). Its description, like `PSQLError`'s, holds no server message (which may quote a
/// value); `PostgresPool.describe` gives the message for the log.
public struct PreparedReadFailed: Error, CustomStringConvertible {
    /// The server's SQLSTATE; nil when the failure was not the server's answer.
    public let sqlState: String?
    let message: String
    /// The connection is given up (and the transaction run again on another): it was lost or shut down.
    let connectionLost: Bool
    /// The connection's prepared statement no longer fits the schema (a newer instance's migration changed a table it
    /// reads: "cached plan must not change result type", 0A000) or is gone (26000): forgotten, and the transaction runs
    /// again, preparing it afresh.
    let staleStatement: Bool

    public var description: String { "PostgreSQL refused a prepared read (SQLSTATE \(sqlState ?? "none"))" }

    /// A prepared read's failure as the pool's retry rules read it: a statement that got no answer stays
    /// `StatementTimedOut`, a failure postgres-nio did not translate stays `PSQLError`, anything else is one of these.
    static func reading(_ error: any Error, executing: Bool) -> any Error {
        if error is PostgresPool.StatementTimedOut || error is PSQLError { return error }
        return PreparedReadFailed(error, executing: executing)
    }

    /// `executing`: the failure came from running a statement already prepared (not from preparing it).
    init(_ error: any Error, executing: Bool) {
        if let error = error as? PostgresError, case .server(let answer) = error {
            let state = answer.fields[.sqlState]
            sqlState = state
            message = answer.fields[.message] ?? ""
            connectionLost = ["57P01", "57P02"].contains(state ?? "")
            staleStatement = executing && ["0A000", "26000"].contains(state ?? "")
        } else {
            sqlState = nil
            message = "\(error)"
            connectionLost = true
            staleStatement = false
        }
    }
}

extension PostgresSession {
    /// Every row of a read, run as a statement this connection prepared by name: PostgreSQL parses, analyses and plans
    /// it once (then keeps a generic plan), instead of at each execution as it does an unnamed statement (measured
    /// 2026-11-27 under StoreKit 2 redeems: planning was 220 of the purchase read's 276 µs, 86 of the entitlement read's
    /// 92). Preparing is one more round trip, the first time the connection meets the text (counted apart:
    /// `iap_postgres_statements_prepared_total`).
    ///
    /// `sql`'s parameters are `$n`, each cast in the text to the type of the value bound to it (`($1::int8)`), except a
    /// NULL's: a statement is prepared without parameter types, so the text must carry them as an unnamed statement's
    /// bindings do. Cells come back as the values' binary form.
    public func queryPrepared(_ sql: String, _ values: [PostgresData]) throws -> [[PostgresCell]] {
        let known = prepared?[sql]
        guard let prepared, known != nil || !prepared.isFull else {
            var binds = PostgresBindings(capacity: values.count)
            for value in values { binds.append(value) }
            return try query(PostgresQuery(unsafeSQL: sql, binds: binds)).map { Array($0) }
        }
        if let onTask {
            // Its answer, once the caller has sent it; else the read the caller is to send (then the body runs again).
            if let answer = try onTask.answer(sql, values) { return answer }
            guard let known else { throw onTask.needsThread() }
            throw onTask.needsRead(.init(sql: sql, statement: known, values: values))
        }
        let statement: PreparedQuery
        if let known {
            statement = known
        } else {
            roundTrips.prepared()
            statement = try Self.answering(executing: false) { try bounded(connection.prepare(query: sql)) }
            prepared.keep(statement, for: sql)
        }
        roundTrips.one()
        let rows: [PostgresRow]
        do {
            rows = try Self.answering(executing: true) { try bounded(statement.execute(values)) }
        } catch let error as PreparedReadFailed where error.staleStatement {
            prepared.forget(sql)
            throw error
        }
        return Self.relabelled(rows)
    }

    /// The rows of a prepared read as they are: postgres-nio 1.33 asks for binary results (Bind) but labels them with the
    /// Describe's text formats.
    static func relabelled(_ rows: [PostgresRow]) -> [[PostgresCell]] {
        rows.map { row in
            row.map { cell in
                var cell = cell
                cell.format = .binary
                return cell
            }
        }
    }

    /// `body`, its postgres-nio failures as `PreparedReadFailed` (`PreparedReadFailed.reading`).
    private static func answering<T>(executing: Bool, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch {
            throw PreparedReadFailed.reading(error, executing: executing)
        }
    }
}

extension Array where Element == PostgresCell {
    /// The column `name` of a row `queryPrepared` answered, decoded as `T` (an optional type for a nullable column).
    public func get<T: PostgresDecodable>(_ name: String, as type: T.Type = T.self) throws -> T {
        guard let cell = first(where: { $0.columnName == name }) else { throw MissingColumn(name: name) }
        return try cell.decode(T.self, context: .default)
    }
}

/// A row without the column a reader asked for (a statement and its reader out of step).
public struct MissingColumn: Error, CustomStringConvertible {
    let name: String
    public var description: String { "the row has no column \(name)" }
}
