import Foundation
import GRDB
import ServiceSupport

/// The Play simulator's database (`play-sim.sqlite`): purchases (each one JSON document beside the columns it
/// is found by), voided purchases, real-time developer notifications waiting to be pushed, the simulated clock.
final class PlayStore: Sendable {
    let writer: any DatabaseWriter

    init(directory: URL) throws {
        var config = Configuration()
        config.busyMode = .timeout(5)
        writer = try DatabasePool(
            path: try PrivateFiles.databaseFile(directory.appendingPathComponent("play-sim.sqlite").path), configuration: config)
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE playPurchase (
                        purchaseToken TEXT PRIMARY KEY NOT NULL,
                        packageName TEXT NOT NULL,
                        -- Each order of the purchase (a subscription's renewals have their own), space-separated.
                        orderIds TEXT NOT NULL,
                        -- When something next happens to it on its own (a renewal, an expiry, the acknowledgement deadline).
                        dueAtMs INTEGER,
                        body TEXT NOT NULL
                    );
                    CREATE INDEX playPurchase_due ON playPurchase(dueAtMs) WHERE dueAtMs IS NOT NULL;
                    CREATE TABLE playOrder (orderId TEXT PRIMARY KEY NOT NULL, purchaseToken TEXT NOT NULL) WITHOUT ROWID;
                    CREATE TABLE playVoided (
                        seq INTEGER PRIMARY KEY AUTOINCREMENT,
                        packageName TEXT NOT NULL, voidedTimeMs INTEGER NOT NULL,
                        subscription INTEGER NOT NULL, partial INTEGER NOT NULL, body TEXT NOT NULL
                    );
                    CREATE INDEX playVoided_time ON playVoided(packageName, voidedTimeMs, seq);
                    CREATE TABLE playNotification (
                        seq INTEGER PRIMARY KEY AUTOINCREMENT,
                        messageId TEXT NOT NULL UNIQUE, packageName TEXT NOT NULL, data TEXT NOT NULL, publishTimeMs INTEGER NOT NULL,
                        attempts INTEGER NOT NULL DEFAULT 0, nextAttemptAtMs INTEGER, deliveredAtMs INTEGER
                    );
                    CREATE INDEX playNotification_due ON playNotification(nextAttemptAtMs) WHERE deliveredAtMs IS NULL;
                    CREATE TABLE playState (
                        id INTEGER PRIMARY KEY CHECK (id = 1), clockOffsetMs INTEGER NOT NULL,
                        pushURL TEXT, pushAudience TEXT
                    );
                    INSERT INTO playState (id, clockOffsetMs) VALUES (1, 0);
                    """)
        }
        m.registerMigration("v2-push-email") { db in
            try db.execute(sql: "ALTER TABLE playState ADD COLUMN pushEmail TEXT")
        }
        try m.migrate(writer)
    }

    static func purchase(_ token: String, db: Database) throws -> PlayPurchase? {
        try String.fetchOne(db, sql: "SELECT body FROM playPurchase WHERE purchaseToken = ?", arguments: [token]).map(PlayPurchase.decode)
    }

    static func purchase(orderId: String, db: Database) throws -> PlayPurchase? {
        guard let token = try String.fetchOne(db, sql: "SELECT purchaseToken FROM playOrder WHERE orderId = ?", arguments: [orderId])
        else { return nil }
        return try purchase(token, db: db)
    }

    /// Inserts or replaces the purchase, with its orders and when it is next due.
    static func save(_ p: PlayPurchase, db: Database) throws {
        try db.execute(
            sql: "INSERT OR REPLACE INTO playPurchase (purchaseToken, packageName, orderIds, dueAtMs, body) VALUES (?, ?, ?, ?, ?)",
            arguments: [p.purchaseToken, p.packageName, p.orderIds.joined(separator: " "), p.dueAtMs, try p.encoded()])
        for order in p.orderIds {
            try db.execute(
                sql: "INSERT OR IGNORE INTO playOrder (orderId, purchaseToken) VALUES (?, ?)", arguments: [order, p.purchaseToken])
        }
    }

    /// Purchases something happens to at or before `nowMs`, oldest due first.
    static func due(nowMs: Int64, db: Database) throws -> [PlayPurchase] {
        try String.fetchAll(db, sql: "SELECT body FROM playPurchase WHERE dueAtMs <= ? ORDER BY dueAtMs", arguments: [nowMs])
            .map(PlayPurchase.decode)
    }

    static func insertVoided(
        packageName: String, voidedTimeMs: Int64, subscription: Bool, partial: Bool, body: [String: Any], db: Database
    ) throws {
        try db.execute(
            sql: "INSERT INTO playVoided (packageName, voidedTimeMs, subscription, partial, body) VALUES (?, ?, ?, ?, ?)",
            arguments: [packageName, voidedTimeMs, subscription, partial, try json(body)])
    }

    /// Voided purchases of a package in `[startMs, endMs]` after `afterSeq`, oldest first (the clock only moves forward,
    /// so record order is voided-time order); subscriptions only with `subscriptions`, quantity-based partial refunds
    /// only with `partial`.
    static func voided(
        packageName: String, startMs: Int64, endMs: Int64, afterSeq: Int64, subscriptions: Bool, partial: Bool, limit: Int, db: Database
    ) throws -> [(seq: Int64, body: String)] {
        try Row.fetchAll(
            db,
            sql: """
                SELECT seq, body FROM playVoided
                WHERE packageName = ? AND voidedTimeMs BETWEEN ? AND ? AND seq > ? AND (subscription = 0 OR ?) AND (partial = 0 OR ?)
                ORDER BY seq LIMIT ?
                """, arguments: [packageName, startMs, endMs, afterSeq, subscriptions, partial, limit]
        ).map { ($0["seq"], $0["body"]) }
    }

    static func insertNotification(packageName: String, notification: [String: Any], publishTimeMs: Int64, db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO playNotification (messageId, packageName, data, publishTimeMs, nextAttemptAtMs)
                VALUES (printf('%d%06d', (SELECT COALESCE(MAX(seq), 0) + 1 FROM playNotification), abs(random() % 1000000)), ?, ?, ?, ?)
                """, arguments: [packageName, try json(notification), publishTimeMs, publishTimeMs])
    }

    static func json(_ object: [String: Any]) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]), as: UTF8.self)
    }
}
