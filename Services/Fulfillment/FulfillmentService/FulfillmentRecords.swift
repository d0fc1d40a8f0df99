import IAPProtocol
import PostgresSupport

/// `FulfillmentTransaction` in SQL, written once for both engines: every statement the grant rules need inside one
/// transaction, and nothing else. The engine supplies the session (`FulfillmentStore` on SQLite,
/// `PostgresFulfillmentStore` on PostgreSQL) and has already begun the transaction.
struct FulfillmentRecords: FulfillmentTransaction {
    let s: any SQLSession
    /// Whose active entitlements (at `answerAtMs`) the transaction will answer with: read by `stored` in its one statement
    /// with the account's last event sequence, for a body that must read only once (`FulfillmentDatabase.writeAfterOneRead`;
    /// its attempts in a transaction, after a conflict, read the same way).
    let answer: Holder?
    let answerAtMs: Int64

    init(_ session: any SQLSession, answering answer: Holder? = nil, atMs: Int64 = 0) {
        self.s = session
        self.answer = answer
        self.answerAtMs = atMs
    }

    func enqueueOutbox(kind: OutboxKind, key: String, payload: String, nowMs: Int64) throws {
        try s.later(
            """
            INSERT INTO outbox (kind, item_key, payload, attempts, created_at_ms, next_attempt_at_ms, last_error)
            VALUES (?1, ?2, ?3, 0, ?4, ?4, NULL)
            ON CONFLICT (kind, item_key) DO UPDATE SET payload = excluded.payload, attempts = 0,
                created_at_ms = excluded.created_at_ms, next_attempt_at_ms = excluded.next_attempt_at_ms, last_error = NULL
            """, kind.rawValue, key, payload, nowMs)
    }

    func appendEvent(_ event: FulfillmentEvent) throws { try EventRecords(s).append(event) }

    func rememberPlayPackage(purchaseToken: String, packageName: String) throws {
        try s.later(
            "INSERT INTO play_package (purchase_token, package_name) VALUES (?1, ?2) ON CONFLICT DO NOTHING", purchaseToken, packageName)
    }

    /// The purchase's original's owner, its own processed row and an early revocation, in one read, with the wallets of
    /// `accountId` in both scopes remembered for the rules' next steps (`SQLSession.wallets`).
    func stored(_ p: VerifiedPurchase, accountId: String) throws -> StoredPurchase {
        let arguments: [SQLValue] = [
            .text(p.originalTransactionId), .text(p.transactionId), .text(accountId), .text(AccountScope.production.rawValue),
            .text(AccountScope.sandbox.rawValue),
        ]
        let row: SQLRow?
        if let answer, answer.accountId == accountId, let memo = s.wallets {
            // The same row first, then the answer's entitlements, one row each (columns named as `entitlementRecord` reads).
            let rows = try s.fetch(
                """
                SELECT 0 AS row_kind, \(Self.storedColumns), (SELECT MAX(v.sequence) FROM event v WHERE v.account_id = ?3) AS last_sequence,
                    NULL AS entitlement, NULL AS starts_at_ms, NULL AS expires_at_ms
                \(Self.storedJoins)
                UNION ALL
                SELECT 1, NULL, NULL, x.environment, x.account_id, x.scope, x.original_transaction_id, x.product_id, NULL, NULL,
                    x.revoked_at_ms, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, x.entitlement, x.starts_at_ms, x.expires_at_ms
                FROM entitlement x
                WHERE x.account_id = ?3 AND x.scope = ?6 AND x.revoked_at_ms IS NULL AND (x.expires_at_ms IS NULL OR x.expires_at_ms > ?7)
                ORDER BY row_kind
                """, arguments: arguments + [.text(answer.scope.rawValue), .int(answerAtMs)])
            row = rows.first
            if let row {
                memo.sequences[accountId] = try row.get("last_sequence", as: Int64?.self) ?? 0
                memo.entitlements[answer] = (answerAtMs, try rows.dropFirst().map(Self.entitlementRecord))
            }
        } else {
            row = try s.fetch("SELECT \(Self.storedColumns) \(Self.storedJoins)", arguments: arguments).first
        }
        guard let row else { throw StoredValueInvalid(column: "stored", value: "(no row)") }
        for scope in AccountScope.allCases {
            let prefix = scope == .production ? "production" : "sandbox"
            s.wallets?.known[Holder(accountId: accountId, scope: scope)] = Wallet(
                balance: try row.get("\(prefix)_balance", as: Int64?.self) ?? 0, owed: try row.get("\(prefix)_owed", as: Int64?.self) ?? 0)
        }
        var owner: Holder?
        if let ownerAccount = try row.get("owner_account_id", as: String?.self) {
            let raw: String = try row.get("owner_scope")
            guard let scope = AccountScope(rawValue: raw) else { throw StoredValueInvalid(column: "scope", value: raw) }
            owner = Holder(accountId: ownerAccount, scope: scope)
        }
        let processed: ProcessedTransaction? =
            try row.get("environment", as: String?.self) == nil ? nil : try Self.processedTransaction(row)
        return StoredPurchase(
            owner: owner, processed: processed, earlyRevocation: try row.get("early_reason"),
            claimed: try row.get("claim_id", as: String?.self) != nil, standsSignedMs: try row.get("stands_signed_ms"))
    }

    private static let storedColumns = """
        o.account_id AS owner_account_id, o.scope AS owner_scope, p.environment, p.account_id, p.scope,
            p.original_transaction_id, p.product_id, p.grant_kind, p.coins_granted, p.revoked_at_ms, p.revoke_reason, p.expires_date_ms,
            ss.stands_signed_ms,
            e.reason AS early_reason,
            wp.balance AS production_balance, wp.owed AS production_owed, ws.balance AS sandbox_balance, ws.owed AS sandbox_owed,
            c.transaction_id AS claim_id
        """
    private static let storedJoins = """
        FROM (SELECT 1 AS one) AS one
        LEFT JOIN ownership o ON o.original_transaction_id = ?1
        LEFT JOIN processed_transaction p ON p.transaction_id = ?2
        LEFT JOIN early_revocation e ON e.transaction_id = ?2
        LEFT JOIN signed_standing ss ON ss.transaction_id = ?2
        LEFT JOIN transaction_claim c ON c.transaction_id = ?2
        LEFT JOIN wallet wp ON wp.account_id = ?3 AND wp.scope = ?4
        LEFT JOIN wallet ws ON ws.account_id = ?3 AND ws.scope = ?5
        """

    func owner(original: String) throws -> Holder? {
        try s.row("SELECT account_id, scope FROM ownership WHERE original_transaction_id = ?1", original).map(Self.holder)
    }

    func bind(_ p: VerifiedPurchase, to holder: Holder, nowMs: Int64) throws {
        try s.later(
            """
            INSERT INTO ownership (environment, original_transaction_id, account_id, scope, product_id, bound_at_ms)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6)
            """, p.environment, p.originalTransactionId, holder.accountId, holder.scope.rawValue, p.productId, nowMs)
    }

    func transfer(_ p: VerifiedPurchase, from accountId: String, to holder: Holder, nowMs: Int64) throws {
        try s.later(
            "UPDATE ownership SET account_id = ?1, scope = ?2, bound_at_ms = ?3 WHERE original_transaction_id = ?4",
            holder.accountId, holder.scope.rawValue, nowMs, p.originalTransactionId)
        s.wallets?.entitlements = [:]
        try s.later(
            "UPDATE entitlement SET account_id = ?1, scope = ?2 WHERE original_transaction_id = ?3",
            holder.accountId, holder.scope.rawValue, p.originalTransactionId)
        // Its transactions too: a later refund or reinstatement is about the account that holds the purchase now.
        try s.later(
            "UPDATE processed_transaction SET account_id = ?1, scope = ?2 WHERE environment = ?3 AND original_transaction_id = ?4",
            holder.accountId, holder.scope.rawValue, p.environment, p.originalTransactionId)
        try s.later(
            """
            INSERT INTO ownership_transfer (environment, original_transaction_id, from_account_id, to_account_id, transferred_at_ms)
            VALUES (?1, ?2, ?3, ?4, ?5)
            """, p.environment, p.originalTransactionId, accountId, holder.accountId, nowMs)
    }

    func processed(_ transactionId: String) throws -> ProcessedTransaction? {
        try s.row(
            """
            SELECT environment, account_id, scope, original_transaction_id, product_id, grant_kind, coins_granted, revoked_at_ms,
                revoke_reason, expires_date_ms
            FROM processed_transaction WHERE transaction_id = ?1
            """, transactionId
        ).map(Self.processedTransaction)
    }

    /// A `processed_transaction` row, every column `ProcessedTransaction` has (the redeem's combined read's too).
    static func processedTransaction(_ row: SQLRow) throws -> ProcessedTransaction {
        ProcessedTransaction(
            environment: try row.get("environment"), holder: try holder(row),
            originalTransactionId: try row.get("original_transaction_id"), productId: try row.get("product_id"),
            grantKind: try row.get("grant_kind"), coinsGranted: try row.get("coins_granted"), revokedAtMs: try row.get("revoked_at_ms"),
            revokeReason: try row.get("revoke_reason"), expiresDateMs: try row.get("expires_date_ms"))
    }

    func laterPeriodHeld(environment: String, original: String, than transactionId: String, endsAtMs: Int64, revoked: Bool) throws -> Bool {
        // Until 2026-11-30 by expiry alone: after an upgrade from a yearly plan to a monthly one the replaced yearly period
        // held every monthly refund back (access kept for free), and a refund of the yearly one took the monthly access.
        let later =
            revoked
            ? """
            (t.purchase_date_ms > r.purchase_date_ms OR (t.purchase_date_ms = r.purchase_date_ms AND t.expires_date_ms >= ?2)
                OR COALESCE(t.revoke_reason, 'refunded') NOT IN ('refunded', 'revoked'))
            """
            : """
            ((t.purchase_date_ms > r.purchase_date_ms AND t.expires_date_ms != ?2)
                OR (t.purchase_date_ms = r.purchase_date_ms AND t.expires_date_ms > ?2))
            """
        return try s.row(
            """
            SELECT 1 AS held FROM processed_transaction t JOIN processed_transaction r ON r.transaction_id = ?3
            WHERE t.environment = ?4 AND t.original_transaction_id = ?1 AND t.transaction_id != ?3
                AND t.revoked_at_ms IS \(revoked ? "NOT NULL" : "NULL") AND t.expires_date_ms IS NOT NULL AND \(later)
            LIMIT 1
            """, original, endsAtMs, transactionId, environment) != nil
    }

    func laterPurchaseHeld(environment: String, original: String, afterMs: Int64, other transactionId: String) throws -> Bool {
        try s.row(
            """
            SELECT 1 AS held FROM processed_transaction
            WHERE environment = ?4 AND original_transaction_id = ?1 AND transaction_id != ?3 AND revoked_at_ms IS NULL
                AND purchase_date_ms > ?2
            LIMIT 1
            """, original, afterMs, transactionId, environment) != nil
    }

    func recordProcessed(_ p: VerifiedPurchase, holder: Holder, grantKind: String, coins: Int64, nowMs: Int64) throws {
        try s.later(
            """
            INSERT INTO processed_transaction (environment, transaction_id, original_transaction_id, account_id, scope, product_id,
                grant_kind, coins_granted, purchase_date_ms, expires_date_ms, processed_at_ms, price, currency, offer_identifier, units)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
            """, p.environment, p.transactionId, p.originalTransactionId, holder.accountId, holder.scope.rawValue, p.productId,
            grantKind, coins, p.purchaseDateMs, p.expiresDateMs, nowMs, p.price, p.currency, p.offerIdentifier,
            p.play?.purchasedQuantity != nil ? p.quantity : nil)
    }

    /// A plain INSERT: on PostgreSQL it meets another writer's committed or in-flight claim whatever this transaction's
    /// snapshot (unlike a read), and fails (23505), so the attempt runs again.
    func claim(_ transactionId: String) throws {
        try s.later("INSERT INTO transaction_claim (transaction_id) VALUES (?1)", transactionId)
    }

    func earlyRevocation(_ transactionId: String) throws -> String? {
        try s.value("SELECT reason FROM early_revocation WHERE transaction_id = ?1", transactionId)
    }

    func earlyRefundShare(_ transactionId: String) throws -> Int64? {
        try s.value("SELECT refund_share_milli FROM early_revocation WHERE transaction_id = ?1", transactionId)
    }

    /// Never sent alone (`run`: an attempt without a transaction runs again in one): at REPEATABLE READ or SERIALIZABLE,
    /// removing a row another transaction removed meanwhile fails (40001), which is what keeps a redeem and a refund
    /// reversal about one early refund from both deciding on it.
    func forgetEarlyRevocation(_ transactionId: String) throws {
        try s.run("DELETE FROM early_revocation WHERE transaction_id = ?1", transactionId)
        try s.later(
            """
            DELETE FROM transaction_claim WHERE transaction_id = ?1
                AND NOT EXISTS (SELECT 1 FROM processed_transaction p WHERE p.transaction_id = ?1)
            """, transactionId)
    }

    func recordStandsSigned(_ transactionId: String, signedMs: Int64) throws { try recordSigned("stands_signed_ms", transactionId, signedMs) }
    func recordRefundSigned(_ transactionId: String, signedMs: Int64) throws { try recordSigned("refunded_signed_ms", transactionId, signedMs) }

    /// Keeps `column` of the transaction's `signed_standing` row at the latest of the times given.
    private func recordSigned(_ column: String, _ transactionId: String, _ signedMs: Int64) throws {
        try s.later(
            """
            INSERT INTO signed_standing (transaction_id, \(column)) VALUES (?1, ?2)
            ON CONFLICT (transaction_id) DO UPDATE SET \(column) = excluded.\(column)
            WHERE signed_standing.\(column) IS NULL OR signed_standing.\(column) < excluded.\(column)
            """, transactionId, signedMs)
    }

    func standsSignedMs(_ transactionId: String) throws -> Int64? {
        try s.value("SELECT stands_signed_ms FROM signed_standing WHERE transaction_id = ?1", transactionId)
    }

    func refundSignedMs(_ transactionId: String) throws -> Int64? {
        try s.value("SELECT refunded_signed_ms FROM signed_standing WHERE transaction_id = ?1", transactionId)
    }

    func markReinstated(_ transactionId: String) throws {
        try s.later("UPDATE processed_transaction SET revoked_at_ms = NULL, revoke_reason = NULL WHERE transaction_id = ?1", transactionId)
    }

    func reversalDebtSinceReinstatement(_ transactionId: String) throws -> Int64 {
        // CAST: PostgreSQL's SUM of a BIGINT is a NUMERIC.
        try s.value(
            """
            SELECT CAST(COALESCE(SUM(debt), 0) AS BIGINT) FROM ledger WHERE transaction_id = ?1 AND kind = 'reversal'
              AND id > COALESCE((SELECT MAX(id) FROM ledger WHERE transaction_id = ?1 AND kind = 'reinstatement'), 0)
            """, transactionId) ?? 0
    }

    func grantedCoins(_ transactionId: String) throws -> Int64? {
        try s.value("SELECT delta FROM ledger WHERE transaction_id = ?1 AND kind = 'grant' LIMIT 1", transactionId)
    }

    func markRevoked(_ transactionId: String, reason: String, nowMs: Int64) throws {
        try s.later(
            "UPDATE processed_transaction SET revoked_at_ms = ?1, revoke_reason = ?2 WHERE transaction_id = ?3", nowMs, reason,
            transactionId)
    }

    func setCoinsGranted(_ transactionId: String, coins: Int64) throws {
        try s.later("UPDATE processed_transaction SET coins_granted = ?1 WHERE transaction_id = ?2", coins, transactionId)
    }

    func setGrantedUnits(_ transactionId: String, units: Int64) throws {
        try s.later("UPDATE processed_transaction SET units = ?1 WHERE transaction_id = ?2", units, transactionId)
    }

    static let entitlementColumns =
        "environment, original_transaction_id, account_id, scope, entitlement, product_id, starts_at_ms, expires_at_ms, revoked_at_ms"

    func entitlement(original: String) throws -> EntitlementRecord? {
        try s.row("SELECT \(Self.entitlementColumns) FROM entitlement WHERE original_transaction_id = ?1", original)
            .map(Self.entitlementRecord)
    }

    func insertEntitlement(_ e: EntitlementRecord) throws {
        s.wallets?.entitlements = [:]
        try s.later(
            "INSERT INTO entitlement (\(Self.entitlementColumns)) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            e.environment, e.originalTransactionId, e.holder.accountId, e.holder.scope.rawValue, e.entitlement, e.productId,
            e.startsAtMs, e.expiresAtMs, e.revokedAtMs)
    }

    func updateEntitlement(_ e: EntitlementRecord) throws {
        s.wallets?.entitlements = [:]
        try s.later(
            """
            UPDATE entitlement SET entitlement = ?1, product_id = ?2, starts_at_ms = ?3, expires_at_ms = ?4, revoked_at_ms = ?5
            WHERE original_transaction_id = ?6
            """, e.entitlement, e.productId, e.startsAtMs, e.expiresAtMs, e.revokedAtMs, e.originalTransactionId)
    }

    func entitlements(_ holder: Holder, activeAtMs: Int64?) throws -> [EntitlementRecord] {
        if let activeAtMs, let known = s.wallets?.entitlements[holder], known.atMs == activeAtMs { return known.records }
        let all = "SELECT \(Self.entitlementColumns) FROM entitlement WHERE account_id = ?1 AND scope = ?2 AND revoked_at_ms IS NULL"
        guard let activeAtMs else { return try s.rows(all, holder.accountId, holder.scope.rawValue).map(Self.entitlementRecord) }
        return try s.rows(all + " AND (expires_at_ms IS NULL OR expires_at_ms > ?3)", holder.accountId, holder.scope.rawValue, activeAtMs)
            .map(Self.entitlementRecord)
    }

    func wallet(_ holder: Holder) throws -> Wallet {
        if let known = s.wallets?.known[holder] { return known }
        let wallet =
            try s.row("SELECT balance, owed FROM wallet WHERE account_id = ?1 AND scope = ?2", holder.accountId, holder.scope.rawValue)
            .map { Wallet(balance: try $0.get("balance"), owed: try $0.get("owed")) } ?? Wallet()
        s.wallets?.known[holder] = wallet
        return wallet
    }

    func append(_ row: LedgerRow) throws {
        if let guessed = s.wallets?.guessed, guessed == row.holder, let before = s.wallets?.known[row.holder] {
            // On a guess (`WalletMemo.guessed`) the wallet is written only from the state it was decided on.
            try s.later(Self.walletGuarded, row.holder.accountId, row.holder.scope.rawValue, row.balance, row.owed, before.balance, before.owed)
        } else {
            try s.later(Self.walletUpsert, row.holder.accountId, row.holder.scope.rawValue, row.balance, row.owed)
        }
        try s.later(
            """
            INSERT INTO ledger (account_id, scope, delta, balance, kind, environment, transaction_id, idempotency_key, memo,
                debt, recovered, owed, created_at_ms)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
            """, row.holder.accountId, row.holder.scope.rawValue, row.delta, row.balance, row.kind.rawValue, row.environment,
            row.transactionId, row.idempotencyKey, row.memo, row.debt, row.recovered, row.owed, row.createdAtMs)
        s.wallets?.known[row.holder] = Wallet(balance: row.balance, owed: row.owed)
    }

    private static let walletUpsert = """
        INSERT INTO wallet (account_id, scope, balance, owed) VALUES (?1, ?2, ?3, ?4)
        ON CONFLICT (account_id, scope) DO UPDATE SET balance = excluded.balance, owed = excluded.owed
        """
    private static let walletGuarded =
        walletUpsert + " WHERE wallet.balance = ?5 AND wallet.owed = ?6\n" + WriteFunctions.mustWriteARow

    /// The spend made with this key, if any; the holder's wallet is read with it and remembered (`SQLSession.wallets`).
    func spend(_ holder: Holder, idempotencyKey: String) throws -> RecordedSpend? {
        // On a guess the key is taken for new: if it is not, the ledger's unique key refuses the writes.
        if let guessed = s.wallets?.guessed, guessed == holder { return nil }
        guard
            let row = try s.row(
                """
                SELECT l.delta, l.balance, l.memo, w.balance AS wallet_balance, w.owed AS wallet_owed,
                    (SELECT MAX(e.sequence) FROM event e WHERE e.account_id = ?1) AS last_sequence
                FROM (SELECT 1 AS one) AS one
                LEFT JOIN ledger l ON l.account_id = ?1 AND l.scope = ?2 AND l.idempotency_key = ?3
                LEFT JOIN wallet w ON w.account_id = ?1 AND w.scope = ?2
                """, holder.accountId, holder.scope.rawValue, idempotencyKey)
        else { throw StoredValueInvalid(column: "spend", value: "(no row)") }
        s.wallets?.known[holder] = Wallet(
            balance: try row.get("wallet_balance", as: Int64?.self) ?? 0, owed: try row.get("wallet_owed", as: Int64?.self) ?? 0)
        s.wallets?.sequences[holder.accountId] = try row.get("last_sequence", as: Int64?.self) ?? 0
        guard let delta = try row.get("delta", as: Int64?.self) else { return nil }
        return RecordedSpend(delta: delta, balance: try row.get("balance"), memo: try row.get("memo"))
    }

    /// A subscription's renewal state as Apple last signed it.
    func renewal(_ original: String) throws -> RenewalState? {
        try s.row("SELECT * FROM subscription_renewal WHERE original_transaction_id = ?1", original).map {
            RenewalState(
                originalTransactionId: try $0.get("original_transaction_id"), autoRenew: try $0.get("auto_renew"),
                autoRenewProductId: try $0.get("auto_renew_product_id"), inBillingRetry: try $0.get("in_billing_retry"),
                gracePeriodExpiresAtMs: try $0.get("grace_period_expires_at_ms"), expirationIntent: try $0.get("expiration_intent"),
                priceIncreaseStatus: try $0.get("price_increase_status"), signedDateMs: try $0.get("signed_date_ms"))
        }
    }

    /// A stored scope; the schema admits only the two, so anything else is a damaged row, never Production.
    static func holder(_ row: SQLRow) throws -> Holder {
        let raw: String = try row.get("scope")
        guard let scope = AccountScope(rawValue: raw) else { throw StoredValueInvalid(column: "scope", value: raw) }
        return Holder(accountId: try row.get("account_id"), scope: scope)
    }

    static func entitlementRecord(_ row: SQLRow) throws -> EntitlementRecord {
        EntitlementRecord(
            environment: try row.get("environment"), originalTransactionId: try row.get("original_transaction_id"),
            holder: try holder(row), entitlement: try row.get("entitlement"), productId: try row.get("product_id"),
            startsAtMs: try row.get("starts_at_ms"), expiresAtMs: try row.get("expires_at_ms"), revokedAtMs: try row.get("revoked_at_ms"))
    }
}
