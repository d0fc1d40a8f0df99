import Foundation
import GRDB
import IAPProtocol
import JSONRPC
import Receipts

/// `sim.lifecycleEvent` and `sim.notify`: the rest of what Apple's notifications describe, so that every
/// documented type and subtype can be produced and delivered like the ones renewals, billing and refunds make.
extension AppStoreSimulator {
    /// The notification types the simulator makes from its own events; `sim.notify` refuses them.
    static let modelledNotificationTypes: Set<String> = [
        "SUBSCRIBED", "DID_RENEW", "DID_CHANGE_RENEWAL_STATUS", "DID_CHANGE_RENEWAL_PREF", "DID_FAIL_TO_RENEW", "GRACE_PERIOD_EXPIRED",
        "EXPIRED", "PRICE_INCREASE", "REFUND", "REFUND_DECLINED", "REFUND_REVERSED", "CONSUMPTION_REQUEST", "RENEWAL_EXTENDED",
        "REVOKE", "ONE_TIME_CHARGE", "TEST",
    ]

    public func lifecycleEvent(_ p: SimLifecycleEvent.Params) throws -> SimLifecycleEvent.Result {
        let payload = try store.writer.write { db -> String? in
            guard let t = try SimulatorStore.transaction(p.transactionId, db: db), t.appleId == p.appleId else {
                throw RPCError.notFound("no transaction \(p.transactionId) for this Apple ID", reason: "unknownTransaction")
            }
            let now = try self.now(db)
            if p.event == .revokeFamilySharing { return try self.endFamilySharing(t, nowMs: now, db: db) }
            guard t.productType == .autoRenewable, let latest = try SimulatorStore.latestPeriod(t.originalTransactionId, db: db) else {
                throw RPCError.notFound("no subscription transaction \(p.transactionId) for this Apple ID", reason: "unknownTransaction")
            }
            var renewal = try SimulatorStore.renewal(t.originalTransactionId, db: db)
            guard renewal.expiredAtMs == nil, latest.cancellationDateMs == nil else {
                throw RPCError.conflict("the subscription has ended", reason: "subscriptionEnded")
            }
            func plan() throws -> String {
                guard let product = p.productId, !product.isEmpty, product.utf8.count <= 200, product != latest.productId else {
                    throw RPCError.invalidParams(
                        "productId must name another plan of the subscription", field: "productId", reason: "invalidValue")
                }
                return product
            }
            switch p.event {
            case .priceIncrease:
                guard renewal.priceIncreaseStatus == nil else {
                    throw RPCError.conflict("a price increase is already announced", reason: "priceIncreasePending")
                }
                renewal.priceIncreaseStatus = 0
                try SimulatorStore.saveRenewal(t.originalTransactionId, renewal, db: db)
                return try self.recordNotification("PRICE_INCREASE", subtype: "PENDING", latest, signedDate: now, db: db)
            case .acceptPriceIncrease:
                guard renewal.priceIncreaseStatus == 0 else {
                    throw RPCError.conflict("no price increase awaits consent", reason: "noPriceIncrease")
                }
                renewal.priceIncreaseStatus = 1
                try SimulatorStore.saveRenewal(t.originalTransactionId, renewal, db: db)
                return try self.recordNotification("PRICE_INCREASE", subtype: "ACCEPTED", latest, signedDate: now, db: db)
            case .downgrade:
                renewal.autoRenewProductId = try plan()
                try SimulatorStore.saveRenewal(t.originalTransactionId, renewal, db: db)
                return try self.recordNotification("DID_CHANGE_RENEWAL_PREF", subtype: "DOWNGRADE", latest, signedDate: now, db: db)
            case .cancelDowngrade:
                guard renewal.autoRenewProductId != nil else {
                    throw RPCError.conflict("no downgrade is pending", reason: "noDowngrade")
                }
                renewal.autoRenewProductId = nil
                try SimulatorStore.saveRenewal(t.originalTransactionId, renewal, db: db)
                return try self.recordNotification("DID_CHANGE_RENEWAL_PREF", latest, signedDate: now, db: db)
            case .upgrade:
                // Immediate: a period of the higher plan starts now (the customer is refunded the rest of the old
                // one, which Apple does not signal through the old transaction's revocation).
                renewal.autoRenewProductId = nil
                try SimulatorStore.saveRenewal(t.originalTransactionId, renewal, db: db)
                var higher = latest
                higher.productId = try plan()
                if let days = p.subscriptionPeriodDays {
                    guard (1...366).contains(days) else {
                        throw RPCError.invalidParams(
                            "subscriptionPeriodDays must be 1-366", field: "subscriptionPeriodDays", reason: "invalidValue")
                    }
                    higher.periodDays = days
                }
                // The period replaced says so (`isUpgraded`); its expiry stays.
                try db.execute(sql: "UPDATE simTransaction SET isUpgraded = 1 WHERE transactionId = ?", arguments: [latest.transactionId])
                let next = try self.renew(higher, startingAt: now, reason: "PURCHASE", db: db)
                return try self.recordNotification("DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE", next, signedDate: now, db: db)
            case .withdrawProduct, .endOtherwise:
                renewal.endingIntent = p.event == .withdrawProduct ? 4 : 5
                try SimulatorStore.saveRenewal(t.originalTransactionId, renewal, db: db)
                return nil
            case .revokeFamilySharing:
                return nil  // handled above
            }
        }
        courier.kick()
        return .init(signedPayload: payload)
    }

    public func notify(_ p: SimNotify.Params) throws -> SimNotify.Result {
        func name(_ value: String?, _ field: String) throws {
            guard let value else { return }
            guard (1...64).contains(value.utf8.count), value.utf8.allSatisfy({ (65...90).contains($0) || $0 == 95 }) else {
                throw RPCError.invalidParams("\(field) must be an upper-case name such as OFFER_REDEEMED", field: field, reason: "invalidValue")
            }
        }
        try name(p.notificationType, "notificationType")
        try name(p.subtype, "subtype")
        guard !Self.modelledNotificationTypes.contains(p.notificationType) else {
            throw RPCError.invalidParams(
                "\(p.notificationType) comes from the simulator's own events (sim.refund, sim.billing, sim.lifecycleEvent, advanceClock...)",
                field: "notificationType", reason: "modelledEvent")
        }
        let payload = try store.writer.write { db -> String in
            guard var t = try SimulatorStore.transaction(p.transactionId, db: db), t.appleId == p.appleId else {
                throw RPCError.notFound("no transaction \(p.transactionId) for this Apple ID", reason: "unknownTransaction")
            }
            if t.productType == .autoRenewable, let latest = try SimulatorStore.latestPeriod(t.originalTransactionId, db: db) { t = latest }
            let now = try self.now(db)
            var app: [String: Any] = ["bundleId": t.bundleId]
            if t.environment == .production { app["appAppleId"] = 1_234_567_890 }
            switch (p.notificationType, p.subtype) {
            case ("RENEWAL_EXTENSION", "SUMMARY"):
                // A mass extension's summary: no transaction, the counts of subscriptions extended or not.
                app.merge(
                    [
                        "requestIdentifier": UUID().uuidString.lowercased(), "environment": t.environment.appleName, "productId": t.productId,
                        "storefrontCountryCodes": ["USA"], "succeededCount": 0, "failedCount": 0,
                    ], uniquingKeysWith: { a, _ in a })
                return try self.recordNotification(
                    p.notificationType, subtype: p.subtype, bundleId: t.bundleId, environment: t.environment, section: "summary", data: app,
                    transaction: nil, signedDate: now, db: db
                ).signedPayload
            case ("EXTERNAL_PURCHASE_TOKEN", _):
                // A Sandbox token's id starts with SANDBOX: the only sign of its environment Apple's libraries read.
                let id = (t.environment == .sandbox ? "SANDBOX_" : "") + UUID().uuidString.lowercased()
                app.merge(["externalPurchaseId": id, "tokenCreationDate": now], uniquingKeysWith: { a, _ in a })
                return try self.recordNotification(
                    p.notificationType, subtype: p.subtype, bundleId: t.bundleId, environment: t.environment, section: "externalPurchaseToken",
                    data: app, transaction: nil, signedDate: now, db: db
                ).signedPayload
            default:
                return try self.recordNotification(p.notificationType, subtype: p.subtype, t, signedDate: now, db: db)
            }
        }
        courier.kick()
        return .init(signedPayload: payload)
    }
}

/// Promotional offers as the App Store checks them when a purchase carries one.
extension AppStoreSimulator {
    /// The offer's id when the purchase carries a valid one (signed with the offer key for this app, product and
    /// customer, within 24 hours, its nonce never seen before); nil without an offer; `forbidden` otherwise.
    func redeemOffer(_ p: SimPurchase.Params, nowMs: Int64, db: Database) throws -> String? {
        func refuse(_ detail: String, _ reason: String) -> RPCError { RPCError.forbidden(detail, reason: reason) }
        let publicKey = offerKey.privateKey.publicKey
        let offerId: String
        let nonce: String
        let signedAtMs: Int64
        if let offer = p.offer {
            guard offer.keyIdentifier == offerKey.keyId else { throw refuse("unknown offer key \(offer.keyIdentifier)", "invalidOfferSignature") }
            let message = PromotionalOffer.message(
                bundleId: p.bundleId, keyId: offer.keyIdentifier, productId: p.productId, offerId: offer.offerIdentifier,
                appAccountToken: p.appAccountToken ?? "", nonce: offer.nonce, timestamp: offer.timestamp)
            guard PromotionalOffer.isValidSignature(offer.signature, message: message, key: publicKey) else {
                throw refuse("the offer's signature does not verify for this app, product, offer and customer", "invalidOfferSignature")
            }
            (offerId, nonce, signedAtMs) = (offer.offerIdentifier, offer.nonce.lowercased(), offer.timestamp)
        } else if let jws = p.offerJWS {
            guard let (_, claims) = PromotionalOffer.verifiedClaims(jws, key: { $0 == self.offerKey.keyId ? publicKey : nil }),
                claims["aud"]?.stringValue == "promotional-offer", claims["bid"]?.stringValue == p.bundleId,
                claims["iss"]?.stringValue == offerKey.issuerId, claims["productId"]?.stringValue == p.productId,
                let id = claims["offerIdentifier"]?.stringValue, let n = claims["nonce"]?.stringValue, let iat = claims["iat"]?.intValue
            else {
                throw refuse("the offer's JWS does not verify for this app and product", "invalidOfferSignature")
            }
            (offerId, nonce, signedAtMs) = (id, n.lowercased(), iat * 1000)
        } else {
            return nil
        }
        guard signedAtMs <= nowMs + 300_000, nowMs - signedAtMs <= PromotionalOffer.validityMs else {
            throw refuse("the offer was signed more than 24 hours ago (or in the future)", "offerExpired")
        }
        guard try Int.fetchOne(db, sql: "SELECT 1 FROM simOfferNonce WHERE nonce = ?", arguments: [nonce]) == nil else {
            throw refuse("the offer's nonce was used before", "offerNonceReused")
        }
        try db.execute(sql: "INSERT INTO simOfferNonce (nonce, usedAtMs) VALUES (?, ?)", arguments: [nonce, nowMs])
        return offerId
    }
}
