import Foundation
import GRDB
import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import RPCTransport
import ServiceSupport

/// A local stand-in for Google Play (development and tests only): customers buy one-time products and subscribe to
/// base plans; subscriptions renew, enter grace and account hold, pause and expire on the simulated clock; purchases
/// not acknowledged in time are refunded and revoked, as Google's three-day rule says; refunds and chargebacks become
/// voided purchases. The Play Developer API, the OAuth token endpoint and the push certificates are on its HTTP port
/// (`PlayDeveloperAPI`); real-time developer notifications go out as Pub/Sub pushes (`PlayPushCourier`).
public final class PlaySimulator: Sendable {
    let store: PlayStore
    let clock: ServiceClock
    public let accounts: PlayAccounts
    public let courier: PlayPushCourier
    /// `play.setFault`: the Developer API's next answers, and for how many requests.
    private let fault = NIOLockedValueBox<(mode: PlayFaultMode, remaining: Int?)>((.none, nil))

    public init(directory: URL, publicURL: String, clock: ServiceClock = .system, pushTrustRootsPEM: String? = nil) throws {
        let keys = directory.appendingPathComponent("play-keys")
        store = try PlayStore(directory: directory)
        self.clock = clock
        accounts = try PlayAccounts(directory: keys, publicURL: publicURL)
        courier = try PlayPushCourier(store: store, accounts: accounts, clock: clock, trustRootsPEM: pushTrustRootsPEM)
    }

    /// Simulated now: the wall clock plus every `advanceClock` so far.
    func now(_ db: Database) throws -> Int64 {
        clock.nowMs + (try Int64.fetchOne(db, sql: "SELECT clockOffsetMs FROM playState")!)
    }

    /// Runs `body` in one write transaction after moving every due purchase to now (so an answer never shows a state
    /// the clock has passed), then starts a push of what was recorded.
    func write<T>(_ body: (Database, Int64) throws -> T) throws -> T {
        let (value, recorded) = try store.writer.write { db -> (T, Int) in
            let now = try self.now(db)
            var recorded = try self.settle(nowMs: now, db: db)
            // The newest notification's number before and after (AUTOINCREMENT: each one recorded takes the next): a count
            // of the table would read all of it on every API call.
            let newest = "SELECT COALESCE(MAX(seq), 0) FROM playNotification"
            let before = try Int.fetchOne(db, sql: newest)!
            let value = try body(db, now)
            recorded += try Int.fetchOne(db, sql: newest)! - before
            return (value, recorded)
        }
        if recorded > 0 { courier.kick() }
        return value
    }

    /// Moves every purchase something is due for to `nowMs`; answers how many notifications that recorded.
    @discardableResult
    func settle(nowMs: Int64, db: Database) throws -> Int {
        var recorded = 0
        for var purchase in try PlayStore.due(nowMs: nowMs, db: db) {
            let events = purchase.advance(to: nowMs)
            try PlayStore.save(purchase, db: db)
            for (at, event) in events { recorded += try record(event, of: purchase, atMs: at, db: db) }
        }
        return recorded
    }

    /// The real-time developer notification of an event (and the voided purchase of a revocation).
    @discardableResult
    func record(_ event: PlayEvent, of p: PlayPurchase, atMs: Int64, db: Database) throws -> Int {
        var notification: [String: Any] = ["version": "1.0", "packageName": p.packageName, "eventTimeMillis": String(atMs)]
        switch event {
        case .productPurchased:
            notification["oneTimeProductNotification"] = [
                "version": "1.0", "notificationType": 1, "purchaseToken": p.purchaseToken, "sku": p.productId,
            ]
        case .subscription(let type):
            notification["subscriptionNotification"] = [
                "version": "1.0", "notificationType": type.rawValue, "purchaseToken": p.purchaseToken, "subscriptionId": p.productId,
            ]
        case .voided(let orderId, let source, let reason, let quantity):
            var voided: [String: Any] = [
                "kind": "androidpublisher#voidedPurchase", "purchaseToken": p.purchaseToken, "orderId": orderId,
                "purchaseTimeMillis": String(p.purchaseTimeMs), "voidedTimeMillis": String(atMs), "voidedSource": source.rawValue,
                "voidedReason": reason.rawValue,
            ]
            if let quantity { voided["voidedQuantity"] = quantity }
            try PlayStore.insertVoided(
                packageName: p.packageName, voidedTimeMs: atMs, subscription: p.kind == .subscription, partial: quantity != nil,
                body: voided, db: db)
            notification["voidedPurchaseNotification"] = [
                "purchaseToken": p.purchaseToken, "orderId": orderId, "productType": p.kind == .subscription ? 1 : 2,
                "refundType": quantity == nil ? 1 : 2,
            ]
        }
        try PlayStore.insertNotification(packageName: p.packageName, notification: notification, publishTimeMs: atMs, db: db)
        return 1
    }

    // MARK: play.* methods

    public func purchase(_ p: PlayPurchaseProduct.Params) throws -> PlayPurchaseState {
        try PlayPurchaseRules.validate(p)
        return try write { db, now in
            var linked: PlayPurchase?
            if let token = p.linkedPurchaseToken {
                guard let old = try PlayStore.purchase(token, db: db), old.packageName == p.packageName, old.kind == .subscription else {
                    throw RPCError.notFound("no subscription \(token) in \(p.packageName) to replace", reason: "unknownPurchase")
                }
                guard old.state != .expired, old.cancellation != .replacement else {
                    throw RPCError.conflict("the subscription to replace has expired or was replaced", reason: "purchaseExpired")
                }
                linked = old
            }
            var made = PlayPurchaseRules.make(p, nowMs: now, linked: linked?.purchaseToken)
            if var old = linked {
                if p.replacementMode == .DEFERRED {
                    try PlayPurchaseRules.deferReplacement(&made, replacing: &old, nowMs: now)
                    try self.record(.subscription(.expired), of: old, atMs: now, db: db)
                } else {
                    // Replaced: it stops recurring and its access passes to the new purchase, which carries on from here.
                    // Google answers it as canceled (`replacementCancellation`) with its old expiry until then, then
                    // expired: both tokens look live for a while, and only the new one gives access.
                    old.state = .canceled
                    old.autoRenewing = false
                    old.cancellation = .replacement
                    old.cancelTimeMs = now
                }
                try PlayStore.save(old, db: db)
            }
            try PlayStore.save(made, db: db)
            try self.record(made.kind == .product ? .productPurchased : .subscription(.purchased), of: made, atMs: now, db: db)
            return made.state(nowMs: now)
        }
    }

    public func getPurchase(_ p: PlayPurchaseToken) throws -> PlayPurchaseState {
        try write { db, now in try Self.existing(p.purchaseToken, db: db).state(nowMs: now) }
    }

    public func subscriptionEvent(_ p: PlaySubscriptionEvent.Params) throws -> PlayPurchaseState {
        try write { db, now in
            var purchase = try Self.existing(p.purchaseToken, db: db)
            guard purchase.kind == .subscription else {
                throw RPCError.invalidParams("\(p.purchaseToken) is a one-time purchase", field: "purchaseToken", reason: "notASubscription")
            }
            let events = try PlayPurchaseRules.apply(p, to: &purchase, nowMs: now)
            try PlayStore.save(purchase, db: db)
            for event in events { try self.record(event, of: purchase, atMs: now, db: db) }
            return purchase.state(nowMs: now)
        }
    }

    public func voidPurchase(_ p: PlayRefund.Params) throws -> PlayPurchaseState {
        try write { db, now in
            var purchase = try Self.existing(p.purchaseToken, db: db)
            let events = try PlayPurchaseRules.void(&purchase, p, nowMs: now)
            try PlayStore.save(purchase, db: db)
            for (at, event) in events { try self.record(event, of: purchase, atMs: at, db: db) }
            return purchase.state(nowMs: now)
        }
    }

    public func advanceClock(_ p: PlayAdvanceClock.Params) throws -> PlayAdvanceClock.Result {
        guard (0...(10 * 366 * 86_400)).contains(p.seconds) else {
            throw RPCError.invalidParams("seconds must be 0 to ten years", field: "seconds", reason: "invalidValue")
        }
        let (now, recorded) = try store.writer.write { db -> (Int64, Int) in
            try db.execute(sql: "UPDATE playState SET clockOffsetMs = clockOffsetMs + ?", arguments: [p.seconds * 1000])
            let now = try self.now(db)
            return (now, try self.settle(nowMs: now, db: db))
        }
        if recorded > 0 { courier.kick() }
        return .init(nowMs: now, notifications: recorded)
    }

    func setFault(_ p: PlaySetFault.Params) throws {
        if let count = p.count, count < 0 { throw RPCError.invalidParams("count must not be negative", field: "count", reason: "invalidValue") }
        fault.withLockedValue { $0 = (p.mode, p.count) }
    }

    /// The fault this Developer API request gets, counting it.
    func takeFault() -> PlayFaultMode {
        fault.withLockedValue { fault in
            guard fault.mode != .none else { return .none }
            if let remaining = fault.remaining {
                guard remaining > 0 else { return .none }
                fault.remaining = remaining - 1
            }
            return fault.mode
        }
    }

    static func existing(_ token: String, db: Database) throws -> PlayPurchase {
        guard let purchase = try PlayStore.purchase(token, db: db) else {
            throw RPCError.notFound("no purchase with this token", reason: "unknownPurchase")
        }
        return purchase
    }

    public func router() -> RPCRouter {
        var r = RPCRouter()
        r.registerImmediate(PlayServiceAccountKey.self) { _, _ in self.accounts.keyFileResult() }
        r.registerBlocking(PlayPurchaseProduct.self) { p, _ in try self.purchase(p) }
        r.registerBlocking(PlayGetPurchase.self) { p, _ in try self.getPurchase(p) }
        r.registerBlocking(PlaySubscriptionEvent.self) { p, _ in try self.subscriptionEvent(p) }
        r.registerBlocking(PlayRefund.self) { p, _ in try self.voidPurchase(p) }
        r.registerBlocking(PlayAdvanceClock.self) { p, _ in try self.advanceClock(p) }
        r.registerBlocking(PlaySetPushEndpoint.self) { p, _ in
            try self.courier.setEndpoint(p)
            return EmptyResult()
        }
        r.registerImmediate(PlaySetPushFault.self) { p, _ in
            try self.courier.setFault(p)
            return EmptyResult()
        }
        r.register(PlayDeliverNotifications.self) { _, _ in await self.courier.deliver() }
        r.registerImmediate(PlaySetFault.self) { p, _ in
            try self.setFault(p)
            return EmptyResult()
        }
        return r
    }
}

extension PlayPurchase {
    func state(nowMs: Int64) -> PlayPurchaseState {
        PlayPurchaseState(
            purchaseToken: purchaseToken, packageName: packageName, productId: productId, basePlanId: basePlanId, orderIds: orderIds,
            state: kind == .product ? (canceled ? "canceled" : "purchased") : state.rawValue, acknowledged: acknowledged, consumed: consumed,
            quantity: quantity, refundableQuantity: refundableQuantity, expiryTimeMs: kind == .subscription ? expiryTimeMs : nil,
            autoRenewing: kind == .subscription ? autoRenewing : nil, test: test,
            acknowledgementDeadlineMs: acknowledged || !isLive ? nil : acknowledgementDeadlineMs)
    }
}
