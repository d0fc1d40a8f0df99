import IAPProtocol

// MARK: the notification inbox: one row per notificationUUID, its payload apart (written once; the row changes state)

extension NotificationInboxStorage where Self: FulfillmentDatabase {
    private static var inboxColumns: String {
        """
        notification_uuid, notification_type, subtype, signed_date_ms, received_at_ms, state, attempts, next_attempt_at_ms,
        last_error, processed_at_ms, original_transaction_id
        """
    }

    /// A whole entry: its inbox row and its payload.
    private static var entry: String {
        """
        SELECT i.notification_uuid, i.notification_type, i.subtype, i.signed_date_ms, p.signed_payload, p.notification,
            i.received_at_ms, i.state, i.attempts, i.next_attempt_at_ms, i.last_error, i.processed_at_ms, i.original_transaction_id
        FROM notification_inbox i JOIN notification_payload p ON p.notification_uuid = i.notification_uuid
        """
    }

    private static func inboxEntry(_ row: SQLRow) throws -> InboxEntry {
        let rawState: String = try row.get("state")
        guard let state = NotificationState(rawValue: rawState) else { throw StoredValueInvalid(column: "state", value: rawState) }
        return InboxEntry(
            notificationUUID: try row.get("notification_uuid"), notificationType: try row.get("notification_type"),
            subtype: try row.get("subtype"), signedDateMs: try row.get("signed_date_ms"), signedPayload: try row.get("signed_payload"),
            notification: try row.get("notification"), receivedAtMs: try row.get("received_at_ms"), state: state,
            attempts: try row.get("attempts"), nextAttemptAtMs: try row.get("next_attempt_at_ms"), lastError: try row.get("last_error"),
            processedAtMs: try row.get("processed_at_ms"), originalTransactionId: try row.get("original_transaction_id"))
    }

    public func recordNotification(_ entry: InboxEntry) async throws -> (entry: InboxEntry, isNew: Bool) {
        try await write { s in
            let inserted = try s.run(
                """
                INSERT INTO notification_inbox (\(Self.inboxColumns)) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                ON CONFLICT (notification_uuid) DO NOTHING
                """, entry.notificationUUID, entry.notificationType, entry.subtype, entry.signedDateMs, entry.receivedAtMs,
                entry.state.rawValue, entry.attempts, entry.nextAttemptAtMs, entry.lastError, entry.processedAtMs,
                entry.originalTransactionId)
            if inserted == 1 {
                try s.run(
                    "INSERT INTO notification_payload (notification_uuid, signed_payload, notification) VALUES (?1, ?2, ?3)",
                    entry.notificationUUID, entry.signedPayload, entry.notification)
                return (entry, true)
            }
            let kept = try s.row(Self.entry + " WHERE i.notification_uuid = ?1", entry.notificationUUID)
            return (try kept.map(Self.inboxEntry) ?? entry, false)
        }
    }

    /// In signed order (unsigned first). On SQLite the batch's ids are found in `inbox_pending_order` alone (in order,
    /// filtered on the index's own columns, stopping at `limit`) and only those rows are read;
    /// `dueNotificationsUseTheirIndex` checks the plan. PostgreSQL's planner finds its partial index unaided.
    static var dueNotificationsSQL: [SQLDialect: String] {
        [
            .sqlite: entry + """
                 WHERE i.notification_uuid IN (
                    SELECT notification_uuid FROM notification_inbox INDEXED BY inbox_pending_order
                    WHERE state = 'pending' AND next_attempt_at_ms <= ?1 ORDER BY signed_date_ms, received_at_ms LIMIT ?2)
                ORDER BY i.signed_date_ms, i.received_at_ms
                """,
            .postgres: entry + """
                 WHERE i.state = 'pending' AND i.next_attempt_at_ms <= ?1
                ORDER BY i.signed_date_ms NULLS FIRST, i.received_at_ms LIMIT ?2
                """,
        ]
    }

    public func dueNotifications(nowMs: Int64, limit: Int) async throws -> [InboxEntry] {
        try await read { s in try s.rows(Self.dueNotificationsSQL[s.dialect]!, nowMs, limit).map(Self.inboxEntry) }
    }

    public func settleNotification(
        _ uuid: String, state: NotificationState, attempts: Int, nextAttemptAtMs: Int64, lastError: String?, nowMs: Int64
    ) async throws {
        try await write { s in
            try FulfillmentRecords(s).settleNotification(
                uuid, state: state, attempts: attempts, nextAttemptAtMs: nextAttemptAtMs, lastError: lastError, nowMs: nowMs)
        }
    }

    public func latestAppliedSignedDate(originalTransactionId: String, types: [String]) async throws -> Int64? {
        try await read { s in try FulfillmentRecords(s).latestAppliedSignedDate(originalTransactionId, types: types) }
    }

    public func notification(_ uuid: String) async throws -> InboxEntry? {
        try await read { s in try s.row(Self.entry + " WHERE i.notification_uuid = ?1", uuid).map(Self.inboxEntry) }
    }

    public func notifications(state: NotificationState?, limit: Int) async throws -> [InboxEntry] {
        try await read { s in
            let order = "ORDER BY i.received_at_ms DESC, i.notification_uuid"
            guard let state else { return try s.rows(Self.entry + " \(order) LIMIT ?1", limit).map(Self.inboxEntry) }
            return try s.rows(Self.entry + " WHERE i.state = ?1 \(order) LIMIT ?2", state.rawValue, limit).map(Self.inboxEntry)
        }
    }
}

// MARK: the outbox (OutboxStorage)

extension OutboxStorage where Self: FulfillmentDatabase {
    /// Claimed for a lease: another instance's worker skips what this one is delivering (PostgreSQL's row locks;
    /// SQLite has one writer).
    public func dueOutbox(nowMs: Int64, limit: Int) async throws -> [OutboxItem] {
        try await write { s in
            try s.rows(
                """
                UPDATE outbox SET next_attempt_at_ms = ?1
                WHERE id IN (SELECT id FROM outbox WHERE next_attempt_at_ms <= ?2 ORDER BY next_attempt_at_ms, id LIMIT ?3
                             \(s.dialect == .postgres ? "FOR UPDATE SKIP LOCKED" : ""))
                RETURNING *
                """, nowMs + OutboxRetry.leaseMs, nowMs, limit
            ).map(Self.outboxItem).sorted { $0.id < $1.id }
        }
    }

    /// Only the payload that was tried: owed again meanwhile with another payload, the item stays as it is now.
    public func settleOutbox(_ item: OutboxItem, delivered: Bool, nextAttemptAtMs: Int64, lastError: String?) async throws {
        try await write { s in
            if delivered {
                try s.run("DELETE FROM outbox WHERE id = ?1 AND payload = ?2", item.id, item.payload)
            } else {
                try s.run(
                    "UPDATE outbox SET attempts = attempts + 1, next_attempt_at_ms = ?1, last_error = ?2 WHERE id = ?3 AND payload = ?4",
                    nextAttemptAtMs, lastError, item.id, item.payload)
            }
        }
    }

    public func outbox(limit: Int) async throws -> (items: [OutboxItem], total: Int, oldestCreatedAtMs: Int64?) {
        try await read { s in
            let items = try s.rows("SELECT * FROM outbox ORDER BY created_at_ms, id LIMIT ?1", limit).map(Self.outboxItem)
            let summary = try s.row("SELECT COUNT(*) AS total, MIN(created_at_ms) AS oldest FROM outbox")
            return (items, try summary?.get("total") ?? 0, try summary?.get("oldest"))
        }
    }

    private static func outboxItem(_ row: SQLRow) throws -> OutboxItem {
        OutboxItem(
            id: try row.get("id"), kind: try row.get("kind"), key: try row.get("item_key"), payload: try row.get("payload"),
            attempts: try row.get("attempts"), createdAtMs: try row.get("created_at_ms"),
            nextAttemptAtMs: try row.get("next_attempt_at_ms"), lastError: try row.get("last_error"))
    }
}
