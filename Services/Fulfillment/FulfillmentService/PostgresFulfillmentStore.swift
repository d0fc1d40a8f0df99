import Foundation
import IAPProtocol
import JSONRPC
import NIOCore
import PostgresNIO
import PostgresSupport

/// The fulfillment database on PostgreSQL (`--database-url`), for several fulfillment instances on one
/// database. The same records and the same rules in the schema as `FulfillmentStore` (SQLite): one processed
/// row per transaction id and one owner and one entitlement per original whatever the environment, one grant
/// and one recovery ledger row per transaction, one spend per (account, scope, idempotency key), balances and
/// debt CHECKed >= 0, the ledger and the audit log append-only (triggers), the inbox keyed by UUID.
///
/// Every write runs `GrantRules` in one SERIALIZABLE transaction (`PostgresPool.write`): two instances
/// redeeming one receipt, or spending with one key, at the same moment cannot both commit; the loser runs
/// again on the winner's result. Tables live in the `fulfillment` schema.
public final class PostgresFulfillmentStore: FulfillmentStorage, FulfillmentInvariants, Sendable {
    let pool: PostgresPool

    /// Brings the schema up to date (`migrations`); on failure the pool is closed and the error thrown.
    public init(pool: PostgresPool) async throws {
        self.pool = pool
        try await pool.migrateOrClose(Self.migrations)
    }

    public func close() throws { pool.close() }

    // MARK: the outbox (OutboxStorage)

    public func dueOutbox(nowMs: Int64, limit: Int) async throws -> [OutboxItem] {
        try await pool.write { s in
            // Claimed for a lease: another instance's worker skips what this one is delivering.
            try s.query(
                """
                UPDATE outbox SET next_attempt_at_ms = \(nowMs + OutboxRetry.leaseMs)
                WHERE id IN (SELECT id FROM outbox WHERE next_attempt_at_ms <= \(nowMs) ORDER BY next_attempt_at_ms, id
                             LIMIT \(limit) FOR UPDATE SKIP LOCKED)
                RETURNING *
                """
            ).map(Self.outboxItem).sorted { $0.id < $1.id }
        }
    }

    public func settleOutbox(_ item: OutboxItem, delivered: Bool, nextAttemptAtMs: Int64, lastError: String?) async throws {
        try await pool.write { s in
            // Only the payload that was tried: owed again meanwhile with another payload, the item stays as it is now.
            if delivered {
                try s.execute("DELETE FROM outbox WHERE id = \(item.id) AND payload = \(item.payload)")
            } else {
                try s.execute(
                    """
                    UPDATE outbox SET attempts = attempts + 1, next_attempt_at_ms = \(nextAttemptAtMs), last_error = \(lastError)
                    WHERE id = \(item.id) AND payload = \(item.payload)
                    """)
            }
        }
    }

    public func outbox(limit: Int) async throws -> (items: [OutboxItem], total: Int, oldestCreatedAtMs: Int64?) {
        try await pool.read { s in
            let items = try s.query("SELECT * FROM outbox ORDER BY created_at_ms, id LIMIT \(limit)").map(Self.outboxItem)
            let summary = try s.query("SELECT COUNT(*) AS total, MIN(created_at_ms) AS oldest FROM outbox").first
            return (items, Int(try summary?.get("total", as: Int64.self) ?? 0), try summary?.get("oldest", as: Int64?.self))
        }
    }

    static func outboxItem(_ row: PostgresRandomAccessRow) throws -> OutboxItem {
        OutboxItem(
            id: try row.get("id"), kind: try row.get("kind"), key: try row.get("item_key"), payload: try row.get("payload"),
            attempts: Int(try row.get("attempts", as: Int64.self)), createdAtMs: try row.get("created_at_ms"),
            nextAttemptAtMs: try row.get("next_attempt_at_ms"), lastError: try row.get("last_error"))
    }

    // MARK: the administrators' audit log

    public func recordAudit(action: String, accountId: String?, transactionId: String?, reason: String, credential: String, nowMs: Int64)
        async throws
    {
        try await pool.write { s in
            try s.execute(
                """
                INSERT INTO admin_audit (at_ms, action, account_id, transaction_id, reason, credential)
                VALUES (\(nowMs), \(action), \(accountId), \(transactionId), \(reason), \(credential))
                """)
        }
    }

    public func audit(limit: Int) async throws -> [AuditEntry] {
        try await pool.read { s in
            try s.query("SELECT * FROM admin_audit ORDER BY id DESC LIMIT \(limit)").map {
                AuditEntry(
                    id: try $0.get("id"), atMs: try $0.get("at_ms"), action: try $0.get("action"), accountId: try $0.get("account_id"),
                    transactionId: try $0.get("transaction_id"), reason: try $0.get("reason"), credential: try $0.get("credential"))
            }
        }
    }

    // MARK: writes: the grant rules over this database

    public func apply(
        _ planned: [PlannedPurchase], accountId: String, appAccountToken: String?, recordTies: Bool, mode: FulfillmentMode,
        policy: OwnershipPolicy, answerScope: AccountScope = .production, nowMs: Int64
    ) async throws -> AppliedPurchases {
        try await pool.write(locking: ["fulfillment:account:" + accountId]) { s in
            try GrantRules.apply(
                planned, accountId: accountId, appAccountToken: appAccountToken, recordTies: recordTies, mode: mode, policy: policy,
                answerScope: answerScope, nowMs: nowMs, in: PostgresFulfillmentTransaction(s))
        }
    }

    public func revoke(transactionId: String, reason: String, nowMs: Int64) async throws -> RevokeOutcome {
        try await pool.write { s in
            let tx = PostgresFulfillmentTransaction(s)
            guard try tx.processed(transactionId) != nil else { return .notFound }
            return try GrantRules.revoke(transactionId, reason: reason, nowMs: nowMs, in: tx) ? .revoked : .alreadyRevoked
        }
    }

    public func reinstate(transactionId: String, nowMs: Int64) async throws -> Bool {
        try await pool.write { s in try GrantRules.reinstate(transactionId, nowMs: nowMs, in: PostgresFulfillmentTransaction(s)) }
    }

    public func recordEarlyRevocation(transactionId: String, reason: String, nowMs: Int64) async throws {
        try await pool.write { s in
            try s.execute(
                """
                INSERT INTO early_revocation (transaction_id, reason, recorded_at_ms) VALUES (\(transactionId), \(reason), \(nowMs))
                ON CONFLICT (transaction_id) DO NOTHING
                """)
        }
    }

    public func recordRenewal(_ state: RenewalState) async throws -> Bool {
        try await pool.write { s in
            let kept = try s.one(
                "SELECT signed_date_ms FROM subscription_renewal WHERE original_transaction_id = \(state.originalTransactionId)"
            )?.get("signed_date_ms", as: Int64.self)
            if let kept, kept > state.signedDateMs { return false }
            try s.execute(
                """
                INSERT INTO subscription_renewal (original_transaction_id, auto_renew, auto_renew_product_id, in_billing_retry,
                    grace_period_expires_at_ms, expiration_intent, price_increase_status, signed_date_ms)
                VALUES (\(state.originalTransactionId), \(state.autoRenew), \(state.autoRenewProductId), \(state.inBillingRetry),
                    \(state.gracePeriodExpiresAtMs), \(state.expirationIntent.map(Int64.init)), \(state.priceIncreaseStatus.map(Int64.init)),
                    \(state.signedDateMs))
                ON CONFLICT (original_transaction_id) DO UPDATE SET auto_renew = excluded.auto_renew,
                    auto_renew_product_id = excluded.auto_renew_product_id, in_billing_retry = excluded.in_billing_retry,
                    grace_period_expires_at_ms = excluded.grace_period_expires_at_ms, expiration_intent = excluded.expiration_intent,
                    price_increase_status = excluded.price_increase_status, signed_date_ms = excluded.signed_date_ms
                """)
            return true
        }
    }

    static func renewal(_ original: String, _ s: PostgresSession) throws -> RenewalState? {
        try s.one("SELECT * FROM subscription_renewal WHERE original_transaction_id = \(original)").map {
            RenewalState(
                originalTransactionId: try $0.get("original_transaction_id"), autoRenew: try $0.get("auto_renew"),
                autoRenewProductId: try $0.get("auto_renew_product_id"), inBillingRetry: try $0.get("in_billing_retry"),
                gracePeriodExpiresAtMs: try $0.get("grace_period_expires_at_ms"),
                expirationIntent: try $0.get("expiration_intent", as: Int64?.self).map(Int.init),
                priceIncreaseStatus: try $0.get("price_increase_status", as: Int64?.self).map(Int.init),
                signedDateMs: try $0.get("signed_date_ms"))
        }
    }

    public func extendEntitlement(originalTransactionId: String, expiresAtMs: Int64) async throws -> Bool {
        try await pool.write { s in
            try GrantRules.extendRenewal(original: originalTransactionId, expiresAtMs: expiresAtMs, in: PostgresFulfillmentTransaction(s))
        }
    }

    public func spend(
        accountId: String, scope: AccountScope = .production, amount: Int64, idempotencyKey: String, memo: String?,
        nowMs: Int64
    ) async throws -> SpendOutcome {
        try await pool.write(locking: ["fulfillment:account:" + accountId]) { s in
            try GrantRules.spend(
                Holder(accountId: accountId, scope: scope), amount: amount, idempotencyKey: idempotencyKey, memo: memo,
                nowMs: nowMs, in: PostgresFulfillmentTransaction(s))
        }
    }

    // MARK: reconciliation

    public func reconcileCheckpoint(environment: String) async throws -> Int64? {
        try await pool.read { s in
            try s.one("SELECT signed_date_ms FROM reconcile_checkpoint WHERE environment = \(environment)")?.get("signed_date_ms")
        }
    }

    public func saveReconcileCheckpoint(environment: String, signedDateMs: Int64) async throws {
        try await pool.write { s in
            try s.execute(
                """
                INSERT INTO reconcile_checkpoint (environment, signed_date_ms) VALUES (\(environment), \(signedDateMs))
                ON CONFLICT (environment) DO UPDATE SET signed_date_ms = excluded.signed_date_ms
                """)
        }
    }

    public func subscriptionsToCheck(nowMs: Int64, limit: Int) async throws -> [String] {
        let since = nowMs - 60 * 86_400_000
        return try await pool.read { s in
            try s.query(
                """
                SELECT e.original_transaction_id FROM entitlement e
                LEFT JOIN subscription_renewal r ON r.original_transaction_id = e.original_transaction_id
                WHERE e.revoked_at_ms IS NULL AND e.expires_at_ms IS NOT NULL
                  AND EXISTS (SELECT 1 FROM processed_transaction p
                              WHERE p.original_transaction_id = e.original_transaction_id AND p.grant_kind = 'subscription')
                  AND ((e.expires_at_ms <= \(nowMs) AND e.expires_at_ms > \(since) AND COALESCE(r.expiration_intent, 0) = 0
                        AND COALESCE(r.auto_renew, TRUE))
                       OR r.in_billing_retry)
                ORDER BY e.expires_at_ms LIMIT \(limit)
                """
            ).map { try $0.get("original_transaction_id") }
        }
    }

    // MARK: reads

    public func processed(transactionId: String) async throws -> ProcessedTransaction? {
        try await pool.read { s in try PostgresFulfillmentTransaction(s).processed(transactionId) }
    }

    /// Always false: the table of notifications applied before the inbox existed belongs to SQLite databases of v1.
    public func notificationWasApplied(_ uuid: String) async throws -> Bool { false }

    public func owner(originalTransactionId: String) async throws -> Holder? {
        try await pool.read { s in try PostgresFulfillmentTransaction(s).owner(original: originalTransactionId) }
    }

    public func subscriptionHistory(accountId: String, scope: AccountScope, nowMs: Int64) async throws -> [SubscriptionHistoryRecord] {
        try await pool.read { s in
            let tx = PostgresFulfillmentTransaction(s)
            return try tx.entitlements(Holder(accountId: accountId, scope: scope), activeAtMs: nil).filter { $0.expiresAtMs != nil }.map {
                record in
                let paid = try s.query(
                    """
                    SELECT product_id, revoked_at_ms FROM processed_transaction
                    WHERE environment = \(record.environment) AND original_transaction_id = \(record.originalTransactionId)
                    """)
                let renewal = try Self.renewal(record.originalTransactionId, s)
                return SubscriptionHistoryRecord(
                    originalTransactionId: record.originalTransactionId,
                    productIds: Set(try paid.map { try $0.get("product_id", as: String.self) }).union([record.productId]),
                    active: GrantRules.isActive(record, renewal: renewal, nowMs: nowMs),
                    periodsPaid: try paid.filter { try $0.get("revoked_at_ms", as: Int64?.self) == nil }.count)
            }
        }
    }

    public func customerTransactionId(accountId: String) async throws -> String? {
        try await pool.read { s in
            try s.query(
                """
                SELECT id FROM (
                    (SELECT original_transaction_id AS id, 0 AS kind, starts_at_ms AS at FROM entitlement
                     WHERE account_id = \(accountId) AND scope = 'Production' AND environment = 'Production'
                     ORDER BY starts_at_ms, original_transaction_id LIMIT 1)
                    UNION ALL (SELECT transaction_id, 1, id FROM ledger
                     WHERE account_id = \(accountId) AND scope = 'Production' AND environment = 'Production' AND kind = 'grant'
                     ORDER BY id LIMIT 1)
                ) AS held ORDER BY kind, at, id LIMIT 1
                """
            ).first.map { try $0.get("id", as: String.self) }
        }
    }

    public func balance(accountId: String, scope: AccountScope = .production) async throws -> Wallet {
        try await pool.read { s in try PostgresFulfillmentTransaction(s).wallet(Holder(accountId: accountId, scope: scope)) }
    }

    public func entitlements(accountId: String, scope: AccountScope = .production, nowMs: Int64) async throws
        -> (entitlements: [Entitlement], balance: Int64, owed: Int64)
    {
        try await pool.read { s in
            let tx = PostgresFulfillmentTransaction(s)
            let holder = Holder(accountId: accountId, scope: scope)
            let wallet = try tx.wallet(holder)
            var renewals: [String: RenewalState] = [:]
            var current: [EntitlementRecord] = []
            for record in try tx.entitlements(holder, activeAtMs: nil) {
                let renewal = record.expiresAtMs == nil ? nil : try Self.renewal(record.originalTransactionId, s)
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

    public func ledger(accountId: String, scope: AccountScope = .production, after: Int64, limit: Int) async throws
        -> (entries: [LedgerEntry], next: Int64?)
    {
        try await pool.read { s in
            let rows = try s.query(
                """
                SELECT id, delta, balance, kind, transaction_id, memo, debt, recovered, owed, created_at_ms FROM ledger
                WHERE account_id = \(accountId) AND scope = \(scope.rawValue) AND id > \(after) ORDER BY id LIMIT \(limit + 1)
                """)
            let entries = try rows.prefix(limit).map { row -> LedgerEntry in
                var e = LedgerEntry(
                    id: try row.get("id"), delta: try row.get("delta"), balance: try row.get("balance"),
                    kind: LedgerKind(rawValue: try row.get("kind")) ?? .grant, transactionId: try row.get("transaction_id"),
                    memo: try row.get("memo"), createdAtMs: try row.get("created_at_ms"))
                let debt: Int64 = try row.get("debt"), recovered: Int64 = try row.get("recovered"), owed: Int64 = try row.get("owed")
                if debt > 0 { e.shortfall = debt }
                if recovered > 0 { e.recovered = recovered }
                if owed > 0 || debt > 0 || recovered > 0 { e.owed = owed }
                return e
            }
            return (entries, rows.count > limit ? entries.last?.id : nil)
        }
    }

    // MARK: invariants

    /// A server setting as this store's connections see it (`SHOW name`).
    package func setting(_ name: String) async throws -> String? {
        try await pool.read { s in try s.one(PostgresQuery(unsafeSQL: "SHOW \(name)"))?[0].decode(String.self, context: .default) }
    }

    /// The first column of the first row of `sql`, a count (tests' questions about what was recorded).
    package func count(_ sql: String) async throws -> Int {
        // As a bigint: PostgreSQL's SUM of bigints is a numeric.
        try await pool.read { s in
            try s.one(PostgresQuery(unsafeSQL: "SELECT (\(sql))::bigint")).map { try $0[0].decode(Int?.self, context: .default) ?? 0 } ?? 0
        }
    }

    public func duplicateLedgerEffects() async throws -> [String] {
        try await pool.read { s in
            var last: [String: String] = [:]
            var bad: [String] = []
            for row in try s.query("SELECT transaction_id, kind FROM ledger WHERE kind IN ('reversal', 'reinstatement') ORDER BY id") {
                let id: String = try row.get("transaction_id"), kind: String = try row.get("kind")
                let expected = last[id] == "reversal" ? "reinstatement" : "reversal"
                if kind != expected { bad.append("\(id): \(kind) after \(last[id] ?? "nothing")") }
                last[id] = kind
            }
            return bad
        }
    }

    public func ledgerMismatches() async throws -> [String] {
        try await pool.read { s in
            try s.query(
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

/// `FulfillmentTransaction` over one PostgreSQL transaction: the statements of `SQLiteFulfillmentTransaction`,
/// in PostgreSQL's dialect.
struct PostgresFulfillmentTransaction: FulfillmentTransaction {
    let s: PostgresSession

    init(_ session: PostgresSession) { self.s = session }

    func enqueueOutbox(kind: OutboxKind, key: String, payload: String, nowMs: Int64) throws {
        try s.execute(
            """
            INSERT INTO outbox (kind, item_key, payload, attempts, created_at_ms, next_attempt_at_ms, last_error)
            VALUES (\(kind.rawValue), \(key), \(payload), 0, \(nowMs), \(nowMs), NULL)
            ON CONFLICT (kind, item_key) DO UPDATE SET payload = excluded.payload, attempts = 0,
                created_at_ms = excluded.created_at_ms, next_attempt_at_ms = excluded.next_attempt_at_ms, last_error = NULL
            """)
    }

    func owner(original: String) throws -> Holder? {
        try s.one("SELECT account_id, scope FROM ownership WHERE original_transaction_id = \(original)").map(Self.holder)
    }

    func bind(_ p: VerifiedPurchase, to holder: Holder, nowMs: Int64) throws {
        try s.execute(
            """
            INSERT INTO ownership (environment, original_transaction_id, account_id, scope, product_id, bound_at_ms)
            VALUES (\(p.environment), \(p.originalTransactionId), \(holder.accountId), \(holder.scope.rawValue), \(p.productId), \(nowMs))
            """)
    }

    func transfer(_ p: VerifiedPurchase, from accountId: String, to holder: Holder, nowMs: Int64) throws {
        try s.execute(
            """
            UPDATE ownership SET account_id = \(holder.accountId), scope = \(holder.scope.rawValue), bound_at_ms = \(nowMs)
            WHERE original_transaction_id = \(p.originalTransactionId)
            """)
        try s.execute(
            """
            UPDATE entitlement SET account_id = \(holder.accountId), scope = \(holder.scope.rawValue)
            WHERE original_transaction_id = \(p.originalTransactionId)
            """)
        try s.execute(
            """
            INSERT INTO ownership_transfer (environment, original_transaction_id, from_account_id, to_account_id, transferred_at_ms)
            VALUES (\(p.environment), \(p.originalTransactionId), \(accountId), \(holder.accountId), \(nowMs))
            """)
    }

    func processed(_ transactionId: String) throws -> ProcessedTransaction? {
        try s.one(
            """
            SELECT environment, account_id, scope, original_transaction_id, product_id, grant_kind, coins_granted, revoked_at_ms
            FROM processed_transaction WHERE transaction_id = \(transactionId)
            """
        ).map {
            ProcessedTransaction(
                environment: try $0.get("environment"), holder: try Self.holder($0),
                originalTransactionId: try $0.get("original_transaction_id"), productId: try $0.get("product_id"),
                grantKind: try $0.get("grant_kind"), coinsGranted: try $0.get("coins_granted"), revokedAtMs: try $0.get("revoked_at_ms"))
        }
    }

    func recordProcessed(_ p: VerifiedPurchase, holder: Holder, grantKind: String, coins: Int64, nowMs: Int64) throws {
        try s.execute(
            """
            INSERT INTO processed_transaction (environment, transaction_id, original_transaction_id, account_id, scope, product_id,
                grant_kind, coins_granted, purchase_date_ms, expires_date_ms, processed_at_ms)
            VALUES (\(p.environment), \(p.transactionId), \(p.originalTransactionId), \(holder.accountId), \(holder.scope.rawValue),
                \(p.productId), \(grantKind), \(coins), \(p.purchaseDateMs), \(p.expiresDateMs), \(nowMs))
            """)
    }

    func markRevoked(_ transactionId: String, reason: String, nowMs: Int64) throws {
        try s.execute(
            "UPDATE processed_transaction SET revoked_at_ms = \(nowMs), revoke_reason = \(reason) WHERE transaction_id = \(transactionId)")
    }

    func markReinstated(_ transactionId: String) throws {
        try s.execute("UPDATE processed_transaction SET revoked_at_ms = NULL, revoke_reason = NULL WHERE transaction_id = \(transactionId)")
    }

    func earlyRevocation(_ transactionId: String) throws -> String? {
        try s.one("SELECT reason FROM early_revocation WHERE transaction_id = \(transactionId)")?.get("reason")
    }

    func forgetEarlyRevocation(_ transactionId: String) throws {
        try s.execute("DELETE FROM early_revocation WHERE transaction_id = \(transactionId)")
    }

    func lastReversalDebt(_ transactionId: String) throws -> Int64? {
        try s.one("SELECT debt FROM ledger WHERE transaction_id = \(transactionId) AND kind = 'reversal' ORDER BY id DESC LIMIT 1")?
            .get("debt")
    }

    private static let entitlementColumns =
        "environment, original_transaction_id, account_id, scope, entitlement, product_id, starts_at_ms, expires_at_ms, revoked_at_ms"

    func entitlement(original: String) throws -> EntitlementRecord? {
        try s.one("SELECT \(unescaped: Self.entitlementColumns) FROM entitlement WHERE original_transaction_id = \(original)")
            .map(Self.entitlementRecord)
    }

    func insertEntitlement(_ e: EntitlementRecord) throws {
        try s.execute(
            """
            INSERT INTO entitlement (\(unescaped: Self.entitlementColumns))
            VALUES (\(e.environment), \(e.originalTransactionId), \(e.holder.accountId), \(e.holder.scope.rawValue), \(e.entitlement),
                \(e.productId), \(e.startsAtMs), \(e.expiresAtMs), \(e.revokedAtMs))
            """)
    }

    func updateEntitlement(_ e: EntitlementRecord) throws {
        try s.execute(
            """
            UPDATE entitlement SET entitlement = \(e.entitlement), product_id = \(e.productId), starts_at_ms = \(e.startsAtMs),
                expires_at_ms = \(e.expiresAtMs), revoked_at_ms = \(e.revokedAtMs)
            WHERE original_transaction_id = \(e.originalTransactionId)
            """)
    }

    func entitlements(_ holder: Holder, activeAtMs: Int64?) throws -> [EntitlementRecord] {
        let rows: [PostgresRandomAccessRow]
        if let activeAtMs {
            rows = try s.query(
                """
                SELECT \(unescaped: Self.entitlementColumns) FROM entitlement
                WHERE account_id = \(holder.accountId) AND scope = \(holder.scope.rawValue) AND revoked_at_ms IS NULL
                  AND (expires_at_ms IS NULL OR expires_at_ms > \(activeAtMs))
                """)
        } else {
            rows = try s.query(
                """
                SELECT \(unescaped: Self.entitlementColumns) FROM entitlement
                WHERE account_id = \(holder.accountId) AND scope = \(holder.scope.rawValue) AND revoked_at_ms IS NULL
                """)
        }
        return try rows.map(Self.entitlementRecord)
    }

    func wallet(_ holder: Holder) throws -> Wallet {
        try s.one("SELECT balance, owed FROM wallet WHERE account_id = \(holder.accountId) AND scope = \(holder.scope.rawValue)").map {
            Wallet(balance: try $0.get("balance"), owed: try $0.get("owed"))
        } ?? Wallet()
    }

    func append(_ row: LedgerRow) throws {
        try s.execute(
            """
            INSERT INTO wallet (account_id, scope, balance, owed) VALUES (\(row.holder.accountId), \(row.holder.scope.rawValue),
                \(row.balance), \(row.owed))
            ON CONFLICT (account_id, scope) DO UPDATE SET balance = excluded.balance, owed = excluded.owed
            """)
        try s.execute(
            """
            INSERT INTO ledger (account_id, scope, delta, balance, kind, environment, transaction_id, idempotency_key, memo,
                debt, recovered, owed, created_at_ms)
            VALUES (\(row.holder.accountId), \(row.holder.scope.rawValue), \(row.delta), \(row.balance), \(row.kind.rawValue),
                \(row.environment), \(row.transactionId), \(row.idempotencyKey), \(row.memo), \(row.debt), \(row.recovered),
                \(row.owed), \(row.createdAtMs))
            """)
    }

    func spend(_ holder: Holder, idempotencyKey: String) throws -> RecordedSpend? {
        try s.one(
            """
            SELECT delta, balance, memo FROM ledger
            WHERE account_id = \(holder.accountId) AND scope = \(holder.scope.rawValue) AND idempotency_key = \(idempotencyKey)
            """
        ).map { RecordedSpend(delta: try $0.get("delta"), balance: try $0.get("balance"), memo: try $0.get("memo")) }
    }

    private static func holder(_ row: PostgresRandomAccessRow) throws -> Holder {
        let raw: String = try row.get("scope")
        // The schema admits only the two scopes: anything else is a damaged row, never Production.
        guard let scope = AccountScope(rawValue: raw) else { throw StoredValueInvalid(column: "scope", value: raw) }
        return Holder(accountId: try row.get("account_id"), scope: scope)
    }

    private static func entitlementRecord(_ row: PostgresRandomAccessRow) throws -> EntitlementRecord {
        EntitlementRecord(
            environment: try row.get("environment"), originalTransactionId: try row.get("original_transaction_id"),
            holder: try holder(row), entitlement: try row.get("entitlement"), productId: try row.get("product_id"),
            startsAtMs: try row.get("starts_at_ms"), expiresAtMs: try row.get("expires_at_ms"), revokedAtMs: try row.get("revoked_at_ms"))
    }
}
