import Foundation
import GRDB
import IAPProtocol
import JSONRPC
import ServiceSupport

/// The notification inbox on SQLite (NotificationInboxStorage): one row per notificationUUID, its payload apart.
extension FulfillmentStore {
    // MARK: the notification inbox

    /// The inbox row's own columns (small; its state changes) ...
    private static let inboxRowColumns = """
        notificationUUID, notificationType, subtype, signedDateMs, receivedAtMs, state, attempts, nextAttemptAtMs, lastError,
        processedAtMs, originalTransactionId
        """

    /// ... and a whole entry, with its payload (written once, kept apart), from `inboxWithPayload`.
    private static let inboxColumns = """
        i.notificationUUID, i.notificationType, i.subtype, i.signedDateMs, p.signedPayload, p.notification, i.receivedAtMs, i.state,
        i.attempts, i.nextAttemptAtMs, i.lastError, i.processedAtMs, i.originalTransactionId
        """
    private static let inboxWithPayload = "notificationInbox i JOIN notificationPayload p ON p.notificationUUID = i.notificationUUID"

    private static func inboxEntry(_ row: Row) -> InboxEntry {
        InboxEntry(
            notificationUUID: row["notificationUUID"], notificationType: row["notificationType"], subtype: row["subtype"],
            signedDateMs: row["signedDateMs"], signedPayload: row["signedPayload"], notification: [UInt8](row["notification"] as Data),
            receivedAtMs: row["receivedAtMs"], state: NotificationState(rawValue: row["state"]) ?? .parked, attempts: row["attempts"],
            nextAttemptAtMs: row["nextAttemptAtMs"], lastError: row["lastError"], processedAtMs: row["processedAtMs"],
            originalTransactionId: row["originalTransactionId"])
    }

    public func recordNotification(_ entry: InboxEntry) async throws -> (entry: InboxEntry, isNew: Bool) {
        try await commits.write { db in
            try db.cachedStatement(
                sql: """
                    INSERT OR IGNORE INTO notificationInbox (\(Self.inboxRowColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """
            ).execute(arguments: [
                entry.notificationUUID, entry.notificationType, entry.subtype, entry.signedDateMs, entry.receivedAtMs,
                entry.state.rawValue, entry.attempts, entry.nextAttemptAtMs, entry.lastError, entry.processedAtMs,
                entry.originalTransactionId,
            ])
            if db.changesCount == 1 {
                try db.cachedStatement(sql: "INSERT INTO notificationPayload (notificationUUID, signedPayload, notification) VALUES (?, ?, ?)")
                    .execute(arguments: [entry.notificationUUID, entry.signedPayload, Data(entry.notification)])
                return (entry, true)
            }
            let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT \(Self.inboxColumns) FROM \(Self.inboxWithPayload) WHERE i.notificationUUID = ?"),
                arguments: [entry.notificationUUID])
            return (row.map(Self.inboxEntry) ?? entry, false)
        }
    }

    /// The batch's ids are found in `inbox_pending_order` alone (in order, filtered on the index's own columns,
    /// stopping at `limit`); only those rows are read. `dueNotificationsUseTheirIndex` checks the plan.
    static let dueNotificationsSQL = """
        SELECT \(inboxColumns) FROM \(inboxWithPayload) WHERE i.notificationUUID IN (
            SELECT notificationUUID FROM notificationInbox INDEXED BY inbox_pending_order
            WHERE state = 'pending' AND nextAttemptAtMs <= ? ORDER BY signedDateMs, receivedAtMs LIMIT ?)
        ORDER BY i.signedDateMs, i.receivedAtMs
        """

    public func dueNotifications(nowMs: Int64, limit: Int) async throws -> [InboxEntry] {
        try await writer.read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: Self.dueNotificationsSQL), arguments: [nowMs, limit]
            ).map(Self.inboxEntry)
        }
    }

    public func settleNotification(
        _ uuid: String, state: NotificationState, attempts: Int, nextAttemptAtMs: Int64, lastError: String?, nowMs: Int64
    ) async throws {
        try await commits.write { db in
            try db.cachedStatement(
                sql: """
                    UPDATE notificationInbox SET state = ?, attempts = ?, nextAttemptAtMs = ?, lastError = ?,
                        processedAtMs = CASE WHEN ? IN ('applied', 'ignored') THEN ? ELSE processedAtMs END
                    WHERE notificationUUID = ?
                    """
            ).execute(arguments: [state.rawValue, attempts, nextAttemptAtMs, lastError, state.rawValue, nowMs, uuid])
        }
    }

    public func latestAppliedSignedDate(originalTransactionId: String, types: [String]) async throws -> Int64? {
        try await writer.read { db in
            let placeholders = types.map { _ in "?" }.joined(separator: ", ")
            return try Int64.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT MAX(signedDateMs) FROM notificationInbox
                        WHERE originalTransactionId = ? AND state = 'applied' AND notificationType IN (\(placeholders))
                        """),
                arguments: StatementArguments([originalTransactionId] + types))
        }
    }

    public func notification(_ uuid: String) async throws -> InboxEntry? {
        try await writer.read { db in
            try Row.fetchOne(
                db.cachedStatement(sql: "SELECT \(Self.inboxColumns) FROM \(Self.inboxWithPayload) WHERE i.notificationUUID = ?"),
                arguments: [uuid]
            ).map(Self.inboxEntry)
        }
    }

    public func notifications(state: NotificationState?, limit: Int) async throws -> [InboxEntry] {
        try await writer.read { db in
            let filter = state == nil ? "" : "WHERE i.state = ?"
            let arguments: StatementArguments = state.map { [$0.rawValue, limit] } ?? [limit]
            return try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT \(Self.inboxColumns) FROM \(Self.inboxWithPayload) \(filter)
                        ORDER BY i.receivedAtMs DESC, i.notificationUUID LIMIT ?
                        """),
                arguments: arguments
            ).map(Self.inboxEntry)
        }
    }
}
