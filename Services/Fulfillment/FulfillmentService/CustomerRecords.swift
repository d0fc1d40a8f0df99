import IAPProtocol

/// The statements the support console's reads need, both engines: one customer's purchases, newest ledger rows and
/// notifications, the account behind a transaction id, and the audit entries about an account.
struct CustomerRecords {
    let s: any SQLSession

    init(_ session: any SQLSession) { self.s = session }

    /// The account holding the purchase with this original transaction id now (ownership moves with the `transfer`
    /// policy), else the account a transaction with this id was processed for.
    func accountId(transactionId: String) throws -> String? {
        if let owner: String = try s.value("SELECT account_id FROM ownership WHERE original_transaction_id = ?1", transactionId) {
            return owner
        }
        return try s.value("SELECT account_id FROM processed_transaction WHERE transaction_id = ?1", transactionId)
    }

    /// Every purchase processed for the account, newest first, with where it stands.
    func purchases(_ accountId: String) throws -> [CustomerPurchase] {
        try s.rows(
            """
            SELECT p.*, EXISTS (SELECT 1 FROM ledger l WHERE l.transaction_id = p.transaction_id AND l.kind = 'reinstatement') AS reinstated
            FROM processed_transaction p WHERE p.account_id = ?1 ORDER BY p.purchase_date_ms DESC, p.transaction_id DESC
            """, accountId
        ).map { row in
            let scope: String = try row.get("scope")
            guard let accountScope = AccountScope(rawValue: scope) else { throw StoredValueInvalid(column: "scope", value: scope) }
            let revokedAtMs: Int64? = try row.get("revoked_at_ms")
            let revokeReason: String? = try row.get("revoke_reason")
            let reinstated: Bool = try row.get("reinstated")
            return CustomerPurchase(
                transactionId: try row.get("transaction_id"), originalTransactionId: try row.get("original_transaction_id"),
                productId: try row.get("product_id"), environment: try row.get("environment"), scope: accountScope,
                grantKind: try row.get("grant_kind"), coinsGranted: try row.get("coins_granted"),
                purchaseDateMs: try row.get("purchase_date_ms"), expiresAtMs: try row.get("expires_date_ms"),
                processedAtMs: try row.get("processed_at_ms"),
                state: Self.state(revokedAtMs: revokedAtMs, revokeReason: revokeReason, reinstated: reinstated),
                revokedAtMs: revokedAtMs, revokeReason: revokeReason, price: try row.get("price"), currency: try row.get("currency"))
        }
    }

    /// A purchase's state from its row: revoked by a refund or otherwise, reinstated after a refund, else granted.
    static func state(revokedAtMs: Int64?, revokeReason: String?, reinstated: Bool) -> PurchaseState {
        if revokedAtMs != nil { return revokeReason == "refunded" ? .refunded : .revoked }
        return reinstated ? .reinstated : .granted
    }

    /// The holder's ledger rows, newest first, at most `limit`.
    func newestLedger(_ holder: Holder, limit: Int) throws -> [LedgerEntry] {
        try s.rows(
            """
            SELECT id, delta, balance, kind, transaction_id, memo, debt, recovered, owed, created_at_ms FROM ledger
            WHERE account_id = ?1 AND scope = ?2 ORDER BY id DESC LIMIT ?3
            """, holder.accountId, holder.scope.rawValue, limit
        ).map(FulfillmentQueries.ledgerEntry)
    }

    /// The notifications recorded about the purchases the account holds now (after a transfer, the new owner's), newest
    /// first.
    func notifications(_ accountId: String, limit: Int) throws -> [CustomerNotification] {
        try s.rows(
            """
            SELECT notification_uuid, notification_type, subtype, state, attempts, received_at_ms, next_attempt_at_ms, last_error,
                processed_at_ms, original_transaction_id
            FROM notification_inbox WHERE original_transaction_id IN
                (SELECT original_transaction_id FROM ownership WHERE account_id = ?1)
            ORDER BY received_at_ms DESC, notification_uuid LIMIT ?2
            """, accountId, limit
        ).map { row in
            let rawState: String = try row.get("state")
            guard let state = NotificationState(rawValue: rawState) else { throw StoredValueInvalid(column: "state", value: rawState) }
            return CustomerNotification(
                originalTransactionId: try row.get("original_transaction_id"),
                notification: NotificationSummary(
                    notificationUUID: try row.get("notification_uuid"), notificationType: try row.get("notification_type"),
                    subtype: try row.get("subtype"), state: state, attempts: try row.get("attempts"),
                    receivedAtMs: try row.get("received_at_ms"), nextAttemptAtMs: state == .pending ? try row.get("next_attempt_at_ms") : nil,
                    lastError: try row.get("last_error"), processedAtMs: try row.get("processed_at_ms")))
        }
    }

    /// The audit entries about one account, newest first.
    func audit(accountId: String, limit: Int) throws -> [AuditEntry] {
        try s.rows("SELECT * FROM admin_audit WHERE account_id = ?1 ORDER BY id DESC LIMIT ?2", accountId, limit).map(FulfillmentQueries.auditEntry)
    }
}

extension CustomerRecords {
    /// The ledger row an idempotency key wrote for the holder, of whatever kind.
    func ledgerRow(_ holder: Holder, idempotencyKey: String) throws -> LedgerEntry? {
        try s.row(
            """
            SELECT id, delta, balance, kind, transaction_id, memo, debt, recovered, owed, created_at_ms FROM ledger
            WHERE account_id = ?1 AND scope = ?2 AND idempotency_key = ?3
            """, holder.accountId, holder.scope.rawValue, idempotencyKey
        ).map(FulfillmentQueries.ledgerEntry)
    }
}
