import Foundation
import GRDB
import IAPProtocol
import JSONRPC

/// What the simulated App Store Server API endpoint (`AppStoreServerAPIEndpoint` and its routes) reads and writes in the
/// simulator's store: transactions, histories, subscriptions, notification history, consumption, account tokens,
/// extensions.
struct SimulatorServerAPIBackend: Sendable {
    let simulator: AppStoreSimulator
    var store: SimulatorStore { simulator.store }
    var courier: NotificationCourier { simulator.courier }

    // MARK: reads

    /// The simulated now (ms).
    func simulatedNow() throws -> Int64 { try store.writer.read { db in try self.simulator.now(db) } }

    func apiTransaction(_ id: String) throws -> SimTransaction? {
        try store.writer.read { db in try SimulatorStore.transaction(id, db: db) }
    }

    func apiHistory(of id: String) throws -> [SimTransaction]? {
        try store.writer.read { db in try SimulatorStore.history(of: id, db: db) }
    }

    func knowsBundle(_ bundleId: String) throws -> Bool {
        try store.writer.read { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM simTransaction WHERE bundleId = ? LIMIT 1", arguments: [bundleId]) ?? false
        }
    }

    func apiOrder(_ orderId: String) throws -> [SimTransaction] {
        try store.writer.read { db in try SimulatorStore.transactions(orderId: orderId, db: db) }
    }

    // MARK: reads and writes of the customer's subscriptions, notifications and consumption

    /// Every subscription of the customer who made `anchor`: (status, latest period, signed renewal info).
    func apiSubscriptions(of anchor: SimTransaction) throws -> [(status: Int, latest: SimTransaction, renewalInfo: String)] {
        try store.writer.read { db in
            let history = try SimulatorStore.transactions(appleId: anchor.appleId, bundleId: anchor.bundleId, environment: anchor.environment, db: db)
            var originals: [String] = []
            for t in history where t.productType == .autoRenewable && !originals.contains(t.originalTransactionId) {
                originals.append(t.originalTransactionId)
            }
            return try originals.compactMap { original in
                guard let latest = try SimulatorStore.latestPeriod(original, db: db) else { return nil }
                return (try self.simulator.subscriptionStatus(latest, db: db), latest, try self.simulator.signedRenewalInfo(latest, db: db))
            }
        }
    }

    /// The notifications of an app and environment signed in [start, end), in the order made.
    func apiNotifications(
        bundleId: String, environment: SimEnvironment, startMs: Int64, endMs: Int64, type: String?, subtype: String?,
        originalTransactionId: String?, onlyFailures: Bool, afterSeq: Int64, limit: Int
    ) throws -> [(SimNotification, [SimSendAttempt])] {
        try store.writer.read { db in
            var sql = "SELECT * FROM simNotification WHERE bundleId = ? AND environment = ? AND signedDateMs >= ? AND signedDateMs < ? AND seq > ?"
            var arguments: StatementArguments = [bundleId, environment.rawValue, startMs, endMs, afterSeq]
            if let type {
                sql += " AND notificationType = ?"
                _ = arguments.append(contentsOf: [type])
            }
            if let subtype {
                sql += " AND subtype = ?"
                _ = arguments.append(contentsOf: [subtype])
            }
            if let originalTransactionId {
                sql += " AND originalTransactionId = ?"
                _ = arguments.append(contentsOf: [originalTransactionId])
            }
            if onlyFailures {
                sql +=
                    " AND NOT EXISTS (SELECT 1 FROM simSendAttempt a WHERE a.notificationUUID = simNotification.notificationUUID AND a.result = 'SUCCESS')"
            }
            sql += " ORDER BY seq LIMIT ?"
            _ = arguments.append(contentsOf: [limit])
            return try Row.fetchAll(db, sql: sql, arguments: arguments).map(SimNotification.row).map { n in
                (n, try SimulatorStore.attempts(n.notificationUUID, db: db))
            }
        }
    }

    /// Request a Test Notification: a TEST notification for the app, sent now; its token.
    func apiRequestTestNotification(bundleId: String, environment: SimEnvironment) throws -> String {
        let token = try store.writer.write { db -> String in
            let now = try self.simulator.now(db)
            var data: [String: Any] = ["bundleId": bundleId, "environment": environment.appleName]
            if environment == .production { data["appAppleId"] = 1_234_567_890 }
            let uuid = try self.simulator.recordNotification(
                "TEST", subtype: nil, bundleId: bundleId, environment: environment, data: data, transaction: nil, signedDate: now, db: db
            ).notificationUUID
            return "\(uuid)_\(now)"
        }
        courier.kick()
        return token
    }

    /// A TEST notification by its token, with its send attempts; nil when there is none for this app.
    func apiTestNotification(_ token: String, bundleId: String, environment: SimEnvironment) throws -> (SimNotification, [SimSendAttempt])? {
        let uuid = String(token.split(separator: "_").first ?? "")
        return try store.writer.read { db in
            guard let n = try SimulatorStore.notification(uuid, db: db), n.notificationType == "TEST", n.bundleId == bundleId,
                n.environment == environment
            else { return nil }
            return (n, try SimulatorStore.attempts(uuid, db: db))
        }
    }

    func apiRecordConsumption(_ transactionId: String, body: String) throws {
        try store.writer.write { db in
            try db.execute(
                sql: "INSERT INTO simConsumption (transactionId, receivedAtMs, body) VALUES (?, ?, ?)",
                arguments: [transactionId, try self.simulator.now(db), body])
        }
    }

    /// Finish Transaction: the transaction is finished as the device's `finish()` would (a consumable leaves the
    /// receipt), and the call is recorded.
    func apiFinish(_ transactionId: String) throws {
        try store.writer.write { db in
            try db.execute(
                sql: "INSERT INTO simServerFinish (transactionId, atMs) VALUES (?, ?)", arguments: [transactionId, try self.simulator.now(db)])
            try db.execute(sql: "UPDATE simTransaction SET finished = 1 WHERE transactionId = ?", arguments: [transactionId])
        }
    }

    /// Set App Account Token: every transaction of the original purchase carries it from now on.
    func apiSetAppAccountToken(_ originalTransactionId: String, token: String) throws {
        try store.writer.write { db in
            try db.execute(
                sql: "UPDATE simTransaction SET appAccountToken = ? WHERE originalTransactionId = ?",
                arguments: [token.lowercased(), originalTransactionId])
        }
    }

    enum ExtensionOutcome {
        case extended(effectiveDateMs: Int64, webOrderLineItemId: String)
        case ineligible
        case maxExtensions
    }

    /// Extend a Subscription Renewal Date: the current period's expiry moves `days` later (at most two
    /// extensions a subscription; only an active, unrevoked one); a repeated `requestIdentifier` answers
    /// the first result again. Sends RENEWAL_EXTENDED.
    func apiExtend(_ original: SimTransaction, days: Int, requestIdentifier: String) throws -> ExtensionOutcome {
        let outcome = try store.writer.write { db -> ExtensionOutcome in
            if let row = try Row.fetchOne(
                db, sql: "SELECT * FROM simExtension WHERE originalTransactionId = ? AND requestIdentifier = ?",
                arguments: [original.originalTransactionId, requestIdentifier])
            {
                return .extended(effectiveDateMs: row["effectiveDateMs"], webOrderLineItemId: row["webOrderLineItemId"])
            }
            let outcome = try self.extend(original.originalTransactionId, days: days, db: db)
            if case .extended(let effective, let lineItem) = outcome {
                try db.execute(
                    sql:
                        "INSERT INTO simExtension (originalTransactionId, requestIdentifier, effectiveDateMs, webOrderLineItemId) VALUES (?, ?, ?, ?)",
                    arguments: [original.originalTransactionId, requestIdentifier, effective, lineItem])
            }
            return outcome
        }
        courier.kick()
        return outcome
    }

    /// One subscription's current period moved `days` later, with its RENEWAL_EXTENDED: only an active one (Apple's status
    /// 1), at most two extensions (the single extension and the mass one alike).
    func extend(_ original: String, days: Int, db: Database) throws -> ExtensionOutcome {
        guard var latest = try SimulatorStore.latestPeriod(original, db: db), try simulator.subscriptionStatus(latest, db: db) == 1,
            let expires = latest.expiresDateMs
        else { return .ineligible }
        var renewal = try SimulatorStore.renewal(original, db: db)
        guard renewal.extensions < 2 else { return .maxExtensions }
        renewal.extensions += 1
        try SimulatorStore.saveRenewal(original, renewal, db: db)
        latest.expiresDateMs = expires + Int64(days) * 86_400_000
        try db.execute(
            sql: "UPDATE simTransaction SET expiresDateMs = ? WHERE transactionId = ?", arguments: [latest.expiresDateMs, latest.transactionId])
        try simulator.recordNotification("RENEWAL_EXTENDED", latest, signedDate: try simulator.now(db), db: db)
        return .extended(effectiveDateMs: latest.expiresDateMs!, webOrderLineItemId: String(latest.webOrderLineItemId))
    }
}

extension AppStoreSimulator {
    /// What the App Store Server API endpoint reads and writes.
    var api: SimulatorServerAPIBackend { SimulatorServerAPIBackend(simulator: self) }
}
