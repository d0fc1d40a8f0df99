import Foundation
import GRDB
import IAPProtocol
import JSONRPC
import ServiceSupport

/// The SQLite schema of fulfillment, migration by migration (each one once, in order, in one transaction).
extension FulfillmentStore {
    package static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.execute(
                sql: """
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
            // docs/security.md. One environment per purchase: a transaction id, an original's owner
            // and its entitlement can be recorded once, whatever environment a later copy claims. Every
            // account has two scopes (Production, Sandbox), each with its own wallet, ledger and
            // entitlements. Refunds of spent coins are debt (`owed`), repaid by later grants.
            try db.execute(
                sql: """
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
        m.registerMigration("v3-notification-inbox") { db in
            // docs/contract.md, "App Store Server Notifications": every verified notification is recorded before the webhook answers.
            try db.execute(
                sql: """
                    CREATE TABLE notificationInbox (
                        notificationUUID TEXT PRIMARY KEY NOT NULL,
                        notificationType TEXT NOT NULL,
                        subtype TEXT,
                        signedDateMs INTEGER,
                        signedPayload TEXT NOT NULL,
                        notification BLOB NOT NULL,
                        receivedAtMs INTEGER NOT NULL,
                        state TEXT NOT NULL CHECK (state IN ('pending', 'applied', 'ignored', 'parked')),
                        attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
                        nextAttemptAtMs INTEGER NOT NULL,
                        lastError TEXT,
                        processedAtMs INTEGER
                    ) WITHOUT ROWID;
                    CREATE INDEX inbox_due ON notificationInbox(state, nextAttemptAtMs);
                    CREATE INDEX inbox_received ON notificationInbox(receivedAtMs);
                    """)
        }
        m.registerMigration("v4-admin-audit") { db in
            try db.execute(
                sql: """
                    CREATE TABLE adminAudit (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        atMs INTEGER NOT NULL,
                        action TEXT NOT NULL,
                        accountId TEXT,
                        transactionId TEXT,
                        reason TEXT NOT NULL,
                        credential TEXT NOT NULL
                    );
                    CREATE TRIGGER adminAudit_no_update BEFORE UPDATE ON adminAudit
                        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
                    CREATE TRIGGER adminAudit_no_delete BEFORE DELETE ON adminAudit
                        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
                    """)
        }
        m.registerMigration("v5-inbox-original") { db in
            // Forward-only processing per purchase needs each notification's original transaction.
            try db.execute(
                sql: """
                    ALTER TABLE notificationInbox ADD COLUMN originalTransactionId TEXT;
                    CREATE INDEX inbox_by_original ON notificationInbox(originalTransactionId, state, signedDateMs);
                    """)
        }
        m.registerMigration("v6-account-token-outbox") { db in
            try db.execute(
                sql: """
                    CREATE TABLE accountTokenOutbox (
                        originalTransactionId TEXT PRIMARY KEY NOT NULL, appAccountToken TEXT NOT NULL,
                        attempts INTEGER NOT NULL DEFAULT 0, nextAttemptAtMs INTEGER NOT NULL, lastError TEXT
                    ) WITHOUT ROWID;
                    CREATE INDEX accountTokenOutbox_due ON accountTokenOutbox(nextAttemptAtMs);
                    """)
        }
        m.registerMigration("v7-renewal-state-and-reinstatement") { db in
            // Subscription renewal state from Apple's signed renewal info (docs/services/fulfillment.md), and the ledger
            // gains `reinstatement` (a refund Apple reversed: the coins back, the debt the refund made forgiven).
            // Reversals and reinstatements may repeat for one transaction (refunded, reversed, refunded again);
            // grants and recoveries stay once per transaction.
            try db.execute(
                sql: """
                    CREATE TABLE subscriptionRenewal (
                        originalTransactionId TEXT PRIMARY KEY NOT NULL,
                        autoRenew INTEGER NOT NULL,
                        autoRenewProductId TEXT,
                        inBillingRetry INTEGER NOT NULL,
                        gracePeriodExpiresAtMs INTEGER,
                        expirationIntent INTEGER,
                        priceIncreaseStatus INTEGER,
                        signedDateMs INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    -- A refund or revocation Apple announced before the purchase was ever redeemed here: the
                    -- redeem that brings it grants nothing.
                    CREATE TABLE reconcileCheckpoint (environment TEXT PRIMARY KEY NOT NULL, signedDateMs INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE earlyRevocation (
                        transactionId TEXT PRIMARY KEY NOT NULL, reason TEXT NOT NULL, recordedAtMs INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    DROP TRIGGER ledger_no_update;
                    DROP TRIGGER ledger_no_delete;
                    ALTER TABLE ledger RENAME TO ledger_v2;
                    CREATE TABLE ledger (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        accountId TEXT NOT NULL,
                        scope TEXT NOT NULL CHECK (scope IN ('Production', 'Sandbox')),
                        delta INTEGER NOT NULL,
                        balance INTEGER NOT NULL CHECK (balance >= 0),
                        kind TEXT NOT NULL CHECK (kind IN ('grant', 'spend', 'reversal', 'recovery', 'reinstatement')),
                        environment TEXT,
                        transactionId TEXT,
                        idempotencyKey TEXT,
                        memo TEXT,
                        debt INTEGER NOT NULL DEFAULT 0 CHECK (debt >= 0),           -- owed added (reversals)
                        recovered INTEGER NOT NULL DEFAULT 0 CHECK (recovered >= 0), -- owed repaid (recoveries) or forgiven (reinstatements)
                        owed INTEGER NOT NULL DEFAULT 0 CHECK (owed >= 0),           -- owed after this row
                        createdAtMs INTEGER NOT NULL,
                        CHECK (kind != 'grant' OR (delta > 0 AND transactionId IS NOT NULL)),
                        CHECK (kind != 'spend' OR (delta < 0 AND idempotencyKey IS NOT NULL)),
                        CHECK (kind != 'reversal' OR (delta <= 0 AND transactionId IS NOT NULL)),
                        CHECK (kind != 'recovery' OR (delta < 0 AND recovered = -delta AND transactionId IS NOT NULL)),
                        CHECK (kind != 'reinstatement' OR (delta >= 0 AND transactionId IS NOT NULL)),
                        CHECK (kind = 'reversal' OR debt = 0),
                        CHECK (kind IN ('recovery', 'reinstatement') OR recovered = 0),
                        UNIQUE (accountId, scope, idempotencyKey)
                    );
                    INSERT INTO ledger SELECT * FROM ledger_v2;
                    DROP TABLE ledger_v2;
                    CREATE INDEX ledger_by_account ON ledger(accountId, scope, id);
                    CREATE UNIQUE INDEX ledger_once ON ledger(kind, transactionId) WHERE kind IN ('grant', 'recovery');
                    CREATE INDEX ledger_by_transaction ON ledger(transactionId, kind);
                    CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger
                        BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
                    CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger
                        BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
                    """)
        }
        m.registerMigration("v8-inbox-payload-apart") { db in
            // Found profiling the webhook benchmark (fulfillment read ~300 KB per notification):
            // - The signed payload and the decoded notification (~13 KB a row) lived in the inbox row, which changes
            //   state two or three times (leased, applied); SQLite rewrites a whole row, overflow pages and all, on
            //   every UPDATE. They now live apart, written once; the inbox row is small.
            // - The worker takes due notifications in signed order; with only (state, nextAttemptAtMs) SQLite read
            //   every pending row, payloads included, and sorted them for each batch of 100 (a backlog cost its square
            //   to drain). `inbox_pending_order` is in the batch's order and covers its filter.
            try db.execute(
                sql: """
                    CREATE TABLE notificationPayload (
                        notificationUUID TEXT PRIMARY KEY NOT NULL,
                        signedPayload TEXT NOT NULL,
                        notification BLOB NOT NULL
                    );
                    INSERT INTO notificationPayload (notificationUUID, signedPayload, notification)
                        SELECT notificationUUID, signedPayload, notification FROM notificationInbox ORDER BY receivedAtMs;
                    CREATE TABLE notificationInbox_v8 (
                        notificationUUID TEXT PRIMARY KEY NOT NULL,
                        notificationType TEXT NOT NULL,
                        subtype TEXT,
                        signedDateMs INTEGER,
                        receivedAtMs INTEGER NOT NULL,
                        state TEXT NOT NULL CHECK (state IN ('pending', 'applied', 'ignored', 'parked')),
                        attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
                        nextAttemptAtMs INTEGER NOT NULL,
                        lastError TEXT,
                        processedAtMs INTEGER,
                        originalTransactionId TEXT
                    ) WITHOUT ROWID;
                    INSERT INTO notificationInbox_v8
                        SELECT notificationUUID, notificationType, subtype, signedDateMs, receivedAtMs, state, attempts, nextAttemptAtMs,
                               lastError, processedAtMs, originalTransactionId FROM notificationInbox;
                    DROP TABLE notificationInbox;
                    ALTER TABLE notificationInbox_v8 RENAME TO notificationInbox;
                    CREATE INDEX inbox_received ON notificationInbox(receivedAtMs);
                    CREATE INDEX inbox_by_original ON notificationInbox(originalTransactionId, state, signedDateMs);
                    CREATE INDEX inbox_pending_order ON notificationInbox(state, signedDateMs, receivedAtMs, nextAttemptAtMs, notificationUUID);
                    """)
        }
        m.registerMigration("v9-outbox") { db in
            // One durable outbox for everything owed to an outside party after a commit (the appAccountToken ties
            // first), never dropped. Its columns are named as in PostgreSQL's schema.
            try db.execute(
                sql: """
                    CREATE TABLE outbox (
                        id INTEGER PRIMARY KEY,
                        kind TEXT NOT NULL,
                        item_key TEXT NOT NULL,
                        payload TEXT NOT NULL,
                        attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
                        created_at_ms INTEGER NOT NULL,
                        next_attempt_at_ms INTEGER NOT NULL,
                        last_error TEXT,
                        UNIQUE (kind, item_key)
                    );
                    CREATE INDEX outbox_due ON outbox (next_attempt_at_ms, id);
                    INSERT INTO outbox (kind, item_key, payload, attempts, created_at_ms, next_attempt_at_ms, last_error)
                        SELECT 'appAccountToken', originalTransactionId, appAccountToken, attempts, nextAttemptAtMs, nextAttemptAtMs, lastError
                        FROM accountTokenOutbox;
                    DROP TABLE accountTokenOutbox;
                    """)
        }
        m.registerMigration("v10-one-vocabulary") { db in
            // PostgreSQL's names (snake_case) for every table and column, so each statement is written once for both
            // engines (`FulfillmentRecords`). Names only: no row moves; SQLite rewrites indexes and triggers itself.
            let tables = try String.fetchAll(
                db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != 'grdb_migrations'")
            for table in tables {
                for column in try String.fetchAll(db, sql: "SELECT name FROM pragma_table_info(?)", arguments: [table])
                where snakeCase(column) != column {
                    try db.execute(sql: "ALTER TABLE \"\(table)\" RENAME COLUMN \"\(column)\" TO \"\(snakeCase(column))\"")
                }
                if snakeCase(table) != table { try db.execute(sql: "ALTER TABLE \"\(table)\" RENAME TO \"\(snakeCase(table))\"") }
            }
        }
        m.registerMigration("v11-scope-checks") { db in
            // PostgreSQL's schema CHECKs every row's scope; v2 added SQLite's scope columns by ALTER TABLE, which cannot
            // add a CHECK. Each table is rebuilt with it, SQLite's documented way to change a table (a new table, the rows
            // copied, swapped in, its indexes made again); a row with another scope makes the migration fail.
            let column = "scope TEXT NOT NULL DEFAULT 'Production'"
            for table in ["processed_transaction", "ownership", "entitlement"] {
                let sql = try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", arguments: [table])
                let indexes = try String.fetchAll(
                    db, sql: "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL", arguments: [table])
                guard let sql, sql.contains(column), let header = sql.firstRange(of: /^CREATE TABLE [^(]+\(/) else {
                    throw StoredValueInvalid(column: "\(table).scope", value: sql ?? "(no table)")
                }
                let rebuilt = sql.replacingCharacters(in: header, with: "CREATE TABLE \(table)_v11 (")
                    .replacingOccurrences(of: column, with: column + " CHECK (scope IN ('Production', 'Sandbox'))")
                try db.execute(sql: rebuilt)
                try db.execute(sql: "INSERT INTO \(table)_v11 SELECT * FROM \(table)")
                try db.execute(sql: "DROP TABLE \(table)")
                try db.execute(sql: "ALTER TABLE \(table)_v11 RENAME TO \(table)")
                for index in indexes { try db.execute(sql: index) }
            }
        }
        return m
    }

    /// `originalTransactionId` -> `original_transaction_id`, `notificationUUID` -> `notification_uuid`.
    static func snakeCase(_ name: String) -> String {
        name.replacing(/([a-z0-9])([A-Z])/) { "\($0.output.1)_\($0.output.2)" }.lowercased()
    }
}
