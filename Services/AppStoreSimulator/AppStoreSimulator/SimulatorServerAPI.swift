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

    /// The latest period of a subscription (the one bought last: an upgrade to a shorter plan ends before the period it
    /// replaced), restores aside.
    static func latestPeriod(_ original: String, db: Database) throws -> SimTransaction? {
        try Row.fetchOne(
            db,
            sql: """
                SELECT * FROM simTransaction WHERE originalTransactionId = ? AND productType = 'autoRenewable' AND reason != 'RESTORE'
                ORDER BY seq DESC LIMIT 1
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
            guard t.sharedFrom == nil else {
                throw RPCError.invalidParams(
                    "a family member's transaction is not refunded (they did not pay): the purchaser's is", field: "transactionId",
                    reason: "notPurchaser")
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
                t.revocationPercentage = nil
                try db.execute(
                    sql: "UPDATE simTransaction SET cancellationDateMs = NULL, revocationPercentage = NULL WHERE transactionId = ?",
                    arguments: [t.transactionId])
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

    public func serverFinishes(_ p: SimServerFinishes.Params) throws -> SimServerFinishes.Result {
        .init(
            finishedAtMs: try store.writer.read { db in
                try Int64.fetchAll(db, sql: "SELECT atMs FROM simServerFinish WHERE transactionId = ? ORDER BY rowid", arguments: [p.transactionId])
            })
    }
}
