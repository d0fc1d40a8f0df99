import Foundation
import IAPProtocol
import JSONRPC
import Testing

@testable import PlaySimulator

/// The simulator's purchase rules on their own (no storage, no HTTP): the clock's due work, customers' actions, refunds.
@Suite struct PlayPurchaseRulesTests {
    static let day: Int64 = 86_400_000

    static func subscription(test: Bool = false, grace: Int? = nil, hold: Int? = nil) -> PlayPurchase {
        var s = PlayPurchaseRules.make(
            .init(
                packageName: "com.example.game", productId: "premium", basePlanId: "monthly", testPurchase: test, gracePeriodDays: grace,
                accountHoldDays: hold), nowMs: 0, linked: nil)
        s.acknowledged = true
        return s
    }

    static func types(_ events: [(atMs: Int64, event: PlayEvent)]) -> [Int] {
        events.compactMap { if case .subscription(let t) = $0.event { t.rawValue } else { nil } }
    }

    @Test func aRenewingSubscriptionRenewsEachPeriodWithANewOrder() {
        var s = Self.subscription()
        let events = s.advance(to: 61 * Self.day)
        #expect(Self.types(events) == [2, 2])
        #expect(events.map(\.atMs) == [30 * Self.day, 60 * Self.day])
        #expect(s.renewals == 2 && s.expiryTimeMs == 90 * Self.day && s.state == .active)
        #expect(s.latestOrderId == "\(s.orderId)..1" && s.orderIds.count == 3)
    }

    @Test func canceledItExpiresOnceAtTheEndOfItsPeriod() throws {
        var s = Self.subscription()
        #expect(try PlayPurchaseRules.apply(.init(purchaseToken: "", action: .cancel), to: &s, nowMs: Self.day) == [.subscription(.canceled)])
        #expect(s.state == .canceled && !s.autoRenewing)
        #expect(Self.types(s.advance(to: 29 * Self.day)).isEmpty)
        #expect(Self.types(s.advance(to: 100 * Self.day)) == [13])
        #expect(s.state == .expired && s.dueAtMs == nil && Self.types(s.advance(to: 200 * Self.day)).isEmpty)
    }

    @Test func aDeclinedPaymentGoesToGraceThenHoldThenExpiresUnlessFixed() throws {
        var s = Self.subscription(grace: 7, hold: 30)
        _ = try PlayPurchaseRules.apply(.init(purchaseToken: "", action: .declinePayment), to: &s, nowMs: 0)
        #expect(Self.types(s.advance(to: 30 * Self.day)) == [6])
        #expect(s.state == .inGracePeriod && s.expiryTimeMs == 37 * Self.day)
        #expect(Self.types(s.advance(to: 37 * Self.day)) == [5])
        #expect(s.state == .onHold && !s.isLive)
        var fixed = s
        #expect(
            try PlayPurchaseRules.apply(.init(purchaseToken: "", action: .fixPayment), to: &fixed, nowMs: 40 * Self.day) == [
                .subscription(.recovered)
            ])
        #expect(fixed.state == .active && fixed.expiryTimeMs == 70 * Self.day && fixed.renewals == 1)
        #expect(Self.types(s.advance(to: 67 * Self.day)) == [3, 13])
        #expect(s.state == .expired && s.cancellation == .system)
    }

    @Test func withoutGraceOrHoldADeclinedRenewalEndsIt() throws {
        var s = Self.subscription(grace: 0, hold: 0)
        _ = try PlayPurchaseRules.apply(.init(purchaseToken: "", action: .declinePayment), to: &s, nowMs: 0)
        #expect(Self.types(s.advance(to: 31 * Self.day)) == [3, 13])
    }

    @Test func notAcknowledgedInThreeDaysItIsRefundedAndRevokedByGoogle() {
        var p = PlayPurchaseRules.make(.init(packageName: "com.example.game", productId: "coins.100"), nowMs: 0, linked: nil)
        #expect(p.advance(to: 3 * Self.day - 1).isEmpty && !p.canceled)
        let events = p.advance(to: 3 * Self.day)
        #expect(events.map(\.event) == [.voided(orderId: p.orderId, source: .google, reason: .unacknowledgedPurchase, quantity: nil)])
        #expect(p.canceled && p.refundableQuantity == 0 && p.dueAtMs == nil)
        var acknowledged = PlayPurchaseRules.make(.init(packageName: "com.example.game", productId: "coins.100"), nowMs: 0, linked: nil)
        acknowledged.acknowledged = true
        #expect(acknowledged.dueAtMs == nil && acknowledged.advance(to: 10 * Self.day).isEmpty)
    }

    @Test func aTestersSubscriptionIsFastAndRenewsSixTimes() {
        var s = Self.subscription(test: true)
        #expect(s.periodMs == 5 * 60_000 && s.gracePeriodMs == 5 * 60_000 && s.accountHoldMs == 10 * 60_000)
        var unacknowledged = PlayPurchaseRules.make(
            .init(packageName: "com.example.game", productId: "coins.1", testPurchase: true), nowMs: 0, linked: nil)
        #expect(unacknowledged.advance(to: 5 * 60_000).count == 1 && unacknowledged.canceled)
        #expect(Self.types(s.advance(to: Self.day)) == [2, 2, 2, 2, 2, 2, 13])
    }

    @Test func aPauseStartsAtTheNextRenewalAndResumesWithACharge() throws {
        var s = Self.subscription()
        #expect(
            try PlayPurchaseRules.apply(.init(purchaseToken: "", action: .pause, pauseDays: 14), to: &s, nowMs: 0)
                == [.subscription(.pauseScheduleChanged)])
        #expect(Self.types(s.advance(to: 30 * Self.day)) == [10])
        #expect(s.state == .paused && !s.isLive && s.pausedUntilMs == 44 * Self.day)
        #expect(Self.types(s.advance(to: 44 * Self.day)) == [1])
        #expect(s.state == .active && s.expiryTimeMs == 74 * Self.day)
        #expect(throws: RPCError.self) { try PlayPurchaseRules.apply(.init(purchaseToken: "", action: .pause, pauseDays: 3), to: &s, nowMs: 0) }
    }

    @Test func aPartialRefundLeavesTheRestThenTheLastRevokes() throws {
        var p = PlayPurchaseRules.make(.init(packageName: "com.example.game", productId: "coins.100", quantity: 3), nowMs: 0, linked: nil)
        let partial = try PlayPurchaseRules.void(&p, .init(purchaseToken: "", quantity: 1), nowMs: 5)
        #expect(partial.map(\.event) == [.voided(orderId: p.orderId, source: .user, reason: .remorse, quantity: 1)])
        #expect(!p.canceled && p.refundableQuantity == 2)
        #expect(throws: RPCError.self) { try PlayPurchaseRules.void(&p, .init(purchaseToken: "", quantity: 3), nowMs: 6) }
        let rest = try PlayPurchaseRules.void(&p, .init(purchaseToken: "", reason: .chargeback, quantity: 2), nowMs: 7)
        #expect(rest.map(\.event) == [.voided(orderId: p.orderId, source: .user, reason: .chargeback, quantity: nil)])
        #expect(p.canceled && p.refundableQuantity == 0)
        #expect(throws: RPCError.self) { try PlayPurchaseRules.void(&p, .init(purchaseToken: ""), nowMs: 8) }
    }

    /// A DEFERRED plan change: the new token carries the old plan to its paid end, then the new plan's first period starts
    /// as a renewal; a plan on hold (no paid period to carry on) is refused rather than switched at once.
    @Test func aDeferredChangeCarriesThePaidPlanThenSwitchesAsARenewal() throws {
        var old = Self.subscription()
        var made = PlayPurchaseRules.make(
            .init(
                packageName: "com.example.game", productId: "basic", basePlanId: "yearly", billingPeriod: .P1Y, linkedPurchaseToken: old.purchaseToken
            ),
            nowMs: 10 * Self.day, linked: old.purchaseToken)
        made.acknowledged = true
        try PlayPurchaseRules.deferReplacement(&made, replacing: &old, nowMs: 10 * Self.day)
        #expect(old.state == .expired && old.cancellation == .replacement && old.dueAtMs == nil)
        #expect(made.productId == "premium" && made.expiryTimeMs == 30 * Self.day && made.deferred?.productId == "basic")
        #expect(Self.types(made.advance(to: 29 * Self.day)).isEmpty)
        #expect(Self.types(made.advance(to: 31 * Self.day)) == [2], "the switch is a renewal")
        #expect(made.productId == "basic" && made.basePlanId == "yearly" && made.expiryTimeMs == 395 * Self.day && made.deferred == nil)
        #expect(made.replacedItem?.productId == "premium" && made.replacedItem?.expiryTimeMs == 30 * Self.day)
        #expect(made.latestOrderId == "\(made.orderId)..0")
        // On hold: refused, nothing changed.
        var held = Self.subscription(grace: 0)
        _ = try PlayPurchaseRules.apply(.init(purchaseToken: "", action: .declinePayment), to: &held, nowMs: Self.day)
        _ = held.advance(to: 31 * Self.day)
        #expect(held.state == .onHold)
        var another = made
        #expect(throws: RPCError.self) { try PlayPurchaseRules.deferReplacement(&another, replacing: &held, nowMs: 32 * Self.day) }
        #expect(held.state == .onHold && another == made)
    }

    @Test func badPurchasesAreRefused() {
        for params in [
            PlayPurchaseProduct.Params(packageName: "", productId: "coins"),
            .init(packageName: "com.example.game", productId: "coins", quantity: 11),
            .init(packageName: "com.example.game", productId: "premium", basePlanId: "monthly", quantity: 2),
            .init(packageName: "com.example.game", productId: "coins", linkedPurchaseToken: "x"),
            .init(packageName: "com.example.game", productId: "coins", obfuscatedExternalAccountId: String(repeating: "a", count: 65)),
            .init(packageName: "com.example.game", productId: "coins", regionCode: "usa"),
        ] {
            #expect(throws: RPCError.self) { try PlayPurchaseRules.validate(params) }
        }
    }
}

/// The simulator's `google-datetime` values, written by hand, are Foundation's.
@Suite struct PlayTimeTests {
    @Test func writesWhatFoundationWrites() {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        var rng = SystemRandomNumberGenerator()
        for ms in [0, -1, 86_399_999, 951_782_400_000]
            + (0..<2_000).map({ _ in Int64.random(in: -2_208_988_800_000...7_258_118_400_000, using: &rng) })
        {
            #expect(PlayTime.rfc3339(ms) == formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000)), "\(ms)")
        }
    }
}
