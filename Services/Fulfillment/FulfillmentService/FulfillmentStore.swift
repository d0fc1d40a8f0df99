import Foundation
import GRDB
import IAPProtocol
import JSONRPC

/// The fulfillment database: the only durable record of what was granted. Processed transactions,
/// ownership of original transactions, entitlements, wallets and the append-only coin ledger.
///
/// The rules that protect money are in the schema, not only here: one row per (environment,
/// transactionId); one owner per (environment, originalTransactionId); one grant and one reversal
/// ledger row per transaction; one spend per (account, idempotency key); balances CHECKed >= 0; the
/// ledger refuses UPDATE and DELETE. Every grant commits in the same transaction as the record that
/// its purchase was processed.
public final class FulfillmentStore: Sendable {
    let writer: any DatabaseWriter
    private let commits: GroupCommit

    /// Opens (creating if needed) `fulfillment.sqlite` in `directory`: WAL with `synchronous=FULL`, so
    /// a grant acknowledged with `finishable: true` survives a power cut, not only a process crash (in
    /// WAL mode NORMAL may lose the last commits on power loss). It costs one WAL fsync per commit.
    public static func open(directory: URL) throws -> FulfillmentStore {
        var config = Configuration()
        config.foreignKeysEnabled = true
        config.busyMode = .timeout(10)
        let pool = try DatabasePool(path: directory.appendingPathComponent("fulfillment.sqlite").path, configuration: config)
        // After GRDB's WAL setup (which sets NORMAL) on the pool's one writing connection.
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        return try FulfillmentStore(writer: pool)
    }

    public init(writer: any DatabaseWriter) throws {
        self.writer = writer
        self.commits = GroupCommit(writer: writer)
        try Self.migrator.migrate(writer)
    }

    package static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE wallet (
                    accountId TEXT PRIMARY KEY NOT NULL,
                    balance INTEGER NOT NULL DEFAULT 0 CHECK (balance >= 0),
                    -- coins refunded after they were spent: owed, never silently dropped
                    shortfall INTEGER NOT NULL DEFAULT 0 CHECK (shortfall >= 0)
                ) WITHOUT ROWID;

                CREATE TABLE processedTransaction (
                    environment TEXT NOT NULL,
                    transactionId TEXT NOT NULL,
                    originalTransactionId TEXT NOT NULL,
                    accountId TEXT NOT NULL,
                    productId TEXT NOT NULL,
                    grantKind TEXT NOT NULL,
                    coinsGranted INTEGER NOT NULL DEFAULT 0 CHECK (coinsGranted >= 0),
                    purchaseDateMs INTEGER NOT NULL,
                    expiresDateMs INTEGER,
                    processedAtMs INTEGER NOT NULL,
                    revokedAtMs INTEGER,
                    revokeReason TEXT,
                    PRIMARY KEY (environment, transactionId)
                ) WITHOUT ROWID;
                CREATE INDEX processed_by_transaction ON processedTransaction(transactionId);
                CREATE INDEX processed_by_original ON processedTransaction(environment, originalTransactionId);

                CREATE TABLE ownership (
                    environment TEXT NOT NULL,
                    originalTransactionId TEXT NOT NULL,
                    accountId TEXT NOT NULL,
                    productId TEXT NOT NULL,
                    boundAtMs INTEGER NOT NULL,
                    PRIMARY KEY (environment, originalTransactionId)
                ) WITHOUT ROWID;

                CREATE TABLE ownershipTransfer (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    environment TEXT NOT NULL,
                    originalTransactionId TEXT NOT NULL,
                    fromAccountId TEXT NOT NULL,
                    toAccountId TEXT NOT NULL,
                    transferredAtMs INTEGER NOT NULL
                );

                -- One row per original transaction that grants an entitlement.
                CREATE TABLE entitlement (
                    environment TEXT NOT NULL,
                    originalTransactionId TEXT NOT NULL,
                    accountId TEXT NOT NULL,
                    entitlement TEXT NOT NULL,
                    productId TEXT NOT NULL,
                    startsAtMs INTEGER NOT NULL,
                    expiresAtMs INTEGER,            -- NULL: permanent
                    revokedAtMs INTEGER,
                    PRIMARY KEY (environment, originalTransactionId)
                ) WITHOUT ROWID;
                CREATE INDEX entitlement_by_account ON entitlement(accountId, entitlement);

                CREATE TABLE ledger (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    accountId TEXT NOT NULL,
                    delta INTEGER NOT NULL,
                    balance INTEGER NOT NULL CHECK (balance >= 0),
                    kind TEXT NOT NULL CHECK (kind IN ('grant', 'spend', 'reversal')),
                    environment TEXT,
                    transactionId TEXT,
                    idempotencyKey TEXT,
                    memo TEXT,
                    shortfall INTEGER NOT NULL DEFAULT 0 CHECK (shortfall >= 0),
                    createdAtMs INTEGER NOT NULL,
                    CHECK (kind != 'grant' OR (delta > 0 AND transactionId IS NOT NULL)),
                    CHECK (kind != 'spend' OR (delta < 0 AND idempotencyKey IS NOT NULL)),
                    CHECK (kind != 'reversal' OR (delta <= 0 AND transactionId IS NOT NULL)),
                    UNIQUE (kind, environment, transactionId),
                    UNIQUE (accountId, idempotencyKey)
                );
                CREATE INDEX ledger_by_account ON ledger(accountId, id);
                CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger
                    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
                CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger
                    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;

                CREATE TABLE appliedNotification (
                    notificationUUID TEXT PRIMARY KEY NOT NULL,
                    notificationType TEXT NOT NULL,
                    appliedAtMs INTEGER NOT NULL
                ) WITHOUT ROWID;
                """)
        }
        m.registerMigration("v2-scopes-and-debt") { db in
            // DESIGN.md section 6. One environment per purchase: a transaction id, an original's owner
            // and its entitlement can be recorded once, whatever environment a later copy claims. Every
            // account has two scopes (Production, Sandbox), each with its own wallet, ledger and
            // entitlements. Refunds of spent coins are debt (`owed`), repaid by later grants.
            try db.execute(sql: """
                DROP INDEX processed_by_transaction;
                CREATE UNIQUE INDEX processed_one_environment ON processedTransaction(transactionId);
                CREATE UNIQUE INDEX ownership_one_environment ON ownership(originalTransactionId);
                CREATE UNIQUE INDEX entitlement_one_environment ON entitlement(originalTransactionId);
                ALTER TABLE processedTransaction ADD COLUMN scope TEXT NOT NULL DEFAULT 'Production';
                ALTER TABLE ownership ADD COLUMN scope TEXT NOT NULL DEFAULT 'Production';
                ALTER TABLE entitlement ADD COLUMN scope TEXT NOT NULL DEFAULT 'Production';
                DROP INDEX entitlement_by_account;
                CREATE INDEX entitlement_by_account ON entitlement(accountId, scope, entitlement);

                CREATE TABLE wallet_v2 (
                    accountId TEXT NOT NULL,
                    scope TEXT NOT NULL CHECK (scope IN ('Production', 'Sandbox')),
                    balance INTEGER NOT NULL DEFAULT 0 CHECK (balance >= 0),
                    -- coins refunded after they were spent: repaid by later grants before any spend
                    owed INTEGER NOT NULL DEFAULT 0 CHECK (owed >= 0),
                    PRIMARY KEY (accountId, scope)
                ) WITHOUT ROWID;
                INSERT INTO wallet_v2 (accountId, scope, balance, owed) SELECT accountId, 'Production', balance, shortfall FROM wallet;
                DROP TABLE wallet;
                ALTER TABLE wallet_v2 RENAME TO wallet;

                DROP TRIGGER ledger_no_update;
                DROP TRIGGER ledger_no_delete;
                ALTER TABLE ledger RENAME TO ledger_v1;
                CREATE TABLE ledger (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    accountId TEXT NOT NULL,
                    scope TEXT NOT NULL CHECK (scope IN ('Production', 'Sandbox')),
                    delta INTEGER NOT NULL,
                    balance INTEGER NOT NULL CHECK (balance >= 0),
                    kind TEXT NOT NULL CHECK (kind IN ('grant', 'spend', 'reversal', 'recovery')),
                    environment TEXT,
                    transactionId TEXT,
                    idempotencyKey TEXT,
                    memo TEXT,
                    debt INTEGER NOT NULL DEFAULT 0 CHECK (debt >= 0),           -- owed added (reversals)
                    recovered INTEGER NOT NULL DEFAULT 0 CHECK (recovered >= 0), -- owed repaid (recoveries)
                    owed INTEGER NOT NULL DEFAULT 0 CHECK (owed >= 0),           -- owed after this row
                    createdAtMs INTEGER NOT NULL,
                    CHECK (kind != 'grant' OR (delta > 0 AND transactionId IS NOT NULL)),
                    CHECK (kind != 'spend' OR (delta < 0 AND idempotencyKey IS NOT NULL)),
                    CHECK (kind != 'reversal' OR (delta <= 0 AND transactionId IS NOT NULL)),
                    CHECK (kind != 'recovery' OR (delta < 0 AND recovered = -delta AND transactionId IS NOT NULL)),
                    CHECK (kind = 'reversal' OR debt = 0),
                    CHECK (kind = 'recovery' OR recovered = 0),
                    UNIQUE (kind, transactionId),
                    UNIQUE (accountId, scope, idempotencyKey)
                );
                INSERT INTO ledger (id, accountId, scope, delta, balance, kind, environment, transactionId, idempotencyKey, memo,
                                    debt, owed, createdAtMs)
                    SELECT id, accountId, 'Production', delta, balance, kind, environment, transactionId, idempotencyKey, memo,
                           shortfall, SUM(shortfall) OVER (PARTITION BY accountId ORDER BY id), createdAtMs
                    FROM ledger_v1;
                DROP TABLE ledger_v1;
                CREATE INDEX ledger_by_account ON ledger(accountId, scope, id);
                CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger
                    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
                CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger
                    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
                """)
        }
        return m
    }

    // MARK: redeem

    public enum Mode: Sendable { case redeem, restore }

    /// What happens when a purchase's original transaction is bound to another account.
    public enum OwnershipPolicy: String, Sendable, CaseIterable {
        /// The purchase stays with the first account (`ownedByAnotherAccount`).
        case refuse
        /// The entitlement moves to the presenting account (never coins); the move is recorded.
        case transfer
    }

    /// A purchase to process, with the catalog's rule for its product (nil: unknown product) and the
    /// account scope it grants into (from its environment and the sandbox policy).
    public struct Planned: Sendable {
        public var purchase: VerifiedPurchase
        public var rule: GrantRule?
        public var scope: AccountScope
        public init(purchase: VerifiedPurchase, rule: GrantRule?, scope: AccountScope = .production) {
            self.purchase = purchase; self.rule = rule; self.scope = scope
        }
    }

    public struct Applied: Sendable {
        public var results: [TransactionResult]
        public var balance: Int64
        public var owed: Int64
        public var entitlements: [Entitlement]
        public var transfers: [(originalTransactionId: String, from: String)]
    }

    /// Records and grants every purchase in ONE write transaction; the answer is what was committed,
    /// with the balance and entitlements of `answerScope`. `appAccountToken` is the account's token from
    /// accounts: a StoreKit 2 purchase made with another token belongs to another account.
    ///
    /// A purchase is recorded once, under the environment and scope it was first seen with: a later copy
    /// that claims another environment finds the same record (its transaction id is unique).
    public func apply(_ planned: [Planned], accountId: String, appAccountToken: String?, mode: Mode, policy: OwnershipPolicy,
                      answerScope: AccountScope = .production, nowMs: Int64) async throws -> Applied {
        try await commits.write { db in
            var results: [TransactionResult] = []
            var transfers: [(String, String)] = []
            for item in planned {
                let p = item.purchase
                func result(_ outcome: RedeemOutcome, finishable: Bool = true) {
                    results.append(TransactionResult(transactionId: p.transactionId, originalTransactionId: p.originalTransactionId,
                                                     productId: p.productId, outcome: outcome, finishable: finishable))
                }
                guard let rule = item.rule else {
                    result(.unknownProduct, finishable: false)  // kept unfinished: retried after a catalog update
                    continue
                }
                if let token = p.appAccountToken, let own = appAccountToken?.lowercased(), token != own {
                    // The app bound this purchase to a different account at purchase time.
                    result(.ownedByAnotherAccount)
                    continue
                }
                let owner = try Self.owner(p.originalTransactionId, db)
                // The scope an original was first bound to is where all of its transactions land.
                let holder = Holder(accountId: accountId, scope: owner?.scope ?? item.scope)
                if let owner, owner.accountId != accountId {
                    guard policy == .transfer, rule.entitlement != nil, p.cancellationDateMs == nil else {
                        result(.ownedByAnotherAccount)
                        continue
                    }
                    try Self.transfer(p, from: owner.accountId, to: holder, nowMs: nowMs, db: db)
                    transfers.append((p.originalTransactionId, owner.accountId))
                    if try Self.processed(p.transactionId, db) == nil {
                        try Self.recordProcessed(p, holder: holder, rule: rule, coins: 0, nowMs: nowMs, db: db)
                    }
                    result(.restored)
                    continue
                }
                if let processed = try Self.processed(p.transactionId, db) {
                    if processed.revokedAtMs != nil {
                        result(.revoked)
                    } else if p.cancellationDateMs != nil {
                        try Self.revoke(transactionId: p.transactionId, reason: "refunded", nowMs: nowMs, db: db)
                        result(.revoked)
                    } else {
                        result(.alreadyGranted)
                    }
                    continue
                }
                if case .coins = rule, mode == .restore {
                    continue  // restore never grants consumables; an unredeemed one is left for redeem
                }
                if p.cancellationDateMs != nil {
                    // Refunded before we ever saw it: record it, grant nothing, and take back what its
                    // original granted (a refunded renewal or re-purchase revokes the entitlement).
                    if owner == nil { try Self.bind(p, holder: holder, nowMs: nowMs, db: db) }
                    try Self.recordProcessed(p, holder: holder, rule: rule, coins: 0, nowMs: nowMs, db: db)
                    try Self.revoke(transactionId: p.transactionId, reason: "refunded", nowMs: nowMs, db: db)
                    result(.revoked)
                    continue
                }
                if owner == nil { try Self.bind(p, holder: holder, nowMs: nowMs, db: db) }
                switch rule {
                case .coins(let perUnit):
                    let (coins, overflow) = perUnit.multipliedReportingOverflow(by: p.quantity)
                    guard !overflow, coins > 0, coins <= CoinLimits.maxGrant else { throw LedgerLimit.grantTooLarge }
                    try Self.recordProcessed(p, holder: holder, rule: rule, coins: coins, nowMs: nowMs, db: db)
                    try Self.appendLedger(holder, delta: coins, kind: .grant, environment: p.environment,
                                          transactionId: p.transactionId, memo: p.productId, nowMs: nowMs, db: db)
                    // Owed coins (refunds of spent coins) are repaid first, in their own row.
                    let wallet = try Self.wallet(holder, db)
                    if wallet.owed > 0 {
                        let repaid = min(wallet.owed, wallet.balance)
                        try Self.appendLedger(holder, delta: -repaid, kind: .recovery, environment: p.environment,
                                              transactionId: p.transactionId, memo: "repays refunded coins", recovered: repaid,
                                              nowMs: nowMs, db: db)
                    }
                    result(.granted)
                case .permanent(let name):
                    try Self.recordProcessed(p, holder: holder, rule: rule, coins: 0, nowMs: nowMs, db: db)
                    if owner == nil {
                        try Self.insertEntitlement(p, holder: holder, name: name, startsAtMs: p.purchaseDateMs, expiresAtMs: nil, db: db)
                        result(.granted)
                    } else {
                        result(.restored)  // a restore or a free re-purchase of what the account owns
                    }
                case .subscription(let name):
                    try Self.recordProcessed(p, holder: holder, rule: rule, coins: 0, nowMs: nowMs, db: db)
                    if owner == nil {
                        try Self.insertEntitlement(p, holder: holder, name: name, startsAtMs: p.purchaseDateMs,
                                                   expiresAtMs: p.expiresDateMs, db: db)
                        result(.granted)
                    } else if try Self.extendSubscription(p, db: db) {
                        result(.granted)  // a renewal: the entitlement now ends later
                    } else {
                        result(.restored)
                    }
                case .timeLimited(let name, let days):
                    try Self.recordProcessed(p, holder: holder, rule: rule, coins: 0, nowMs: nowMs, db: db)
                    if owner == nil {
                        // Back-to-back purchases stack: start from the later of now and the current end.
                        let currentEnd = try Int64.fetchOne(db.cachedStatement(sql: """
                            SELECT MAX(expiresAtMs) FROM entitlement
                            WHERE accountId = ? AND scope = ? AND entitlement = ? AND revokedAtMs IS NULL AND expiresAtMs IS NOT NULL
                            """), arguments: [holder.accountId, holder.scope.rawValue, name]) ?? 0
                        let start = max(nowMs, currentEnd)
                        try Self.insertEntitlement(p, holder: holder, name: name, startsAtMs: start,
                                                   expiresAtMs: start + Int64(days) * 86_400_000, db: db)
                        result(.granted)
                    } else {
                        result(.restored)
                    }
                }
            }
            let answer = Holder(accountId: accountId, scope: answerScope)
            let wallet = try Self.wallet(answer, db)
            return Applied(results: results, balance: wallet.balance, owed: wallet.owed,
                           entitlements: try Self.activeEntitlements(answer, nowMs: nowMs, db), transfers: transfers)
        }
    }

    // MARK: revocation and renewal (notifications, admin)

    public enum RevokeOutcome: Sendable, Equatable { case revoked, alreadyRevoked, notFound }

    /// Revokes one processed transaction, whatever environment it was recorded under: its coins are
    /// reversed (floored at zero, the rest owed) or its entitlement removed, with a reversal ledger row either way.
    public func revoke(transactionId: String, reason: String, nowMs: Int64) async throws -> RevokeOutcome {
        try await commits.write { db in
            guard try Self.processed(transactionId, db) != nil else { return .notFound }
            return try Self.revoke(transactionId: transactionId, reason: reason, nowMs: nowMs, db: db) ? .revoked : .alreadyRevoked
        }
    }

    /// The account an original transaction is bound to, if any, and the scope it grants into.
    public func owner(originalTransactionId: String) async throws -> (accountId: String, scope: AccountScope)? {
        try await writer.read { db in try Self.owner(originalTransactionId, db).map { ($0.accountId, $0.scope) } }
    }

    /// Records a notification id; false if it was already applied (App Store retries deliver twice).
    public func markNotificationApplied(_ uuid: String, type: String, nowMs: Int64) async throws -> Bool {
        try await commits.write { db in
            try db.cachedStatement(sql: "INSERT OR IGNORE INTO appliedNotification (notificationUUID, notificationType, appliedAtMs) VALUES (?, ?, ?)").execute(arguments: [uuid, type, nowMs])
            return db.changesCount == 1
        }
    }

    // MARK: coins

    public enum SpendOutcome: Sendable, Equatable {
        case spent(balance: Int64)
        case replayed(balance: Int64)
        case keyConflict
        case insufficient(balance: Int64)
        /// Refunded coins are owed: nothing can be spent until later grants repay them.
        case owes(owed: Int64, balance: Int64)
    }

    /// Spends once per (account, scope, idempotency key). The same key with the same amount and memo
    /// answers the first result; with other params it is a conflict.
    public func spend(accountId: String, scope: AccountScope = .production, amount: Int64, idempotencyKey: String, memo: String?,
                      nowMs: Int64) async throws -> SpendOutcome {
        let holder = Holder(accountId: accountId, scope: scope)
        return try await commits.write { db in
            if let row = try Row.fetchOne(db.cachedStatement(sql: """
                SELECT delta, balance, memo FROM ledger WHERE accountId = ? AND scope = ? AND idempotencyKey = ?
                """), arguments: [accountId, scope.rawValue, idempotencyKey]) {
                let delta: Int64 = row["delta"], memoThen: String? = row["memo"]
                return delta == -amount && memoThen == memo ? .replayed(balance: row["balance"]) : .keyConflict
            }
            let wallet = try Self.wallet(holder, db)
            guard wallet.owed == 0 else { return .owes(owed: wallet.owed, balance: wallet.balance) }
            guard wallet.balance >= amount else { return .insufficient(balance: wallet.balance) }
            let after = try Self.appendLedger(holder, delta: -amount, kind: .spend, idempotencyKey: idempotencyKey, memo: memo,
                                              nowMs: nowMs, db: db)
            return .spent(balance: after)
        }
    }

    public func balance(accountId: String, scope: AccountScope = .production) async throws -> (balance: Int64, owed: Int64) {
        try await writer.read { db in
            let w = try Self.wallet(Holder(accountId: accountId, scope: scope), db)
            return (w.balance, w.owed)
        }
    }

    public func entitlements(accountId: String, scope: AccountScope = .production, nowMs: Int64) async throws
        -> (entitlements: [Entitlement], balance: Int64, owed: Int64)
    {
        try await writer.read { db in
            let holder = Holder(accountId: accountId, scope: scope)
            let w = try Self.wallet(holder, db)
            return (try Self.activeEntitlements(holder, nowMs: nowMs, db), w.balance, w.owed)
        }
    }

    /// Ledger rows after `after` (an entry id), oldest first; `next` when more remain.
    public func ledger(accountId: String, scope: AccountScope = .production, after: Int64, limit: Int) async throws
        -> (entries: [LedgerEntry], next: Int64?)
    {
        try await writer.read { db in
            let rows = try Row.fetchAll(db.cachedStatement(sql: """
                SELECT id, delta, balance, kind, transactionId, memo, debt, recovered, owed, createdAtMs FROM ledger
                WHERE accountId = ? AND scope = ? AND id > ? ORDER BY id LIMIT ?
                """), arguments: [accountId, scope.rawValue, after, limit + 1])
            let entries = rows.prefix(limit).map { row -> LedgerEntry in
                var e = LedgerEntry(id: row["id"], delta: row["delta"], balance: row["balance"],
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

    /// Owed coins (refunded after being spent) for an account's scope.
    public func shortfall(accountId: String, scope: AccountScope = .production) async throws -> Int64 {
        try await balance(accountId: accountId, scope: scope).owed
    }

    // MARK: invariants (tests, benchmarks, the crash harness)

    /// Accounts whose wallet differs from their ledger, in any scope: `balance` must be the sum of the
    /// deltas and `owed` the sum of debts less the sum of recoveries.
    public func ledgerMismatches() async throws -> [String] {
        try await writer.read { db in
            try String.fetchAll(db, sql: """
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
    public func synchronousMode() async throws -> Int {
        try await writer.write { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    // MARK: statements (inside a write)

    /// Whose wallet, ledger and entitlements a write touches: an account's Production or Sandbox scope.
    struct Holder {
        var accountId: String
        var scope: AccountScope
    }

    private static func owner(_ originalTransactionId: String, _ db: Database) throws -> Holder? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT accountId, scope FROM ownership WHERE originalTransactionId = ?"),
                         arguments: [originalTransactionId]).map {
            Holder(accountId: $0["accountId"], scope: AccountScope(rawValue: $0["scope"]) ?? .production)
        }
    }

    private struct ProcessedRow { var revokedAtMs: Int64? }

    private static func processed(_ transactionId: String, _ db: Database) throws -> ProcessedRow? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT revokedAtMs FROM processedTransaction WHERE transactionId = ?"),
                         arguments: [transactionId]).map { ProcessedRow(revokedAtMs: $0["revokedAtMs"]) }
    }

    private static func recordProcessed(_ p: VerifiedPurchase, holder: Holder, rule: GrantRule, coins: Int64, nowMs: Int64,
                                        db: Database) throws {
        try db.cachedStatement(sql: """
            INSERT INTO processedTransaction (environment, transactionId, originalTransactionId, accountId, scope, productId, grantKind,
                                              coinsGranted, purchaseDateMs, expiresDateMs, processedAtMs)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [p.environment, p.transactionId, p.originalTransactionId, holder.accountId, holder.scope.rawValue,
                                     p.productId, rule.kind, coins, p.purchaseDateMs, p.expiresDateMs, nowMs])
    }

    private static func bind(_ p: VerifiedPurchase, holder: Holder, nowMs: Int64, db: Database) throws {
        try db.cachedStatement(sql: """
            INSERT INTO ownership (environment, originalTransactionId, accountId, scope, productId, boundAtMs) VALUES (?, ?, ?, ?, ?, ?)
            """).execute(arguments: [p.environment, p.originalTransactionId, holder.accountId, holder.scope.rawValue, p.productId, nowMs])
    }

    private static func transfer(_ p: VerifiedPurchase, from: String, to: Holder, nowMs: Int64, db: Database) throws {
        try db.cachedStatement(sql: "UPDATE ownership SET accountId = ?, boundAtMs = ? WHERE originalTransactionId = ?")
            .execute(arguments: [to.accountId, nowMs, p.originalTransactionId])
        try db.cachedStatement(sql: "UPDATE entitlement SET accountId = ? WHERE originalTransactionId = ?")
            .execute(arguments: [to.accountId, p.originalTransactionId])
        try db.cachedStatement(sql: """
            INSERT INTO ownershipTransfer (environment, originalTransactionId, fromAccountId, toAccountId, transferredAtMs)
            VALUES (?, ?, ?, ?, ?)
            """).execute(arguments: [p.environment, p.originalTransactionId, from, to.accountId, nowMs])
    }

    private static func insertEntitlement(_ p: VerifiedPurchase, holder: Holder, name: String, startsAtMs: Int64,
                                          expiresAtMs: Int64?, db: Database) throws {
        try db.cachedStatement(sql: """
            INSERT INTO entitlement (environment, originalTransactionId, accountId, scope, entitlement, productId, startsAtMs, expiresAtMs)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [p.environment, p.originalTransactionId, holder.accountId, holder.scope.rawValue, name, p.productId,
                                     startsAtMs, expiresAtMs])
    }

    /// Moves a subscription's end to this transaction's expiry if that is later (a renewal); a renewal
    /// bought after a revocation reinstates access. True if anything changed.
    private static func extendSubscription(_ p: VerifiedPurchase, db: Database) throws -> Bool {
        guard let expires = p.expiresDateMs else { return false }
        try db.cachedStatement(sql: """
            UPDATE entitlement SET expiresAtMs = ?, revokedAtMs = NULL
            WHERE originalTransactionId = ?
              AND (expiresAtMs IS NULL OR expiresAtMs < ?)
              AND (revokedAtMs IS NULL OR revokedAtMs < ?)
            """).execute(arguments: [expires, p.originalTransactionId, expires, p.purchaseDateMs])
        return db.changesCount > 0
    }

    /// Revokes inside a write; false if it was already revoked.
    @discardableResult
    private static func revoke(transactionId: String, reason: String, nowMs: Int64, db: Database) throws -> Bool {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT environment, accountId, scope, originalTransactionId, productId, grantKind, coinsGranted, revokedAtMs
            FROM processedTransaction WHERE transactionId = ?
            """), arguments: [transactionId]) else { return false }
        let revokedAt: Int64? = row["revokedAtMs"]
        guard revokedAt == nil else { return false }
        try db.cachedStatement(sql: "UPDATE processedTransaction SET revokedAtMs = ?, revokeReason = ? WHERE transactionId = ?")
            .execute(arguments: [nowMs, reason, transactionId])
        let holder = Holder(accountId: row["accountId"], scope: AccountScope(rawValue: row["scope"]) ?? .production)
        let environment: String = row["environment"], original: String = row["originalTransactionId"], productId: String = row["productId"]
        let coins: Int64 = row["coinsGranted"]
        if coins > 0 {
            // Whatever was spent of it is owed, never dropped: later grants repay it first.
            let balance = try Self.wallet(holder, db).balance
            let taken = min(balance, coins)
            try appendLedger(holder, delta: -taken, kind: .reversal, environment: environment, transactionId: transactionId,
                             memo: "\(reason): \(productId)", debt: coins - taken, nowMs: nowMs, db: db)
        } else {
            let name = try String.fetchOne(db.cachedStatement(sql: """
                SELECT entitlement FROM entitlement WHERE originalTransactionId = ? AND revokedAtMs IS NULL
                """), arguments: [original])
            try db.cachedStatement(sql: """
                UPDATE entitlement SET revokedAtMs = ? WHERE originalTransactionId = ? AND revokedAtMs IS NULL
                """).execute(arguments: [nowMs, original])
            if let name, (row["grantKind"] as String?) == GrantRule.timeLimitedKind {
                try restack(holder, entitlement: name, nowMs: nowMs, db: db)
            }
            try appendLedger(holder, delta: 0, kind: .reversal, environment: environment, transactionId: transactionId,
                             memo: "\(reason): \(productId)", nowMs: nowMs, db: db)
        }
        return true
    }

    /// After a stacked pass is revoked, the passes queued behind it move up: each one not yet started
    /// starts at the later of now and the end of the one before it, keeping its own length.
    private static func restack(_ holder: Holder, entitlement: String, nowMs: Int64, db: Database) throws {
        let rows = try Row.fetchAll(db.cachedStatement(sql: """
            SELECT originalTransactionId, startsAtMs, expiresAtMs FROM entitlement
            WHERE accountId = ? AND scope = ? AND entitlement = ? AND revokedAtMs IS NULL AND expiresAtMs IS NOT NULL
            ORDER BY startsAtMs
            """), arguments: [holder.accountId, holder.scope.rawValue, entitlement])
        var cursor = nowMs
        for row in rows {
            let start: Int64 = row["startsAtMs"], end: Int64 = row["expiresAtMs"]
            guard start > nowMs else {
                cursor = max(cursor, end)  // running or over: stays as it is
                continue
            }
            let newStart = min(start, max(nowMs, cursor))  // passes only ever move earlier
            if newStart < start {
                try db.cachedStatement(sql: """
                    UPDATE entitlement SET startsAtMs = ?, expiresAtMs = ? WHERE originalTransactionId = ?
                    """).execute(arguments: [newStart, newStart + (end - start), row["originalTransactionId"] as String])
            }
            cursor = newStart + (end - start)
        }
    }

    /// Appends a ledger row and moves the wallet by the same amounts, with checked arithmetic; returns
    /// the new balance. `debt` adds to what is owed, `recovered` repays it.
    @discardableResult
    private static func appendLedger(_ holder: Holder, delta: Int64, kind: LedgerKind, environment: String? = nil,
                                     transactionId: String? = nil, idempotencyKey: String? = nil, memo: String?, debt: Int64 = 0,
                                     recovered: Int64 = 0, nowMs: Int64, db: Database) throws -> Int64 {
        let wallet = try Self.wallet(holder, db)
        let (balance, balanceOverflow) = wallet.balance.addingReportingOverflow(delta)
        let (owedPlusDebt, debtOverflow) = wallet.owed.addingReportingOverflow(debt)
        let owed = owedPlusDebt - recovered
        guard !balanceOverflow, !debtOverflow, balance >= 0, balance <= CoinLimits.maxBalance, owed >= 0 else {
            throw LedgerLimit.balanceOutOfRange
        }
        try db.cachedStatement(sql: """
            INSERT INTO wallet (accountId, scope, balance, owed) VALUES (?, ?, ?, ?)
            ON CONFLICT (accountId, scope) DO UPDATE SET balance = excluded.balance, owed = excluded.owed
            """).execute(arguments: [holder.accountId, holder.scope.rawValue, balance, owed])
        try db.cachedStatement(sql: """
            INSERT INTO ledger (accountId, scope, delta, balance, kind, environment, transactionId, idempotencyKey, memo,
                                debt, recovered, owed, createdAtMs)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [holder.accountId, holder.scope.rawValue, delta, balance, kind.rawValue, environment, transactionId,
                                     idempotencyKey, memo, debt, recovered, owed, nowMs])
        return balance
    }

    private static func wallet(_ holder: Holder, _ db: Database) throws -> (balance: Int64, owed: Int64) {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT balance, owed FROM wallet WHERE accountId = ? AND scope = ?"),
                                         arguments: [holder.accountId, holder.scope.rawValue]) else { return (0, 0) }
        return (row["balance"], row["owed"])
    }

    /// Active entitlements, one per entitlement name: a permanent one wins, else the latest end.
    private static func activeEntitlements(_ holder: Holder, nowMs: Int64, _ db: Database) throws -> [Entitlement] {
        let rows = try Row.fetchAll(db.cachedStatement(sql: """
            SELECT entitlement, productId, expiresAtMs, originalTransactionId FROM entitlement
            WHERE accountId = ? AND scope = ? AND revokedAtMs IS NULL AND (expiresAtMs IS NULL OR expiresAtMs > ?)
            ORDER BY entitlement, expiresAtMs IS NOT NULL, expiresAtMs DESC, originalTransactionId
            """), arguments: [holder.accountId, holder.scope.rawValue, nowMs])
        var seen = Set<String>()
        var out: [Entitlement] = []
        for row in rows {
            let name: String = row["entitlement"]
            guard seen.insert(name).inserted else { continue }
            out.append(Entitlement(entitlement: name, productId: row["productId"], expiresAtMs: row["expiresAtMs"],
                                   originalTransactionId: row["originalTransactionId"]))
        }
        return out
    }
}

/// A write refused because an amount is outside `Coins`' bounds; nothing was committed.
public enum LedgerLimit: Error, Sendable {
    case grantTooLarge
    case balanceOutOfRange
}
