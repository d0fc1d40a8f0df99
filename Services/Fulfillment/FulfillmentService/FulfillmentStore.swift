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

    static var migrator: DatabaseMigrator {
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

    /// A purchase to process, with the catalog's rule for its product (nil: unknown product).
    public struct Planned: Sendable {
        public var purchase: VerifiedPurchase
        public var rule: GrantRule?
        public init(purchase: VerifiedPurchase, rule: GrantRule?) { self.purchase = purchase; self.rule = rule }
    }

    public struct Applied: Sendable {
        public var results: [TransactionResult]
        public var balance: Int64
        public var entitlements: [Entitlement]
        public var transfers: [(originalTransactionId: String, from: String)]
    }

    /// Records and grants every purchase in ONE write transaction; the answer is what was committed.
    /// `appAccountToken` is the account's token from accounts: a StoreKit 2 purchase made with another
    /// token belongs to another account.
    public func apply(_ planned: [Planned], accountId: String, appAccountToken: String?, mode: Mode, policy: OwnershipPolicy,
                      nowMs: Int64) async throws -> Applied {
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
                let owner = try String.fetchOne(db.cachedStatement(sql: "SELECT accountId FROM ownership WHERE environment = ? AND originalTransactionId = ?"), arguments: [p.environment, p.originalTransactionId])
                if let owner, owner != accountId {
                    guard policy == .transfer, rule.entitlement != nil, p.cancellationDateMs == nil else {
                        result(.ownedByAnotherAccount)
                        continue
                    }
                    try Self.transfer(p, from: owner, to: accountId, nowMs: nowMs, db: db)
                    transfers.append((p.originalTransactionId, owner))
                    if try !Self.isProcessed(p, db) { try Self.recordProcessed(p, accountId: accountId, rule: rule, coins: 0, nowMs: nowMs, db: db) }
                    result(.restored)
                    continue
                }
                if let processed = try Self.processed(p, db) {
                    if processed.revokedAtMs != nil {
                        result(.revoked)
                    } else if p.cancellationDateMs != nil {
                        try Self.revoke(environment: p.environment, transactionId: p.transactionId, reason: "refunded",
                                        nowMs: nowMs, db: db)
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
                    if owner == nil { try Self.bind(p, accountId: accountId, nowMs: nowMs, db: db) }
                    try Self.recordProcessed(p, accountId: accountId, rule: rule, coins: 0, nowMs: nowMs, db: db)
                    try Self.revoke(environment: p.environment, transactionId: p.transactionId, reason: "refunded", nowMs: nowMs, db: db)
                    result(.revoked)
                    continue
                }
                if owner == nil { try Self.bind(p, accountId: accountId, nowMs: nowMs, db: db) }
                switch rule {
                case .coins(let perUnit):
                    let coins = perUnit * p.quantity
                    try Self.recordProcessed(p, accountId: accountId, rule: rule, coins: coins, nowMs: nowMs, db: db)
                    try Self.appendLedger(accountId: accountId, delta: coins, kind: "grant", environment: p.environment,
                                          transactionId: p.transactionId, memo: p.productId, nowMs: nowMs, db: db)
                    result(.granted)
                case .permanent(let name):
                    try Self.recordProcessed(p, accountId: accountId, rule: rule, coins: 0, nowMs: nowMs, db: db)
                    if owner == nil {
                        try Self.insertEntitlement(p, accountId: accountId, name: name, startsAtMs: p.purchaseDateMs,
                                                   expiresAtMs: nil, db: db)
                        result(.granted)
                    } else {
                        result(.restored)  // a restore or a free re-purchase of what the account owns
                    }
                case .subscription(let name):
                    try Self.recordProcessed(p, accountId: accountId, rule: rule, coins: 0, nowMs: nowMs, db: db)
                    if owner == nil {
                        try Self.insertEntitlement(p, accountId: accountId, name: name, startsAtMs: p.purchaseDateMs,
                                                   expiresAtMs: p.expiresDateMs, db: db)
                        result(.granted)
                    } else if try Self.extendSubscription(p, db: db) {
                        result(.granted)  // a renewal: the entitlement now ends later
                    } else {
                        result(.restored)
                    }
                case .timeLimited(let name, let days):
                    try Self.recordProcessed(p, accountId: accountId, rule: rule, coins: 0, nowMs: nowMs, db: db)
                    if owner == nil {
                        // Back-to-back purchases stack: start from the later of now and the current end.
                        let currentEnd = try Int64.fetchOne(db.cachedStatement(sql: """
                            SELECT MAX(expiresAtMs) FROM entitlement
                            WHERE accountId = ? AND entitlement = ? AND revokedAtMs IS NULL AND expiresAtMs IS NOT NULL
                            """), arguments: [accountId, name]) ?? 0
                        let start = max(nowMs, currentEnd)
                        try Self.insertEntitlement(p, accountId: accountId, name: name, startsAtMs: start,
                                                   expiresAtMs: start + Int64(days) * 86_400_000, db: db)
                        result(.granted)
                    } else {
                        result(.restored)
                    }
                }
            }
            return Applied(results: results, balance: try Self.balance(accountId, db),
                           entitlements: try Self.activeEntitlements(accountId, nowMs: nowMs, db),
                           transfers: transfers)
        }
    }

    // MARK: revocation and renewal (notifications, admin)

    public enum RevokeOutcome: Sendable, Equatable { case revoked, alreadyRevoked, notFound }

    /// Revokes one processed transaction: its coins are reversed (floored at zero, the shortfall
    /// recorded) or its entitlement removed, with a reversal ledger row either way.
    public func revoke(transactionId: String, environment: String?, reason: String, nowMs: Int64) async throws -> RevokeOutcome {
        try await commits.write { db in
            let environments = try String.fetchAll(db.cachedStatement(sql: """
                SELECT environment FROM processedTransaction WHERE transactionId = ? AND (? IS NULL OR environment = ?)
                """), arguments: [transactionId, environment, environment])
            guard !environments.isEmpty else { return .notFound }
            var any = false
            for env in environments {
                any = try Self.revoke(environment: env, transactionId: transactionId, reason: reason, nowMs: nowMs, db: db) || any
            }
            return any ? .revoked : .alreadyRevoked
        }
    }

    /// The account an original transaction is bound to, if any.
    public func owner(environment: String, originalTransactionId: String) async throws -> String? {
        try await writer.read { db in
            try String.fetchOne(db.cachedStatement(sql: "SELECT accountId FROM ownership WHERE environment = ? AND originalTransactionId = ?"),
                                arguments: [environment, originalTransactionId])
        }
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
    }

    /// Spends once per (account, idempotency key). The same key with the same amount and memo answers
    /// the first result; with other params it is a conflict.
    public func spend(accountId: String, amount: Int64, idempotencyKey: String, memo: String?, nowMs: Int64) async throws -> SpendOutcome {
        try await commits.write { db in
            if let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT delta, balance, memo FROM ledger WHERE accountId = ? AND idempotencyKey = ?"), arguments: [accountId, idempotencyKey]) {
                let delta: Int64 = row["delta"], memoThen: String? = row["memo"]
                return delta == -amount && memoThen == memo ? .replayed(balance: row["balance"]) : .keyConflict
            }
            let balance = try Self.balance(accountId, db)
            guard balance >= amount else { return .insufficient(balance: balance) }
            let after = try Self.appendLedger(accountId: accountId, delta: -amount, kind: "spend", idempotencyKey: idempotencyKey,
                                              memo: memo, nowMs: nowMs, db: db)
            return .spent(balance: after)
        }
    }

    public func balance(accountId: String) async throws -> Int64 {
        try await writer.read { db in try Self.balance(accountId, db) }
    }

    public func entitlements(accountId: String, nowMs: Int64) async throws -> (entitlements: [Entitlement], balance: Int64) {
        try await writer.read { db in (try Self.activeEntitlements(accountId, nowMs: nowMs, db), try Self.balance(accountId, db)) }
    }

    /// Ledger rows after `after` (an entry id), oldest first; `next` when more remain.
    public func ledger(accountId: String, after: Int64, limit: Int) async throws -> (entries: [LedgerEntry], next: Int64?) {
        try await writer.read { db in
            let rows = try Row.fetchAll(db.cachedStatement(sql: """
                SELECT id, delta, balance, kind, transactionId, memo, shortfall, createdAtMs FROM ledger
                WHERE accountId = ? AND id > ? ORDER BY id LIMIT ?
                """), arguments: [accountId, after, limit + 1])
            let entries = rows.prefix(limit).map { row -> LedgerEntry in
                var e = LedgerEntry(id: row["id"], delta: row["delta"], balance: row["balance"],
                                    kind: LedgerKind(rawValue: row["kind"]) ?? .grant, transactionId: row["transactionId"],
                                    memo: row["memo"], createdAtMs: row["createdAtMs"])
                let shortfall: Int64 = row["shortfall"]
                if shortfall > 0 { e.shortfall = shortfall }
                return e
            }
            return (Array(entries), rows.count > limit ? entries.last?.id : nil)
        }
    }

    /// Owed coins (refunded after being spent) for an account.
    public func shortfall(accountId: String) async throws -> Int64 {
        try await writer.read { db in try Int64.fetchOne(db.cachedStatement(sql: "SELECT shortfall FROM wallet WHERE accountId = ?"), arguments: [accountId]) ?? 0 }
    }

    // MARK: invariants (tests, benchmarks, the crash harness)

    /// Accounts whose wallet balance differs from the sum of their ledger.
    public func ledgerMismatches() async throws -> [String] {
        try await writer.read { db in
            try String.fetchAll(db, sql: """
                SELECT w.accountId FROM wallet w
                LEFT JOIN (SELECT accountId, SUM(delta) AS total FROM ledger GROUP BY accountId) l ON l.accountId = w.accountId
                WHERE w.balance != COALESCE(l.total, 0)
                UNION
                SELECT l.accountId FROM ledger l LEFT JOIN wallet w ON w.accountId = l.accountId WHERE w.accountId IS NULL
                """)
        }
    }

    /// `PRAGMA synchronous` of the writing connection (2 = FULL).
    public func synchronousMode() async throws -> Int {
        try await writer.write { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    // MARK: statements (inside a write)

    private static func isProcessed(_ p: VerifiedPurchase, _ db: Database) throws -> Bool {
        try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM processedTransaction WHERE environment = ? AND transactionId = ?"),
                          arguments: [p.environment, p.transactionId]) ?? false
    }

    private struct ProcessedRow { var revokedAtMs: Int64? }

    private static func processed(_ p: VerifiedPurchase, _ db: Database) throws -> ProcessedRow? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT revokedAtMs FROM processedTransaction WHERE environment = ? AND transactionId = ?"),
                         arguments: [p.environment, p.transactionId]).map { ProcessedRow(revokedAtMs: $0["revokedAtMs"]) }
    }

    private static func recordProcessed(_ p: VerifiedPurchase, accountId: String, rule: GrantRule, coins: Int64, nowMs: Int64, db: Database) throws {
        try db.cachedStatement(sql: """
            INSERT INTO processedTransaction (environment, transactionId, originalTransactionId, accountId, productId, grantKind,
                                              coinsGranted, purchaseDateMs, expiresDateMs, processedAtMs)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [p.environment, p.transactionId, p.originalTransactionId, accountId, p.productId, rule.kind,
                             coins, p.purchaseDateMs, p.expiresDateMs, nowMs])
    }

    private static func bind(_ p: VerifiedPurchase, accountId: String, nowMs: Int64, db: Database) throws {
        try db.cachedStatement(sql: """
            INSERT INTO ownership (environment, originalTransactionId, accountId, productId, boundAtMs) VALUES (?, ?, ?, ?, ?)
            """).execute(arguments: [p.environment, p.originalTransactionId, accountId, p.productId, nowMs])
    }

    private static func transfer(_ p: VerifiedPurchase, from: String, to: String, nowMs: Int64, db: Database) throws {
        try db.cachedStatement(sql: "UPDATE ownership SET accountId = ?, boundAtMs = ? WHERE environment = ? AND originalTransactionId = ?").execute(arguments: [to, nowMs, p.environment, p.originalTransactionId])
        try db.cachedStatement(sql: "UPDATE entitlement SET accountId = ? WHERE environment = ? AND originalTransactionId = ?").execute(arguments: [to, p.environment, p.originalTransactionId])
        try db.cachedStatement(sql: """
            INSERT INTO ownershipTransfer (environment, originalTransactionId, fromAccountId, toAccountId, transferredAtMs)
            VALUES (?, ?, ?, ?, ?)
            """).execute(arguments: [p.environment, p.originalTransactionId, from, to, nowMs])
    }

    private static func insertEntitlement(_ p: VerifiedPurchase, accountId: String, name: String, startsAtMs: Int64,
                                          expiresAtMs: Int64?, db: Database) throws {
        try db.cachedStatement(sql: """
            INSERT INTO entitlement (environment, originalTransactionId, accountId, entitlement, productId, startsAtMs, expiresAtMs)
            VALUES (?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [p.environment, p.originalTransactionId, accountId, name, p.productId, startsAtMs, expiresAtMs])
    }

    /// Moves a subscription's end to this transaction's expiry if that is later (a renewal); a renewal
    /// bought after a revocation reinstates access. True if anything changed.
    private static func extendSubscription(_ p: VerifiedPurchase, db: Database) throws -> Bool {
        guard let expires = p.expiresDateMs else { return false }
        try db.cachedStatement(sql: """
            UPDATE entitlement SET expiresAtMs = ?, revokedAtMs = NULL
            WHERE environment = ? AND originalTransactionId = ?
              AND (expiresAtMs IS NULL OR expiresAtMs < ?)
              AND (revokedAtMs IS NULL OR revokedAtMs < ?)
            """).execute(arguments: [expires, p.environment, p.originalTransactionId, expires, p.purchaseDateMs])
        return db.changesCount > 0
    }

    /// Revokes inside a write; false if it was already revoked.
    @discardableResult
    private static func revoke(environment: String, transactionId: String, reason: String, nowMs: Int64, db: Database) throws -> Bool {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT accountId, originalTransactionId, productId, grantKind, coinsGranted, revokedAtMs FROM processedTransaction
            WHERE environment = ? AND transactionId = ?
            """), arguments: [environment, transactionId]) else { return false }
        let revokedAt: Int64? = row["revokedAtMs"]
        guard revokedAt == nil else { return false }
        try db.cachedStatement(sql: "UPDATE processedTransaction SET revokedAtMs = ?, revokeReason = ? WHERE environment = ? AND transactionId = ?").execute(arguments: [nowMs, reason, environment, transactionId])
        let accountId: String = row["accountId"], original: String = row["originalTransactionId"], productId: String = row["productId"]
        let coins: Int64 = row["coinsGranted"]
        if coins > 0 {
            let balance = try Self.balance(accountId, db)
            let taken = min(balance, coins)
            try appendLedger(accountId: accountId, delta: -taken, kind: "reversal", environment: environment, transactionId: transactionId,
                             memo: "\(reason): \(productId)", shortfall: coins - taken, nowMs: nowMs, db: db)
        } else {
            let name = try String.fetchOne(db.cachedStatement(sql: """
                SELECT entitlement FROM entitlement WHERE environment = ? AND originalTransactionId = ? AND revokedAtMs IS NULL
                """), arguments: [environment, original])
            try db.cachedStatement(sql: """
                UPDATE entitlement SET revokedAtMs = ? WHERE environment = ? AND originalTransactionId = ? AND revokedAtMs IS NULL
                """).execute(arguments: [nowMs, environment, original])
            if let name, (row["grantKind"] as String?) == GrantRule.timeLimitedKind {
                try restack(accountId: accountId, entitlement: name, nowMs: nowMs, db: db)
            }
            try appendLedger(accountId: accountId, delta: 0, kind: "reversal", environment: environment, transactionId: transactionId,
                             memo: "\(reason): \(productId)", nowMs: nowMs, db: db)
        }
        return true
    }

    /// After a stacked pass is revoked, the passes queued behind it move up: each one not yet started
    /// starts at the later of now and the end of the one before it, keeping its own length.
    private static func restack(accountId: String, entitlement: String, nowMs: Int64, db: Database) throws {
        let rows = try Row.fetchAll(db.cachedStatement(sql: """
            SELECT environment, originalTransactionId, startsAtMs, expiresAtMs FROM entitlement
            WHERE accountId = ? AND entitlement = ? AND revokedAtMs IS NULL AND expiresAtMs IS NOT NULL ORDER BY startsAtMs
            """), arguments: [accountId, entitlement])
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
                    UPDATE entitlement SET startsAtMs = ?, expiresAtMs = ? WHERE environment = ? AND originalTransactionId = ?
                    """).execute(arguments: [newStart, newStart + (end - start), row["environment"] as String, row["originalTransactionId"] as String])
            }
            cursor = newStart + (end - start)
        }
    }

    /// Appends a ledger row and moves the wallet by the same delta; returns the new balance.
    @discardableResult
    private static func appendLedger(accountId: String, delta: Int64, kind: String, environment: String? = nil, transactionId: String? = nil,
                                     idempotencyKey: String? = nil, memo: String?, shortfall: Int64 = 0, nowMs: Int64,
                                     db: Database) throws -> Int64 {
        try db.cachedStatement(sql: "INSERT OR IGNORE INTO wallet (accountId) VALUES (?)").execute(arguments: [accountId])
        try db.cachedStatement(sql: "UPDATE wallet SET balance = balance + ?, shortfall = shortfall + ? WHERE accountId = ?").execute(arguments: [delta, shortfall, accountId])
        let balance = try Self.balance(accountId, db)
        try db.cachedStatement(sql: """
            INSERT INTO ledger (accountId, delta, balance, kind, environment, transactionId, idempotencyKey, memo, shortfall, createdAtMs)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [accountId, delta, balance, kind, environment, transactionId, idempotencyKey, memo, shortfall, nowMs])
        return balance
    }

    private static func balance(_ accountId: String, _ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT balance FROM wallet WHERE accountId = ?"), arguments: [accountId]) ?? 0
    }

    /// Active entitlements, one per entitlement name: a permanent one wins, else the latest end.
    private static func activeEntitlements(_ accountId: String, nowMs: Int64, _ db: Database) throws -> [Entitlement] {
        let rows = try Row.fetchAll(db.cachedStatement(sql: """
            SELECT entitlement, productId, expiresAtMs, originalTransactionId FROM entitlement
            WHERE accountId = ? AND revokedAtMs IS NULL AND (expiresAtMs IS NULL OR expiresAtMs > ?)
            ORDER BY entitlement, expiresAtMs IS NOT NULL, expiresAtMs DESC, originalTransactionId
            """), arguments: [accountId, nowMs])
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
