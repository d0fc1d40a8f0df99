import IAPProtocol

/// A webhook endpoint as stored, with its secrets (never leaves fulfillment but signed).
public struct WebhookRecord: Sendable, Equatable {
    public var id: String
    public var url: String
    public var types: [FulfillmentEventType]?
    public var environments: [String]?
    public var allowPrivateAddress: Bool
    public var secret: String
    public var previousSecret: String?
    public var previousSecretUntilMs: Int64?
    public var state: String
    public var createdAtMs: Int64
    /// The feed is dispatched to this endpoint up to here (`EventPosition`).
    public var dispatched: EventPosition
    /// PostgreSQL: the snapshot of the add (`pg_current_snapshot()`); events it saw committed are not owed
    /// (`WebhookRecords.insert`). Nil on SQLite.
    public var startSnapshot: String?

    public init(
        id: String, url: String, types: [FulfillmentEventType]?, environments: [String]?, allowPrivateAddress: Bool, secret: String,
        previousSecret: String? = nil, previousSecretUntilMs: Int64? = nil, state: String, createdAtMs: Int64, dispatched: EventPosition,
        startSnapshot: String? = nil
    ) {
        self.id = id
        self.url = url
        self.types = types
        self.environments = environments
        self.allowPrivateAddress = allowPrivateAddress
        self.secret = secret
        self.previousSecret = previousSecret
        self.previousSecretUntilMs = previousSecretUntilMs
        self.state = state
        self.createdAtMs = createdAtMs
        self.dispatched = dispatched
        self.startSnapshot = startSnapshot
    }

    /// Whether the endpoint takes an event of this type and environment.
    public func takes(type: String, environment: String) -> Bool {
        (types.map { $0.contains { $0.rawValue == type } } ?? true) && (environments.map { $0.contains(environment) } ?? true)
    }

    public func takes(_ e: FulfillmentEvent) -> Bool { takes(type: e.type.rawValue, environment: e.environment) }

    /// The secrets that sign now: the current one, and the one before a rotation for 24 hours after it.
    public func signingSecrets(nowMs: Int64) -> [String] {
        guard let previousSecret, let until = previousSecretUntilMs, nowMs < until else { return [secret] }
        return [secret, previousSecret]
    }
}

/// What one delivery round did for one (endpoint, account) item, to record in one write.
public struct WebhookSettlement: Sendable {
    public var item: OutboxItem
    public var endpointId: String
    public var accountId: String
    /// The account's events delivered (or skipped by the endpoint's filter) up to here.
    public var deliveredSequence: Int64
    /// The progress row's generation the round read (a redelivery since makes the round's progress moot).
    public var generation: Int64
    public var attempts: [WebhookDelivery]
    /// Nil: every event read was delivered. Else the failure, and when to try again.
    public var failure: String?
    public var nextAttemptAtMs: Int64
    /// A whole page was read: more may be waiting.
    public var more: Bool
    /// Some event went out (or was skipped) this round.
    public var progressed: Bool
    /// The item has failed for the endpoint's give-up period: the endpoint is marked failing.
    public var givesUp: Bool

    public init(
        item: OutboxItem, endpointId: String, accountId: String, deliveredSequence: Int64, generation: Int64, attempts: [WebhookDelivery],
        failure: String?, nextAttemptAtMs: Int64, more: Bool, progressed: Bool, givesUp: Bool
    ) {
        self.item = item
        self.endpointId = endpointId
        self.accountId = accountId
        self.deliveredSequence = deliveredSequence
        self.generation = generation
        self.attempts = attempts
        self.failure = failure
        self.nextAttemptAtMs = nextAttemptAtMs
        self.more = more
        self.progressed = progressed
        self.givesUp = givesUp
    }
}

/// The webhook tables' statements, both engines. An endpoint's deliveries are outbox items of kind `webhook`, one per
/// (endpoint, account) that has events waiting (key `"<endpoint> <account>"`, payload the last sequence owed); the
/// account's delivered sequence is in `webhook_progress`, so its events go out in order and one failing account
/// waits alone.
struct WebhookRecords {
    let s: any SQLSession

    init(_ session: any SQLSession) { self.s = session }

    static let kind = OutboxKind.webhook.rawValue

    /// False when `maxEndpoints` exist already (counted by the insert itself: two adds at once cannot both pass).
    ///
    /// The endpoint is owed exactly what commits after the add (`w.dispatched` is not read). SQLite has one writer: the
    /// feed's last event is where it starts. On PostgreSQL a transaction running at the add can commit its event after
    /// it at an earlier position (`EventPosition`); so the endpoint starts before the oldest transaction still running
    /// (the add's snapshot's xmin), and dispatch skips the events that snapshot saw committed (`EventRecords.headers`).
    /// Until 2026-11-30 it started after the last event committed, and such an event was never given to it.
    func insert(_ w: WebhookRecord, maxEndpoints: Int) throws -> Bool {
        let start =
            s.dialect == .postgres
            ? "pg_snapshot_xmin(pg_current_snapshot())::text::bigint, 0, pg_current_snapshot()::text"
            : "0, COALESCE((SELECT MAX(id) FROM event), 0), NULL"
        return try s.run(
            """
            INSERT INTO webhook_endpoint (id, url, types, environments, allow_private_address, secret, previous_secret,
                previous_secret_until_ms, state, created_at_ms, dispatched_tx_order, dispatched_id, start_snapshot)
            SELECT ?1, ?2, ?3, ?4, ?5, ?6, NULL, NULL, 'active', ?7, \(start) WHERE (SELECT COUNT(*) FROM webhook_endpoint) < ?8
            """, w.id, w.url, Self.list(w.types?.map(\.rawValue)), Self.list(w.environments), w.allowPrivateAddress, w.secret,
            w.createdAtMs, maxEndpoints) == 1
    }

    func all() throws -> [WebhookRecord] {
        try s.rows("SELECT * FROM webhook_endpoint ORDER BY created_at_ms, id").map(Self.record)
    }

    func one(_ id: String) throws -> WebhookRecord? {
        try s.row("SELECT * FROM webhook_endpoint WHERE id = ?1", id).map(Self.record)
    }

    func rotate(_ id: String, secret: String, previousUntilMs: Int64) throws -> Bool {
        try s.run(
            "UPDATE webhook_endpoint SET previous_secret = secret, previous_secret_until_ms = ?1, secret = ?2 WHERE id = ?3", previousUntilMs,
            secret, id) == 1
    }

    /// Only an active endpoint's items are claimed (`claimOutbox`); made active again, its items wait from now
    /// (`WebhookPolicy.giveUpAfterMs` counts again) and are due now, except those due within a lease (`leaseMs`) anyway:
    /// one of them may be claimed and in flight, and made due it would be claimed again and its account's events sent
    /// twice at once, out of order (until 2026-11-30, a pause and a resume within a minute could).
    func setState(_ id: String, _ state: String, nowMs: Int64, leaseMs: Int64) throws -> Bool {
        guard try s.run("UPDATE webhook_endpoint SET state = ?1 WHERE id = ?2", state, id) == 1 else { return false }
        if state == "active" {
            try s.run(
                """
                UPDATE outbox SET created_at_ms = ?1, attempts = 0,
                    next_attempt_at_ms = CASE WHEN next_attempt_at_ms > ?1 + ?4 THEN ?1 ELSE next_attempt_at_ms END
                WHERE kind = ?2 AND item_key LIKE ?3
                """, nowMs, Self.kind, id + " %", leaseMs)
        }
        return true
    }

    func delete(_ id: String) throws -> Bool {
        try s.run("DELETE FROM outbox WHERE kind = ?1 AND item_key LIKE ?2", Self.kind, id + " %")
        try s.run("DELETE FROM webhook_progress WHERE endpoint_id = ?1", id)
        try s.run("DELETE FROM webhook_attempt WHERE endpoint_id = ?1", id)
        return try s.run("DELETE FROM webhook_endpoint WHERE id = ?1", id) == 1
    }

    /// Accounts waiting, since when the oldest waits, and the latest failure.
    func backlog(_ id: String) throws -> (count: Int, oldestMs: Int64?, lastError: String?) {
        let row = try s.row(
            "SELECT COUNT(*) AS n, MIN(created_at_ms) AS oldest FROM outbox WHERE kind = ?1 AND item_key LIKE ?2", Self.kind, id + " %")
        let error: String? = try s.value(
            "SELECT last_error FROM outbox WHERE kind = ?1 AND item_key LIKE ?2 AND last_error IS NOT NULL ORDER BY created_at_ms LIMIT 1",
            Self.kind, id + " %")
        return (try row?.get("n") ?? 0, try row?.get("oldest"), error)
    }

    /// Owes `endpoint` the events of a dispatched batch (those it takes), and moves its dispatch position past them. False
    /// when another instance dispatched meanwhile (the caller's transaction is then rolled back and nothing is owed twice).
    func dispatch(_ w: WebhookRecord, events: [EventHeader], nowMs: Int64) throws -> Bool {
        guard let last = events.last?.position else { return true }
        var owed: [String: (first: Int64, last: Int64)] = [:]
        var order: [String] = []
        for e in events where !e.committedBeforeStart && w.takes(type: e.type, environment: e.environment) {
            if let known = owed[e.accountId] {
                owed[e.accountId] = (known.first, e.sequence)
            } else {
                owed[e.accountId] = (e.sequence, e.sequence)
                order.append(e.accountId)
            }
        }
        for accountId in order {
            let range = owed[accountId]!
            try s.run(
                """
                INSERT INTO webhook_progress (endpoint_id, account_id, delivered_sequence) VALUES (?1, ?2, ?3)
                ON CONFLICT (endpoint_id, account_id) DO NOTHING
                """, w.id, accountId, range.first - 1)
            try s.run(
                """
                INSERT INTO outbox (kind, item_key, payload, attempts, created_at_ms, next_attempt_at_ms, last_error)
                VALUES (?1, ?2, ?3, 0, ?4, ?4, NULL)
                ON CONFLICT (kind, item_key) DO UPDATE SET payload = excluded.payload
                """, Self.kind, w.id + " " + accountId, String(range.last), nowMs)
        }
        // Past the add's snapshot's xmax every event is one it did not see: the skip is done with, and no longer read.
        let startDone = w.startSnapshot.flatMap(Self.snapshotXmax).map { last.txOrder >= $0 } ?? true
        return try s.run(
            """
            UPDATE webhook_endpoint SET dispatched_tx_order = ?1, dispatched_id = ?2,
                start_snapshot = CASE WHEN ?6 THEN NULL ELSE start_snapshot END
            WHERE id = ?3 AND dispatched_tx_order = ?4 AND dispatched_id = ?5
            """, last.txOrder, last.id, w.id, w.dispatched.txOrder, w.dispatched.id, startDone) == 1
    }

    /// The xmax of a `pg_snapshot` as text (`xmin:xmax:xip,...`): every transaction id from it on began after the snapshot.
    static func snapshotXmax(_ snapshot: String) -> Int64? {
        let parts = snapshot.split(separator: ":", omittingEmptySubsequences: false)
        return parts.count == 3 ? Int64(parts[1]) : nil
    }

    func progress(_ endpointId: String, _ accountId: String) throws -> (delivered: Int64, generation: Int64)? {
        try s.row(
            "SELECT delivered_sequence, generation FROM webhook_progress WHERE endpoint_id = ?1 AND account_id = ?2", endpointId, accountId
        ).map { (try $0.get("delivered_sequence"), try $0.get("generation")) }
    }

    /// Records one round of an item: the account's progress (forward only), each attempt, and the item: removed when
    /// everything owed went out (unless more was owed meanwhile: its payload changed), due again now when more waits,
    /// or tried again later after a failure. The item's time is set only while this round's claim holds it (its lease
    /// unchanged): a round that outlived its lease leaves the next claim's lease alone.
    func settle(_ r: WebhookSettlement, nowMs: Int64) throws {
        // Deleted meanwhile: nothing of the round is kept (its attempts would outlive the endpoint).
        let exists: Int64? = try s.value("SELECT 1 FROM webhook_endpoint WHERE id = ?1", r.endpointId)
        guard exists != nil else { return }
        try s.run(
            """
            UPDATE webhook_progress SET delivered_sequence = ?1
            WHERE endpoint_id = ?2 AND account_id = ?3 AND delivered_sequence < ?1 AND generation = ?4
            """, r.deliveredSequence, r.endpointId, r.accountId, r.generation)
        if !r.attempts.isEmpty {
            // One statement for the round's attempts: (endpoint, account, sequence, at, status, latency, error) each.
            var values: [String] = [], arguments: [SQLValue] = []
            for a in r.attempts {
                values.append("(\(s.placeholders(7, from: arguments.count + 1)))")
                arguments += [
                    .text(r.endpointId), .text(a.accountId), a.sequence.sql, a.attemptedAtMs.sql, a.status.sql, a.latencyMs.sql, a.error.sql,
                ]
            }
            try s.execute(
                "INSERT INTO webhook_attempt (endpoint_id, account_id, sequence, attempted_at_ms, status, latency_ms, error) VALUES "
                    + values.joined(separator: ", "), arguments: arguments)
        }
        if let failure = r.failure {
            let held = try s.run(
                """
                UPDATE outbox SET attempts = CASE WHEN ?4 THEN 1 ELSE attempts + 1 END, next_attempt_at_ms = ?1, last_error = ?2,
                    created_at_ms = CASE WHEN ?4 THEN ?5 ELSE created_at_ms END
                WHERE id = ?3 AND next_attempt_at_ms = ?6 AND created_at_ms = ?7
                """, r.nextAttemptAtMs, failure, r.item.id, r.progressed, nowMs, r.item.nextAttemptAtMs, r.item.createdAtMs)
            // An operator's resume or redeliver meanwhile made the item wait from then (`setState`): this round's old count
            // of failures neither stands nor marks the endpoint failing (until 2026-11-30 it undid the resume), nor does a
            // pause meanwhile become `failing`.
            if r.givesUp, held == 1 { try s.run("UPDATE webhook_endpoint SET state = 'failing' WHERE id = ?1 AND state = 'active'", r.endpointId) }
        } else if try r.more
            || s.run(
                "DELETE FROM outbox WHERE id = ?1 AND payload = ?2 AND next_attempt_at_ms = ?3", r.item.id, r.item.payload,
                r.item.nextAttemptAtMs) == 0
        {
            // Progress made: the item waits from now (`WebhookPolicy.giveUpAfterMs` counts from its last progress).
            try s.run(
                "UPDATE outbox SET attempts = 0, next_attempt_at_ms = ?1, created_at_ms = ?1, last_error = NULL WHERE id = ?2 AND next_attempt_at_ms = ?3",
                nowMs, r.item.id, r.item.nextAttemptAtMs)
        }
    }

    /// Hands a claimed item back untouched, due now (its round had no time left in its lease).
    func release(_ item: OutboxItem, nowMs: Int64) throws {
        try s.run("UPDATE outbox SET next_attempt_at_ms = ?1 WHERE id = ?2 AND next_attempt_at_ms = ?3", nowMs, item.id, item.nextAttemptAtMs)
    }

    /// Every event after `after` is owed again: each account's progress goes back to just before its first such event
    /// (never forward), in a new generation, so a round in flight meanwhile cannot move it on; the items' payloads change
    /// too, so such a round cannot remove them.
    func redeliver(_ id: String, after: EventPosition, nowMs: Int64, leaseMs: Int64) throws -> Int {
        let later = "FROM event WHERE (tx_order, id) > (?2, ?3)"
        let accounts = try s.run(
            """
            INSERT INTO webhook_progress (endpoint_id, account_id, delivered_sequence, generation)
            SELECT ?1, account_id, MIN(sequence) - 1, 0 \(later) GROUP BY account_id
            ON CONFLICT (endpoint_id, account_id) DO UPDATE SET generation = webhook_progress.generation + 1,
                delivered_sequence = CASE WHEN excluded.delivered_sequence < webhook_progress.delivered_sequence
                    THEN excluded.delivered_sequence ELSE webhook_progress.delivered_sequence END
            """, id, after.txOrder, after.id)
        try s.run(
            """
            INSERT INTO outbox (kind, item_key, payload, attempts, created_at_ms, next_attempt_at_ms, last_error)
            SELECT ?4, CAST(?1 AS TEXT) || ' ' || account_id, CAST(MAX(sequence) AS TEXT) || ' redelivered ' || CAST(?5 AS TEXT), 0, ?5, ?5,
                NULL \(later) GROUP BY account_id
            ON CONFLICT (kind, item_key) DO UPDATE SET payload = excluded.payload
            """, id, after.txOrder, after.id, Self.kind, nowMs)
        _ = try setState(id, "active", nowMs: nowMs, leaseMs: leaseMs)
        return accounts
    }

    func deliveries(_ id: String, limit: Int) throws -> [WebhookDelivery] {
        try s.rows("SELECT * FROM webhook_attempt WHERE endpoint_id = ?1 ORDER BY id DESC LIMIT ?2", id, limit).map {
            let account: String = try $0.get("account_id"), sequence: Int64 = try $0.get("sequence")
            return WebhookDelivery(
                eventId: "evt_\(account)_\(sequence)", accountId: account, sequence: sequence, attemptedAtMs: try $0.get("attempted_at_ms"),
                status: try $0.get("status", as: Int?.self), latencyMs: try $0.get("latency_ms"), error: try $0.get("error"))
        }
    }

    /// Drops delivery attempts older than `beforeMs` (the log is for operators, not the record of what was sent).
    func trimAttempts(beforeMs: Int64) throws {
        try s.run("DELETE FROM webhook_attempt WHERE attempted_at_ms < ?1", beforeMs)
    }

    private static func list(_ values: [String]?) -> String { values?.joined(separator: " ") ?? "" }

    private static func record(_ row: SQLRow) throws -> WebhookRecord {
        let types: String = try row.get("types"), environments: String = try row.get("environments")
        return WebhookRecord(
            id: try row.get("id"), url: try row.get("url"),
            types: types.isEmpty ? nil : types.split(separator: " ").compactMap { FulfillmentEventType(rawValue: String($0)) },
            environments: environments.isEmpty ? nil : environments.split(separator: " ").map(String.init),
            allowPrivateAddress: try row.get("allow_private_address"), secret: try row.get("secret"),
            previousSecret: try row.get("previous_secret"), previousSecretUntilMs: try row.get("previous_secret_until_ms"),
            state: try row.get("state"), createdAtMs: try row.get("created_at_ms"),
            dispatched: EventPosition(txOrder: try row.get("dispatched_tx_order"), id: try row.get("dispatched_id")),
            startSnapshot: try row.get("start_snapshot"))
    }
}
