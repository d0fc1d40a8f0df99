import Foundation

/// The one vocabulary both storage engines speak: statements in SQL both SQLite and PostgreSQL accept, with
/// numbered parameters (`?1`, `?2`, ...; PostgreSQL's session rewrites them to `$1`, `$2`), values of a few kinds,
/// and rows read by column name. Fulfillment's statements are written once, over `SQLSession`; an engine supplies
/// the session (one open transaction, or a read) and its migrations.
public protocol SQLSession {
    var dialect: SQLDialect { get }
    /// Every row `sql` answers.
    func fetch(_ sql: String, arguments: [SQLValue]) throws -> [SQLRow]
    /// Runs a statement; answers how many rows it changed.
    func execute(_ sql: String, arguments: [SQLValue]) throws -> Int
    /// A write whose answer nobody reads: the engine may hold it and send it, in order, before the transaction's next
    /// statement or at its end (PostgreSQL sends all held writes in one round trip); SQLite runs it at once. Its
    /// failure then surfaces there, and the whole transaction fails as it would have.
    func executeLater(_ sql: String, arguments: [SQLValue]) throws
    /// What this transaction has already read or written of holders' wallets, or nil when the engine keeps nothing
    /// (a read saved is a round trip saved on PostgreSQL; SQLite reads in-process). Every wallet write of a transaction
    /// goes through `FulfillmentRecords.append`, which keeps it current.
    var wallets: WalletMemo? { get }
}

/// Holders' wallets as one transaction has read or written them (`SQLSession.wallets`): made for one attempt of one
/// transaction and dropped with it.
public final class WalletMemo {
    var known: [Holder: Wallet] = [:]
    /// Accounts' last event sequence as this transaction read it, then as its own events moved it (`EventRecords.append`
    /// gives the next event that number rather than reading it again when it writes).
    var sequences: [String: Int64] = [:]
    /// A holder's active entitlements at a time, read with the transaction's first read for its answer
    /// (`FulfillmentRecords.stored`), until the transaction writes an entitlement (then read again).
    var entitlements: [Holder: (atMs: Int64, records: [EntitlementRecord])] = [:]
    /// Set when `known` and `sequences` hold a guess for this holder instead of a read (`KnownWallets`): its spend reads
    /// nothing, and its event is written only while the account's last event is still the guessed one
    /// (`EventRecords.append`).
    var guessed: Holder?
    init() {}
}

/// Where the engines' SQL differs (few places: row locks, index hints).
public enum SQLDialect: Sendable {
    case sqlite, postgres
}

extension SQLSession {
    func rows(_ sql: String, _ arguments: any SQLEncodable...) throws -> [SQLRow] {
        try fetch(sql, arguments: arguments.map(\.sql))
    }

    func row(_ sql: String, _ arguments: any SQLEncodable...) throws -> SQLRow? {
        try fetch(sql, arguments: arguments.map(\.sql)).first
    }

    @discardableResult
    func run(_ sql: String, _ arguments: any SQLEncodable...) throws -> Int {
        try execute(sql, arguments: arguments.map(\.sql))
    }

    /// `executeLater`: a write whose row count nobody reads.
    func later(_ sql: String, _ arguments: any SQLEncodable...) throws {
        try executeLater(sql, arguments: arguments.map(\.sql))
    }

    /// The first column of the first row; nil when there is no row (or the value is NULL).
    func value<T: SQLDecodable>(_ sql: String, _ arguments: any SQLEncodable..., as type: T.Type = T.self) throws -> T? {
        try value(sql, arguments: arguments.map(\.sql))
    }

    func value<T: SQLDecodable>(_ sql: String, arguments: [SQLValue], as type: T.Type = T.self) throws -> T? {
        guard let row = try fetch(sql, arguments: arguments).first, let first = row.values.first, first != .null else { return nil }
        return try T(sql: first, column: row.columns[0])
    }

    /// `?first, ?first+1, ...` for a list bound after `first - 1` other arguments (`IN (...)`).
    func placeholders(_ count: Int, from first: Int) -> String {
        (first..<(first + count)).map { "?\($0)" }.joined(separator: ", ")
    }
}

/// A value bound to a statement or read from a row.
public enum SQLValue: Sendable, Equatable {
    case int(Int64)
    case text(String)
    case bool(Bool)
    case blob([UInt8])
    case null
}

/// One row of an answer: its column names and values, in order.
public struct SQLRow: Sendable {
    public let columns: [String]
    public let values: [SQLValue]

    public init(columns: [String], values: [SQLValue]) {
        self.columns = columns
        self.values = values
    }

    /// The column `name` as `T` (an optional type for a nullable column); a missing column or a value of another
    /// kind is `StoredValueInvalid`.
    public func get<T: SQLDecodable>(_ name: String, as type: T.Type = T.self) throws -> T {
        guard let index = columns.firstIndex(of: name) else { throw StoredValueInvalid(column: name, value: "(no such column)") }
        return try T(sql: values[index], column: name)
    }
}

/// A Swift value a column decodes to.
public protocol SQLDecodable {
    init(sql value: SQLValue, column: String) throws
}

/// A Swift value bound as an argument.
public protocol SQLEncodable {
    var sql: SQLValue { get }
}

extension Int64: SQLDecodable, SQLEncodable {
    public init(sql value: SQLValue, column: String) throws {
        guard case .int(let v) = value else { throw StoredValueInvalid(column: column, value: "\(value)") }
        self = v
    }
    public var sql: SQLValue { .int(self) }
}

extension Int: SQLDecodable, SQLEncodable {
    public init(sql value: SQLValue, column: String) throws { self = Int(try Int64(sql: value, column: column)) }
    public var sql: SQLValue { .int(Int64(self)) }
}

extension String: SQLDecodable, SQLEncodable {
    public init(sql value: SQLValue, column: String) throws {
        guard case .text(let v) = value else { throw StoredValueInvalid(column: column, value: "\(value)") }
        self = v
    }
    public var sql: SQLValue { .text(self) }
}

extension Bool: SQLDecodable, SQLEncodable {
    /// SQLite keeps booleans as 0 and 1.
    public init(sql value: SQLValue, column: String) throws {
        switch value {
        case .bool(let v): self = v
        case .int(let v): self = v != 0
        default: throw StoredValueInvalid(column: column, value: "\(value)")
        }
    }
    public var sql: SQLValue { .bool(self) }
}

extension [UInt8]: SQLDecodable, SQLEncodable {
    public init(sql value: SQLValue, column: String) throws {
        guard case .blob(let v) = value else { throw StoredValueInvalid(column: column, value: "\(value)") }
        self = v
    }
    public var sql: SQLValue { .blob(self) }
}

extension Optional: SQLDecodable where Wrapped: SQLDecodable {
    public init(sql value: SQLValue, column: String) throws {
        self = value == .null ? nil : try Wrapped(sql: value, column: column)
    }
}

extension Optional: SQLEncodable where Wrapped: SQLEncodable {
    public var sql: SQLValue { map(\.sql) ?? .null }
}
