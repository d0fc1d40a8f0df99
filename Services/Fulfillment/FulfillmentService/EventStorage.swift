import IAPProtocol

/// The event feed and webhook endpoints on a storage engine (both keep them beside the ledger; the statements are
/// `EventRecords` and `WebhookRecords`).
public protocol EventStorage: Sendable {
    /// Events after `after` in commit order (on PostgreSQL, transaction-id order: commit order within an account; `EventRecords.list`).
    func events(after: EventPosition, limit: Int, accountId: String?, types: [FulfillmentEventType]?) async throws -> [FulfillmentEvent]
    /// Drops events that occurred before `beforeMs` (`EventRecords.trim`), in batches; answers how many.
    func trimEvents(beforeMs: Int64) async throws -> Int
    /// Drops webhook delivery attempts older than `beforeMs`.
    func trimDeliveryLog(beforeMs: Int64) async throws
    /// Stores a new endpoint, owed the events that commit from now on; false when `maxEndpoints` exist already.
    func addWebhook(_ webhook: WebhookRecord, maxEndpoints: Int) async throws -> Bool
    func webhooks() async throws -> [WebhookRecord]
    func webhook(_ id: String) async throws -> WebhookRecord?
    func webhookBacklog(_ id: String) async throws -> (count: Int, oldestMs: Int64?, lastError: String?)
    func rotateWebhookSecret(_ id: String, secret: String, previousUntilMs: Int64) async throws -> Bool
    /// `leaseMs`: a claim's lease (`WebhookPolicy.leaseMs`); made active, items due within it keep their time (one may
    /// be in flight).
    func setWebhookState(_ id: String, _ state: String, nowMs: Int64, leaseMs: Int64) async throws -> Bool
    func deleteWebhook(_ id: String) async throws -> Bool
    func redeliverWebhook(_ id: String, after: EventPosition, nowMs: Int64, leaseMs: Int64) async throws -> Int
    func webhookDeliveries(_ id: String, limit: Int) async throws -> [WebhookDelivery]
    /// Owes the endpoint the next events of the feed it has not been given (at most `limit`); answers how many were read.
    func dispatchEvents(to webhook: WebhookRecord, limit: Int, nowMs: Int64) async throws -> Int
    /// An endpoint's due items, claimed for `leaseMs` (`claimOutbox`): another instance skips them meanwhile, and after a
    /// crash they are due again when it ends.
    func dueWebhookItems(endpointId: String, nowMs: Int64, limit: Int, leaseMs: Int64) async throws -> [OutboxItem]
    /// The account's events the endpoint has not been given yet, in order, and the progress row's generation (nil: the
    /// endpoint has no progress for the account: deleted meanwhile).
    func undeliveredEvents(endpointId: String, accountId: String, limit: Int) async throws
        -> (delivered: Int64, generation: Int64, events: [FulfillmentEvent])?
    func settleWebhook(_ settlement: WebhookSettlement, nowMs: Int64) async throws
    /// Hands a claimed item back, due now.
    func releaseWebhookItem(_ item: OutboxItem, nowMs: Int64) async throws
}

/// The dispatch position moved under this instance (another instance dispatched the same events): nothing is written.
struct DispatchRaced: Error {}

extension EventStorage where Self: FulfillmentDatabase {
    public func events(after: EventPosition, limit: Int, accountId: String?, types: [FulfillmentEventType]?) async throws -> [FulfillmentEvent] {
        try await read { s in try EventRecords(s).list(after: after, limit: limit, accountId: accountId, types: types) }
    }

    /// Batches of 5,000, each its own transaction: a long delete would hold up every commit that appends to the feed.
    public func trimEvents(beforeMs: Int64) async throws -> Int {
        var total = 0
        while true {
            let dropped = try await write { s in try EventRecords(s).trim(beforeMs: beforeMs, limit: 5_000) }
            total += dropped
            if dropped < 5_000 { return total }
        }
    }

    public func trimDeliveryLog(beforeMs: Int64) async throws {
        try await write { s in try WebhookRecords(s).trimAttempts(beforeMs: beforeMs) }
    }

    public func addWebhook(_ webhook: WebhookRecord, maxEndpoints: Int) async throws -> Bool {
        try await write { s in try WebhookRecords(s).insert(webhook, maxEndpoints: maxEndpoints) }
    }

    public func webhooks() async throws -> [WebhookRecord] { try await read { s in try WebhookRecords(s).all() } }

    public func webhook(_ id: String) async throws -> WebhookRecord? { try await read { s in try WebhookRecords(s).one(id) } }

    public func webhookBacklog(_ id: String) async throws -> (count: Int, oldestMs: Int64?, lastError: String?) {
        try await read { s in try WebhookRecords(s).backlog(id) }
    }

    public func rotateWebhookSecret(_ id: String, secret: String, previousUntilMs: Int64) async throws -> Bool {
        try await write { s in try WebhookRecords(s).rotate(id, secret: secret, previousUntilMs: previousUntilMs) }
    }

    public func setWebhookState(_ id: String, _ state: String, nowMs: Int64, leaseMs: Int64) async throws -> Bool {
        try await write { s in try WebhookRecords(s).setState(id, state, nowMs: nowMs, leaseMs: leaseMs) }
    }

    public func deleteWebhook(_ id: String) async throws -> Bool { try await write { s in try WebhookRecords(s).delete(id) } }

    public func redeliverWebhook(_ id: String, after: EventPosition, nowMs: Int64, leaseMs: Int64) async throws -> Int {
        try await write { s in try WebhookRecords(s).redeliver(id, after: after, nowMs: nowMs, leaseMs: leaseMs) }
    }

    public func webhookDeliveries(_ id: String, limit: Int) async throws -> [WebhookDelivery] {
        try await read { s in try WebhookRecords(s).deliveries(id, limit: limit) }
    }

    /// Reads the batch outside the write (a SERIALIZABLE write reading the feed would conflict with every commit
    /// appending to it), then owes it in one write that moves the endpoint's position only from where the read began.
    public func dispatchEvents(to webhook: WebhookRecord, limit: Int, nowMs: Int64) async throws -> Int {
        let batch = try await read { s in try EventRecords(s).headers(after: webhook.dispatched, limit: limit, startSnapshot: webhook.startSnapshot) }
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

    public func dueWebhookItems(endpointId: String, nowMs: Int64, limit: Int, leaseMs: Int64) async throws -> [OutboxItem] {
        try await claimWrite { s in
            try FulfillmentQueries(s).claimOutbox(nowMs: nowMs, limit: limit, webhookEndpoint: endpointId, leaseMs: leaseMs)
        }
    }

    public func undeliveredEvents(endpointId: String, accountId: String, limit: Int) async throws
        -> (delivered: Int64, generation: Int64, events: [FulfillmentEvent])?
    {
        try await read { s in
            guard let progress = try WebhookRecords(s).progress(endpointId, accountId) else { return nil }
            return (
                progress.delivered, progress.generation,
                try EventRecords(s).account(accountId, afterSequence: progress.delivered, limit: limit)
            )
        }
    }

    public func settleWebhook(_ settlement: WebhookSettlement, nowMs: Int64) async throws {
        try await write { s in try WebhookRecords(s).settle(settlement, nowMs: nowMs) }
    }

    public func releaseWebhookItem(_ item: OutboxItem, nowMs: Int64) async throws {
        try await write { s in try WebhookRecords(s).release(item, nowMs: nowMs) }
    }
}
