import IAPProtocol

// MARK: reads: what was committed, the same statements on both engines

extension FulfillmentStorage where Self: FulfillmentDatabase {
    public func processed(transactionId: String) async throws -> ProcessedTransaction? {
        try await read { s in try FulfillmentRecords(s).processed(transactionId) }
    }

    /// The account an original transaction is bound to, if any, and the scope it grants into.
    public func owner(originalTransactionId: String) async throws -> Holder? {
        try await read { s in try FulfillmentRecords(s).owner(original: originalTransactionId) }
    }

    public func balance(accountId: String, scope: AccountScope = .production) async throws -> Wallet {
        try await read { s in try FulfillmentRecords(s).wallet(Holder(accountId: accountId, scope: scope)) }
    }

    /// What the account has now: subscriptions in a billing grace period count as active; each subscription
    /// carries its renewal state (`willRenew`, `inBillingRetry`, `gracePeriodExpiresAtMs`) when Apple sent one.
    public func entitlements(accountId: String, scope: AccountScope = .production, nowMs: Int64) async throws
        -> (entitlements: [Entitlement], balance: Int64, owed: Int64)
    {
        try await read { s in
            let tx = FulfillmentRecords(s)
            let holder = Holder(accountId: accountId, scope: scope)
            let wallet = try tx.wallet(holder)
            var renewals: [String: RenewalState] = [:]
            var current: [EntitlementRecord] = []
            for record in try tx.entitlements(holder, activeAtMs: nil) {
                let renewal = record.expiresAtMs == nil ? nil : try tx.renewal(record.originalTransactionId)
                renewals[record.originalTransactionId] = renewal
                if GrantRules.isActive(record, renewal: renewal, nowMs: nowMs) { current.append(record) }
            }
            let active = GrantRules.activeEntitlements(current).map { e in
                var e = e
                if let renewal = renewals[e.originalTransactionId] { renewal.describe(&e) }
                return e
            }
            return (active, wallet.balance, wallet.owed)
        }
    }

    public func subscriptionHistory(accountId: String, scope: AccountScope, nowMs: Int64) async throws -> [SubscriptionHistoryRecord] {
        try await read { s in
            let tx = FulfillmentRecords(s)
            return try tx.entitlements(Holder(accountId: accountId, scope: scope), activeAtMs: nil).filter { $0.expiresAtMs != nil }.map {
                record in
                let paid = try s.rows(
                    "SELECT product_id, revoked_at_ms FROM processed_transaction WHERE environment = ?1 AND original_transaction_id = ?2",
                    record.environment, record.originalTransactionId)
                return SubscriptionHistoryRecord(
                    originalTransactionId: record.originalTransactionId,
                    productIds: Set(try paid.map { try $0.get("product_id", as: String.self) }).union([record.productId]),
                    active: GrantRules.isActive(record, renewal: try tx.renewal(record.originalTransactionId), nowMs: nowMs),
                    periodsPaid: try paid.filter { try $0.get("revoked_at_ms", as: Int64?.self) == nil }.count)
            }
        }
    }

    /// The account's oldest Production entitlement's original, else its first Production coin grant's transaction.
    public func customerTransactionId(accountId: String) async throws -> String? {
        try await read { s in
            let production = "account_id = ?1 AND scope = 'Production' AND environment = 'Production'"
            return try s.value(
                "SELECT original_transaction_id FROM entitlement WHERE \(production) ORDER BY starts_at_ms, original_transaction_id LIMIT 1",
                accountId)
                ?? s.value("SELECT transaction_id FROM ledger WHERE \(production) AND kind = 'grant' ORDER BY id LIMIT 1", accountId)
        }
    }

    /// Ledger rows after `after` (an entry id), oldest first; `next` when more remain.
    public func ledger(accountId: String, scope: AccountScope = .production, after: Int64, limit: Int) async throws
        -> (entries: [LedgerEntry], next: Int64?)
    {
        try await read { s in
            let rows = try s.rows(
                """
                SELECT id, delta, balance, kind, transaction_id, memo, debt, recovered, owed, created_at_ms FROM ledger
                WHERE account_id = ?1 AND scope = ?2 AND id > ?3 ORDER BY id LIMIT ?4
                """, accountId, scope.rawValue, after, limit + 1)
            let entries = try rows.prefix(limit).map { row -> LedgerEntry in
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
            return (entries, rows.count > limit ? entries.last?.id : nil)
        }
    }

    /// The audit log, newest first.
    public func audit(limit: Int) async throws -> [AuditEntry] {
        try await read { s in
            try s.rows("SELECT * FROM admin_audit ORDER BY id DESC LIMIT ?1", limit).map {
                AuditEntry(
                    id: try $0.get("id"), atMs: try $0.get("at_ms"), action: try $0.get("action"), accountId: try $0.get("account_id"),
                    transactionId: try $0.get("transaction_id"), reason: try $0.get("reason"), credential: try $0.get("credential"))
            }
        }
    }

    public func reconcileCheckpoint(environment: String) async throws -> Int64? {
        try await read { s in try s.value("SELECT signed_date_ms FROM reconcile_checkpoint WHERE environment = ?1", environment) }
    }

    /// Originals of subscriptions to ask Apple about: ended without news in the last 60 days, or in billing retry.
    public func subscriptionsToCheck(nowMs: Int64, limit: Int) async throws -> [String] {
        try await read { s in
            try s.rows(
                """
                SELECT e.original_transaction_id FROM entitlement e
                LEFT JOIN subscription_renewal r ON r.original_transaction_id = e.original_transaction_id
                WHERE e.revoked_at_ms IS NULL AND e.expires_at_ms IS NOT NULL
                  AND EXISTS (SELECT 1 FROM processed_transaction p
                              WHERE p.original_transaction_id = e.original_transaction_id AND p.grant_kind = 'subscription')
                  AND ((e.expires_at_ms <= ?1 AND e.expires_at_ms > ?2 AND COALESCE(r.expiration_intent, 0) = 0
                        AND COALESCE(r.auto_renew, TRUE))
                       OR r.in_billing_retry)
                ORDER BY e.expires_at_ms LIMIT ?3
                """, nowMs, nowMs - 60 * 86_400_000, limit
            ).map { try $0.get("original_transaction_id") }
        }
    }
}

// MARK: invariants (tests, benchmarks, the crash harness)

extension FulfillmentInvariants where Self: FulfillmentDatabase {
    public func duplicateLedgerEffects() async throws -> [String] {
        try await read { s in
            var last: [String: String] = [:]
            var bad: [String] = []
            for row in try s.rows("SELECT transaction_id, kind FROM ledger WHERE kind IN ('reversal', 'reinstatement') ORDER BY id") {
                let id: String = try row.get("transaction_id"), kind: String = try row.get("kind")
                let expected = last[id] == "reversal" ? "reinstatement" : "reversal"
                if kind != expected { bad.append("\(id): \(kind) after \(last[id] ?? "nothing")") }
                last[id] = kind
            }
            return bad
        }
    }

    public func ledgerMismatches() async throws -> [String] {
        try await read { s in
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
}
