import Foundation
import GRDB
import IAPProtocol
import JSONRPC
import ServiceSupport

/// The SQLite schema of fulfillment, migration by migration (each one once, in order, in one transaction).
extension FulfillmentStore {
    /// The eleven steps made from 2026-11-22 to 2026-11-26, merged on 2026-11-26 (GRDB's `merging:`) into the schema they
    /// left: a database those steps made is not touched (their names give way to this one's); a new one gets the same
    /// tables, keys, CHECKs, indexes and triggers (MigrationTests compares them with a database the steps made). A
    /// database stopped before the last step is refused (`SchemaTooOld`), unchanged.
    static let steps: [String] = [
        "v1", "v2-scopes-and-debt", "v3-notification-inbox", "v4-admin-audit", "v5-inbox-original", "v6-account-token-outbox",
        "v7-renewal-state-and-reinstatement", "v8-inbox-payload-apart", "v9-outbox", "v10-one-vocabulary", "v11-scope-checks",
    ]

    /// A step's name that lived for minutes on 2026-11-23 before it was renamed `v8-inbox-payload-apart`: a file that
    /// went through it also went through the eleven steps, and only the name is left of it.
    static let retired: [String] = ["v8-inbox-pending-order"]

    struct SchemaTooOld: Error, CustomStringConvertible {
        let lastStep: String
        var description: String {
            "fulfillment.sqlite was made by a build from before 2026-11-26 and stopped at \(lastStep): open it once with commit "
                + "61f9297 (which takes it to v11-scope-checks), then with this build; docs/operations.md, \"Upgrades\""
        }
    }

    /// A database a newer build migrated: this build refuses it rather than run on a schema it does not know.
    struct SchemaTooNew: Error, CustomStringConvertible {
        let unknown: [String]
        var description: String {
            "fulfillment.sqlite has migrations this build does not know (\(unknown.joined(separator: ", "))): it was used by a "
                + "newer version; run that version or restore a backup taken before the upgrade"
        }
    }

    /// Refuses a newer database, then migrates.
    static func migrate(_ writer: any DatabaseWriter) throws {
        let m = migrator
        let applied = try writer.read { db in try m.appliedIdentifiers(db) }
        let unknown = applied.subtracting(m.migrations).subtracting(steps).subtracting(retired)
        guard unknown.isEmpty else { throw SchemaTooNew(unknown: unknown.sorted()) }
        try m.migrate(writer)
    }

    package static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1-2026-11-26", merging: Set(steps + retired)) { db, applied in
            if applied.isSuperset(of: steps) { return }
            if let last = steps.last(where: applied.contains) { throw SchemaTooOld(lastStep: last) }
            try db.execute(
                sql: """
                    CREATE TABLE ownership_transfer (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        environment TEXT NOT NULL,
                        original_transaction_id TEXT NOT NULL,
                        from_account_id TEXT NOT NULL,
                        to_account_id TEXT NOT NULL,
                        transferred_at_ms INTEGER NOT NULL);
                    -- Kept for databases from before the inbox (2026-11-23): notifications applied then; never written since.
                    CREATE TABLE applied_notification (
                        notification_uuid TEXT PRIMARY KEY NOT NULL, notification_type TEXT NOT NULL, applied_at_ms INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    CREATE TABLE wallet (
                        account_id TEXT NOT NULL,
                        scope TEXT NOT NULL CHECK (scope IN ('Production', 'Sandbox')),
                        balance INTEGER NOT NULL DEFAULT 0 CHECK (balance >= 0),
                        -- coins refunded after they were spent: repaid by later grants before any spend
                        owed INTEGER NOT NULL DEFAULT 0 CHECK (owed >= 0),
                        PRIMARY KEY (account_id, scope)
                    ) WITHOUT ROWID;
                    CREATE TABLE admin_audit (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        at_ms INTEGER NOT NULL,
                        action TEXT NOT NULL,
                        account_id TEXT,
                        transaction_id TEXT,
                        reason TEXT NOT NULL,
                        credential TEXT NOT NULL);
                    CREATE TABLE subscription_renewal (
                        original_transaction_id TEXT PRIMARY KEY NOT NULL,
                        auto_renew INTEGER NOT NULL,
                        auto_renew_product_id TEXT,
                        in_billing_retry INTEGER NOT NULL,
                        grace_period_expires_at_ms INTEGER,
                        expiration_intent INTEGER,
                        price_increase_status INTEGER,
                        signed_date_ms INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    CREATE TABLE reconcile_checkpoint (environment TEXT PRIMARY KEY NOT NULL, signed_date_ms INTEGER NOT NULL) WITHOUT ROWID;
                    -- A refund or revocation Apple announced before the purchase was ever redeemed here: its redeem grants nothing.
                    CREATE TABLE early_revocation (
                        transaction_id TEXT PRIMARY KEY NOT NULL, reason TEXT NOT NULL, recorded_at_ms INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    CREATE TABLE ledger (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        account_id TEXT NOT NULL,
                        scope TEXT NOT NULL CHECK (scope IN ('Production', 'Sandbox')),
                        delta INTEGER NOT NULL,
                        balance INTEGER NOT NULL CHECK (balance >= 0),
                        kind TEXT NOT NULL CHECK (kind IN ('grant', 'spend', 'reversal', 'recovery', 'reinstatement')),
                        environment TEXT,
                        transaction_id TEXT,
                        idempotency_key TEXT,
                        memo TEXT,
                        debt INTEGER NOT NULL DEFAULT 0 CHECK (debt >= 0),           -- owed added (reversals)
                        recovered INTEGER NOT NULL DEFAULT 0 CHECK (recovered >= 0), -- owed repaid (recoveries) or forgiven (reinstatements)
                        owed INTEGER NOT NULL DEFAULT 0 CHECK (owed >= 0),           -- owed after this row
                        created_at_ms INTEGER NOT NULL,
                        CHECK (kind != 'grant' OR (delta > 0 AND transaction_id IS NOT NULL)),
                        CHECK (kind != 'spend' OR (delta < 0 AND idempotency_key IS NOT NULL)),
                        CHECK (kind != 'reversal' OR (delta <= 0 AND transaction_id IS NOT NULL)),
                        CHECK (kind != 'recovery' OR (delta < 0 AND recovered = -delta AND transaction_id IS NOT NULL)),
                        CHECK (kind != 'reinstatement' OR (delta >= 0 AND transaction_id IS NOT NULL)),
                        CHECK (kind = 'reversal' OR debt = 0),
                        CHECK (kind IN ('recovery', 'reinstatement') OR recovered = 0),
                        UNIQUE (account_id, scope, idempotency_key));
                    -- A notification's payload apart from its inbox row: written once, while the row changes state.
                    CREATE TABLE notification_payload (
                        notification_uuid TEXT PRIMARY KEY NOT NULL, signed_payload TEXT NOT NULL, notification BLOB NOT NULL);
                    CREATE TABLE notification_inbox (
                        notification_uuid TEXT PRIMARY KEY NOT NULL,
                        notification_type TEXT NOT NULL,
                        subtype TEXT,
                        signed_date_ms INTEGER,
                        received_at_ms INTEGER NOT NULL,
                        state TEXT NOT NULL CHECK (state IN ('pending', 'applied', 'ignored', 'parked')),
                        attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
                        next_attempt_at_ms INTEGER NOT NULL,
                        last_error TEXT,
                        processed_at_ms INTEGER,
                        original_transaction_id TEXT
                    ) WITHOUT ROWID;
                    CREATE TABLE outbox (
                        id INTEGER PRIMARY KEY,
                        kind TEXT NOT NULL,
                        item_key TEXT NOT NULL,
                        payload TEXT NOT NULL,
                        attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
                        created_at_ms INTEGER NOT NULL,
                        next_attempt_at_ms INTEGER NOT NULL,
                        last_error TEXT,
                        UNIQUE (kind, item_key));
                    -- Keyed by (environment, id) with id alone unique: one environment per purchase, whatever a later copy claims.
                    CREATE TABLE processed_transaction (
                        environment TEXT NOT NULL,
                        transaction_id TEXT NOT NULL,
                        original_transaction_id TEXT NOT NULL,
                        account_id TEXT NOT NULL,
                        product_id TEXT NOT NULL,
                        grant_kind TEXT NOT NULL,
                        coins_granted INTEGER NOT NULL DEFAULT 0 CHECK (coins_granted >= 0),
                        purchase_date_ms INTEGER NOT NULL,
                        expires_date_ms INTEGER,
                        processed_at_ms INTEGER NOT NULL,
                        revoked_at_ms INTEGER,
                        revoke_reason TEXT, scope TEXT NOT NULL DEFAULT 'Production' CHECK (scope IN ('Production', 'Sandbox')),
                        PRIMARY KEY (environment, transaction_id)
                    ) WITHOUT ROWID;
                    CREATE TABLE ownership (
                        environment TEXT NOT NULL,
                        original_transaction_id TEXT NOT NULL,
                        account_id TEXT NOT NULL,
                        product_id TEXT NOT NULL,
                        bound_at_ms INTEGER NOT NULL, scope TEXT NOT NULL DEFAULT 'Production' CHECK (scope IN ('Production', 'Sandbox')),
                        PRIMARY KEY (environment, original_transaction_id)
                    ) WITHOUT ROWID;
                    -- One row per original transaction that grants an entitlement.
                    CREATE TABLE entitlement (
                        environment TEXT NOT NULL,
                        original_transaction_id TEXT NOT NULL,
                        account_id TEXT NOT NULL,
                        entitlement TEXT NOT NULL,
                        product_id TEXT NOT NULL,
                        starts_at_ms INTEGER NOT NULL,
                        expires_at_ms INTEGER,            -- NULL: permanent
                        revoked_at_ms INTEGER, scope TEXT NOT NULL DEFAULT 'Production' CHECK (scope IN ('Production', 'Sandbox')),
                        PRIMARY KEY (environment, original_transaction_id)
                    ) WITHOUT ROWID;
                    CREATE INDEX ledger_by_account ON ledger(account_id, scope, id);
                    CREATE UNIQUE INDEX ledger_once ON ledger(kind, transaction_id) WHERE kind IN ('grant', 'recovery');
                    CREATE INDEX ledger_by_transaction ON ledger(transaction_id, kind);
                    CREATE INDEX inbox_received ON notification_inbox(received_at_ms);
                    CREATE INDEX inbox_by_original ON notification_inbox(original_transaction_id, state, signed_date_ms);
                    -- The worker's batch of due notifications in signed order, from the index alone (InboxQueryPlanTests).
                    CREATE INDEX inbox_pending_order ON notification_inbox(state, signed_date_ms, received_at_ms, next_attempt_at_ms, notification_uuid);
                    CREATE INDEX outbox_due ON outbox (next_attempt_at_ms, id);
                    CREATE INDEX processed_by_original ON processed_transaction(environment, original_transaction_id);
                    CREATE UNIQUE INDEX processed_one_environment ON processed_transaction(transaction_id);
                    CREATE UNIQUE INDEX ownership_one_environment ON ownership(original_transaction_id);
                    CREATE UNIQUE INDEX entitlement_one_environment ON entitlement(original_transaction_id);
                    CREATE INDEX entitlement_by_account ON entitlement(account_id, scope, entitlement);
                    CREATE TRIGGER adminAudit_no_update BEFORE UPDATE ON admin_audit
                        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
                    CREATE TRIGGER adminAudit_no_delete BEFORE DELETE ON admin_audit
                        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
                    CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger
                        BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
                    CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger
                        BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
                    """)
        }
        // 2026-11-26: the content each account was given a download of (consumption answers: how much was delivered).
        m.registerMigration("v2-content-deliveries") { db in
            try db.execute(
                sql: """
                    CREATE TABLE content_delivery (
                        account_id TEXT NOT NULL,
                        scope TEXT NOT NULL CHECK (scope IN ('Production', 'Sandbox')),
                        content_id TEXT NOT NULL,
                        first_at_ms INTEGER NOT NULL,
                        PRIMARY KEY (account_id, scope, content_id)
                    ) WITHOUT ROWID;
                    """)
        }
        // 2026-11-26: the event feed and webhook endpoints (docs/events.md).
        m.registerMigration("v3-events") { db in
            try db.execute(
                sql: """
                    CREATE TABLE event (
                        id INTEGER PRIMARY KEY,
                        tx_order INTEGER NOT NULL DEFAULT 0,  -- one writer: ids are commit order
                        account_id TEXT NOT NULL,
                        sequence INTEGER NOT NULL CHECK (sequence > 0),
                        type TEXT NOT NULL,
                        occurred_at_ms INTEGER NOT NULL,
                        environment TEXT NOT NULL,
                        balance INTEGER NOT NULL,
                        owed INTEGER NOT NULL,
                        body TEXT NOT NULL,
                        UNIQUE (account_id, sequence));
                    CREATE INDEX event_order ON event (tx_order, id);
                    CREATE TABLE webhook_endpoint (
                        id TEXT PRIMARY KEY,
                        url TEXT NOT NULL,
                        types TEXT NOT NULL,         -- space-separated; '' for all
                        environments TEXT NOT NULL,  -- space-separated; '' for all
                        allow_private_address INTEGER NOT NULL,
                        secret TEXT NOT NULL,
                        previous_secret TEXT,
                        previous_secret_until_ms INTEGER,
                        state TEXT NOT NULL CHECK (state IN ('active', 'paused', 'failing')),
                        created_at_ms INTEGER NOT NULL,
                        dispatched_tx_order INTEGER NOT NULL,  -- the feed read up to here for this endpoint
                        dispatched_id INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE webhook_progress (
                        endpoint_id TEXT NOT NULL,
                        account_id TEXT NOT NULL,
                        delivered_sequence INTEGER NOT NULL,
                        generation INTEGER NOT NULL DEFAULT 0,  -- bumped by a redelivery: a settle of the round before it changes nothing
                        PRIMARY KEY (endpoint_id, account_id)) WITHOUT ROWID;
                    CREATE TABLE webhook_attempt (
                        id INTEGER PRIMARY KEY,
                        endpoint_id TEXT NOT NULL,
                        account_id TEXT NOT NULL,
                        sequence INTEGER NOT NULL,
                        attempted_at_ms INTEGER NOT NULL,
                        status INTEGER,
                        latency_ms INTEGER NOT NULL,
                        error TEXT);
                    CREATE INDEX webhook_attempt_by_endpoint ON webhook_attempt (endpoint_id, id);
                    """)
        }
        // 2026-11-27, for the support console: coins an operator gives or takes back (ledger kind `adjustment`, rebuilt
        // because SQLite cannot change a CHECK in place; the append-only triggers go and come back around the copy), who
        // acted, and what each purchase cost (its signed transaction's price in milliunits and currency; NULL: unpriced).
        m.registerMigration("v4-adjustments") { db in
            try db.execute(
                sql: """
                    DROP TRIGGER ledger_no_update;
                    DROP TRIGGER ledger_no_delete;
                    CREATE TABLE ledger_next (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        account_id TEXT NOT NULL,
                        scope TEXT NOT NULL CHECK (scope IN ('Production', 'Sandbox')),
                        delta INTEGER NOT NULL,
                        balance INTEGER NOT NULL CHECK (balance >= 0),
                        kind TEXT NOT NULL CHECK (kind IN ('grant', 'spend', 'reversal', 'recovery', 'reinstatement', 'adjustment')),
                        environment TEXT,
                        transaction_id TEXT,
                        idempotency_key TEXT,
                        memo TEXT,
                        debt INTEGER NOT NULL DEFAULT 0 CHECK (debt >= 0),
                        recovered INTEGER NOT NULL DEFAULT 0 CHECK (recovered >= 0),
                        owed INTEGER NOT NULL DEFAULT 0 CHECK (owed >= 0),
                        created_at_ms INTEGER NOT NULL,
                        CHECK (kind != 'grant' OR (delta > 0 AND transaction_id IS NOT NULL)),
                        CHECK (kind != 'spend' OR (delta < 0 AND idempotency_key IS NOT NULL)),
                        CHECK (kind != 'reversal' OR (delta <= 0 AND transaction_id IS NOT NULL)),
                        CHECK (kind != 'recovery' OR (delta < 0 AND recovered = -delta AND transaction_id IS NOT NULL)),
                        CHECK (kind != 'reinstatement' OR (delta >= 0 AND transaction_id IS NOT NULL)),
                        CHECK (kind != 'adjustment' OR (delta != 0 AND idempotency_key IS NOT NULL AND memo IS NOT NULL)),
                        CHECK (kind = 'reversal' OR debt = 0),
                        CHECK (kind IN ('recovery', 'reinstatement') OR recovered = 0),
                        UNIQUE (account_id, scope, idempotency_key));
                    INSERT INTO ledger_next SELECT * FROM ledger;
                    DROP TABLE ledger;
                    ALTER TABLE ledger_next RENAME TO ledger;
                    CREATE INDEX ledger_by_account ON ledger(account_id, scope, id);
                    CREATE UNIQUE INDEX ledger_once ON ledger(kind, transaction_id) WHERE kind IN ('grant', 'recovery');
                    CREATE INDEX ledger_by_transaction ON ledger(transaction_id, kind);
                    CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger
                        BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
                    CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger
                        BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
                    ALTER TABLE admin_audit ADD COLUMN operator_name TEXT;
                    CREATE INDEX admin_audit_by_account ON admin_audit (account_id, id);
                    ALTER TABLE processed_transaction ADD COLUMN price INTEGER CHECK (price >= 0);
                    ALTER TABLE processed_transaction ADD COLUMN currency TEXT CHECK (length(currency) = 3);
                    CREATE INDEX processed_by_purchase_date ON processed_transaction (purchase_date_ms);
                    CREATE INDEX processed_by_processed_at ON processed_transaction (processed_at_ms);
                    CREATE INDEX processed_by_revoked_at ON processed_transaction (revoked_at_ms) WHERE revoked_at_ms IS NOT NULL;
                    """)
        }
        // 2026-11-27: Retention Messaging: each answer to Apple's Get Retention Message request, once per request, and an
        // offer once per customer; the account's refunds are counted by account.
        m.registerMigration("v5-retention") { db in
            try db.execute(
                sql: """
                    CREATE TABLE retention_answer (
                        request_identifier TEXT PRIMARY KEY NOT NULL,
                        customer_key TEXT NOT NULL,
                        environment TEXT NOT NULL CHECK (environment IN ('Production', 'Sandbox')),
                        original_transaction_id TEXT NOT NULL,
                        account_id TEXT,
                        product_id TEXT NOT NULL,
                        choice_id TEXT,
                        kind TEXT NOT NULL CHECK (kind IN ('message', 'alternateProduct', 'promotionalOffer', 'none')),
                        offer_id TEXT CHECK (offer_id IS NULL OR kind = 'promotionalOffer'),
                        response TEXT NOT NULL,
                        reason TEXT,
                        answered_at_ms INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE UNIQUE INDEX retention_offer_once ON retention_answer (customer_key, offer_id) WHERE offer_id IS NOT NULL;
                    CREATE INDEX processed_by_account ON processed_transaction (account_id);
                    ALTER TABLE processed_transaction ADD COLUMN offer_identifier TEXT;
                    """)
        }
        // 2026-11-27: the package of each Google Play subscription granted here, for the subscription sweep at Google
        // (Google's API is addressed by package; a push or the app names it, a sweep has only what was kept); the units a
        // Google Play one-time purchase was granted for, for its quantity-based partial refunds.
        m.registerMigration("v6-play") { db in
            try db.execute(
                sql: """
                    CREATE TABLE play_package (purchase_token TEXT PRIMARY KEY NOT NULL, package_name TEXT NOT NULL) WITHOUT ROWID;
                    ALTER TABLE processed_transaction ADD COLUMN units INTEGER CHECK (units > 0);
                    """)
        }
        // 2026-11-29: one claim per transaction id whose fate was first decided here (`FulfillmentTransaction.claim`). One
        // writer at a time never races here; the same records as PostgreSQL's, where a redeem and an early refund do.
        m.registerMigration("v7-transaction-claim") { db in
            try db.execute(
                sql: """
                    CREATE TABLE transaction_claim (transaction_id TEXT PRIMARY KEY NOT NULL) WITHOUT ROWID;
                    INSERT INTO transaction_claim (transaction_id)
                        SELECT transaction_id FROM processed_transaction UNION SELECT transaction_id FROM early_revocation;
                    """)
        }
        // 2026-11-30: PostgreSQL's webhook start snapshot (`WebhookRecords.insert`); always NULL here (one writer).
        m.registerMigration("v8-webhook-start") { db in
            try db.execute(sql: "ALTER TABLE webhook_endpoint ADD COLUMN start_snapshot TEXT")
        }
        // 2026-11-30: the share of an Apple prorated refund remembered before the purchase's first redeem (NULL: the whole).
        m.registerMigration("v9-early-refund-share") { db in
            try db.execute(sql: "ALTER TABLE early_revocation ADD COLUMN refund_share_milli INTEGER")
        }
        // 2026-11-30: when Apple last signed that a transaction stands (a refund's reversal, its current copy) and that it
        // is refunded, redeemed here or not (`StoredPurchase.standsSignedMs`, `refundSignedMs`).
        m.registerMigration("v10-signed-standing") { db in
            try db.execute(
                sql: """
                    CREATE TABLE signed_standing (
                        transaction_id TEXT PRIMARY KEY NOT NULL, stands_signed_ms INTEGER, refunded_signed_ms INTEGER
                    ) WITHOUT ROWID
                    """)
        }
        return m
    }
}
