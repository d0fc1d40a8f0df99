import Foundation
import IAPProtocol
import JSONRPC
import ServiceSupport

/// Google Play's real-time developer notifications (Pub/Sub pushes through the edge): verified by verification (the
/// push's OIDC token), recorded in the same inbox as Apple's notifications by `messageId` BEFORE the push is answered,
/// then processed state-based: a notification is only news that a purchase changed, so Google is asked for the purchase
/// as it is now, and the purchase here is brought to that (granted to the account the app bound it to, renewed, revoked
/// with the same debt rules as an App Store refund) by `NotificationRules`, exactly as an Apple notification with Apple's
/// current word. Any number of deliveries, in any order, end the same.
public struct PlayNotifications: FulfillmentPart {
    let service: FulfillmentService

    /// The inbox key of a push: its Pub/Sub message id (unique within its topic) and its subscription, apart from Apple's
    /// UUIDs; of a voided purchase taken from Google's list, its order.
    static func key(_ push: VerifiedPlayPush) -> String { "googlePlay:\(push.messageId)@\(push.subscription ?? "-")" }
    static let voidedKeyPrefix = "googlePlayVoided:"
    static func voidedKey(_ order: String) -> String { voidedKeyPrefix + order }
    /// Of a quantity-based partial refund from the list: one order can have several.
    static func partialVoidedKey(_ order: String, voidedTimeMs: Int64) -> String { voidedKeyPrefix + "\(order)@\(voidedTimeMs)" }
    /// The `subscription` of a voided purchase read from Google's list rather than pushed.
    static let voidedListSource = "voidedpurchases.list"
    /// The `subscription` of a sweep's question about a subscription.
    static let sweepSource = "subscriptionsv2.get"

    static func isPlay(_ entry: InboxEntry) -> Bool { entry.notificationUUID.hasPrefix("googlePlay") }

    public func receive(_ p: PlayPushDelivery) async throws(RPCError) -> FulfillmentReceiveNotification.Result {
        // Only the edge's Google Play route hands pushes over.
        try TokenGate.internal.check(p.internalToken, configured: configuration.internalToken)
        let push = try await dependencies.verifyPlayPush(p)
        return try await take(push, key: Self.key(push), body: p.body, processLater: p.processLater == true)
    }

    /// Records `push` in the inbox under `key` (nothing if it is there already), then processes it now or right after.
    func take(_ push: VerifiedPlayPush, key: String, body: String, processLater: Bool) async throws(RPCError)
        -> FulfillmentReceiveNotification.Result
    {
        let now = clock.nowMs
        let entry = InboxEntry(
            notificationUUID: key, notificationType: Self.typeName(push), subtype: nil, signedDateMs: push.eventTimeMs,
            signedPayload: body, notification: (try? JSONByteEncoder.encode(push)) ?? [], receivedAtMs: now,
            // Leased to this call: the inbox worker leaves it alone while it is processed here, and takes it if this process dies.
            nextAttemptAtMs: now + configuration.inboxLeaseMs, originalTransactionId: push.purchaseToken)
        let recorded = try await storeCall { try await self.store.recordNotification(entry) }
        guard recorded.isNew else {
            return .init(notificationUUID: key, state: recorded.entry.state, firstDelivery: false)
        }
        if processLater {
            if case .dropped = service.laterQueue.yield(entry) {
                try? await store.settleNotification(key, state: .pending, attempts: 0, nextAttemptAtMs: now, lastError: nil, nowMs: now)
            }
            return .init(notificationUUID: key, state: .pending, firstDelivery: true)
        }
        return .init(notificationUUID: key, state: await service.notifications.process(entry), firstDelivery: true)
    }

    /// Google's list of voided purchases since the last complete read (an hour's overlap; at most 29 days back, Google keeps
    /// 30): each one not yet taken back here is recorded in the inbox (`googlePlayVoided:` and its order) and processed, so a
    /// push Pub/Sub never delivered still ends in the refund: Google's list is its own authenticated answer, so an order it
    /// lists that this purchase was granted by is taken back without asking again. Answers how many were listed and how many
    /// were taken in; nothing when verification has no Play service account.
    func reconcileVoided() async throws(RPCError) -> (seen: Int, takenIn: Int) {
        guard let internalToken = configuration.internalToken else { return (0, 0) }
        let now = clock.nowMs
        let checkpoint = try await storeCall { try await self.store.reconcileCheckpoint(environment: "googlePlay") }
        let start = max(now - 29 * 86_400_000, (checkpoint ?? now - configuration.reconcileFirstWindowMs) - configuration.reconcileOverlapMs)
        var page: String?
        var seen = 0
        var takenIn = 0
        repeat {
            let answer: VerificationPlayVoidedPurchases.Result
            do {
                answer = try await dependencies.playVoidedPurchases(.init(internalToken: internalToken, startTimeMs: start, pageToken: page))
            } catch  where error.has(.playAPINotConfigured) {
                return (0, 0)
            }
            for voided in answer.voidedPurchases {
                seen += 1
                let order = voided.orderId ?? voided.purchaseToken
                if let record = try await storeCall({ try await self.store.processed(transactionId: order) }), record.revokedAtMs != nil { continue }
                let push = VerifiedPlayPush(
                    messageId: order, subscription: Self.voidedListSource, packageName: voided.packageName, eventTimeMs: voided.voidedTimeMs,
                    kind: .voidedPurchase, purchaseToken: voided.purchaseToken, orderId: voided.orderId,
                    refundType: (voided.voidedQuantity ?? 0) > 0 ? 2 : 1)
                let body = String(decoding: (try? JSONByteEncoder.encode(voided)) ?? [], as: UTF8.self)
                let key = push.refundType == 2 ? Self.partialVoidedKey(order, voidedTimeMs: voided.voidedTimeMs) : Self.voidedKey(order)
                if try await take(push, key: key, body: body, processLater: false).firstDelivery { takenIn += 1 }
            }
            page = answer.nextPageToken
        } while page != nil
        try await storeCall { try await self.store.saveReconcileCheckpoint(environment: "googlePlay", signedDateMs: now) }
        if seen > 0 { logger.info("reconciled with Google Play", metadata: ["voidsSeen": "\(seen)", "voidsTakenIn": "\(takenIn)"]) }
        return (seen, takenIn)
    }

    /// Google Play's side of the subscription sweep: each subscription whose access ended without news (every push about it
    /// lost) is asked of Google once per end, through the inbox under `PlaySubscriptionToCheck.key` (so a crash half-way is
    /// retried by the inbox worker and the question is not asked again): a renewal Google made is granted and moves the end,
    /// an end Google confirms changes nothing. Answers how many were asked and how many changed here.
    func sweepSubscriptions() async throws(RPCError) -> (checked: Int, updated: Int) {
        guard configuration.internalToken != nil else { return (0, 0) }
        let now = clock.nowMs
        let due = try await storeCall {
            try await self.store.playSubscriptionsToCheck(nowMs: now, limit: self.configuration.reconcileSubscriptionsPerRun)
        }
        var updated = 0
        for subscription in due {
            // Without a kept package (granted before packages were kept), verification's only package is asked.
            let question = VerifiedPlayPush(
                messageId: subscription.key, subscription: Self.sweepSource, packageName: subscription.packageName ?? "", eventTimeMs: now,
                kind: .subscription, purchaseToken: subscription.purchaseToken)
            if try await take(question, key: subscription.key, body: "", processLater: false).state == .applied { updated += 1 }
        }
        if !due.isEmpty {
            logger.info("swept Google Play subscriptions", metadata: ["checked": "\(due.count)", "updated": "\(updated)"])
        }
        return (due.count, updated)
    }

    /// The inbox's `notificationType` of a push: `googlePlay.subscription.4`, `googlePlay.voidedPurchase`, ...
    static func typeName(_ push: VerifiedPlayPush) -> String {
        "googlePlay.\(push.kind.rawValue)" + (push.notificationType.map { ".\($0)" } ?? "")
    }

    /// What `NotificationRules` decides from: Google's current word about the purchase the push names, the catalog's rule,
    /// and the account (the purchase's owner here, else the owner of the purchase it replaced, else the account whose
    /// appAccountToken the app passed as obfuscatedAccountId).
    func facts(_ entry: InboxEntry) async throws(RPCError) -> NotificationRules.Facts {
        let push: VerifiedPlayPush
        do {
            push = try JSONDecoder().decode(VerifiedPlayPush.self, from: Data(entry.notification))
        } catch {
            return Self.ignored("the recorded push could not be read")
        }
        guard let token = push.purchaseToken, [.subscription, .oneTimeProduct, .voidedPurchase].contains(push.kind) else {
            return Self.ignored(push.kind == .test ? "a test notification" : "not about a purchase this version knows")
        }
        // What was processed here for the order (or for a token without orders), read once: for voided purchases and pushes
        // that name no product.
        let record =
            push.kind == .voidedPurchase || push.productId == nil
            ? try await storeCall { try await self.store.processed(transactionId: push.orderId ?? token) } : nil
        // Only the server's own read of the list (its inbox key), never a push's unsigned `subscription` field saying so.
        if push.kind == .voidedPurchase, entry.notificationUUID.hasPrefix(Self.voidedKeyPrefix), push.refundType != 2, let record {
            // Google's own list says this order was refunded: taken back if it is this purchase's (the rules check the order's
            // original against the token), whatever Google answers about the purchase now. (A quantity-based partial refund
            // is brought to Google's current word below: how many units it still counts as refundable.)
            let purchase = VerifiedPurchase(
                environment: record.environment, transactionId: push.orderId ?? token, originalTransactionId: token, productId: record.productId,
                purchaseDateMs: push.eventTimeMs ?? clock.nowMs, cancellationDateMs: push.eventTimeMs ?? clock.nowMs)
            return NotificationRules.Facts(
                disposition: .bringToAppleState, type: .unknown("googlePlay"), snapshot: nil, current: purchase,
                signedDateMs: entry.signedDateMs, scope: record.holder.scope)
        }
        // A voided purchase from Google's list does not say which kind it is: the records here do.
        var recordedAsSubscription = false
        if push.kind == .voidedPurchase, push.productType == nil {
            if let record {
                recordedAsSubscription = record.grantKind == "subscription"
            } else if let product = try await storeCall({ try await self.store.entitlement(originalTransactionId: token) })?.productId {
                // A renewal's order never seen here, of a subscription granted here.
                if case .subscription? = try await service.grantRules(for: [product])[product] { recordedAsSubscription = true }
            }
        }
        let subscription = push.kind == .subscription || (push.kind == .voidedPurchase && (push.productType == 1 || recordedAsSubscription))
        let unrecordedVoid = push.kind == .voidedPurchase && record == nil && !recordedAsSubscription
        if unrecordedVoid, entry.notificationUUID.hasPrefix(Self.voidedKeyPrefix), push.refundType != 2 {
            // Google's own list says an order not recorded here was voided in full: remembered as an early refund under it,
            // without asking Google (nothing to ask per void of a purchase never redeemed here, however many Google's
            // three-day rule refunds). A redeem that asked Google before the void and commits after this read claims the
            // same order and takes the grant back; one that asks after is refused by Google's answer.
            let at = push.eventTimeMs ?? clock.nowMs
            let purchase = VerifiedPurchase(
                environment: "Production", transactionId: push.orderId ?? token, originalTransactionId: token, productId: "",
                purchaseDateMs: at, cancellationDateMs: at)
            return NotificationRules.Facts(
                disposition: .bringToAppleState, type: .unknown("googlePlay"), snapshot: nil, current: purchase, signedDateMs: entry.signedDateMs)
        }
        // Google is asked by token (its product id only checked when the push names one: a voided purchase names none, and
        // Google no longer sends a subscription's). A voided push about a purchase not recorded here is asked about too: a
        // redeem may have asked Google before the void and not committed yet, so a void Google confirms is remembered as an
        // early refund under the order that redeem claims (a one-time purchase: its order; a list entry's partial refund,
        // which only one-time purchases have, too).
        let productId = push.productId
        guard let internalToken = configuration.internalToken else {
            throw RPCError(code: .unavailable, message: "Google Play needs the internal token on fulfillment", reason: .playAPINotConfigured)
        }
        func ask(_ productId: String?) async throws(RPCError) -> VerifiedPlayPurchase {
            try await dependencies.verifyPlayPurchase(
                PlayPurchaseReference(
                    internalToken: internalToken, packageName: push.packageName.isEmpty ? nil : push.packageName, productId: productId,
                    purchaseToken: token, kind: subscription ? .subscription : .product))
        }
        let play: VerifiedPlayPurchase
        do {
            do {
                play = try await ask(productId)
            } catch  where subscription && productId != nil && error.data.reason == "productMismatch" {
                // The push names another of the token's products than the one holding the access (an add-on, a deferred
                // plan change's next plan): the token decides. Until 2026-11-30 such a push was ignored for good, and a
                // revocation it carried was lost.
                play = try await ask(nil)
            }
        } catch  where error.knownCode.map({ [.notFound, .invalidReceipt, .invalidParams].contains($0) }) ?? false {
            // A sweep's question without a kept package, where verification accepts several: retried, then parked for an
            // operator, never taken as Google's answer.
            if push.packageName.isEmpty, error.knownCode == .invalidParams { throw error }
            return Self.ignored("Google does not know the purchase (\(error.data.reason))")
        }
        if unrecordedVoid, !subscription, push.refundType != 2, play.kind == .product, play.state != "CANCELLED",
            (play.refundableQuantity ?? play.quantity) > 0
        {
            // A full void Google's answer does not show (yet): a void never grants; Google's list says it again.
            return Self.ignored("Google does not show the void of a purchase not recorded here: nothing to do")
        }
        if push.kind == .voidedPurchase, push.refundType == 2, play.kind == .product, (play.refundableQuantity ?? play.quantity) >= play.quantity,
            play.state != "CANCELLED"
        {
            // A partial refund Google's answer does not show yet: asked again later (the inbox's retries), never taken as
            // nothing to do (this delivery's key would be spent).
            throw RPCError(
                code: .unavailable, message: "Google does not show the partial refund of \(push.orderId ?? "-") yet", reason: .dependencyUnavailable)
        }
        let now = clock.nowMs
        // The catalog's product of Google's product id (and base plan); a purchase of one it does not sell keeps Google's id
        // and no rule (`unknownProduct` when granted).
        let product = PlayCatalogEntry.choose(try await service.playCatalog([play.productId])[play.productId] ?? [], basePlanId: play.basePlanId)
        var purchase = VerifiedPurchase(play: play, catalogProductId: product?.productId ?? play.productId, nowMs: now)
        let revokedByGoogle = push.kind == .voidedPurchase || (push.notificationType == 12 && push.kind == .subscription)
        if subscription, revokedByGoogle, !play.entitles {
            // A subscription's refund (voidedPurchaseNotification, authenticated by its token) or revocation, which Google's
            // answer confirms: its order is taken back as an App Store refund is.
            // The push's order only when it is one of this subscription's (Google's renewal orders are its first order and
            // "..N"): a push naming another purchase's order beside its own token would revoke that purchase here.
            if let order = push.orderId, Self.sameOrders(order, play.orderId) { purchase.transactionId = order }
            purchase.cancellationDateMs = push.eventTimeMs ?? now
        } else if !play.entitles && purchase.cancellationDateMs == nil {
            // Expired, on hold, paused, pending: gives nothing now, and what was granted ends when it was granted to end.
            return Self.ignored("Google's state is \(play.state): nothing to grant or take back")
        }
        var facts = NotificationRules.Facts(
            disposition: .bringToAppleState, type: .unknown("googlePlay"), snapshot: nil, current: purchase, signedDateMs: entry.signedDateMs,
            scope: configuration.sandboxPolicy.scope(forEnvironment: purchase.environment))
        if purchase.cancellationDateMs == nil || purchase.transactionId != purchase.originalTransactionId { facts.rule = product?.rule }
        guard purchase.cancellationDateMs == nil else { return facts }
        // An upgrade, downgrade or re-signup: the same customer's purchase history; the plan it replaces ends, whichever
        // account holds it (`GrantRules.endSubscription`).
        facts.replacedOriginal = play.linkedPurchaseToken
        guard try await storeCall({ try await self.store.owner(originalTransactionId: token) }) == nil else { return facts }
        if let linked = play.linkedPurchaseToken, purchase.appAccountToken == nil,
            let owner = try await storeCall({ try await self.store.owner(originalTransactionId: linked) })
        {
            facts.tokenAccountId = owner.accountId
        } else if let appAccountToken = purchase.appAccountToken {
            facts.tokenAccountId = try await dependencies.account(appAccountToken: appAccountToken, internalToken: internalToken)
        }
        return facts
    }

    /// Whether two order ids belong to one subscription: the same first order, renewals adding "..N".
    static func sameOrders(_ a: String, _ b: String?) -> Bool {
        guard let b else { return false }
        func first(_ order: String) -> Substring { order.range(of: "..").map { order[..<$0.lowerBound] } ?? order[...] }
        return first(a) == first(b)
    }

    static func ignored(_ reason: String) -> NotificationRules.Facts {
        NotificationRules.Facts(disposition: .ignore(reason), type: .unknown("googlePlay"), snapshot: nil)
    }
}

/// A Google Play subscription the sweep asks Google about: its purchase token, the end of its access here, and its package
/// when one was kept.
public struct PlaySubscriptionToCheck: Sendable, Equatable {
    public var purchaseToken: String
    public var expiresAtMs: Int64
    public var packageName: String?

    static let keyPrefix = "googlePlaySweep:"
    /// The sweep's inbox key for this end of this subscription (`FulfillmentQueries.playSubscriptionsToCheck` builds the same).
    var key: String { "\(Self.keyPrefix)\(purchaseToken)@\(expiresAtMs)" }
}
