import Foundation
import GRDB
import IAPProtocol
import ServiceSupport

/// One simulated transaction, as the App Store would record it.
public struct SimTransaction: Sendable, Equatable {
    public var transactionId: String
    public var appleId: String
    public var bundleId: String
    public var productId: String
    public var productType: ProductType
    public var quantity: Int
    public var originalTransactionId: String
    public var purchaseDateMs: Int64
    public var originalPurchaseDateMs: Int64
    public var expiresDateMs: Int64?
    public var cancellationDateMs: Int64?
    public var finished: Bool
    /// PURCHASE, RENEWAL or RESTORE.
    public var reason: String
    public var webOrderLineItemId: Int64
    public var appAccountToken: String?
    public var periodDays: Int?
    /// Fixed when the purchase is made; renewals and restores inherit it.
    public var environment: SimEnvironment
    /// The order on the customer's emailed receipt: purchases and renewals have one, restores none.
    public var orderId: String? = nil
    /// Increasing with every transaction the simulator records (history order, paging).
    public var seq: Int64 = 0
    /// A purchase made with a promotional offer: Apple's offerType 2 and the offer's id.
    public var offerIdentifier: String? = nil
    /// The app transaction of the Apple ID in this app and environment (nil for transactions made before the simulator
    /// had app transactions).
    public var appTransactionId: String? = nil
    /// What was paid, in milliunits of `currency` (Apple's JWS fields); renewals inherit it. Nil: the JWS has none.
    public var price: Int64? = nil
    public var currency: String? = nil
    /// A family member's transaction (`inAppOwnershipType` FAMILY_SHARED): the purchaser's original transaction id it is
    /// shared from (`sim.shareWithFamily`). Nil: the customer's own purchase.
    public var sharedFrom: String? = nil
    /// A prorated refund's share, in milliunits of a percent (`sim.refund`); nil: refunded whole (or not refunded).
    public var revocationPercentage: Int? = nil
    /// Upgraded to another plan (`sim.lifecycleEvent upgrade`): Apple's `isUpgraded` on this period's transaction.
    public var isUpgraded = false
}

/// The simulator's database: transactions, the device of each Apple ID's app, the simulated clock.
final class SimulatorStore: Sendable {
    let writer: any DatabaseWriter

    init(directory: URL) throws {
        var config = Configuration()
        config.busyMode = .timeout(5)
        writer = try DatabasePool(
            path: try PrivateFiles.databaseFile(directory.appendingPathComponent("appstore-sim.sqlite").path), configuration: config)
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE simTransaction (
                        transactionId TEXT PRIMARY KEY NOT NULL,
                        seq INTEGER NOT NULL UNIQUE,
                        appleId TEXT NOT NULL, bundleId TEXT NOT NULL, productId TEXT NOT NULL, productType TEXT NOT NULL,
                        quantity INTEGER NOT NULL, originalTransactionId TEXT NOT NULL,
                        purchaseDateMs INTEGER NOT NULL, originalPurchaseDateMs INTEGER NOT NULL,
                        expiresDateMs INTEGER, cancellationDateMs INTEGER, finished INTEGER NOT NULL,
                        reason TEXT NOT NULL, webOrderLineItemId INTEGER NOT NULL, appAccountToken TEXT, periodDays INTEGER
                    );
                    CREATE INDEX simTransaction_by_app ON simTransaction(appleId, bundleId, seq);
                    CREATE TABLE simDevice (appleId TEXT NOT NULL, bundleId TEXT NOT NULL, deviceIdentifier TEXT NOT NULL,
                                            PRIMARY KEY (appleId, bundleId)) WITHOUT ROWID;
                    CREATE TABLE simState (id INTEGER PRIMARY KEY CHECK (id = 1), clockOffsetMs INTEGER NOT NULL, nextSeq INTEGER NOT NULL);
                    INSERT INTO simState (id, clockOffsetMs, nextSeq) VALUES (1, 0, 1);
                    """)
        }
        m.registerMigration("v2-environment") { db in
            // Purchases made before environments were fixed were shown as Sandbox.
            try db.execute(sql: "ALTER TABLE simTransaction ADD COLUMN environment TEXT NOT NULL DEFAULT 'sandbox'")
        }
        m.registerMigration("v3-order-ids") { db in
            try db.execute(
                sql: """
                    ALTER TABLE simTransaction ADD COLUMN orderId TEXT;
                    CREATE INDEX simTransaction_by_order ON simTransaction(orderId);
                    CREATE INDEX simTransaction_by_original ON simTransaction(originalTransactionId);
                    """)
        }
        m.registerMigration("v4-server-api") { db in
            try db.execute(
                sql: """
                    CREATE TABLE simNotification (
                        notificationUUID TEXT PRIMARY KEY NOT NULL, seq INTEGER NOT NULL UNIQUE,
                        bundleId TEXT NOT NULL, environment TEXT NOT NULL, notificationType TEXT NOT NULL, subtype TEXT,
                        transactionId TEXT, originalTransactionId TEXT, signedDateMs INTEGER NOT NULL, signedPayload TEXT NOT NULL,
                        attempts INTEGER NOT NULL DEFAULT 0,
                        nextAttemptAtMs INTEGER   -- simulated time of the next send; NULL: delivered or given up
                    );
                    CREATE INDEX simNotification_due ON simNotification(nextAttemptAtMs) WHERE nextAttemptAtMs IS NOT NULL;
                    CREATE INDEX simNotification_by_date ON simNotification(bundleId, environment, signedDateMs);
                    CREATE TABLE simSendAttempt (
                        notificationUUID TEXT NOT NULL REFERENCES simNotification(notificationUUID), attempt INTEGER NOT NULL,
                        attemptDateMs INTEGER NOT NULL, result TEXT NOT NULL, PRIMARY KEY (notificationUUID, attempt)
                    ) WITHOUT ROWID;
                    CREATE TABLE simNotificationURL (environment TEXT PRIMARY KEY NOT NULL, url TEXT NOT NULL) WITHOUT ROWID;
                    CREATE TABLE simRenewal (
                        originalTransactionId TEXT PRIMARY KEY NOT NULL, autoRenewStatus INTEGER NOT NULL DEFAULT 1,
                        extensions INTEGER NOT NULL DEFAULT 0,
                        expiredAtMs INTEGER   -- set once EXPIRED was sent for the current period
                    ) WITHOUT ROWID;
                    CREATE TABLE simExtension (
                        originalTransactionId TEXT NOT NULL, requestIdentifier TEXT NOT NULL, effectiveDateMs INTEGER NOT NULL,
                        webOrderLineItemId TEXT NOT NULL, PRIMARY KEY (originalTransactionId, requestIdentifier)
                    ) WITHOUT ROWID;
                    CREATE TABLE simConsumption (transactionId TEXT NOT NULL, receivedAtMs INTEGER NOT NULL, body TEXT NOT NULL);
                    CREATE INDEX simConsumption_by_transaction ON simConsumption(transactionId);
                    """)
        }
        m.registerMigration("v5-billing") { db in
            try db.execute(
                sql: """
                    ALTER TABLE simRenewal ADD COLUMN billingWillFail INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE simRenewal ADD COLUMN graceDays INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE simRenewal ADD COLUMN billingRetry INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE simRenewal ADD COLUMN graceUntilMs INTEGER;
                    ALTER TABLE simRenewal ADD COLUMN graceExpiredNotified INTEGER NOT NULL DEFAULT 0;
                    """)
        }
        m.registerMigration("v6-bundle-index") { db in
            // Every App Store Server API request checks its token's bundle id against the apps sold here.
            try db.execute(sql: "CREATE INDEX simTransaction_by_bundle ON simTransaction(bundleId)")
        }
        m.registerMigration("v7-lifecycle") { db in
            // sim.lifecycleEvent: price increases, plan changes, endings other than auto-renew off.
            try db.execute(
                sql: """
                    ALTER TABLE simRenewal ADD COLUMN priceIncreaseStatus INTEGER;
                    ALTER TABLE simRenewal ADD COLUMN autoRenewProductId TEXT;
                    ALTER TABLE simRenewal ADD COLUMN endingIntent INTEGER;
                    ALTER TABLE simRenewal ADD COLUMN expirationIntent INTEGER;
                    """)
        }
        m.registerMigration("v8-offers") { db in
            // Purchases with a promotional offer, and the offer nonces the App Store has seen (each works once).
            try db.execute(
                sql: """
                    ALTER TABLE simTransaction ADD COLUMN offerIdentifier TEXT;
                    CREATE TABLE simOfferNonce (nonce TEXT PRIMARY KEY NOT NULL, usedAtMs INTEGER NOT NULL) WITHOUT ROWID;
                    """)
        }
        m.registerMigration("v9-server-finish") { db in
            // The App Store Server API's Finish Transaction calls, each as it arrived (`sim.serverFinishes`).
            try db.execute(
                sql: """
                    CREATE TABLE simServerFinish (transactionId TEXT NOT NULL, atMs INTEGER NOT NULL);
                    CREATE INDEX simServerFinish_by_transaction ON simServerFinish(transactionId);
                    """)
        }
        m.registerMigration("v10-app-transactions") { db in
            // One app transaction per Apple ID, app and environment (`sim.appTransaction`, Get App Transaction Info); every
            // transaction made since names it, as Apple's do.
            try db.execute(
                sql: """
                    CREATE TABLE simAppTransaction (
                        appTransactionId TEXT PRIMARY KEY NOT NULL, appleId TEXT NOT NULL, bundleId TEXT NOT NULL,
                        environment TEXT NOT NULL, originalPurchaseDateMs INTEGER NOT NULL, UNIQUE (appleId, bundleId, environment));
                    ALTER TABLE simTransaction ADD COLUMN appTransactionId TEXT;
                    """)
        }
        m.registerMigration("v11-mass-extensions") { db in
            // Extend Subscription Renewal Dates for All Active Subscribers: each request, until carried out and after.
            try db.execute(
                sql: """
                    CREATE TABLE simMassExtension (
                        requestIdentifier TEXT NOT NULL, bundleId TEXT NOT NULL, environment TEXT NOT NULL, productId TEXT NOT NULL,
                        days INTEGER NOT NULL, reasonCode INTEGER NOT NULL, storefronts TEXT, completeDateMs INTEGER,
                        succeeded INTEGER NOT NULL DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (requestIdentifier, bundleId, environment)) WITHOUT ROWID;
                    """)
        }
        m.registerMigration("v12-prices") { db in
            // What each transaction was paid, as Apple's JWS carries it (`price` in milliunits, `currency`).
            try db.execute(sql: "ALTER TABLE simTransaction ADD COLUMN price INTEGER; ALTER TABLE simTransaction ADD COLUMN currency TEXT")
        }
        m.registerMigration("v13-realtime-url") { db in
            // Retention Messaging: where each environment's realtime requests go (Apple's Configure Realtime URL).
            try db.execute(sql: "CREATE TABLE simRealtimeURL (environment TEXT PRIMARY KEY NOT NULL, url TEXT NOT NULL) WITHOUT ROWID")
        }
        m.registerMigration("v14-messaging") { db in
            // Retention Messaging's stores at Apple (per app and environment): messages and images with their review state,
            // default messages per product and locale, performance tests, and what each customer about to cancel was shown.
            try db.execute(
                sql: """
                    CREATE TABLE simMessage (
                        environment TEXT NOT NULL, bundleId TEXT NOT NULL, messageIdentifier TEXT NOT NULL, definition TEXT NOT NULL,
                        state TEXT NOT NULL, PRIMARY KEY (environment, bundleId, messageIdentifier)) WITHOUT ROWID;
                    CREATE TABLE simMessageImage (
                        environment TEXT NOT NULL, bundleId TEXT NOT NULL, messageIdentifier TEXT NOT NULL, imageIdentifier TEXT NOT NULL,
                        PRIMARY KEY (environment, bundleId, imageIdentifier, messageIdentifier)) WITHOUT ROWID;
                    CREATE TABLE simImage (
                        environment TEXT NOT NULL, bundleId TEXT NOT NULL, imageIdentifier TEXT NOT NULL, imageSize TEXT NOT NULL,
                        state TEXT NOT NULL, PRIMARY KEY (environment, bundleId, imageIdentifier)) WITHOUT ROWID;
                    CREATE TABLE simDefaultMessage (
                        environment TEXT NOT NULL, bundleId TEXT NOT NULL, productId TEXT NOT NULL, locale TEXT NOT NULL,
                        messageIdentifier TEXT NOT NULL, PRIMARY KEY (environment, bundleId, productId, locale)) WITHOUT ROWID;
                    CREATE TABLE simPerformanceTest (
                        requestId TEXT PRIMARY KEY NOT NULL, bundleId TEXT NOT NULL, target TEXT NOT NULL, result TEXT NOT NULL,
                        answer TEXT, createdAtMs INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE simRetentionShown (
                        requestIdentifier TEXT PRIMARY KEY NOT NULL, originalTransactionId TEXT NOT NULL, environment TEXT NOT NULL,
                        shown TEXT NOT NULL, shownAtMs INTEGER NOT NULL) WITHOUT ROWID;
                    """)
        }
        m.registerMigration("v15-family-sharing") { db in
            // Family members' transactions of a shared purchase (`SimTransaction.sharedFrom`).
            try db.execute(sql: "ALTER TABLE simTransaction ADD COLUMN sharedFrom TEXT")
        }
        m.registerMigration("v16-prorated-refunds") { db in
            // Apple's prorated refunds (REFUND_PRORATED): the share refunded (`SimTransaction.revocationPercentage`).
            try db.execute(sql: "ALTER TABLE simTransaction ADD COLUMN revocationPercentage INTEGER")
        }
        m.registerMigration("v17-is-upgraded") { db in
            // The period an upgrade replaced (`SimTransaction.isUpgraded`).
            try db.execute(sql: "ALTER TABLE simTransaction ADD COLUMN isUpgraded INTEGER NOT NULL DEFAULT 0")
        }
        try m.migrate(writer)
    }

    /// The next value of the sequence transactions are ordered by (and their ids made from).
    static func nextSeq(_ db: Database) throws -> Int64 {
        let seq = try Int64.fetchOne(db, sql: "SELECT nextSeq FROM simState")!
        try db.execute(sql: "UPDATE simState SET nextSeq = nextSeq + 1")
        return seq
    }

    static func insert(_ t: SimTransaction, db: Database) throws {
        let seq = try nextSeq(db)
        try db.execute(
            sql: """
                INSERT INTO simTransaction (transactionId, seq, appleId, bundleId, productId, productType, quantity, originalTransactionId,
                    purchaseDateMs, originalPurchaseDateMs, expiresDateMs, cancellationDateMs, finished, reason, webOrderLineItemId,
                    appAccountToken, periodDays, environment, orderId, offerIdentifier, appTransactionId, price, currency, sharedFrom)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                t.transactionId, seq, t.appleId, t.bundleId, t.productId, t.productType.rawValue, t.quantity,
                t.originalTransactionId, t.purchaseDateMs, t.originalPurchaseDateMs, t.expiresDateMs,
                t.cancellationDateMs, t.finished, t.reason, t.webOrderLineItemId, t.appAccountToken, t.periodDays, t.environment.rawValue,
                t.orderId, t.offerIdentifier, t.appTransactionId, t.price, t.currency, t.sharedFrom,
            ])
    }

    /// A new transaction id, Apple-sandbox-like (2000000000 + sequence).
    static func nextTransactionId(_ db: Database) throws -> String {
        String(2_000_000_000 + (try Int64.fetchOne(db, sql: "SELECT nextSeq FROM simState")!))
    }

    static func transactions(appleId: String, bundleId: String, environment: SimEnvironment, db: Database) throws -> [SimTransaction] {
        try Row.fetchAll(
            db, sql: "SELECT * FROM simTransaction WHERE appleId = ? AND bundleId = ? AND environment = ? ORDER BY seq",
            arguments: [appleId, bundleId, environment.rawValue]
        ).map(row)
    }

    static func transaction(_ id: String, db: Database) throws -> SimTransaction? {
        try Row.fetchOne(db, sql: "SELECT * FROM simTransaction WHERE transactionId = ?", arguments: [id]).map(row)
    }

    /// A new order id, shaped like Apple's (`MK` and eight letters or digits).
    static func newOrderId() -> String {
        let alphabet = Array("ABCDEFGHJKLMNPQRSTUVWXYZ23456789")
        var rng = SystemRandomNumberGenerator()
        return "MK" + String((0..<8).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] })
    }

    /// Every transaction of the customer who made `transactionId` in its app and environment, in the order made.
    static func history(of transactionId: String, db: Database) throws -> [SimTransaction]? {
        guard let t = try transaction(transactionId, db: db) else { return nil }
        return try transactions(appleId: t.appleId, bundleId: t.bundleId, environment: t.environment, db: db)
    }

    static func transactions(orderId: String, db: Database) throws -> [SimTransaction] {
        try Row.fetchAll(db, sql: "SELECT * FROM simTransaction WHERE orderId = ? ORDER BY seq", arguments: [orderId]).map(row)
    }

    /// The family members' transactions shared from the purchaser's `original`, not revoked yet: one per member (their
    /// original; a restore's copy is not another member).
    static func familyShares(of original: String, db: Database) throws -> [SimTransaction] {
        try Row.fetchAll(
            db,
            sql: """
                SELECT * FROM simTransaction WHERE sharedFrom = ? AND cancellationDateMs IS NULL AND transactionId = originalTransactionId
                ORDER BY seq
                """, arguments: [original]
        ).map(row)
    }

    static func allAutoRenewables(_ db: Database) throws -> [SimTransaction] {
        try Row.fetchAll(db, sql: "SELECT * FROM simTransaction WHERE productType = 'autoRenewable' ORDER BY seq").map(row)
    }

    static func row(_ r: Row) -> SimTransaction {
        SimTransaction(
            transactionId: r["transactionId"], appleId: r["appleId"], bundleId: r["bundleId"], productId: r["productId"],
            productType: ProductType(rawValue: r["productType"]) ?? .consumable, quantity: r["quantity"],
            originalTransactionId: r["originalTransactionId"], purchaseDateMs: r["purchaseDateMs"],
            originalPurchaseDateMs: r["originalPurchaseDateMs"], expiresDateMs: r["expiresDateMs"],
            cancellationDateMs: r["cancellationDateMs"], finished: r["finished"], reason: r["reason"],
            webOrderLineItemId: r["webOrderLineItemId"], appAccountToken: r["appAccountToken"], periodDays: r["periodDays"],
            environment: SimEnvironment(rawValue: r["environment"]) ?? .sandbox, orderId: r["orderId"], seq: r["seq"],
            offerIdentifier: r["offerIdentifier"], appTransactionId: r["appTransactionId"], price: r["price"], currency: r["currency"],
            sharedFrom: r["sharedFrom"], revocationPercentage: r["revocationPercentage"], isUpgraded: r["isUpgraded"])
    }
}
