import IAPProtocol

/// The event feed and webhook endpoints on a storage engine (both keep them beside the ledger; the statements are
/// `EventRecords` and `WebhookRecords`).
public protocol EventStorage: Sendable {
    /// Events after `after` in commit order (`EventRecords.list`).
    func events(after: EventPosition, limit: Int, accountId: String?, types: [FulfillmentEventType]?) async throws -> [FulfillmentEvent]
    /// Drops events that occurred before `beforeMs` (each account's latest is kept), and delivery attempts as old.
    func trimEvents(beforeMs: Int64) async throws -> Int
    /// Stores a new endpoint; it is owed the events that commit from now on.
    func addWebhook(_ webhook: WebhookRecord) async throws
    func webhooks() async throws -> [WebhookRecord]
    func webhook(_ id: String) async throws -> WebhookRecord?
    func webhookBacklog(_ id: String) async throws -> (count: Int, oldestMs: Int64?, lastError: String?)
    func rotateWebhookSecret(_ id: String, secret: String, previousUntilMs: Int64) async throws -> Bool
    func setWebhookState(_ id: String, _ state: String, nowMs: Int64) async throws -> Bool
    func deleteWebhook(_ id: String) async throws -> Bool
    func redeliverWebhook(_ id: String, after: EventPosition, nowMs: Int64) async throws -> Int
    func webhookDeliveries(_ id: String, limit: Int) async throws -> [WebhookDelivery]
    /// Owes the endpoint the next events of the feed it has not been given (at most `limit`); answers how many were read.
    func dispatchEvents(to webhook: WebhookRecord, limit: Int, nowMs: Int64) async throws -> Int
    /// Due webhook items, claimed for `OutboxRetry.leaseMs` (`claimOutbox`).
    func dueWebhookItems(nowMs: Int64, limit: Int) async throws -> [OutboxItem]
    /// The account's events the endpoint has not been given yet, in order (nil: the endpoint no longer has progress).
    func undeliveredEvents(endpointId: String, accountId: String, limit: Int) async throws -> (delivered: Int64, events: [FulfillmentEvent])?
    func settleWebhook(_ settlement: WebhookSettlement, nowMs: Int64) async throws
    func parkWebhookItem(_ item: OutboxItem, because reason: String) async throws
}

/// The dispatch position moved under this instance (another instance dispatched the same events): nothing is written.
struct DispatchRaced: Error {}

extension EventStorage where Self: FulfillmentDatabase {
    public func events(after: EventPosition, limit: Int, accountId: String?, types: [FulfillmentEventType]?) async throws -> [FulfillmentEvent] {
        try await read { s in try EventRecords(s).list(after: after, limit: limit, accountId: accountId, types: types) }
    }

    public func trimEvents(beforeMs: Int64) async throws -> Int {
        try await write { s in
            try WebhookRecords(s).trimAttempts(beforeMs: beforeMs)
            return try EventRecords(s).trim(beforeMs: beforeMs)
        }
    }

    public func addWebhook(_ webhook: WebhookRecord) async throws {
        let head = try await read { s in try EventRecords(s).head() }
        var webhook = webhook
        webhook.dispatched = head
        try await write { [webhook] s in try WebhookRecords(s).insert(webhook) }
    }

    public func webhooks() async throws -> [WebhookRecord] { try await read { s in try WebhookRecords(s).all() } }

    public func webhook(_ id: String) async throws -> WebhookRecord? { try await read { s in try WebhookRecords(s).one(id) } }

    public func webhookBacklog(_ id: String) async throws -> (count: Int, oldestMs: Int64?, lastError: String?) {
        try await read { s in try WebhookRecords(s).backlog(id) }
    }

    public func rotateWebhookSecret(_ id: String, secret: String, previousUntilMs: Int64) async throws -> Bool {
        try await write { s in try WebhookRecords(s).rotate(id, secret: secret, previousUntilMs: previousUntilMs) }
    }

    public func setWebhookState(_ id: String, _ state: String, nowMs: Int64) async throws -> Bool {
        try await write { s in try WebhookRecords(s).setState(id, state, nowMs: nowMs) }
    }

    public func deleteWebhook(_ id: String) async throws -> Bool { try await write { s in try WebhookRecords(s).delete(id) } }

    public func redeliverWebhook(_ id: String, after: EventPosition, nowMs: Int64) async throws -> Int {
        try await write { s in try WebhookRecords(s).redeliver(id, after: after, nowMs: nowMs) }
    }

    public func webhookDeliveries(_ id: String, limit: Int) async throws -> [WebhookDelivery] {
        try await read { s in try WebhookRecords(s).deliveries(id, limit: limit) }
    }

    /// Reads the batch outside the write (a SERIALIZABLE write reading the feed would conflict with every commit
    /// appending to it), then owes it in one write that moves the endpoint's position only from where the read began.
    public func dispatchEvents(to webhook: WebhookRecord, limit: Int, nowMs: Int64) async throws -> Int {
        let batch = try await read { s in
            try EventRecords(s).list(after: webhook.dispatched, limit: limit, accountId: nil, types: nil).map {
                ($0, EventPosition(cursor: $0.cursor)!)
            }
        }
        guard !batch.isEmpty else { return 0 }
        do {
            try await write { s in
                guard try WebhookRecords(s).dispatch(webhook, events: batch, nowMs: nowMs) else { throw DispatchRaced() }
            }
        } catch is DispatchRaced {
            return 0
        }
        return batch.count
    }

    public func dueWebhookItems(nowMs: Int64, limit: Int) async throws -> [OutboxItem] {
        try await write { s in try FulfillmentQueries(s).claimOutbox(nowMs: nowMs, limit: limit, webhooks: true) }
    }

    public func undeliveredEvents(endpointId: String, accountId: String, limit: Int) async throws -> (delivered: Int64, events: [FulfillmentEvent])? {
        try await read { s in
            guard let delivered = try WebhookRecords(s).deliveredSequence(endpointId, accountId) else { return nil }
            return (delivered, try EventRecords(s).account(accountId, afterSequence: delivered, limit: limit).map(\.0))
        }
    }

    public func settleWebhook(_ settlement: WebhookSettlement, nowMs: Int64) async throws {
        try await write { s in try WebhookRecords(s).settle(settlement, nowMs: nowMs) }
    }

    public func parkWebhookItem(_ item: OutboxItem, because reason: String) async throws {
        try await write { s in try WebhookRecords(s).park(item, because: reason) }
    }
}
