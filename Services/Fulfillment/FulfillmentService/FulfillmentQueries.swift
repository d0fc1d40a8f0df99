import IAPProtocol

/// The statements beside the grant rules', both engines: pages of the ledger, what offers and support read, the audit
/// log, reconciliation's checkpoints, the outbox, and the invariants tests check.
struct FulfillmentQueries {
    let s: any SQLSession

    init(_ session: any SQLSession) { self.s = session }

    /// Ledger rows after `after` (an entry id), oldest first, at most `limit`.
    func ledger(_ holder: Holder, after: Int64, limit: Int) throws -> [LedgerEntry] {
        try s.rows(
            """
            SELECT id, delta, balance, kind, transaction_id, memo, debt, recovered, owed, created_at_ms FROM ledger
            WHERE account_id = ?1 AND scope = ?2 AND id > ?3 ORDER BY id LIMIT ?4
            """, holder.accountId, holder.scope.rawValue, after, limit
        ).map(Self.ledgerEntry)
    }

    static func ledgerEntry(_ row: SQLRow) throws -> LedgerEntry {
        let kind: String = try row.get("kind")
        guard let ledgerKind = LedgerKind(rawValue: kind) else { throw StoredValueInvalid(column: "kind", value: kind) }
        var e = LedgerEntry(
            id: try row.get("id"), delta: try row.get("delta"), balance: try row.get("balance"), kind: ledgerKind,
            transactionId: try row.get("transaction_id"), memo: try row.get("memo"), createdAtMs: try row.get("created_at_ms"))
        let debt: Int64 = try row.get("debt"), recovered: Int64 = try row.get("recovered"), owed: Int64 = try row.get("owed")
        if debt > 0 { e.shortfall = debt }
        if recovered > 0 { e.recovered = recovered }
        if owed > 0 || debt > 0 || recovered > 0 { e.owed = owed }
        return e
    }

    /// The periods paid for an original: each one's product and whether it was revoked.
    func periods(of record: EntitlementRecord) throws -> [(productId: String, revoked: Bool)] {
        try s.rows(
            "SELECT product_id, revoked_at_ms FROM processed_transaction WHERE environment = ?1 AND original_transaction_id = ?2",
            record.environment, record.originalTransactionId
        ).map { (try $0.get("product_id"), try $0.get("revoked_at_ms", as: Int64?.self) != nil) }
    }

    /// True in SQL when `column` is all digits, as Apple's ids are (Google Play's purchase tokens and `GPA.` order ids are
    /// not): `ltrim` with a set of characters means the same on SQLite and PostgreSQL.
    static func appleId(_ column: String) -> String { "(\(column) <> '' AND ltrim(\(column), '0123456789') = '')" }

    /// The account's oldest Production App Store entitlement's original, else its first Production App Store coin grant's
    /// transaction.
    func customerTransactionId(_ accountId: String) throws -> String? {
        let production = "account_id = ?1 AND scope = 'Production' AND environment = 'Production'"
        return try s.value(
            "SELECT original_transaction_id FROM entitlement WHERE \(production) AND \(Self.appleId("original_transaction_id")) ORDER BY starts_at_ms, original_transaction_id LIMIT 1",
            accountId)
            ?? s.value(
                "SELECT transaction_id FROM ledger WHERE \(production) AND kind = 'grant' AND \(Self.appleId("transaction_id")) ORDER BY id LIMIT 1",
                accountId)
    }

    /// Originals of App Store subscriptions to ask Apple about: ended without news in the last 60 days, or in billing retry;
    /// those after `after` (where the sweep before stopped) in the order (end, original), the earliest first.
    func subscriptionsToCheck(nowMs: Int64, limit: Int, after: (expiresAtMs: Int64, original: String)) throws
        -> [(original: String, expiresAtMs: Int64)]
    {
        try s.rows(
            """
            SELECT e.original_transaction_id, e.expires_at_ms FROM entitlement e
            LEFT JOIN subscription_renewal r ON r.original_transaction_id = e.original_transaction_id
            WHERE e.revoked_at_ms IS NULL AND e.expires_at_ms IS NOT NULL AND \(Self.appleId("e.original_transaction_id"))
              AND EXISTS (SELECT 1 FROM processed_transaction p
                          WHERE p.original_transaction_id = e.original_transaction_id AND p.grant_kind = 'subscription')
              AND ((e.expires_at_ms <= ?1 AND e.expires_at_ms > ?2 AND COALESCE(r.expiration_intent, 0) = 0
                    AND COALESCE(r.auto_renew, TRUE))
                   OR r.in_billing_retry)
              AND (e.expires_at_ms > ?4 OR (e.expires_at_ms = ?4 AND e.original_transaction_id > ?5))
            ORDER BY e.expires_at_ms, e.original_transaction_id LIMIT ?3
            """, nowMs, nowMs - 60 * 86_400_000, limit, after.expiresAtMs, after.original
        ).map { (try $0.get("original_transaction_id"), try $0.get("expires_at_ms")) }
    }

    /// Google Play subscriptions to ask Google about: their access ended in the last 60 days without news, and no sweep has
    /// asked about this end yet (its inbox key, `PlayNotifications.sweepKey`, is not there): a renewal Google made moves the
    /// end and makes the next one due; an end Google confirms is asked about once.
    func playSubscriptionsToCheck(nowMs: Int64, limit: Int) throws -> [PlaySubscriptionToCheck] {
        try s.rows(
            """
            SELECT e.original_transaction_id, e.expires_at_ms, k.package_name FROM entitlement e
            LEFT JOIN play_package k ON k.purchase_token = e.original_transaction_id
            WHERE e.revoked_at_ms IS NULL AND e.expires_at_ms IS NOT NULL AND NOT \(Self.appleId("e.original_transaction_id"))
              AND e.expires_at_ms <= ?1 AND e.expires_at_ms > ?2
              AND EXISTS (SELECT 1 FROM processed_transaction p
                          WHERE p.original_transaction_id = e.original_transaction_id AND p.grant_kind = 'subscription')
              AND NOT EXISTS (SELECT 1 FROM notification_inbox i
                              WHERE i.notification_uuid = ?4 || e.original_transaction_id || '@' || CAST(e.expires_at_ms AS TEXT))
            ORDER BY e.expires_at_ms LIMIT ?3
            """, nowMs, nowMs - 60 * 86_400_000, limit, PlaySubscriptionToCheck.keyPrefix
        ).map {
            PlaySubscriptionToCheck(
                purchaseToken: try $0.get("original_transaction_id"), expiresAtMs: try $0.get("expires_at_ms"),
                packageName: try $0.get("package_name"))
        }
    }

    /// The first time the account was given a download of the content (a signed URL, or its first bytes).
    func recordContentDelivery(_ holder: Holder, contentId: String, nowMs: Int64) throws {
        try s.run(
            "INSERT INTO content_delivery (account_id, scope, content_id, first_at_ms) VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
            holder.accountId, holder.scope.rawValue, contentId, nowMs)
    }

    func deliveredContent(_ holder: Holder) throws -> Set<String> {
        Set(
            try s.rows("SELECT content_id FROM content_delivery WHERE account_id = ?1 AND scope = ?2", holder.accountId, holder.scope.rawValue)
                .map { try $0.get("content_id") as String })
    }

    func reconcileCheckpoint(_ environment: String) throws -> Int64? {
        try s.value("SELECT signed_date_ms FROM reconcile_checkpoint WHERE environment = ?1", environment)
    }

    func saveReconcileCheckpoint(_ environment: String, signedDateMs: Int64) throws {
        try s.run(
            """
            INSERT INTO reconcile_checkpoint (environment, signed_date_ms) VALUES (?1, ?2)
            ON CONFLICT (environment) DO UPDATE SET signed_date_ms = excluded.signed_date_ms
            """, environment, signedDateMs)
    }

    func recordAudit(
        _ action: String, accountId: String?, transactionId: String?, reason: String, credential: String, operatorName: String? = nil,
        nowMs: Int64
    ) throws {
        try s.run(
            """
            INSERT INTO admin_audit (at_ms, action, account_id, transaction_id, reason, credential, operator_name)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
            """, nowMs, action, accountId, transactionId, reason, credential, operatorName)
        if let accountId {
            try FulfillmentRecords(s).event(.supportActionTaken, Holder(accountId: accountId, scope: .production), environment: nil, nowMs: nowMs) {
                $0.action = action
                $0.reason = reason
                $0.transactionId = transactionId
            }
        }
    }

    /// The audit log, newest first; with `action`, only its entries about `transactionId`.
    func audit(limit: Int, action: String? = nil, transactionId: String? = nil) throws -> [AuditEntry] {
        let rows =
            if let action {
                try s.rows(
                    "SELECT * FROM admin_audit WHERE action = ?1 AND transaction_id = ?2 ORDER BY id DESC LIMIT ?3", action, transactionId ?? "",
                    limit)
            } else {
                try s.rows("SELECT * FROM admin_audit ORDER BY id DESC LIMIT ?1", limit)
            }
        return try rows.map(Self.auditEntry)
    }

    static func auditEntry(_ row: SQLRow) throws -> AuditEntry {
        AuditEntry(
            id: try row.get("id"), atMs: try row.get("at_ms"), action: try row.get("action"), accountId: try row.get("account_id"),
            transactionId: try row.get("transaction_id"), reason: try row.get("reason"), credential: try row.get("credential"),
            operatorName: try row.get("operator_name"))
    }

    /// Claims the due items for a lease: another instance's worker skips what this one is delivering (PostgreSQL's row
    /// locks; SQLite has one writer).
    /// `webhookEndpoint`: only that endpoint's webhook deliveries (`WebhookWorker`'s), and only while it is active (a
    /// worker that read it active before a pause or a delete claims nothing after it; until 2026-11-30 it did), else every
    /// item but webhooks.
    func claimOutbox(nowMs: Int64, limit: Int, webhookEndpoint: String? = nil, leaseMs: Int64 = OutboxRetry.leaseMs) throws -> [OutboxItem] {
        var arguments: [SQLValue] = [.int(nowMs + leaseMs), .int(nowMs), .int(Int64(limit))]
        var kinds = "kind != 'webhook'"
        if let webhookEndpoint {
            kinds = """
                kind = 'webhook' AND item_key LIKE ?4
                AND EXISTS (SELECT 1 FROM webhook_endpoint e WHERE e.id = ?5 AND e.state = 'active')
                """
            arguments += [.text(webhookEndpoint + " %"), .text(webhookEndpoint)]
        }
        let locking = s.dialect == .postgres ? "FOR UPDATE SKIP LOCKED" : ""
        return try s.fetch(
            """
            UPDATE outbox SET next_attempt_at_ms = ?1
            WHERE id IN (SELECT id FROM outbox WHERE next_attempt_at_ms <= ?2 AND \(kinds)
                         ORDER BY next_attempt_at_ms, id LIMIT ?3 \(locking))
            RETURNING *
            """, arguments: arguments
        ).map(Self.outboxItem).sorted { $0.id < $1.id }
    }

    /// Only the payload that was tried: owed again meanwhile with another payload, the item stays as it is now.
    func settleOutbox(_ item: OutboxItem, delivered: Bool, nextAttemptAtMs: Int64, lastError: String?) throws {
        if delivered {
            try s.run("DELETE FROM outbox WHERE id = ?1 AND payload = ?2", item.id, item.payload)
        } else {
            try s.run(
                "UPDATE outbox SET attempts = attempts + 1, next_attempt_at_ms = ?1, last_error = ?2 WHERE id = ?3 AND payload = ?4",
                nextAttemptAtMs, lastError, item.id, item.payload)
        }
    }

    /// Every item, oldest first; the count and age are of what is owed to Apple (webhooks have their own backlog gauges:
    /// a paused endpoint's waiting events are not an outage at Apple).
    func outbox(limit: Int) throws -> (items: [OutboxItem], total: Int, oldestCreatedAtMs: Int64?) {
        let items = try s.rows("SELECT * FROM outbox ORDER BY created_at_ms, id LIMIT ?1", limit).map(Self.outboxItem)
        let summary = try s.row("SELECT COUNT(*) AS total, MIN(created_at_ms) AS oldest FROM outbox WHERE kind != 'webhook'")
        return (items, try summary?.get("total") ?? 0, try summary?.get("oldest"))
    }

    func playAcknowledgementsOwed(createdBeforeMs: Int64) throws -> (count: Int, oldestCreatedAtMs: Int64?) {
        let row = try s.row(
            "SELECT COUNT(*) AS total, MIN(created_at_ms) AS oldest FROM outbox WHERE kind = 'playAcknowledge' AND created_at_ms < ?1",
            createdBeforeMs)
        return (try row?.get("total") ?? 0, try row?.get("oldest"))
    }

    static func outboxItem(_ row: SQLRow) throws -> OutboxItem {
        OutboxItem(
            id: try row.get("id"), kind: try row.get("kind"), key: try row.get("item_key"), payload: try row.get("payload"),
            attempts: try row.get("attempts"), createdAtMs: try row.get("created_at_ms"),
            nextAttemptAtMs: try row.get("next_attempt_at_ms"), lastError: try row.get("last_error"))
    }

    /// Transactions whose refunds and reversals did not alternate.
    func duplicateLedgerEffects() throws -> [String] {
        var last: [String: String] = [:]
        var bad: [String] = []
        // A partial refund's reversal (Google Play's units, Apple's prorated share) takes part of a grant that stays granted,
        // and its reinstatement gives that part back: not a refund to alternate with.
        for row in try s.rows(
            """
            SELECT transaction_id, kind FROM ledger WHERE kind IN ('reversal', 'reinstatement')
              AND (memo IS NULL OR (memo NOT LIKE ?1 AND memo NOT LIKE ?2)) ORDER BY id
            """, GrantRules.partialRefundReason + ":%", GrantRules.partialRefundReversedReason + ":%")
        {
            let id: String = try row.get("transaction_id"), kind: String = try row.get("kind")
            let expected = last[id] == "reversal" ? "reinstatement" : "reversal"
            if kind != expected { bad.append("\(id): \(kind) after \(last[id] ?? "nothing")") }
            last[id] = kind
        }
        return bad
    }

    /// Transaction ids claimed without a record behind the claim, or recorded without a claim.
    func claimMismatches() throws -> [String] {
        try s.rows(
            """
            SELECT c.transaction_id FROM transaction_claim c
            WHERE NOT EXISTS (SELECT 1 FROM processed_transaction p WHERE p.transaction_id = c.transaction_id)
              AND NOT EXISTS (SELECT 1 FROM early_revocation e WHERE e.transaction_id = c.transaction_id)
            UNION
            SELECT d.transaction_id FROM (SELECT transaction_id FROM processed_transaction
                                          UNION SELECT transaction_id FROM early_revocation) d
            WHERE NOT EXISTS (SELECT 1 FROM transaction_claim c WHERE c.transaction_id = d.transaction_id)
            """
        ).map { try $0.get("transaction_id") }
    }

    /// Accounts whose wallet differs from their ledger, in any scope.
    func ledgerMismatches() throws -> [String] {
        try s.rows(
            """
            SELECT w.account_id FROM wallet w
            LEFT JOIN (SELECT account_id, scope, SUM(delta) AS total, SUM(debt) - SUM(recovered) AS owed
                       FROM ledger GROUP BY account_id, scope) l
              ON l.account_id = w.account_id AND l.scope = w.scope
            WHERE w.balance != COALESCE(l.total, 0) OR w.owed != COALESCE(l.owed, 0)
            UNION
            SELECT l.account_id FROM ledger l LEFT JOIN wallet w ON w.account_id = l.account_id AND w.scope = l.scope
            WHERE w.account_id IS NULL
            """
        ).map { try $0.get("account_id") }
    }
}
