import IAPProtocol

// MARK: reads: what was committed (the statements: `FulfillmentRecords`, `FulfillmentQueries`)

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
                let periods = try FulfillmentQueries(s).periods(of: record)
                return SubscriptionHistoryRecord(
                    originalTransactionId: record.originalTransactionId,
                    productIds: Set(periods.map(\.productId)).union([record.productId]),
                    active: GrantRules.isActive(record, renewal: try tx.renewal(record.originalTransactionId), nowMs: nowMs),
                    periodsPaid: periods.filter { !$0.revoked }.count)
            }
        }
    }

    /// The account's oldest Production entitlement's original, else its first Production coin grant's transaction.
    public func customerTransactionId(accountId: String) async throws -> String? {
        try await read { s in try FulfillmentQueries(s).customerTransactionId(accountId) }
    }

    /// Ledger rows after `after` (an entry id), oldest first; `next` when more remain.
    public func ledger(accountId: String, scope: AccountScope = .production, after: Int64, limit: Int) async throws
        -> (entries: [LedgerEntry], next: Int64?)
    {
        let rows = try await read { s in
            try FulfillmentQueries(s).ledger(Holder(accountId: accountId, scope: scope), after: after, limit: limit + 1)
        }
        let entries = Array(rows.prefix(limit))
        return (entries, rows.count > limit ? entries.last?.id : nil)
    }

    /// The audit log, newest first.
    public func audit(limit: Int) async throws -> [AuditEntry] {
        try await read { s in try FulfillmentQueries(s).audit(limit: limit) }
    }

    public func audit(action: String, transactionId: String, limit: Int) async throws -> [AuditEntry] {
        try await read { s in try FulfillmentQueries(s).audit(limit: limit, action: action, transactionId: transactionId) }
    }

    public func entitlement(originalTransactionId: String) async throws -> EntitlementRecord? {
        try await read { s in try FulfillmentRecords(s).entitlement(original: originalTransactionId) }
    }

    public func deliveredContent(accountId: String, scope: AccountScope) async throws -> Set<String> {
        try await read { s in try FulfillmentQueries(s).deliveredContent(Holder(accountId: accountId, scope: scope)) }
    }

    public func reconcileCheckpoint(environment: String) async throws -> Int64? {
        try await read { s in try FulfillmentQueries(s).reconcileCheckpoint(environment) }
    }

    /// Originals of subscriptions to ask Apple about: ended without news in the last 60 days, or in billing retry.
    public func subscriptionsToCheck(nowMs: Int64, limit: Int, after: (expiresAtMs: Int64, original: String)) async throws
        -> [(original: String, expiresAtMs: Int64)]
    {
        try await read { s in try FulfillmentQueries(s).subscriptionsToCheck(nowMs: nowMs, limit: limit, after: after) }
    }

    public func playSubscriptionsToCheck(nowMs: Int64, limit: Int) async throws -> [PlaySubscriptionToCheck] {
        try await read { s in try FulfillmentQueries(s).playSubscriptionsToCheck(nowMs: nowMs, limit: limit) }
    }
}

// MARK: invariants (tests, benchmarks, the crash harness)

extension FulfillmentInvariants where Self: FulfillmentDatabase {
    public func duplicateLedgerEffects() async throws -> [String] {
        try await read { s in try FulfillmentQueries(s).duplicateLedgerEffects() }
    }

    public func ledgerMismatches() async throws -> [String] {
        try await read { s in try FulfillmentQueries(s).ledgerMismatches() }
    }

    public func claimMismatches() async throws -> [String] {
        try await read { s in try FulfillmentQueries(s).claimMismatches() }
    }
}
