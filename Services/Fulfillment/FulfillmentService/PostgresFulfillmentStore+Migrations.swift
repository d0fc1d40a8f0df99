import Foundation
import IAPProtocol
import JSONRPC
import NIOCore
import PostgresNIO
import PostgresSupport

/// The PostgreSQL schema of fulfillment, migration by migration (the same records as the SQLite schema).
extension PostgresFulfillmentStore {
    static let migrations: [PostgresMigration] = [
        PostgresMigration(
            "v1",
            """
            CREATE FUNCTION refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION '% is append-only', TG_TABLE_NAME; END $$;

            CREATE TABLE wallet (
                account_id TEXT NOT NULL,
                scope TEXT NOT NULL CHECK (scope IN ('Production', 'Sandbox')),
                balance BIGINT NOT NULL DEFAULT 0 CHECK (balance >= 0),
                -- coins refunded after they were spent: repaid by later grants before any spend
                owed BIGINT NOT NULL DEFAULT 0 CHECK (owed >= 0),
                PRIMARY KEY (account_id, scope));

            -- One row per transaction id, whatever environment a later copy claims.
            CREATE TABLE processed_transaction (
                transaction_id TEXT PRIMARY KEY,
                environment TEXT NOT NULL,
                original_transaction_id TEXT NOT NULL,
                account_id TEXT NOT NULL,
                scope TEXT NOT NULL CHECK (scope IN ('Production', 'Sandbox')),
                product_id TEXT NOT NULL,
                grant_kind TEXT NOT NULL,
                coins_granted BIGINT NOT NULL DEFAULT 0 CHECK (coins_granted >= 0),
                purchase_date_ms BIGINT NOT NULL,
                expires_date_ms BIGINT,
                processed_at_ms BIGINT NOT NULL,
                revoked_at_ms BIGINT,
                revoke_reason TEXT);
            CREATE INDEX processed_by_original ON processed_transaction (environment, original_transaction_id);

            -- One owner per original transaction.
            CREATE TABLE ownership (
                original_transaction_id TEXT PRIMARY KEY,
                environment TEXT NOT NULL,
                account_id TEXT NOT NULL,
                scope TEXT NOT NULL CHECK (scope IN ('Production', 'Sandbox')),
                product_id TEXT NOT NULL,
                bound_at_ms BIGINT NOT NULL);

            CREATE TABLE ownership_transfer (
                id BIGSERIAL PRIMARY KEY,
                environment TEXT NOT NULL,
                original_transaction_id TEXT NOT NULL,
                from_account_id TEXT NOT NULL,
                to_account_id TEXT NOT NULL,
                transferred_at_ms BIGINT NOT NULL);

            -- One row per original transaction that grants an entitlement.
            CREATE TABLE entitlement (
                original_transaction_id TEXT PRIMARY KEY,
                environment TEXT NOT NULL,
                account_id TEXT NOT NULL,
                scope TEXT NOT NULL CHECK (scope IN ('Production', 'Sandbox')),
                entitlement TEXT NOT NULL,
                product_id TEXT NOT NULL,
                starts_at_ms BIGINT NOT NULL,
                expires_at_ms BIGINT,            -- NULL: permanent
                revoked_at_ms BIGINT);
            CREATE INDEX entitlement_by_account ON entitlement (account_id, scope, entitlement);

            CREATE TABLE ledger (
                id BIGSERIAL PRIMARY KEY,
                account_id TEXT NOT NULL,
                scope TEXT NOT NULL CHECK (scope IN ('Production', 'Sandbox')),
                delta BIGINT NOT NULL,
                balance BIGINT NOT NULL CHECK (balance >= 0),
                kind TEXT NOT NULL CHECK (kind IN ('grant', 'spend', 'reversal', 'recovery', 'reinstatement')),
                environment TEXT,
                transaction_id TEXT,
                idempotency_key TEXT,
                memo TEXT,
                debt BIGINT NOT NULL DEFAULT 0 CHECK (debt >= 0),           -- owed added (reversals)
                recovered BIGINT NOT NULL DEFAULT 0 CHECK (recovered >= 0), -- owed repaid (recoveries) or forgiven (reinstatements)
                owed BIGINT NOT NULL DEFAULT 0 CHECK (owed >= 0),           -- owed after this row
                created_at_ms BIGINT NOT NULL,
                CHECK (kind != 'grant' OR (delta > 0 AND transaction_id IS NOT NULL)),
                CHECK (kind != 'spend' OR (delta < 0 AND idempotency_key IS NOT NULL)),
                CHECK (kind != 'reversal' OR (delta <= 0 AND transaction_id IS NOT NULL)),
                CHECK (kind != 'recovery' OR (delta < 0 AND recovered = -delta AND transaction_id IS NOT NULL)),
                CHECK (kind != 'reinstatement' OR (delta >= 0 AND transaction_id IS NOT NULL)),
                CHECK (kind = 'reversal' OR debt = 0),
                CHECK (kind IN ('recovery', 'reinstatement') OR recovered = 0),
                UNIQUE (account_id, scope, idempotency_key));
            CREATE INDEX ledger_by_account ON ledger (account_id, scope, id);
            CREATE UNIQUE INDEX ledger_once ON ledger (kind, transaction_id) WHERE kind IN ('grant', 'recovery');
            CREATE INDEX ledger_by_transaction ON ledger (transaction_id, kind);
            CREATE TRIGGER ledger_append_only BEFORE UPDATE OR DELETE ON ledger FOR EACH ROW EXECUTE FUNCTION refuse_change();
            CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON ledger FOR EACH STATEMENT EXECUTE FUNCTION refuse_change();

            -- docs/contract.md, "App Store Server Notifications": every verified notification is recorded before the webhook answers.
            CREATE TABLE notification_inbox (
                notification_uuid TEXT PRIMARY KEY,
                notification_type TEXT NOT NULL,
                subtype TEXT,
                signed_date_ms BIGINT,
                signed_payload TEXT NOT NULL,
                notification BYTEA NOT NULL,
                received_at_ms BIGINT NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('pending', 'applied', 'ignored', 'parked')),
                attempts BIGINT NOT NULL DEFAULT 0 CHECK (attempts >= 0),
                next_attempt_at_ms BIGINT NOT NULL,
                last_error TEXT,
                processed_at_ms BIGINT,
                original_transaction_id TEXT);
            CREATE INDEX inbox_due ON notification_inbox (state, next_attempt_at_ms);
            CREATE INDEX inbox_received ON notification_inbox (received_at_ms);
            CREATE INDEX inbox_by_original ON notification_inbox (original_transaction_id, state, signed_date_ms);

            CREATE TABLE admin_audit (
                id BIGSERIAL PRIMARY KEY,
                at_ms BIGINT NOT NULL,
                action TEXT NOT NULL,
                account_id TEXT,
                transaction_id TEXT,
                reason TEXT NOT NULL,
                credential TEXT NOT NULL);
            CREATE TRIGGER admin_audit_append_only BEFORE UPDATE OR DELETE ON admin_audit
                FOR EACH ROW EXECUTE FUNCTION refuse_change();
            CREATE TRIGGER admin_audit_no_truncate BEFORE TRUNCATE ON admin_audit FOR EACH STATEMENT EXECUTE FUNCTION refuse_change();

            CREATE TABLE account_token_outbox (
                original_transaction_id TEXT PRIMARY KEY,
                app_account_token TEXT NOT NULL,
                attempts BIGINT NOT NULL DEFAULT 0,
                next_attempt_at_ms BIGINT NOT NULL,
                last_error TEXT);
            CREATE INDEX account_token_outbox_due ON account_token_outbox (next_attempt_at_ms);

            CREATE TABLE subscription_renewal (
                original_transaction_id TEXT PRIMARY KEY,
                auto_renew BOOLEAN NOT NULL,
                auto_renew_product_id TEXT,
                in_billing_retry BOOLEAN NOT NULL,
                grace_period_expires_at_ms BIGINT,
                expiration_intent BIGINT,
                price_increase_status BIGINT,
                signed_date_ms BIGINT NOT NULL);

            CREATE TABLE reconcile_checkpoint (environment TEXT PRIMARY KEY, signed_date_ms BIGINT NOT NULL);

            -- A refund or revocation Apple announced before the purchase was ever redeemed here.
            CREATE TABLE early_revocation (transaction_id TEXT PRIMARY KEY, reason TEXT NOT NULL, recorded_at_ms BIGINT NOT NULL);
            """),
        // The worker's batches of due notifications, in signed order, without reading or sorting every pending row.
        PostgresMigration(
            "v2-inbox-pending-order",
            """
            CREATE INDEX inbox_pending_order ON notification_inbox (signed_date_ms NULLS FIRST, received_at_ms, next_attempt_at_ms)
                WHERE state = 'pending';
            """),
        // One durable outbox for everything owed to an outside party after a commit (the appAccountToken ties
        // first), never dropped; the same table and columns as SQLite's.
        PostgresMigration(
            "v3-outbox",
            """
            CREATE TABLE outbox (
                id BIGSERIAL PRIMARY KEY,
                kind TEXT NOT NULL,
                item_key TEXT NOT NULL,
                payload TEXT NOT NULL,
                attempts BIGINT NOT NULL DEFAULT 0 CHECK (attempts >= 0),
                created_at_ms BIGINT NOT NULL,
                next_attempt_at_ms BIGINT NOT NULL,
                last_error TEXT,
                UNIQUE (kind, item_key));
            CREATE INDEX outbox_due ON outbox (next_attempt_at_ms, id);
            INSERT INTO outbox (kind, item_key, payload, attempts, created_at_ms, next_attempt_at_ms, last_error)
                SELECT 'appAccountToken', original_transaction_id, app_account_token, attempts, next_attempt_at_ms, next_attempt_at_ms,
                    last_error
                FROM account_token_outbox;
            DROP TABLE account_token_outbox;
            """),
        // A notification's payload apart from its inbox row, as in SQLite's schema (written once; the row changes state).
        PostgresMigration(
            "v4-inbox-payload-apart",
            """
            CREATE TABLE notification_payload (
                notification_uuid TEXT PRIMARY KEY,
                signed_payload TEXT NOT NULL,
                notification BYTEA NOT NULL);
            INSERT INTO notification_payload (notification_uuid, signed_payload, notification)
                SELECT notification_uuid, signed_payload, notification FROM notification_inbox;
            ALTER TABLE notification_inbox DROP COLUMN signed_payload, DROP COLUMN notification;
            """),
        // The content each account was given a download of (consumption answers: how much was delivered).
        PostgresMigration(
            "v5-content-deliveries",
            """
            CREATE TABLE content_delivery (
                account_id TEXT NOT NULL,
                scope TEXT NOT NULL CHECK (scope IN ('Production', 'Sandbox')),
                content_id TEXT NOT NULL,
                first_at_ms BIGINT NOT NULL,
                PRIMARY KEY (account_id, scope, content_id));
            """),
        // The event feed and webhook endpoints (docs/events.md).
        PostgresMigration(
            "v6-events",
            """
            CREATE TABLE event (
                id BIGSERIAL PRIMARY KEY,
                tx_order BIGINT NOT NULL DEFAULT (pg_current_xact_id()::text::bigint),  -- the writing transaction (EventPosition)
                account_id TEXT NOT NULL,
                sequence BIGINT NOT NULL CHECK (sequence > 0),
                type TEXT NOT NULL,
                occurred_at_ms BIGINT NOT NULL,
                environment TEXT NOT NULL,
                balance BIGINT NOT NULL,
                owed BIGINT NOT NULL,
                body TEXT NOT NULL,
                UNIQUE (account_id, sequence));
            CREATE INDEX event_order ON event (tx_order, id);
            CREATE TABLE webhook_endpoint (
                id TEXT PRIMARY KEY,
                url TEXT NOT NULL,
                types TEXT NOT NULL,         -- space-separated; '' for all
                environments TEXT NOT NULL,  -- space-separated; '' for all
                allow_private_address BOOLEAN NOT NULL,
                secret TEXT NOT NULL,
                previous_secret TEXT,
                previous_secret_until_ms BIGINT,
                state TEXT NOT NULL CHECK (state IN ('active', 'paused', 'failing')),
                created_at_ms BIGINT NOT NULL,
                dispatched_tx_order BIGINT NOT NULL,  -- the feed read up to here for this endpoint
                dispatched_id BIGINT NOT NULL);
            CREATE TABLE webhook_progress (
                endpoint_id TEXT NOT NULL,
                account_id TEXT NOT NULL,
                delivered_sequence BIGINT NOT NULL,
                generation BIGINT NOT NULL DEFAULT 0,  -- bumped by a redelivery: a settle of the round before it changes nothing
                PRIMARY KEY (endpoint_id, account_id));
            CREATE TABLE webhook_attempt (
                id BIGSERIAL PRIMARY KEY,
                endpoint_id TEXT NOT NULL,
                account_id TEXT NOT NULL,
                sequence BIGINT NOT NULL,
                attempted_at_ms BIGINT NOT NULL,
                status BIGINT,
                latency_ms BIGINT NOT NULL,
                error TEXT);
            CREATE INDEX webhook_attempt_by_endpoint ON webhook_attempt (endpoint_id, id);
            """),
        // For the support console: coins an operator gives or takes back (ledger kind `adjustment`), who acted, and what
        // each purchase cost (its signed transaction's price in milliunits and currency; NULL: unpriced).
        PostgresMigration(
            "v7-adjustments",
            """
            ALTER TABLE ledger DROP CONSTRAINT ledger_kind_check;
            ALTER TABLE ledger ADD CONSTRAINT ledger_kind_check
                CHECK (kind IN ('grant', 'spend', 'reversal', 'recovery', 'reinstatement', 'adjustment'));
            ALTER TABLE ledger ADD CONSTRAINT ledger_adjustment_check
                CHECK (kind != 'adjustment' OR (delta != 0 AND idempotency_key IS NOT NULL AND memo IS NOT NULL));
            ALTER TABLE admin_audit ADD COLUMN operator_name TEXT;
            CREATE INDEX admin_audit_by_account ON admin_audit (account_id, id);
            ALTER TABLE processed_transaction ADD COLUMN price BIGINT CHECK (price >= 0);
            ALTER TABLE processed_transaction ADD COLUMN currency TEXT CHECK (length(currency) = 3);
            CREATE INDEX processed_by_purchase_date ON processed_transaction (purchase_date_ms);
            CREATE INDEX processed_by_processed_at ON processed_transaction (processed_at_ms);
            CREATE INDEX processed_by_revoked_at ON processed_transaction (revoked_at_ms) WHERE revoked_at_ms IS NOT NULL;
            """),
        // 2026-11-27: Retention Messaging: each answer to Apple's Get Retention Message request, once per request, and an
        // offer once per customer; the account's refunds are counted by account.
        PostgresMigration(
            "v8-retention",
            """
            CREATE TABLE retention_answer (
                request_identifier TEXT PRIMARY KEY,
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
                answered_at_ms BIGINT NOT NULL);
            CREATE UNIQUE INDEX retention_offer_once ON retention_answer (customer_key, offer_id) WHERE offer_id IS NOT NULL;
            CREATE INDEX processed_by_account ON processed_transaction (account_id);
            ALTER TABLE processed_transaction ADD COLUMN offer_identifier TEXT;
            """),
        // 2026-11-27: a transaction's held writes in one round trip (`PostgresSQLSession.flush`). Each statement is
        // prepared once per connection (named by its text's digest) and executed with its own values (`counts[i]` of
        // `arguments`, in order), passed through a transaction-local setting: planning each statement anew was 30% of
        // the server's CPU under a spend load, and a value is never part of a statement's text (nor of an error's context
        // in the server's log). SECURITY INVOKER (the default): it runs what its caller could run itself, with the
        // caller's rights and search_path.
        PostgresMigration(
            "v9-held-writes",
            """
            CREATE FUNCTION run_writes(statements TEXT[], arguments TEXT[], counts BIGINT[]) RETURNS VOID LANGUAGE plpgsql AS $$
            DECLARE
                first BIGINT := 1;
                prepared TEXT;
            BEGIN
                FOR i IN 1 .. coalesce(array_length(statements, 1), 0) LOOP
                    PERFORM set_config('iap.held_arguments', coalesce(arguments[first : first + counts[i] - 1], '{}')::TEXT, true);
                    first := first + counts[i];
                    prepared := 'held_' || md5(statements[i]);
                    IF NOT EXISTS (SELECT 1 FROM pg_prepared_statements p WHERE p.name = prepared) THEN
                        EXECUTE format('PREPARE %I(TEXT[]) AS %s', prepared, statements[i]);
                    END IF;
                    EXECUTE format('EXECUTE %I(current_setting(%L)::TEXT[])', prepared, 'iap.held_arguments');
                END LOOP;
            END
            $$;
            """),
        // 2026-11-27: the package of each Google Play subscription granted here, for the subscription sweep at Google; the
        // units a Google Play one-time purchase was granted for, for its quantity-based partial refunds.
        PostgresMigration(
            "v10-play",
            """
            CREATE TABLE play_package (purchase_token TEXT PRIMARY KEY, package_name TEXT NOT NULL);
            ALTER TABLE processed_transaction ADD COLUMN units BIGINT CHECK (units > 0);
            """),
        // 2026-11-28: `run_writes` learns which statements its connection has prepared from a session setting (the names, as
        // it prepared them) instead of asking `pg_prepared_statements` before every statement: that view lists every
        // statement of the session, each time. The view still answers for a name the setting lacks (a transaction that
        // prepared and then rolled back forgets the setting's change, while the statement stays prepared). Measured on
        // a copy of the schema, seven held writes among 42 prepared statements: 535-590 -> 382-405 µs of the server's CPU
        // per call.
        PostgresMigration(
            "v11-held-writes-known",
            """
            CREATE OR REPLACE FUNCTION run_writes(statements TEXT[], arguments TEXT[], counts BIGINT[]) RETURNS VOID LANGUAGE plpgsql AS $$
            DECLARE
                first BIGINT := 1;
                prepared TEXT;
                known TEXT := coalesce(current_setting('iap.held_prepared', true), '');
            BEGIN
                FOR i IN 1 .. coalesce(array_length(statements, 1), 0) LOOP
                    PERFORM set_config('iap.held_arguments', coalesce(arguments[first : first + counts[i] - 1], '{}')::TEXT, true);
                    first := first + counts[i];
                    prepared := 'held_' || md5(statements[i]);
                    IF strpos(known, prepared) = 0 THEN
                        IF NOT EXISTS (SELECT 1 FROM pg_prepared_statements p WHERE p.name = prepared) THEN
                            EXECUTE format('PREPARE %I(TEXT[]) AS %s', prepared, statements[i]);
                        END IF;
                        known := known || prepared || ' ';
                        PERFORM set_config('iap.held_prepared', known, false);
                    END IF;
                    EXECUTE format('EXECUTE %I(current_setting(%L)::TEXT[])', prepared, 'iap.held_arguments');
                END LOOP;
            END
            $$;
            """),
        // 2026-11-29: one claim per transaction id whose fate was first decided here (`FulfillmentTransaction.claim`): a
        // redeem's grant and a refund that came before it write the same key, so the second of two made at once runs
        // again. Both existing kinds of first decision claim theirs.
        PostgresMigration(
            "v12-transaction-claim",
            """
            CREATE TABLE transaction_claim (transaction_id TEXT PRIMARY KEY);
            INSERT INTO transaction_claim (transaction_id)
                SELECT transaction_id FROM processed_transaction UNION SELECT transaction_id FROM early_revocation;
            """),
        // 2026-11-30: a write sent without its account's lock (a first attempt) takes the lock shared in the statement
        // that writes, and fails when a writer holds it or waits for it (`PostgresSession.yieldingTo`): before, such
        // writes on one instance kept beating a writer of the same account that queued on the lock on another, until its
        // attempts ran out (`storageUnavailable`; 200 spends of one account on two instances, three runs of three).
        // PostgreSQL queues a lock request behind a waiting one it conflicts with, and a try that would queue fails.
        PostgresMigration(
            "v13-yield-to-lock-holders",
            """
            CREATE FUNCTION yield_to_lock_holders(key TEXT) RETURNS VOID LANGUAGE plpgsql AS $$
            BEGIN
                IF NOT pg_try_advisory_xact_lock_shared(hashtextextended(key, 0)) THEN
                    RAISE EXCEPTION 'a writer of the same account holds its lock or waits for it'
                        USING ERRCODE = '40001', HINT = 'yield_to_lock_holders';
                END IF;
            END
            $$;
            """),
        // 2026-11-30: where a new endpoint's feed starts (`WebhookRecords.insert`): the add's snapshot, so an event of a
        // transaction still running at the add is given to it when it commits, and one committed before is not.
        PostgresMigration("v14-webhook-start", "ALTER TABLE webhook_endpoint ADD COLUMN start_snapshot TEXT;"),
        // 2026-11-30: the share of an Apple prorated refund remembered before the purchase's first redeem (NULL: the whole).
        PostgresMigration("v15-early-refund-share", "ALTER TABLE early_revocation ADD COLUMN refund_share_milli BIGINT;"),
        // 2026-11-30: when Apple last signed that a transaction stands (a refund's reversal, its current copy) and that it
        // is refunded, redeemed here or not (`StoredPurchase.standsSignedMs`, `refundSignedMs`).
        PostgresMigration(
            "v16-signed-standing",
            "CREATE TABLE signed_standing (transaction_id TEXT PRIMARY KEY, stands_signed_ms BIGINT, refunded_signed_ms BIGINT);"),
    ]
}
