import IAPProtocol

/// The notification inbox's statements, both engines: one row per notificationUUID, its payload apart (written once;
/// the row changes state two or three times).
struct InboxRecords {
    let s: any SQLSession

    init(_ session: any SQLSession) { self.s = session }

    private static let columns = """
        notification_uuid, notification_type, subtype, signed_date_ms, received_at_ms, state, attempts, next_attempt_at_ms,
        last_error, processed_at_ms, original_transaction_id
        """

    /// A whole entry: its inbox row and its payload.
    private static let entry = """
        SELECT i.notification_uuid, i.notification_type, i.subtype, i.signed_date_ms, p.signed_payload, p.notification,
            i.received_at_ms, i.state, i.attempts, i.next_attempt_at_ms, i.last_error, i.processed_at_ms, i.original_transaction_id
        FROM notification_inbox i JOIN notification_payload p ON p.notification_uuid = i.notification_uuid
        """

    /// In signed order (unsigned first). On SQLite the batch's ids are found in `inbox_pending_order` alone (in order,
    /// filtered on the index's own columns, stopping at `limit`) and only those rows are read;
    /// `dueNotificationsUseTheirIndex` checks the plan. PostgreSQL's planner finds its partial index unaided.
    static let dueSQL: [SQLDialect: String] = [
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

    /// Records the entry unless its UUID is recorded already; answers the entry kept and whether it is this one.
    func record(_ entry: InboxEntry) throws -> (entry: InboxEntry, isNew: Bool) {
        let inserted = try s.run(
            """
            INSERT INTO notification_inbox (\(Self.columns)) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
            ON CONFLICT (notification_uuid) DO NOTHING
            """, entry.notificationUUID, entry.notificationType, entry.subtype, entry.signedDateMs, entry.receivedAtMs,
            entry.state.rawValue, entry.attempts, entry.nextAttemptAtMs, entry.lastError, entry.processedAtMs, entry.originalTransactionId)
        guard inserted == 1 else { return (try self.entry(entry.notificationUUID) ?? entry, false) }
        try s.run(
            "INSERT INTO notification_payload (notification_uuid, signed_payload, notification) VALUES (?1, ?2, ?3)",
            entry.notificationUUID, entry.signedPayload, entry.notification)
        return (entry, true)
    }

    func entry(_ uuid: String) throws -> InboxEntry? {
        try s.row(Self.entry + " WHERE i.notification_uuid = ?1", uuid).map(Self.inboxEntry)
    }

    func due(nowMs: Int64, limit: Int) throws -> [InboxEntry] {
        try s.rows(Self.dueSQL[s.dialect]!, nowMs, limit).map(Self.inboxEntry)
    }

    /// Newest received first, in one state or all.
    func list(state: NotificationState?, limit: Int) throws -> [InboxEntry] {
        let order = "ORDER BY i.received_at_ms DESC, i.notification_uuid"
        guard let state else { return try s.rows(Self.entry + " \(order) LIMIT ?1", limit).map(Self.inboxEntry) }
        return try s.rows(Self.entry + " WHERE i.state = ?1 \(order) LIMIT ?2", state.rawValue, limit).map(Self.inboxEntry)
    }

    /// Records where a pending or parked notification ended; answers 0 when it was no longer pending or parked (an operator
    /// dismissed it meanwhile), and changes nothing then.
    @discardableResult
    func settle(_ uuid: String, state: NotificationState, attempts: Int, nextAttemptAtMs: Int64, lastError: String?, nowMs: Int64) throws
        -> Int
    {
        let processedAtMs: Int64? = state == .applied || state == .ignored ? nowMs : nil
        return try s.run(
            """
            UPDATE notification_inbox SET state = ?1, attempts = ?2, next_attempt_at_ms = ?3, last_error = ?4,
                processed_at_ms = COALESCE(?5, processed_at_ms)
            WHERE notification_uuid = ?6 AND state IN ('pending', 'parked')
            """, state.rawValue, attempts, nextAttemptAtMs, lastError, processedAtMs, uuid)
    }

    /// The signed date of the latest applied notification of `types` about the original.
    func latestAppliedSignedDate(_ original: String, types: [String]) throws -> Int64? {
        guard !types.isEmpty else { return nil }
        return try s.value(
            """
            SELECT MAX(signed_date_ms) FROM notification_inbox
            WHERE original_transaction_id = ?1 AND state = 'applied' AND notification_type IN (\(s.placeholders(types.count, from: 2)))
            """, arguments: ([original] + types).map(\.sql))
    }

    /// True for a notification applied before the inbox existed (SQLite databases of v1-v2: `applied_notification`).
    func appliedBeforeTheInbox(_ uuid: String) throws -> Bool {
        try s.value("SELECT 1 FROM applied_notification WHERE notification_uuid = ?1", uuid, as: Int.self) != nil
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
}
