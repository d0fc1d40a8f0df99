import Foundation
import GRDB
import IAPProtocol
import JSONRPC

/// A subscription's renewal state as the simulated App Store keeps it (per original transaction).
struct SimRenewal: Sendable {
    var autoRenew = true
    var extensions = 0
    var expiredAtMs: Int64?
    /// The next renewal's charge will fail (`sim.billing fail`), with this many days of grace.
    var billingWillFail = false
    var graceDays = 0
    /// The renewal failed: Apple keeps retrying (up to 60 days); access continues until `graceUntilMs`.
    var billingRetry = false
    var graceUntilMs: Int64?
    var graceExpiredNotified = false
    /// Apple's priceIncreaseStatus: 0 an increase awaits the customer's consent, 1 accepted; nil none.
    var priceIncreaseStatus: Int?
    /// The plan the next renewal is of (a downgrade), when not the current one.
    var autoRenewProductId: String?
    /// Set when the subscription will end at the period's end whatever auto-renew says: Apple's
    /// expirationIntent (4 product not for sale, 5 other); a pending price increase ends it with 3.
    var endingIntent: Int?
    /// Why it expired (Apple's expirationIntent), once it has.
    var expirationIntent: Int?

    /// The expirationIntent that ends the current period instead of a renewal, if any.
    var endsAtPeriodEnd: Int? { endingIntent ?? (priceIncreaseStatus == 0 ? 3 : nil) }

    /// Apple retries a failed renewal for this long before the subscription expires.
    static let billingRetryMs: Int64 = 60 * 86_400_000
}

extension SimulatorStore {
    static func renewal(_ original: String, db: Database) throws -> SimRenewal {
        guard let row = try Row.fetchOne(db, sql: "SELECT * FROM simRenewal WHERE originalTransactionId = ?", arguments: [original]) else {
            return SimRenewal()
        }
        return SimRenewal(
            autoRenew: row["autoRenewStatus"] == 1, extensions: row["extensions"], expiredAtMs: row["expiredAtMs"],
            billingWillFail: row["billingWillFail"] == 1, graceDays: row["graceDays"], billingRetry: row["billingRetry"] == 1,
            graceUntilMs: row["graceUntilMs"], graceExpiredNotified: row["graceExpiredNotified"] == 1,
            priceIncreaseStatus: row["priceIncreaseStatus"], autoRenewProductId: row["autoRenewProductId"], endingIntent: row["endingIntent"],
            expirationIntent: row["expirationIntent"])
    }

    static func saveRenewal(_ original: String, _ r: SimRenewal, db: Database) throws {
        try db.execute(
            sql: """
                INSERT OR REPLACE INTO simRenewal (originalTransactionId, autoRenewStatus, extensions, expiredAtMs, billingWillFail, graceDays,
                    billingRetry, graceUntilMs, graceExpiredNotified, priceIncreaseStatus, autoRenewProductId, endingIntent, expirationIntent)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                original, r.autoRenew ? 1 : 0, r.extensions, r.expiredAtMs, r.billingWillFail ? 1 : 0, r.graceDays, r.billingRetry ? 1 : 0,
                r.graceUntilMs, r.graceExpiredNotified ? 1 : 0, r.priceIncreaseStatus, r.autoRenewProductId, r.endingIntent, r.expirationIntent,
            ])
    }

    static func setExpired(_ original: String, atMs: Int64, db: Database) throws {
        var r = try renewal(original, db: db)
        r.expiredAtMs = atMs
        try saveRenewal(original, r, db: db)
    }

    /// The latest period of a subscription (the transaction with the furthest expiry), restores aside.
    static func latestPeriod(_ original: String, db: Database) throws -> SimTransaction? {
        try Row.fetchOne(
            db,
            sql: """
                SELECT * FROM simTransaction WHERE originalTransactionId = ? AND productType = 'autoRenewable' AND reason != 'RESTORE'
                ORDER BY expiresDateMs DESC, seq DESC LIMIT 1
                """, arguments: [original]
        ).map(row)
    }
}

/// What the App Store Server API endpoint and the subscription events do with the simulator's data.
extension AppStoreSimulator {
    /// Apple's subscription status: 1 active, 2 expired, 5 revoked (3 billing retry and 4 grace period
    /// come with billing failures).
    func subscriptionStatus(_ t: SimTransaction, db: Database) throws -> Int {
        if t.cancellationDateMs != nil { return 5 }
        let now = try now(db)
        if (t.expiresDateMs ?? 0) > now { return 1 }
        let renewal = try SimulatorStore.renewal(t.originalTransactionId, db: db)
        guard renewal.billingRetry else { return 2 }
        return (renewal.graceUntilMs ?? 0) > now ? 4 : 3
    }

    /// The signed renewal info (JWSRenewalInfoDecodedPayload) of the subscription `t` belongs to.
    func signedRenewalInfo(_ t: SimTransaction, db: Database) throws -> String {
        let renewal = try SimulatorStore.renewal(t.originalTransactionId, db: db)
        var payload: [String: Any] = [
            "originalTransactionId": t.originalTransactionId, "productId": t.productId,
            "autoRenewProductId": renewal.autoRenewProductId ?? t.productId,
            "autoRenewStatus": renewal.autoRenew ? 1 : 0, "isInBillingRetryPeriod": renewal.billingRetry, "signedDate": try now(db),
            "environment": t.environment.appleName, "recentSubscriptionStartDate": t.originalPurchaseDateMs,
        ]
        if renewal.autoRenew, let expires = t.expiresDateMs { payload["renewalDate"] = expires }
        if renewal.expiredAtMs != nil {
            payload["expirationIntent"] = renewal.expirationIntent ?? (renewal.autoRenew ? 2 : 1)  // billing error : customer cancelled
        }
        if let status = renewal.priceIncreaseStatus { payload["priceIncreaseStatus"] = status }
        if renewal.billingRetry, let grace = renewal.graceUntilMs { payload["gracePeriodExpiresDate"] = grace }
        if let token = t.appAccountToken { payload["appAccountToken"] = token.lowercased() }
        return try pki.signedPayloads.sign(payload: Array(try JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys])))
    }

    // MARK: sim.* events

    public func setAutoRenew(_ p: SimSetAutoRenew.Params) throws -> SimSetAutoRenew.Result {
        let payload = try store.writer.write { db -> String? in
            guard let t = try SimulatorStore.transaction(p.transactionId, db: db), t.appleId == p.appleId, t.productType == .autoRenewable,
                let latest = try SimulatorStore.latestPeriod(t.originalTransactionId, db: db)
            else {
                throw RPCError.notFound("no subscription transaction \(p.transactionId) for this Apple ID", reason: "unknownTransaction")
            }
            var renewal = try SimulatorStore.renewal(t.originalTransactionId, db: db)
            guard renewal.autoRenew != p.enabled else { return nil }
            guard renewal.expiredAtMs == nil, latest.cancellationDateMs == nil else {
                throw RPCError.conflict("the subscription has ended; the customer buys it again instead", reason: "subscriptionEnded")
            }
            renewal.autoRenew = p.enabled
            try SimulatorStore.saveRenewal(t.originalTransactionId, renewal, db: db)
            return try self.recordNotification(
                "DID_CHANGE_RENEWAL_STATUS", subtype: p.enabled ? "AUTO_RENEW_ENABLED" : "AUTO_RENEW_DISABLED", latest,
                signedDate: try self.now(db), db: db)
        }
        courier.kick()
        return .init(signedPayload: payload)
    }

    /// `sim.billing`: `fail` makes the next renewal's charge fail (at the period's end: DID_FAIL_TO_RENEW,
    /// GRACE_PERIOD subtype with grace days; then GRACE_PERIOD_EXPIRED, and EXPIRED / BILLING_RETRY after 60
    /// days of retries, as the clock passes them); `recover` after a failure renews now (DID_RENEW/BILLING_RECOVERY), before
    /// one just cancels the coming failure.
    public func billing(_ p: SimBilling.Params) throws -> SimBilling.Result {
        if let days = p.gracePeriodDays, !(0...16).contains(days) {
            throw RPCError.invalidParams("gracePeriodDays must be 0-16", field: "gracePeriodDays", reason: "invalidValue")
        }
        let payload = try store.writer.write { db -> String? in
            guard let t = try SimulatorStore.transaction(p.transactionId, db: db), t.appleId == p.appleId, t.productType == .autoRenewable,
                let latest = try SimulatorStore.latestPeriod(t.originalTransactionId, db: db)
            else {
                throw RPCError.notFound("no subscription transaction \(p.transactionId) for this Apple ID", reason: "unknownTransaction")
            }
            var renewal = try SimulatorStore.renewal(t.originalTransactionId, db: db)
            guard renewal.expiredAtMs == nil, latest.cancellationDateMs == nil else {
                throw RPCError.conflict("the subscription has ended", reason: "subscriptionEnded")
            }
            let now = try self.now(db)
            switch p.event {
            case .fail:
                renewal.billingWillFail = true
                renewal.graceDays = p.gracePeriodDays ?? 0
                try SimulatorStore.saveRenewal(t.originalTransactionId, renewal, db: db)
                return nil
            case .recover:
                renewal.billingWillFail = false
                guard renewal.billingRetry else {
                    try SimulatorStore.saveRenewal(t.originalTransactionId, renewal, db: db)
                    return nil
                }
                renewal.billingRetry = false
                renewal.graceUntilMs = nil
                renewal.graceExpiredNotified = false
                try SimulatorStore.saveRenewal(t.originalTransactionId, renewal, db: db)
                let renewed = try self.renew(latest, startingAt: now, db: db)
                return try self.recordNotification("DID_RENEW", subtype: "BILLING_RECOVERY", renewed, signedDate: now, db: db)
            }
        }
        courier.kick()
        return .init(signedPayload: payload)
    }

    /// What `advanceClock` does for a subscription whose renewal charge fails or has failed, up to `now`;
    /// true when it was handled here (no renewal happens).
    func advanceBilling(_ t: SimTransaction, now: Int64, notifications: inout [String], db: Database) throws -> Bool {
        var renewal = try SimulatorStore.renewal(t.originalTransactionId, db: db)
        guard let expires = t.expiresDateMs, renewal.billingRetry || (renewal.billingWillFail && expires <= now) else { return false }
        if !renewal.billingRetry {
            renewal.billingRetry = true
            renewal.billingWillFail = false
            renewal.graceUntilMs = renewal.graceDays > 0 ? expires + Int64(renewal.graceDays) * 86_400_000 : nil
            try SimulatorStore.saveRenewal(t.originalTransactionId, renewal, db: db)
            notifications.append(
                try recordNotification("DID_FAIL_TO_RENEW", subtype: renewal.graceDays > 0 ? "GRACE_PERIOD" : nil, t, signedDate: expires, db: db))
        }
        if let grace = renewal.graceUntilMs, grace <= now, !renewal.graceExpiredNotified {
            renewal.graceExpiredNotified = true
            try SimulatorStore.saveRenewal(t.originalTransactionId, renewal, db: db)
            notifications.append(try recordNotification("GRACE_PERIOD_EXPIRED", t, signedDate: grace, db: db))
        }
        if expires + SimRenewal.billingRetryMs <= now, renewal.expiredAtMs == nil {
            renewal.expiredAtMs = expires + SimRenewal.billingRetryMs
            renewal.billingRetry = false
            try SimulatorStore.saveRenewal(t.originalTransactionId, renewal, db: db)
            notifications.append(try recordNotification("EXPIRED", subtype: "BILLING_RETRY", t, signedDate: renewal.expiredAtMs!, db: db))
        }
        return true
    }

    /// `sim.refundDecision`: CONSUMPTION_REQUEST (the customer asked for a refund; Apple asks the developer),
    /// REFUND_DECLINED, or REFUND_REVERSED (a granted refund undone: the transaction is valid again).
    public func refundDecision(_ p: SimRefundDecision.Params) throws -> SimRefundDecision.Result {
        let payload = try store.writer.write { db -> String in
            guard var t = try SimulatorStore.transaction(p.transactionId, db: db), t.appleId == p.appleId else {
                throw RPCError.notFound("no transaction \(p.transactionId) for this Apple ID", reason: "unknownTransaction")
            }
            let now = try self.now(db)
            switch p.event {
            case .request, .decline:
                guard t.cancellationDateMs == nil else {
                    throw RPCError.conflict("transaction \(p.transactionId) is already refunded", reason: "alreadyRefunded")
                }
                return try self.recordNotification(p.event == .request ? "CONSUMPTION_REQUEST" : "REFUND_DECLINED", t, signedDate: now, db: db)
            case .reverse:
                guard t.cancellationDateMs != nil else {
                    throw RPCError.conflict("transaction \(p.transactionId) is not refunded", reason: "notRefunded")
                }
                t.cancellationDateMs = nil
                try db.execute(sql: "UPDATE simTransaction SET cancellationDateMs = NULL WHERE transactionId = ?", arguments: [t.transactionId])
                return try self.recordNotification("REFUND_REVERSED", t, signedDate: now, db: db)
            }
        }
        courier.kick()
        return .init(signedPayload: payload)
    }

    public func setNotificationURL(_ p: SimSetNotificationURL.Params) throws {
        if let url = p.url {
            guard let parsed = URL(string: url), ["http", "https"].contains(parsed.scheme ?? ""), parsed.host != nil, url.utf8.count <= 2048
            else { throw RPCError.invalidParams("url must be an http or https URL", field: "url", reason: "invalidValue") }
        }
        let any = try store.writer.write { db -> Bool in
            if let url = p.url {
                try db.execute(
                    sql: "INSERT OR REPLACE INTO simNotificationURL (environment, url) VALUES (?, ?)", arguments: [p.environment.rawValue, url])
            } else {
                try db.execute(sql: "DELETE FROM simNotificationURL WHERE environment = ?", arguments: [p.environment.rawValue])
            }
            return try Bool.fetchOne(db, sql: "SELECT 1 FROM simNotificationURL LIMIT 1") ?? false
        }
        courier.urlsChanged(any: any)
    }

    public func consumptionReports(_ p: SimConsumptionReports.Params) throws -> SimConsumptionReports.Result {
        let bodies = try store.writer.read { db in
            try String.fetchAll(db, sql: "SELECT body FROM simConsumption WHERE transactionId = ? ORDER BY rowid", arguments: [p.transactionId])
        }
        return .init(reports: bodies.compactMap { try? JSONDecoder().decode(JSONValue.self, from: Data($0.utf8)) })
    }

    // MARK: App Store Server API reads and writes

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
                return (try self.subscriptionStatus(latest, db: db), latest, try self.signedRenewalInfo(latest, db: db))
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
            let now = try self.now(db)
            var data: [String: Any] = ["bundleId": bundleId, "environment": environment.appleName]
            if environment == .production { data["appAppleId"] = 1_234_567_890 }
            let uuid = try self.recordNotification(
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
                arguments: [transactionId, try self.now(db), body])
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
            guard var latest = try SimulatorStore.latestPeriod(original.originalTransactionId, db: db),
                try self.subscriptionStatus(latest, db: db) == 1, let expires = latest.expiresDateMs
            else { return .ineligible }
            var renewal = try SimulatorStore.renewal(original.originalTransactionId, db: db)
            guard renewal.extensions < 2 else { return .maxExtensions }
            renewal.extensions += 1
            try SimulatorStore.saveRenewal(original.originalTransactionId, renewal, db: db)
            latest.expiresDateMs = expires + Int64(days) * 86_400_000
            try db.execute(
                sql: "UPDATE simTransaction SET expiresDateMs = ? WHERE transactionId = ?", arguments: [latest.expiresDateMs, latest.transactionId])
            try db.execute(
                sql: "INSERT INTO simExtension (originalTransactionId, requestIdentifier, effectiveDateMs, webOrderLineItemId) VALUES (?, ?, ?, ?)",
                arguments: [original.originalTransactionId, requestIdentifier, latest.expiresDateMs, String(latest.webOrderLineItemId)])
            try self.recordNotification("RENEWAL_EXTENDED", latest, signedDate: try self.now(db), db: db)
            return .extended(effectiveDateMs: latest.expiresDateMs!, webOrderLineItemId: String(latest.webOrderLineItemId))
        }
        courier.kick()
        return outcome
    }
}
