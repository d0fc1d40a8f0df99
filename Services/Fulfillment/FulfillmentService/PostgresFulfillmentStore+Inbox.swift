import Foundation
import IAPProtocol
import JSONRPC
import NIOCore
import PostgresNIO
import PostgresSupport

/// The notification inbox on PostgreSQL (NotificationInboxStorage): one row per notificationUUID, its payload apart.
extension PostgresFulfillmentStore {
    // MARK: the notification inbox

    /// The inbox row's columns (the row changes state two or three times; its payload, written once, lives apart in
    /// `notification_payload`, as in SQLite's schema).
    private static let inboxColumns = """
        notification_uuid, notification_type, subtype, signed_date_ms, received_at_ms, state,
        attempts, next_attempt_at_ms, last_error, processed_at_ms, original_transaction_id
        """

    /// An entry whole: its inbox row and its payload.
    private static let entryColumns = """
        i.notification_uuid, i.notification_type, i.subtype, i.signed_date_ms, p.signed_payload, p.notification, i.received_at_ms,
        i.state, i.attempts, i.next_attempt_at_ms, i.last_error, i.processed_at_ms, i.original_transaction_id
        """
    private static let inboxWithPayload = "notification_inbox i JOIN notification_payload p ON p.notification_uuid = i.notification_uuid"

    private static func inboxEntry(_ row: PostgresRandomAccessRow) throws -> InboxEntry {
        InboxEntry(
            notificationUUID: try row.get("notification_uuid"), notificationType: try row.get("notification_type"),
            subtype: try row.get("subtype"), signedDateMs: try row.get("signed_date_ms"), signedPayload: try row.get("signed_payload"),
            notification: Array(try row.get("notification", as: ByteBuffer.self).readableBytesView), receivedAtMs: try row.get("received_at_ms"),
            state: NotificationState(rawValue: try row.get("state")) ?? .parked, attempts: try row.get("attempts"),
            nextAttemptAtMs: try row.get("next_attempt_at_ms"), lastError: try row.get("last_error"),
            processedAtMs: try row.get("processed_at_ms"), originalTransactionId: try row.get("original_transaction_id"))
    }

    public func recordNotification(_ entry: InboxEntry) async throws -> (entry: InboxEntry, isNew: Bool) {
        try await pool.write { s in
            let inserted = try s.execute(
                """
                INSERT INTO notification_inbox (\(unescaped: Self.inboxColumns))
                VALUES (\(entry.notificationUUID), \(entry.notificationType), \(entry.subtype), \(entry.signedDateMs),
                        \(entry.receivedAtMs), \(entry.state.rawValue), \(entry.attempts),
                        \(entry.nextAttemptAtMs), \(entry.lastError), \(entry.processedAtMs), \(entry.originalTransactionId))
                ON CONFLICT (notification_uuid) DO NOTHING
                """)
            if inserted == 1 {
                try s.execute(
                    """
                    INSERT INTO notification_payload (notification_uuid, signed_payload, notification)
                    VALUES (\(entry.notificationUUID), \(entry.signedPayload), \(ByteBuffer(bytes: entry.notification)))
                    """)
                return (entry, true)
            }
            let row = try s.one(
                """
                SELECT \(unescaped: Self.entryColumns) FROM \(unescaped: Self.inboxWithPayload)
                WHERE i.notification_uuid = \(entry.notificationUUID)
                """)
            return (try row.map(Self.inboxEntry) ?? entry, false)
        }
    }

    public func dueNotifications(nowMs: Int64, limit: Int) async throws -> [InboxEntry] {
        try await pool.read { s in
            try s.query(
                """
                SELECT \(unescaped: Self.entryColumns) FROM \(unescaped: Self.inboxWithPayload)
                WHERE i.state = 'pending' AND i.next_attempt_at_ms <= \(nowMs)
                ORDER BY i.signed_date_ms NULLS FIRST, i.received_at_ms LIMIT \(limit)
                """
            ).map(Self.inboxEntry)
        }
    }

    public func settleNotification(
        _ uuid: String, state: NotificationState, attempts: Int, nextAttemptAtMs: Int64, lastError: String?, nowMs: Int64
    ) async throws {
        let done = state == .applied || state == .ignored
        try await pool.write { s in
            try s.execute(
                """
                UPDATE notification_inbox SET state = \(state.rawValue), attempts = \(attempts), next_attempt_at_ms = \(nextAttemptAtMs),
                    last_error = \(lastError), processed_at_ms = CASE WHEN \(done) THEN \(nowMs) ELSE processed_at_ms END
                WHERE notification_uuid = \(uuid)
                """)
        }
    }

    public func latestAppliedSignedDate(originalTransactionId: String, types: [String]) async throws -> Int64? {
        try await pool.read { s in
            try s.one(
                """
                SELECT MAX(signed_date_ms) AS latest FROM notification_inbox
                WHERE original_transaction_id = \(originalTransactionId) AND state = 'applied' AND notification_type = ANY(\(types))
                """
            )?.get("latest", as: Int64?.self)
        }
    }

    public func notification(_ uuid: String) async throws -> InboxEntry? {
        try await pool.read { s in
            try s.one(
                "SELECT \(unescaped: Self.entryColumns) FROM \(unescaped: Self.inboxWithPayload) WHERE i.notification_uuid = \(uuid)"
            ).map(Self.inboxEntry)
        }
    }

    public func notifications(state: NotificationState?, limit: Int) async throws -> [InboxEntry] {
        try await pool.read { s in
            try s.query(
                """
                SELECT \(unescaped: Self.entryColumns) FROM \(unescaped: Self.inboxWithPayload)
                WHERE \(state?.rawValue)::text IS NULL OR i.state = \(state?.rawValue)
                ORDER BY i.received_at_ms DESC, i.notification_uuid LIMIT \(limit)
                """
            ).map(Self.inboxEntry)
        }
    }
}
