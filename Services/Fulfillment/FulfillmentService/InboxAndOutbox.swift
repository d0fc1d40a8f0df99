import IAPProtocol

// MARK: the notification inbox (`InboxRecords`)

extension NotificationInboxStorage where Self: FulfillmentDatabase {
    public func recordNotification(_ entry: InboxEntry) async throws -> (entry: InboxEntry, isNew: Bool) {
        try await write { s in try InboxRecords(s).record(entry) }
    }

    public func dueNotifications(nowMs: Int64, limit: Int) async throws -> [InboxEntry] {
        try await read { s in try InboxRecords(s).due(nowMs: nowMs, limit: limit) }
    }

    public func settleNotification(
        _ uuid: String, state: NotificationState, attempts: Int, nextAttemptAtMs: Int64, lastError: String?, nowMs: Int64
    ) async throws {
        try await write { s in
            try InboxRecords(s).settle(uuid, state: state, attempts: attempts, nextAttemptAtMs: nextAttemptAtMs, lastError: lastError, nowMs: nowMs)
        }
    }

    public func latestAppliedSignedDate(originalTransactionId: String, types: [String]) async throws -> Int64? {
        try await read { s in try InboxRecords(s).latestAppliedSignedDate(originalTransactionId, types: types) }
    }

    public func notification(_ uuid: String) async throws -> InboxEntry? {
        try await read { s in try InboxRecords(s).entry(uuid) }
    }

    public func notifications(state: NotificationState?, limit: Int) async throws -> [InboxEntry] {
        try await read { s in try InboxRecords(s).list(state: state, limit: limit) }
    }
}

// MARK: the outbox (`FulfillmentQueries`)

extension OutboxStorage where Self: FulfillmentDatabase {
    public func dueOutbox(nowMs: Int64, limit: Int) async throws -> [OutboxItem] {
        try await claimWrite { s in try FulfillmentQueries(s).claimOutbox(nowMs: nowMs, limit: limit) }
    }

    public func settleOutbox(_ item: OutboxItem, delivered: Bool, nextAttemptAtMs: Int64, lastError: String?) async throws {
        try await write { s in
            try FulfillmentQueries(s).settleOutbox(item, delivered: delivered, nextAttemptAtMs: nextAttemptAtMs, lastError: lastError)
        }
    }

    public func releaseOutbox(_ items: [OutboxItem], nowMs: Int64) async throws {
        try await write { s in
            for item in items {
                try s.run("UPDATE outbox SET next_attempt_at_ms = ?1 WHERE id = ?2 AND payload = ?3", nowMs, item.id, item.payload)
            }
        }
    }

    public func outbox(limit: Int) async throws -> (items: [OutboxItem], total: Int, oldestCreatedAtMs: Int64?) {
        try await read { s in try FulfillmentQueries(s).outbox(limit: limit) }
    }

    public func playAcknowledgementsOwed(createdBeforeMs: Int64) async throws -> (count: Int, oldestCreatedAtMs: Int64?) {
        try await read { s in try FulfillmentQueries(s).playAcknowledgementsOwed(createdBeforeMs: createdBeforeMs) }
    }
}
