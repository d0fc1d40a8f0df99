import Foundation
import GRDB
import IAPProtocol
import JSONRPC

/// Family Sharing as Apple documents it ("Supporting Family Sharing in your app"): only non-consumables and auto-renewable
/// subscriptions are shared; each family member gets transactions of their own (`inAppOwnershipType` FAMILY_SHARED); when
/// the purchaser stops sharing, a member leaves the family or the purchaser is refunded, each member's access ends with a
/// REVOKE about the member's own transaction. The purchaser never gets a REVOKE. Only non-consumables are shared here: a
/// family member's subscription renews as transactions of its own, which the simulator does not make yet.
extension AppStoreSimulator {
    public func shareWithFamily(_ p: SimShareWithFamily.Params) throws -> SimShareWithFamily.Result {
        guard !p.memberAppleId.isEmpty, p.memberAppleId.utf8.count <= 200, p.memberAppleId != p.appleId else {
            throw RPCError.invalidParams("memberAppleId must name another Apple ID", field: "memberAppleId", reason: "invalidValue")
        }
        let shared = try write { db -> SimTransaction in
            guard let t = try SimulatorStore.transaction(p.transactionId, db: db), t.appleId == p.appleId else {
                throw RPCError.notFound("no transaction \(p.transactionId) for this Apple ID", reason: "unknownTransaction")
            }
            guard t.sharedFrom == nil else {
                throw RPCError.invalidParams(
                    "only the purchaser shares a purchase; this is a family member's", field: "transactionId", reason: "notPurchaser")
            }
            guard t.productType == .nonConsumable else {
                throw RPCError.invalidParams(
                    "the simulator shares non-consumables only (Apple shares no consumable or non-renewing subscription; family "
                        + "members' subscriptions are not modelled)", field: "transactionId", reason: "notShareable")
            }
            guard t.cancellationDateMs == nil else {
                throw RPCError.conflict("transaction \(t.transactionId) is refunded", reason: "alreadyRefunded")
            }
            let original = t.originalTransactionId
            let members = try SimulatorStore.familyShares(of: original, db: db).map(\.appleId)
            guard !members.contains(p.memberAppleId) else {
                throw RPCError.conflict("already shared with \(p.memberAppleId)", reason: "alreadyShared")
            }
            guard members.count < 5 else {
                throw RPCError.conflict("Family Sharing reaches at most five family members", reason: "familyFull")
            }
            let now = try self.now(db)
            let id = try SimulatorStore.nextTransactionId(db)
            let app = try SimulatorStore.appTransactionMade(
                appleId: p.memberAppleId, bundleId: t.bundleId, environment: t.environment, nowMs: now, db: db)
            let member = SimTransaction(
                transactionId: id, appleId: p.memberAppleId, bundleId: t.bundleId, productId: t.productId, productType: t.productType,
                quantity: 1, originalTransactionId: id, purchaseDateMs: now, originalPurchaseDateMs: now, expiresDateMs: nil,
                cancellationDateMs: nil, finished: false, reason: "PURCHASE", webOrderLineItemId: 0, appAccountToken: nil, periodDays: nil,
                environment: t.environment, orderId: nil, appTransactionId: app.appTransactionId, sharedFrom: original)
            try SimulatorStore.insert(member, db: db)
            return member
        }
        return .init(transactionId: shared.transactionId, signedTransaction: try signedTransaction(shared, signedAt: shared.purchaseDateMs))
    }

    /// `revokeFamilySharing`: a family member's transaction is revoked (the member leaves the family); the purchaser's
    /// revokes every member's (the purchaser stops sharing). Answers the first REVOKE.
    func endFamilySharing(_ t: SimTransaction, nowMs: Int64, db: Database) throws -> String? {
        guard t.sharedFrom != nil else {
            let revoked = try revokeFamilyShares(of: t, nowMs: nowMs, db: db)
            guard let first = revoked.first else {
                throw RPCError.conflict(
                    "transaction \(t.transactionId) is not shared with any family member (sim.shareWithFamily)", reason: "notShared")
            }
            return first
        }
        guard t.cancellationDateMs == nil else {
            throw RPCError.conflict("transaction \(t.transactionId) is already revoked", reason: "alreadyRefunded")
        }
        return try revoke(t, nowMs: nowMs, db: db)
    }

    /// Revokes every family member's transaction shared from `purchase`'s original, each with a REVOKE about it.
    @discardableResult
    func revokeFamilyShares(of purchase: SimTransaction, nowMs: Int64, db: Database) throws -> [String] {
        try SimulatorStore.familyShares(of: purchase.originalTransactionId, db: db).map { try revoke($0, nowMs: nowMs, db: db) }
    }

    private func revoke(_ member: SimTransaction, nowMs: Int64, db: Database) throws -> String {
        var revoked = member
        revoked.cancellationDateMs = nowMs
        // Every transaction of the member's original (a restore's copy too): a restore after it brings nothing back.
        try db.execute(
            sql: "UPDATE simTransaction SET cancellationDateMs = ? WHERE originalTransactionId = ? AND cancellationDateMs IS NULL",
            arguments: [nowMs, member.originalTransactionId])
        return try recordNotification("REVOKE", revoked, signedDate: nowMs, db: db)
    }
}
