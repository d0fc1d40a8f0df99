import Foundation
import GRDB
import IAPProtocol
import JSONRPC
import ServiceSupport

/// The fulfillment database: the only durable record of what was granted. Processed transactions,
/// ownership of original transactions, entitlements, wallets and the append-only coin ledger.
///
/// The rules that protect money are in the schema, not only here: one row per (environment,
/// transactionId); one owner per (environment, originalTransactionId); one grant and one reversal
/// ledger row per transaction; one spend per (account, idempotency key); balances CHECKed >= 0; the
/// ledger refuses UPDATE and DELETE. Every grant commits in the same transaction as the record that
/// its purchase was processed.
public final class FulfillmentStore: FulfillmentStorage, FulfillmentInvariants, Sendable {
    let writer: any DatabaseWriter
    let commits: GroupCommit
    /// Whether `appliedNotification` (v1-v2 databases, never written since) has rows: if not, no delivery can
    /// have been applied before the inbox existed and `notificationWasApplied` answers without a read.
    private let hasNotificationsFromBeforeTheInbox: Bool

    /// Opens (creating if needed) `fulfillment.sqlite` in `directory`: WAL with `synchronous=FULL`, so
    /// a grant acknowledged with `finishable: true` survives a power cut, not only a process crash (in
    /// WAL mode NORMAL may lose the last commits on power loss). It costs one WAL fsync per commit.
    public static func open(directory: URL) throws -> FulfillmentStore {
        var config = Configuration()
        config.foreignKeysEnabled = true
        config.busyMode = .timeout(10)
        // Group commit runs each operation in a savepoint; SQLite keeps what a savepoint would roll back in
        // a statement journal that spills to a temporary FILE past 64 KiB (open, ~2 pwrites per redeem,
        // unlink, per batch). In memory it never touches the disk; it is not needed after a crash (the WAL
        // is the durable record), so nothing is lost by keeping it there.
        config.prepareDatabase { db in try db.execute(sql: "PRAGMA temp_store = MEMORY") }
        let pool = try DatabasePool(
            path: try PrivateFiles.databaseFile(directory.appendingPathComponent("fulfillment.sqlite").path), configuration: config)
        // After GRDB's WAL setup (which sets NORMAL) on the pool's one writing connection.
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        return try FulfillmentStore(writer: pool)
    }

    /// Closes the database: the WAL is checkpointed and removed, so nothing is left needing recovery.
    /// Called once, after the server has drained (a `ClosingService` in the executable's group).
    public func close() throws {
        if let pool = writer as? DatabasePool { try pool.close() } else if let queue = writer as? DatabaseQueue { try queue.close() }
    }

    public init(writer: any DatabaseWriter) throws {
        self.writer = writer
        self.commits = GroupCommit(writer: writer)
        try Self.migrator.migrate(writer)
        self.hasNotificationsFromBeforeTheInbox = try writer.read { db in
            try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM appliedNotification)") ?? false
        }
    }

    // MARK: the outbox (OutboxStorage)

    public func dueOutbox(nowMs: Int64, limit: Int) async throws -> [OutboxItem] {
        try await commits.write { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        UPDATE outbox SET next_attempt_at_ms = ?
                        WHERE id IN (SELECT id FROM outbox WHERE next_attempt_at_ms <= ? ORDER BY next_attempt_at_ms, id LIMIT ?)
                        RETURNING *
                        """), arguments: [nowMs + OutboxRetry.leaseMs, nowMs, limit]
            ).map(Self.outboxItem).sorted { $0.id < $1.id }
        }
    }

    public func settleOutbox(_ item: OutboxItem, delivered: Bool, nextAttemptAtMs: Int64, lastError: String?) async throws {
        try await commits.write { db in
            // Only the payload that was tried: owed again meanwhile with another payload, the item stays as it is now.
            if delivered {
                try db.cachedStatement(sql: "DELETE FROM outbox WHERE id = ? AND payload = ?").execute(arguments: [item.id, item.payload])
            } else {
                try db.cachedStatement(
                    sql: "UPDATE outbox SET attempts = attempts + 1, next_attempt_at_ms = ?, last_error = ? WHERE id = ? AND payload = ?"
                ).execute(arguments: [nextAttemptAtMs, lastError, item.id, item.payload])
            }
        }
    }

    public func outbox(limit: Int) async throws -> (items: [OutboxItem], total: Int, oldestCreatedAtMs: Int64?) {
        try await writer.read { db in
            let items = try Row.fetchAll(db, sql: "SELECT * FROM outbox ORDER BY created_at_ms, id LIMIT ?", arguments: [limit])
                .map(Self.outboxItem)
            let summary = try Row.fetchOne(db, sql: "SELECT COUNT(*) AS total, MIN(created_at_ms) AS oldest FROM outbox")
            return (items, summary?["total"] ?? 0, summary?["oldest"])
        }
    }

    static func outboxItem(_ row: Row) -> OutboxItem {
        OutboxItem(
            id: row["id"], kind: row["kind"], key: row["item_key"], payload: row["payload"], attempts: row["attempts"],
            createdAtMs: row["created_at_ms"], nextAttemptAtMs: row["next_attempt_at_ms"], lastError: row["last_error"])
    }

    // MARK: the administrators' audit log

    public func recordAudit(action: String, accountId: String?, transactionId: String?, reason: String, credential: String, nowMs: Int64)
        async throws
    {
        try await commits.write { db in
            try db.cachedStatement(
                sql: "INSERT INTO adminAudit (atMs, action, accountId, transactionId, reason, credential) VALUES (?, ?, ?, ?, ?, ?)"
            ).execute(arguments: [nowMs, action, accountId, transactionId, reason, credential])
        }
    }

    public func audit(limit: Int) async throws -> [AuditEntry] {
        try await writer.read { db in
            try Row.fetchAll(db.cachedStatement(sql: "SELECT * FROM adminAudit ORDER BY id DESC LIMIT ?"), arguments: [limit]).map {
                AuditEntry(
                    id: $0["id"], atMs: $0["atMs"], action: $0["action"], accountId: $0["accountId"], transactionId: $0["transactionId"],
                    reason: $0["reason"], credential: $0["credential"])
            }
        }
    }

    // MARK: writes: the grant rules over this database

    /// Records and grants every purchase in ONE write transaction (`GrantRules.apply`); the answer is
    /// what was committed, with the balance and entitlements of `answerScope`.
    public func apply(
        _ planned: [PlannedPurchase], accountId: String, appAccountToken: String?, recordTies: Bool, mode: FulfillmentMode,
        policy: OwnershipPolicy, answerScope: AccountScope = .production, nowMs: Int64
    ) async throws -> AppliedPurchases {
        try await commits.write { db in
            try GrantRules.apply(
                planned, accountId: accountId, appAccountToken: appAccountToken, recordTies: recordTies, mode: mode, policy: policy,
                answerScope: answerScope, nowMs: nowMs, in: SQLiteFulfillmentTransaction(db: db))
        }
    }

    /// Revokes one processed transaction, whatever environment it was recorded under (`GrantRules.revoke`).
    public func revoke(transactionId: String, reason: String, nowMs: Int64) async throws -> RevokeOutcome {
        try await commits.write { db in
            let tx = SQLiteFulfillmentTransaction(db: db)
            guard try tx.processed(transactionId) != nil else { return .notFound }
            return try GrantRules.revoke(transactionId, reason: reason, nowMs: nowMs, in: tx) ? .revoked : .alreadyRevoked
        }
    }

    public func processed(transactionId: String) async throws -> ProcessedTransaction? {
        try await writer.read { db in try SQLiteFulfillmentTransaction(db: db).processed(transactionId) }
    }

    public func reconcileCheckpoint(environment: String) async throws -> Int64? {
        try await writer.read { db in
            try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT signedDateMs FROM reconcileCheckpoint WHERE environment = ?"), arguments: [environment])
        }
    }

    public func saveReconcileCheckpoint(environment: String, signedDateMs: Int64) async throws {
        try await commits.write { db in
            try db.cachedStatement(sql: "INSERT OR REPLACE INTO reconcileCheckpoint (environment, signedDateMs) VALUES (?, ?)")
                .execute(arguments: [environment, signedDateMs])
        }
    }

    public func subscriptionsToCheck(nowMs: Int64, limit: Int) async throws -> [String] {
        try await writer.read { db in
            try String.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT e.originalTransactionId FROM entitlement e
                        LEFT JOIN subscriptionRenewal r ON r.originalTransactionId = e.originalTransactionId
                        WHERE e.revokedAtMs IS NULL AND e.expiresAtMs IS NOT NULL
                          AND EXISTS (SELECT 1 FROM processedTransaction p
                                      WHERE p.originalTransactionId = e.originalTransactionId AND p.grantKind = 'subscription')
                          AND ((e.expiresAtMs <= ? AND e.expiresAtMs > ? AND COALESCE(r.expirationIntent, 0) = 0 AND COALESCE(r.autoRenew, 1) = 1)
                               OR r.inBillingRetry = 1)
                        ORDER BY e.expiresAtMs LIMIT ?
                        """), arguments: [nowMs, nowMs - 60 * 86_400_000, limit])
        }
    }

    /// Remembers a refund or revocation of a purchase not redeemed here yet (its redeem will grant nothing).
    public func recordEarlyRevocation(transactionId: String, reason: String, nowMs: Int64) async throws {
        try await commits.write { db in
            try db.cachedStatement(sql: "INSERT OR IGNORE INTO earlyRevocation (transactionId, reason, recordedAtMs) VALUES (?, ?, ?)")
                .execute(arguments: [transactionId, reason, nowMs])
        }
    }

    /// Reverses a refund (`GrantRules.reinstate`); false when the transaction is unknown or not revoked.
    public func reinstate(transactionId: String, nowMs: Int64) async throws -> Bool {
        try await commits.write { db in try GrantRules.reinstate(transactionId, nowMs: nowMs, in: SQLiteFulfillmentTransaction(db: db)) }
    }

    /// Keeps a subscription's renewal state, forward only: an older signed state than the one kept changes nothing.
    public func recordRenewal(_ state: RenewalState) async throws -> Bool {
        try await commits.write { db in
            let kept = try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT signedDateMs FROM subscriptionRenewal WHERE originalTransactionId = ?"),
                arguments: [state.originalTransactionId])
            if let kept, kept > state.signedDateMs { return false }
            try db.cachedStatement(
                sql: """
                    INSERT OR REPLACE INTO subscriptionRenewal (originalTransactionId, autoRenew, autoRenewProductId, inBillingRetry,
                        gracePeriodExpiresAtMs, expirationIntent, priceIncreaseStatus, signedDateMs)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """
            ).execute(arguments: [
                state.originalTransactionId, state.autoRenew, state.autoRenewProductId, state.inBillingRetry, state.gracePeriodExpiresAtMs,
                state.expirationIntent, state.priceIncreaseStatus, state.signedDateMs,
            ])
            return true
        }
    }

    static func renewal(_ original: String, db: Database) throws -> RenewalState? {
        try Row.fetchOne(
            db.cachedStatement(sql: "SELECT * FROM subscriptionRenewal WHERE originalTransactionId = ?"), arguments: [original]
        ).map {
            RenewalState(
                originalTransactionId: $0["originalTransactionId"], autoRenew: $0["autoRenew"], autoRenewProductId: $0["autoRenewProductId"],
                inBillingRetry: $0["inBillingRetry"], gracePeriodExpiresAtMs: $0["gracePeriodExpiresAtMs"],
                expirationIntent: $0["expirationIntent"], priceIncreaseStatus: $0["priceIncreaseStatus"], signedDateMs: $0["signedDateMs"])
        }
    }

    public func extendEntitlement(originalTransactionId: String, expiresAtMs: Int64) async throws -> Bool {
        try await commits.write { db in
            try GrantRules.extendRenewal(original: originalTransactionId, expiresAtMs: expiresAtMs, in: SQLiteFulfillmentTransaction(db: db))
        }
    }

    /// Spends once per (account, scope, idempotency key) (`GrantRules.spend`).
    public func spend(
        accountId: String, scope: AccountScope = .production, amount: Int64, idempotencyKey: String, memo: String?,
        nowMs: Int64
    ) async throws -> SpendOutcome {
        try await commits.write { db in
            try GrantRules.spend(
                Holder(accountId: accountId, scope: scope), amount: amount, idempotencyKey: idempotencyKey, memo: memo,
                nowMs: nowMs, in: SQLiteFulfillmentTransaction(db: db))
        }
    }

    // MARK: reads

    /// True for a notification id applied before the inbox existed (v1-v2 databases: `appliedNotification`).
    public func notificationWasApplied(_ uuid: String) async throws -> Bool {
        guard hasNotificationsFromBeforeTheInbox else { return false }
        return try await writer.read { db in
            try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM appliedNotification WHERE notificationUUID = ?"), arguments: [uuid]) ?? false
        }
    }

    /// The account an original transaction is bound to, if any, and the scope it grants into.
    public func owner(originalTransactionId: String) async throws -> Holder? {
        try await writer.read { db in try SQLiteFulfillmentTransaction(db: db).owner(original: originalTransactionId) }
    }

    public func subscriptionHistory(accountId: String, scope: AccountScope, nowMs: Int64) async throws -> [SubscriptionHistoryRecord] {
        try await writer.read { db in
            let tx = SQLiteFulfillmentTransaction(db: db)
            return try tx.entitlements(Holder(accountId: accountId, scope: scope), activeAtMs: nil).filter { $0.expiresAtMs != nil }.map {
                record in
                let paid = try Row.fetchAll(
                    db.cachedStatement(
                        sql: """
                            SELECT productId, revokedAtMs FROM processedTransaction WHERE environment = ? AND originalTransactionId = ?
                            """), arguments: [record.environment, record.originalTransactionId])
                let renewal = try Self.renewal(record.originalTransactionId, db: db)
                return SubscriptionHistoryRecord(
                    originalTransactionId: record.originalTransactionId,
                    productIds: Set(paid.map { $0["productId"] as String }).union([record.productId]),
                    active: GrantRules.isActive(record, renewal: renewal, nowMs: nowMs),
                    periodsPaid: paid.filter { ($0["revokedAtMs"] as Int64?) == nil }.count)
            }
        }
    }

    public func customerTransactionId(accountId: String) async throws -> String? {
        try await writer.read { db in
            try String.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT id FROM (
                            SELECT originalTransactionId AS id, 0 AS kind, startsAtMs AS at FROM entitlement
                            WHERE accountId = ?1 AND scope = 'Production' AND environment = 'Production'
                            UNION ALL SELECT transactionId, 1, id FROM ledger
                            WHERE accountId = ?1 AND scope = 'Production' AND environment = 'Production' AND kind = 'grant'
                        ) ORDER BY kind, at, id LIMIT 1
                        """), arguments: [accountId])
        }
    }

    public func balance(accountId: String, scope: AccountScope = .production) async throws -> Wallet {
        try await writer.read { db in try SQLiteFulfillmentTransaction(db: db).wallet(Holder(accountId: accountId, scope: scope)) }
    }

    /// What the account has now: subscriptions in a billing grace period count as active; each subscription
    /// carries its renewal state (`willRenew`, `inBillingRetry`, `gracePeriodExpiresAtMs`) when Apple sent one.
    public func entitlements(accountId: String, scope: AccountScope = .production, nowMs: Int64) async throws
        -> (entitlements: [Entitlement], balance: Int64, owed: Int64)
    {
        try await writer.read { db in
            let tx = SQLiteFulfillmentTransaction(db: db)
            let holder = Holder(accountId: accountId, scope: scope)
            let wallet = try tx.wallet(holder)
            var renewals: [String: RenewalState] = [:]
            var current: [EntitlementRecord] = []
            for record in try tx.entitlements(holder, activeAtMs: nil) {
                let renewal = record.expiresAtMs == nil ? nil : try Self.renewal(record.originalTransactionId, db: db)
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

    /// Ledger rows after `after` (an entry id), oldest first; `next` when more remain.
    public func ledger(accountId: String, scope: AccountScope = .production, after: Int64, limit: Int) async throws
        -> (entries: [LedgerEntry], next: Int64?)
    {
        try await writer.read { db in
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT id, delta, balance, kind, transactionId, memo, debt, recovered, owed, createdAtMs FROM ledger
                        WHERE accountId = ? AND scope = ? AND id > ? ORDER BY id LIMIT ?
                        """), arguments: [accountId, scope.rawValue, after, limit + 1])
            let entries = rows.prefix(limit).map { row -> LedgerEntry in
                var e = LedgerEntry(
                    id: row["id"], delta: row["delta"], balance: row["balance"],
                    kind: LedgerKind(rawValue: row["kind"]) ?? .grant, transactionId: row["transactionId"],
                    memo: row["memo"], createdAtMs: row["createdAtMs"])
                let debt: Int64 = row["debt"], recovered: Int64 = row["recovered"], owed: Int64 = row["owed"]
                if debt > 0 { e.shortfall = debt }
                if recovered > 0 { e.recovered = recovered }
                if owed > 0 || debt > 0 || recovered > 0 { e.owed = owed }
                return e
            }
            return (Array(entries), rows.count > limit ? entries.last?.id : nil)
        }
    }

    // MARK: invariants (FulfillmentInvariants: tests, benchmarks, the crash harness)

    public func duplicateLedgerEffects() async throws -> [String] {
        try await writer.read { db in
            let rows = try Row.fetchAll(
                db, sql: "SELECT transactionId, kind FROM ledger WHERE kind IN ('reversal', 'reinstatement') ORDER BY id")
            var last: [String: String] = [:]
            var bad: [String] = []
            for row in rows {
                let id: String = row["transactionId"], kind: String = row["kind"]
                let expected = last[id] == "reversal" ? "reinstatement" : "reversal"
                if kind != expected { bad.append("\(id): \(kind) after \(last[id] ?? "nothing")") }
                last[id] = kind
            }
            return bad
        }
    }

    public func ledgerMismatches() async throws -> [String] {
        try await writer.read { db in
            try String.fetchAll(
                db,
                sql: """
                    SELECT w.accountId FROM wallet w
                    LEFT JOIN (SELECT accountId, scope, SUM(delta) AS total, SUM(debt) - SUM(recovered) AS owed
                               FROM ledger GROUP BY accountId, scope) l
                      ON l.accountId = w.accountId AND l.scope = w.scope
                    WHERE w.balance != COALESCE(l.total, 0) OR w.owed != COALESCE(l.owed, 0)
                    UNION
                    SELECT l.accountId FROM ledger l LEFT JOIN wallet w ON w.accountId = l.accountId AND w.scope = l.scope
                    WHERE w.accountId IS NULL
                    """)
        }
    }

    /// `PRAGMA synchronous` of the writing connection (2 = FULL).
    package func synchronousMode() async throws -> Int {
        try await writer.write { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    /// `PRAGMA temp_store` on the writing connection and on a reading one (2 = MEMORY).
    package func tempStoreModes() async throws -> (writer: Int, reader: Int) {
        let sql = "PRAGMA temp_store"
        let written = try await writer.write { db in try Int.fetchOne(db, sql: sql) ?? -1 }
        let read = try await writer.read { db in try Int.fetchOne(db, sql: sql) ?? -1 }
        return (written, read)
    }
}

/// `FulfillmentTransaction` over one GRDB write (or read) on `fulfillment.sqlite`: every statement the
/// grant rules need, and nothing else.
struct SQLiteFulfillmentTransaction: FulfillmentTransaction {
    let db: Database

    func enqueueOutbox(kind: OutboxKind, key: String, payload: String, nowMs: Int64) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO outbox (kind, item_key, payload, attempts, created_at_ms, next_attempt_at_ms, last_error)
                VALUES (?, ?, ?, 0, ?, ?, NULL)
                ON CONFLICT (kind, item_key) DO UPDATE SET payload = excluded.payload, attempts = 0,
                    created_at_ms = excluded.created_at_ms, next_attempt_at_ms = excluded.next_attempt_at_ms, last_error = NULL
                """
        ).execute(arguments: [kind.rawValue, key, payload, nowMs, nowMs])
    }

    func owner(original: String) throws -> Holder? {
        try Row.fetchOne(
            db.cachedStatement(sql: "SELECT accountId, scope FROM ownership WHERE originalTransactionId = ?"),
            arguments: [original]
        ).map { Holder(accountId: $0["accountId"], scope: try Self.scope($0["scope"])) }
    }

    func bind(_ p: VerifiedPurchase, to holder: Holder, nowMs: Int64) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO ownership (environment, originalTransactionId, accountId, scope, productId, boundAtMs) VALUES (?, ?, ?, ?, ?, ?)
                """
        ).execute(arguments: [p.environment, p.originalTransactionId, holder.accountId, holder.scope.rawValue, p.productId, nowMs])
    }

    func transfer(_ p: VerifiedPurchase, from accountId: String, to holder: Holder, nowMs: Int64) throws {
        try db.cachedStatement(sql: "UPDATE ownership SET accountId = ?, scope = ?, boundAtMs = ? WHERE originalTransactionId = ?")
            .execute(arguments: [holder.accountId, holder.scope.rawValue, nowMs, p.originalTransactionId])
        try db.cachedStatement(sql: "UPDATE entitlement SET accountId = ?, scope = ? WHERE originalTransactionId = ?")
            .execute(arguments: [holder.accountId, holder.scope.rawValue, p.originalTransactionId])
        try db.cachedStatement(
            sql: """
                INSERT INTO ownershipTransfer (environment, originalTransactionId, fromAccountId, toAccountId, transferredAtMs)
                VALUES (?, ?, ?, ?, ?)
                """
        ).execute(arguments: [p.environment, p.originalTransactionId, accountId, holder.accountId, nowMs])
    }

    func processed(_ transactionId: String) throws -> ProcessedTransaction? {
        try Row.fetchOne(
            db.cachedStatement(
                sql: """
                    SELECT environment, accountId, scope, originalTransactionId, productId, grantKind, coinsGranted, revokedAtMs
                    FROM processedTransaction WHERE transactionId = ?
                    """), arguments: [transactionId]
        ).map {
            ProcessedTransaction(
                environment: $0["environment"], holder: Holder(accountId: $0["accountId"], scope: try Self.scope($0["scope"])),
                originalTransactionId: $0["originalTransactionId"], productId: $0["productId"], grantKind: $0["grantKind"],
                coinsGranted: $0["coinsGranted"], revokedAtMs: $0["revokedAtMs"])
        }
    }

    func recordProcessed(_ p: VerifiedPurchase, holder: Holder, grantKind: String, coins: Int64, nowMs: Int64) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO processedTransaction (environment, transactionId, originalTransactionId, accountId, scope, productId, grantKind,
                                                  coinsGranted, purchaseDateMs, expiresDateMs, processedAtMs)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """
        ).execute(arguments: [
            p.environment, p.transactionId, p.originalTransactionId, holder.accountId, holder.scope.rawValue,
            p.productId, grantKind, coins, p.purchaseDateMs, p.expiresDateMs, nowMs,
        ])
    }

    func earlyRevocation(_ transactionId: String) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT reason FROM earlyRevocation WHERE transactionId = ?"), arguments: [transactionId])
    }

    func forgetEarlyRevocation(_ transactionId: String) throws {
        try db.cachedStatement(sql: "DELETE FROM earlyRevocation WHERE transactionId = ?").execute(arguments: [transactionId])
    }

    func markReinstated(_ transactionId: String) throws {
        try db.cachedStatement(sql: "UPDATE processedTransaction SET revokedAtMs = NULL, revokeReason = NULL WHERE transactionId = ?")
            .execute(arguments: [transactionId])
    }

    func lastReversalDebt(_ transactionId: String) throws -> Int64? {
        try Int64.fetchOne(
            db.cachedStatement(sql: "SELECT debt FROM ledger WHERE transactionId = ? AND kind = 'reversal' ORDER BY id DESC LIMIT 1"),
            arguments: [transactionId])
    }

    func markRevoked(_ transactionId: String, reason: String, nowMs: Int64) throws {
        try db.cachedStatement(sql: "UPDATE processedTransaction SET revokedAtMs = ?, revokeReason = ? WHERE transactionId = ?")
            .execute(arguments: [nowMs, reason, transactionId])
    }

    private static let entitlementColumns =
        "environment, originalTransactionId, accountId, scope, entitlement, productId, startsAtMs, expiresAtMs, revokedAtMs"

    func entitlement(original: String) throws -> EntitlementRecord? {
        try Row.fetchOne(
            db.cachedStatement(sql: "SELECT \(Self.entitlementColumns) FROM entitlement WHERE originalTransactionId = ?"),
            arguments: [original]
        ).map(Self.entitlementRecord)
    }

    func insertEntitlement(_ e: EntitlementRecord) throws {
        try db.cachedStatement(sql: "INSERT INTO entitlement (\(Self.entitlementColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)").execute(
            arguments: [
                e.environment, e.originalTransactionId, e.holder.accountId, e.holder.scope.rawValue, e.entitlement, e.productId,
                e.startsAtMs, e.expiresAtMs, e.revokedAtMs,
            ])
    }

    func updateEntitlement(_ e: EntitlementRecord) throws {
        try db.cachedStatement(
            sql:
                "UPDATE entitlement SET entitlement = ?, productId = ?, startsAtMs = ?, expiresAtMs = ?, revokedAtMs = ? WHERE originalTransactionId = ?"
        ).execute(arguments: [e.entitlement, e.productId, e.startsAtMs, e.expiresAtMs, e.revokedAtMs, e.originalTransactionId])
    }

    func entitlements(_ holder: Holder, activeAtMs: Int64?) throws -> [EntitlementRecord] {
        try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT \(Self.entitlementColumns) FROM entitlement
                    WHERE accountId = ? AND scope = ? AND revokedAtMs IS NULL AND (? IS NULL OR expiresAtMs IS NULL OR expiresAtMs > ?)
                    """), arguments: [holder.accountId, holder.scope.rawValue, activeAtMs, activeAtMs]
        ).map(Self.entitlementRecord)
    }

    func wallet(_ holder: Holder) throws -> Wallet {
        try Row.fetchOne(
            db.cachedStatement(sql: "SELECT balance, owed FROM wallet WHERE accountId = ? AND scope = ?"),
            arguments: [holder.accountId, holder.scope.rawValue]
        ).map { Wallet(balance: $0["balance"], owed: $0["owed"]) }
            ?? Wallet()
    }

    func append(_ row: LedgerRow) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO wallet (accountId, scope, balance, owed) VALUES (?, ?, ?, ?)
                ON CONFLICT (accountId, scope) DO UPDATE SET balance = excluded.balance, owed = excluded.owed
                """
        ).execute(arguments: [row.holder.accountId, row.holder.scope.rawValue, row.balance, row.owed])
        try db.cachedStatement(
            sql: """
                INSERT INTO ledger (accountId, scope, delta, balance, kind, environment, transactionId, idempotencyKey, memo,
                                    debt, recovered, owed, createdAtMs)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """
        ).execute(arguments: [
            row.holder.accountId, row.holder.scope.rawValue, row.delta, row.balance, row.kind.rawValue,
            row.environment, row.transactionId, row.idempotencyKey, row.memo, row.debt, row.recovered, row.owed,
            row.createdAtMs,
        ])
    }

    func spend(_ holder: Holder, idempotencyKey: String) throws -> RecordedSpend? {
        try Row.fetchOne(
            db.cachedStatement(
                sql: """
                    SELECT delta, balance, memo FROM ledger WHERE accountId = ? AND scope = ? AND idempotencyKey = ?
                    """), arguments: [holder.accountId, holder.scope.rawValue, idempotencyKey]
        ).map {
            RecordedSpend(delta: $0["delta"], balance: $0["balance"], memo: $0["memo"])
        }
    }

    /// A stored scope; the schema admits only the two, so anything else is a damaged row, never Production.
    private static func scope(_ raw: String) throws -> AccountScope {
        guard let scope = AccountScope(rawValue: raw) else { throw StoredValueInvalid(column: "scope", value: raw) }
        return scope
    }

    private static func entitlementRecord(_ row: Row) throws -> EntitlementRecord {
        EntitlementRecord(
            environment: row["environment"], originalTransactionId: row["originalTransactionId"],
            holder: Holder(accountId: row["accountId"], scope: try scope(row["scope"])), entitlement: row["entitlement"],
            productId: row["productId"], startsAtMs: row["startsAtMs"], expiresAtMs: row["expiresAtMs"],
            revokedAtMs: row["revokedAtMs"])
    }
}
