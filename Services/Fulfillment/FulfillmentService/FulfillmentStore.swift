import Foundation
import GRDB
import IAPProtocol
import JSONRPC
import ServiceSupport

/// The fulfillment database: the only durable record of what was granted. Processed transactions,
/// ownership of original transactions, entitlements, wallets and the append-only coin ledger.
///
/// The rules that protect money are in the schema, not only here: one row per (environment,
/// transactionId); one owner per (environment, originalTransactionId); one grant and one reversal
/// ledger row per transaction; one spend per (account, idempotency key); balances CHECKed >= 0; the
/// ledger refuses UPDATE and DELETE. Every grant commits in the same transaction as the record that
/// its purchase was processed.
public final class FulfillmentStore: FulfillmentDatabase, FulfillmentStorage, FulfillmentInvariants {
    let writer: any DatabaseWriter
    let commits: GroupCommit
    /// Whether `applied_notification` (v1-v2 databases, never written since) has rows: if not, no delivery can
    /// have been applied before the inbox existed and `notificationWasApplied` answers without a read.
    private let hasNotificationsFromBeforeTheInbox: Bool

    /// Opens (creating if needed) `fulfillment.sqlite` in `directory`: WAL with `synchronous=FULL`, so
    /// a grant acknowledged with `finishable: true` survives a power cut, not only a process crash (in
    /// WAL mode NORMAL may lose the last commits on power loss). It costs one WAL fsync per commit.
    public static func open(directory: URL) throws -> FulfillmentStore {
        var config = Configuration()
        config.foreignKeysEnabled = true
        config.busyMode = .timeout(10)
        // Group commit runs each operation in a savepoint; SQLite keeps what a savepoint would roll back in
        // a statement journal that spills to a temporary FILE past 64 KiB (open, ~2 pwrites per redeem,
        // unlink, per batch). In memory it never touches the disk; it is not needed after a crash (the WAL
        // is the durable record), so nothing is lost by keeping it there.
        config.prepareDatabase { db in try db.execute(sql: "PRAGMA temp_store = MEMORY") }
        let pool = try DatabasePool(
            path: try PrivateFiles.databaseFile(directory.appendingPathComponent("fulfillment.sqlite").path), configuration: config)
        // After GRDB's WAL setup (which sets NORMAL) on the pool's one writing connection.
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        return try FulfillmentStore(writer: pool)
    }

    /// Closes the database: the WAL is checkpointed and removed, so nothing is left needing recovery.
    /// Called once, after the server has drained (a `ClosingService` in the executable's group).
    public func close() throws {
        if let pool = writer as? DatabasePool { try pool.close() } else if let queue = writer as? DatabaseQueue { try queue.close() }
    }

    public init(writer: any DatabaseWriter) throws {
        self.writer = writer
        self.commits = GroupCommit(writer: writer)
        try Self.migrate(writer)
        self.hasNotificationsFromBeforeTheInbox = try writer.read { db in
            try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM applied_notification)") ?? false
        }
    }

    // MARK: the engine (FulfillmentDatabase): transactions over one SQLite file

    public func read<T: Sendable>(_ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
        try await writer.read { db in try body(SQLiteSession(db: db)) }
    }

    /// Every write shares a commit with the writes queued meanwhile (`GroupCommit`), each in its own savepoint; SQLite
    /// has one writer, so `locking` needs nothing more.
    public func write<T: Sendable>(locking keys: [String], _ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
        try await commits.write { db in try body(SQLiteSession(db: db)) }
    }

    /// True for a notification id applied before the inbox existed (v1-v2 databases: `applied_notification`).
    public func notificationWasApplied(_ uuid: String) async throws -> Bool {
        guard hasNotificationsFromBeforeTheInbox else { return false }
        return try await read { s in try InboxRecords(s).appliedBeforeTheInbox(uuid) }
    }

    /// `PRAGMA synchronous` of the writing connection (2 = FULL).
    package func synchronousMode() async throws -> Int {
        try await writer.write { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    /// `PRAGMA temp_store` on the writing connection and on a reading one (2 = MEMORY).
    package func tempStoreModes() async throws -> (writer: Int, reader: Int) {
        let sql = "PRAGMA temp_store"
        let written = try await writer.write { db in try Int.fetchOne(db, sql: sql) ?? -1 }
        let read = try await writer.read { db in try Int.fetchOne(db, sql: sql) ?? -1 }
        return (written, read)
    }
}
