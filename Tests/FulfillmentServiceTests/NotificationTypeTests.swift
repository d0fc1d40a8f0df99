import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import RPCTestSupport
import SuiteTestSupport
import Testing

/// Every notification type and subtype Apple documents for App Store Server Notifications v2, made by the
/// simulator from its events (or `sim.notify` for the ones that change nothing it keeps) and received by
/// fulfillment over TCP: applied (with the effect checked), or ignored with the reason kept on the inbox row.
/// The other types are covered where their story is: REFUND, REFUND_REVERSED, REFUND_DECLINED,
/// CONSUMPTION_REQUEST (NotificationLifecycleTests), DID_FAIL_TO_RENEW with and without GRACE_PERIOD,
/// GRACE_PERIOD_EXPIRED, DID_RENEW/BILLING_RECOVERY, EXPIRED/VOLUNTARY and BILLING_RETRY, DID_CHANGE_RENEWAL_STATUS
/// (NotificationLifecycleTests, NotificationChaosTests), RENEWAL_EXTENDED (SupportActionsTests), ONE_TIME_CHARGE and
/// SUBSCRIBED/INITIAL_BUY (NotificationChaosTests).
@Suite struct NotificationTypeTests {
    static let day: Int64 = 86_400_000

    /// Delivers each payload; answers each one's state and kept reason, in order.
    static func deliver(_ suite: SuiteFixture, _ payloads: [String?]) async throws -> [(state: NotificationState, reason: String?)] {
        var outcomes: [(NotificationState, String?)] = []
        for payload in payloads {
            let received = try await suite.fulfillment.call(
                FulfillmentReceiveNotification.self, .init(signedPayload: try #require(payload), internalToken: SuiteFixture.internalToken))
            let listed = try await suite.fulfillment.call(FulfillmentListNotifications.self, .init(adminToken: SuiteFixture.adminToken, limit: 500))
            let row = try #require(listed.notifications.first { $0.notificationUUID == received.notificationUUID })
            outcomes.append((received.state, row.lastError))
        }
        return outcomes
    }

    static func advance(_ suite: SuiteFixture, days: Int64) async throws -> [String] {
        suite.clock.advance(ms: days * day)
        return try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: days * 86_400)).notifications
    }

    static func event(
        _ suite: SuiteFixture, _ appleId: String, _ transactionId: String, _ event: SimLifecycleEventKind, _ productId: String? = nil
    ) async throws -> String? {
        try await suite.simulator.call(
            SimLifecycleEvent.self, .init(appleId: appleId, transactionId: transactionId, event: event, productId: productId)
        ).signedPayload
    }

    static func notify(_ suite: SuiteFixture, _ appleId: String, _ transactionId: String, _ type: String, _ subtype: String? = nil)
        async throws -> String?
    {
        try await suite.simulator.call(
            SimNotify.self, .init(appleId: appleId, transactionId: transactionId, notificationType: type, subtype: subtype)
        ).signedPayload
    }

    /// A subscriber whose purchase is redeemed.
    static func subscriber(_ suite: SuiteFixture, _ name: String, _ product: String = "sub.premium") async throws -> (
        session: String, appleId: String, transactionId: String, appAccountToken: String
    ) {
        let user = try await suite.register(name)
        let bought = try await suite.buy("\(name)@icloud", product, appAccountToken: user.appAccountToken)
        _ = try await suite.redeem(user.session, signed: [bought.signedTransaction])
        return (user.session, "\(name)@icloud", bought.transactionId, user.appAccountToken)
    }

    @Test func everyDocumentedTypeAndSubtypeHasADisposition() {
        // The rule's table: a documented type is never left to the catch-all "not acted on".
        for (type, subtypes) in NotificationDisposition.documented {
            for subtype in subtypes {
                let disposition = NotificationDisposition.of(type: type, subtype: subtype)
                #expect(disposition != .ignore("\(type) is not a notification type this server acts on"), "\(type)/\(subtype ?? "-")")
            }
        }
        #expect(NotificationDisposition.documented.count == 19)
        #expect(NotificationDisposition.of(type: "DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE") == .bringToAppleState)
        #expect(NotificationDisposition.of(type: "DID_CHANGE_RENEWAL_PREF", subtype: "DOWNGRADE") == .keepRenewalState)
    }

    @Test func priceIncreasePendingAndAcceptedAreAppliedAndOneNotConsentedToExpiresWithPriceIncrease() async throws {
        try await SuiteFixture.with { suite in
            let pia = try await Self.subscriber(suite, "pia")
            let quinn = try await Self.subscriber(suite, "quinn")
            let announced = try await Self.deliver(
                suite,
                [
                    try await Self.event(suite, pia.appleId, pia.transactionId, .priceIncrease),
                    try await Self.event(suite, quinn.appleId, quinn.transactionId, .priceIncrease),
                    try await Self.event(suite, quinn.appleId, quinn.transactionId, .acceptPriceIncrease),
                ])
            #expect(announced.map(\.state) == [.applied, .applied, .applied], "PRICE_INCREASE/PENDING, PENDING, ACCEPTED")
            #expect(try await suite.entitlements(pia.session).first?.willRenew == true, "still renewing until the period ends")
            // The period ends: pia never consented (EXPIRED/PRICE_INCREASE), quinn did (DID_RENEW).
            let ended = try await Self.advance(suite, days: 31)
            #expect(ended.count == 2)
            #expect(try await Self.deliver(suite, ended).map(\.state) == [.applied, .applied])
            #expect(try await suite.entitlements(pia.session).isEmpty)
            let renewed = try #require(try await suite.entitlements(quinn.session).first)
            #expect((renewed.expiresAtMs ?? 0) > suite.clock.clock.nowMs + 28 * Self.day)
        }
    }

    @Test func planChangesDowngradeAtTheNextRenewalCancelAndUpgradeNowAreApplied() async throws {
        try await SuiteFixture.with { suite in
            let rae = try await Self.subscriber(suite, "rae")
            let sam = try await Self.subscriber(suite, "sam")
            let tia = try await Self.subscriber(suite, "tia", "sub.basic")
            let changes = try await Self.deliver(
                suite,
                [
                    try await Self.event(suite, rae.appleId, rae.transactionId, .downgrade, "sub.basic"),  // DOWNGRADE
                    try await Self.event(suite, sam.appleId, sam.transactionId, .downgrade, "sub.basic"),  // DOWNGRADE
                    try await Self.event(suite, sam.appleId, sam.transactionId, .cancelDowngrade),  // no subtype
                    try await Self.event(suite, tia.appleId, tia.transactionId, .upgrade, "sub.premium"),  // UPGRADE
                ])
            #expect(changes.map(\.state) == [.applied, .applied, .applied, .applied])
            #expect(try await suite.entitlements(rae.session).map(\.entitlement) == ["premium"], "a downgrade waits for the renewal")
            // The upgrade is granted now, from Apple's record of it, without the app redeeming anything.
            #expect(try await suite.entitlements(tia.session).map(\.entitlement).contains("premium"))
            #expect(try await Self.deliver(suite, try await Self.advance(suite, days: 31)).allSatisfy { $0.state == .applied })
            #expect(try await suite.entitlements(rae.session).map(\.entitlement) == ["basic"], "renewed on the lower plan")
            #expect(try await suite.entitlements(sam.session).map(\.entitlement) == ["premium"], "the downgrade was cancelled")
            #expect(try await suite.entitlements(tia.session).map(\.entitlement) == ["premium"], "the upgraded plan renews")
        }
    }

    /// An upgrade from a yearly plan to a monthly one: Apple starts the monthly period at once, ending eleven months before
    /// the yearly one would have (its rest refunded). The higher plan holds from the UPGRADE on, and renews monthly.
    /// (Until 2026-11-30 the shorter period was answered `restored` and Basic stayed until the year's end: seen failing so.)
    @Test func anUpgradeFromAYearlyPlanToAMonthlyOneIsAppliedAtOnce() async throws {
        try await SuiteFixture.with { suite in
            let uma = try await suite.register("uma")
            let yearly = try await suite.simulator.call(
                SimPurchase.self,
                .init(
                    appleId: "uma@icloud", bundleId: SuiteFixture.bundleId, productId: "sub.basic", productType: .autoRenewable,
                    appAccountToken: uma.appAccountToken, subscriptionPeriodDays: 365))
            _ = try await suite.redeem(uma.session, signed: [yearly.signedTransaction])
            let upgrade = try await suite.simulator.call(
                SimLifecycleEvent.self,
                .init(
                    appleId: "uma@icloud", transactionId: yearly.transactionId, event: .upgrade, productId: "sub.premium", subscriptionPeriodDays: 30)
            )
            #expect(try await Self.deliver(suite, [upgrade.signedPayload]).map(\.state) == [.applied])
            var premium = try #require(try await suite.entitlements(uma.session).first)
            #expect(premium.entitlement == "premium" && (premium.expiresAtMs ?? .max) <= suite.clock.nowMs + 31 * Self.day, "\(premium)")
            // A refund of the replaced yearly period takes only that period: Premium stays.
            let yearlyRefund = try await suite.simulator.call(SimRefund.self, .init(appleId: "uma@icloud", transactionId: yearly.transactionId))
            #expect(try await Self.deliver(suite, [yearlyRefund.signedPayload]).map(\.state) == [.applied])
            #expect(try await suite.entitlements(uma.session).map(\.entitlement) == ["premium"], "the upgrade's period holds")
            let renewals = try await Self.advance(suite, days: 31)
            #expect(try await Self.deliver(suite, renewals).allSatisfy { $0.state == .applied })
            premium = try #require(try await suite.entitlements(uma.session).first)
            #expect(premium.entitlement == "premium" && (premium.expiresAtMs ?? .max) <= suite.clock.nowMs + 31 * Self.day, "renews monthly")
            // A refund of the current monthly period ends the access: the yearly period bought before it holds nothing
            // back (until 2026-11-30 its later end did, and Premium stayed through every monthly refund).
            let current = try WithoutAppStoreAPITests.transactionId(of: try #require(renewals.last))
            let refund = try await suite.simulator.call(SimRefund.self, .init(appleId: "uma@icloud", transactionId: current))
            #expect(try await Self.deliver(suite, [refund.signedPayload]).map(\.state) == [.applied])
            #expect(try await suite.entitlements(uma.session).isEmpty, "the refund of the current period ends the access")
            #expect(try await suite.ledgerIsConsistent())
        }
    }

    /// Apple's prorated refund of a coin purchase (REFUND_PRORATED, 33.333%: one of three packs): that share of the grant is
    /// taken back and the rest stays; the same REFUND again, or the purchase redeemed again, takes nothing more. (Before
    /// 2026-11-30 every refund took the whole grant back: seen failing so.)
    @Test func aProratedRefundTakesBackOnlyTheRefundedShareOfACoinGrant() async throws {
        try await SuiteFixture.with { suite in
            let vi = try await suite.register("vi")
            let packs = try await suite.buy("vi@icloud", "coins.100", quantity: 3, appAccountToken: vi.appAccountToken)
            #expect(try await suite.redeem(vi.session, signed: [packs.signedTransaction]).balance == 300)
            let refund = try await suite.simulator.call(
                SimRefund.self, .init(appleId: "vi@icloud", transactionId: packs.transactionId, revocationPercentage: 33_333))
            #expect(try await Self.deliver(suite, [refund.signedPayload, refund.signedPayload]).map(\.state) == [.applied, .applied])
            #expect(try await suite.balance(vi.session) == 200, "one pack of three taken back")
            let again = try await suite.redeem(vi.session, signed: [packs.signedTransaction])
            #expect(again.balance == 200 && again.results.map(\.outcome) == [.alreadyGranted])
            // Never redeemed before its prorated REFUND, which came first: the refunded copy, redeemed, grants the rest.
            let more = try await suite.buy("vi@icloud", "coins.100", quantity: 3, appAccountToken: vi.appAccountToken)
            let early = try await suite.simulator.call(
                SimRefund.self, .init(appleId: "vi@icloud", transactionId: more.transactionId, revocationPercentage: 33_333))
            #expect(try await Self.deliver(suite, [early.signedPayload]).map(\.state) == [.applied])
            let refundedCopy = try WithoutAppStoreAPITests.signedTransaction(of: try #require(early.signedPayload))
            let late = try await suite.redeem(vi.session, signed: [refundedCopy])
            #expect(late.results.map(\.outcome) == [.granted] && late.balance == 400, "\(late.results)")
            // Apple reverses the first refund: the pack it took comes back, once (before 2026-11-30, never).
            let reversed = try await suite.simulator.call(
                SimRefundDecision.self, .init(appleId: "vi@icloud", transactionId: packs.transactionId, event: .reverse))
            #expect(try await Self.deliver(suite, [reversed.signedPayload, reversed.signedPayload]).map(\.state) == [.applied, .applied])
            #expect(try await suite.balance(vi.session) == 500)
            // A prorated REFUND remembered first, then the copy signed at the purchase (before the refund) redeemed: the
            // remembered share is taken, not the whole grant (before 2026-11-30, all three packs).
            let third = try await suite.buy("vi@icloud", "coins.100", quantity: 3, appAccountToken: vi.appAccountToken)
            let remembered = try await suite.simulator.call(
                SimRefund.self, .init(appleId: "vi@icloud", transactionId: third.transactionId, revocationPercentage: 66_667))
            #expect(try await Self.deliver(suite, [remembered.signedPayload]).map(\.state) == [.applied])
            let older = try await suite.redeem(vi.session, signed: [third.signedTransaction])
            #expect(older.results.map(\.outcome) == [.granted] && older.balance == 600, "\(older.results)")
            #expect(try await suite.ledgerIsConsistent())
        }
    }

    /// A copy Apple signed while a refund held, redeemed after Apple reversed that refund, takes nothing again: neither the
    /// prorated share nor the whole purchase (until 2026-11-30 it took them a second time). A copy signed at a refund after
    /// the reversal (its notification lost) still takes the purchase back.
    @Test func aCopySignedDuringARefundAppleReversedTakesNothingAgain() async throws {
        try await SuiteFixture.with { suite in
            let zoe = try await suite.register("zoe")
            func reverse(_ transactionId: String) async throws {
                _ = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 1))  // Apple signs the reversal later
                let reversed = try await suite.simulator.call(
                    SimRefundDecision.self, .init(appleId: "zoe@icloud", transactionId: transactionId, event: .reverse))
                #expect(try await Self.deliver(suite, [reversed.signedPayload]).map(\.state) == [.applied])
            }
            let packs = try await suite.buy("zoe@icloud", "coins.100", quantity: 3, appAccountToken: zoe.appAccountToken)
            #expect(try await suite.redeem(zoe.session, signed: [packs.signedTransaction]).balance == 300)
            let prorated = try await suite.simulator.call(
                SimRefund.self, .init(appleId: "zoe@icloud", transactionId: packs.transactionId, revocationPercentage: 33_333))
            #expect(try await Self.deliver(suite, [prorated.signedPayload]).map(\.state) == [.applied])
            let proratedCopy = try WithoutAppStoreAPITests.signedTransaction(of: try #require(prorated.signedPayload))
            try await reverse(packs.transactionId)
            #expect(try await suite.balance(zoe.session) == 300)
            let staleShare = try await suite.redeem(zoe.session, signed: [proratedCopy])
            #expect(staleShare.results.map(\.outcome) == [.alreadyGranted] && staleShare.balance == 300, "\(staleShare.results)")

            let castle = try await suite.buy("zoe@icloud", "pack.castle", appAccountToken: zoe.appAccountToken)
            #expect(try await suite.redeem(zoe.session, signed: [castle.signedTransaction]).entitlements.map(\.entitlement) == ["castle"])
            let refund = try await suite.simulator.call(SimRefund.self, .init(appleId: "zoe@icloud", transactionId: castle.transactionId))
            #expect(try await Self.deliver(suite, [refund.signedPayload]).map(\.state) == [.applied])
            #expect(try await suite.entitlements(zoe.session).isEmpty)
            let refundedCopy = try WithoutAppStoreAPITests.signedTransaction(of: try #require(refund.signedPayload))
            try await reverse(castle.transactionId)
            #expect(try await suite.entitlements(zoe.session).map(\.entitlement) == ["castle"])
            let staleWhole = try await suite.redeem(zoe.session, signed: [refundedCopy])
            #expect(staleWhole.results.map(\.outcome) == [.alreadyGranted], "\(staleWhole.results)")
            #expect(try await suite.entitlements(zoe.session).map(\.entitlement) == ["castle"])

            // Refunded again after the reversal, the notification lost: a copy signed then takes the purchase back.
            _ = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 1))
            let again = try await suite.simulator.call(SimRefund.self, .init(appleId: "zoe@icloud", transactionId: castle.transactionId))
            let fresh = try await suite.redeem(
                zoe.session, signed: [try WithoutAppStoreAPITests.signedTransaction(of: try #require(again.signedPayload))])
            #expect(fresh.results.map(\.outcome) == [.revoked] && fresh.entitlements.isEmpty, "\(fresh.results)")
            #expect(try await suite.ledgerIsConsistent())
        }
    }

    /// The same when Apple's reversal came before the purchase was ever redeemed here, or reversed a refund whose
    /// notification never arrived: the reversal's signed time is kept either way (`signed_standing`).
    @Test func aCopySignedDuringARefundAppleReversedBeforeAnyRedeemOrUnseenTakesNothing() async throws {
        try await SuiteFixture.with { suite in
            let amy = try await suite.register("amy")
            func reverse(_ transactionId: String) async throws {
                _ = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 1))
                let reversed = try await suite.simulator.call(
                    SimRefundDecision.self, .init(appleId: "amy@icloud", transactionId: transactionId, event: .reverse))
                #expect(try await Self.deliver(suite, [reversed.signedPayload]).map(\.state) == [.applied])
            }
            // Refunded and reversed before any redeem: the reversal grants it (its token names amy), and the copy signed
            // during the refund, redeemed later, takes nothing.
            let castle = try await suite.buy("amy@icloud", "pack.castle", appAccountToken: amy.appAccountToken)
            let refund = try await suite.simulator.call(SimRefund.self, .init(appleId: "amy@icloud", transactionId: castle.transactionId))
            #expect(try await Self.deliver(suite, [refund.signedPayload]).map(\.state) == [.applied])
            let refundedCopy = try WithoutAppStoreAPITests.signedTransaction(of: try #require(refund.signedPayload))
            try await reverse(castle.transactionId)
            #expect(try await suite.entitlements(amy.session).map(\.entitlement) == ["castle"])
            let stale = try await suite.redeem(amy.session, signed: [refundedCopy])
            #expect(stale.results.map(\.outcome) == [.alreadyGranted] && stale.entitlements.map(\.entitlement) == ["castle"], "\(stale.results)")

            // A refund whose notification was lost, then its reversal: the copy signed during the refund takes nothing.
            let coins = try await suite.buy("amy@icloud", "coins.100", appAccountToken: amy.appAccountToken)
            #expect(try await suite.redeem(amy.session, signed: [coins.signedTransaction]).balance == 100)
            let lost = try await suite.simulator.call(SimRefund.self, .init(appleId: "amy@icloud", transactionId: coins.transactionId))
            let lostCopy = try WithoutAppStoreAPITests.signedTransaction(of: try #require(lost.signedPayload))
            try await reverse(coins.transactionId)
            let staleCoins = try await suite.redeem(amy.session, signed: [lostCopy])
            #expect(staleCoins.results.map(\.outcome) == [.alreadyGranted] && staleCoins.balance == 100, "\(staleCoins.results)")
            #expect(try await suite.ledgerIsConsistent())
        }
    }

    @Test func expiredProductNotForSaleAndWithoutSubtypeAreAppliedThenResubscribeGrantsAgain() async throws {
        try await SuiteFixture.with { suite in
            let uma = try await Self.subscriber(suite, "uma")
            let vic = try await Self.subscriber(suite, "vic")
            #expect(try await Self.event(suite, uma.appleId, uma.transactionId, .withdrawProduct) == nil, "nothing is sent until the period ends")
            #expect(try await Self.event(suite, vic.appleId, vic.transactionId, .endOtherwise) == nil)
            let ended = try await Self.advance(suite, days: 31)  // EXPIRED/PRODUCT_NOT_FOR_SALE, EXPIRED
            #expect(try await Self.deliver(suite, ended).map(\.state) == [.applied, .applied])
            #expect(try await suite.entitlements(uma.session).isEmpty)
            #expect(try await suite.entitlements(vic.session).isEmpty)
            // vic buys again: SUBSCRIBED/RESUBSCRIBE, granted from Apple's record alone.
            let again = try await suite.buy(vic.appleId, "sub.premium", appAccountToken: vic.appAccountToken)
            let nowMs = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 0)).nowMs
            let history = try await SupportActionsTests.verification(
                suite, VerificationNotificationHistory.self,
                .init(
                    internalToken: SuiteFixture.internalToken, environment: .production, startDateMs: nowMs - Self.day, endDateMs: nowMs + 1,
                    notificationType: "SUBSCRIBED", notificationSubtype: "RESUBSCRIBE"))
            #expect(history.notifications.count == 1)
            #expect(try await Self.deliver(suite, history.notifications.map(\.signedPayload)).map(\.state) == [.applied])
            #expect(try await suite.entitlements(vic.session).first?.originalTransactionId == again.originalTransactionId)
        }
    }

    /// Family Sharing as Apple documents it: each family member redeems a FAMILY_SHARED transaction of their own (its own
    /// ids, no token) into their own account; a REVOKE about a member's transaction ends that member's access only, and a
    /// refund of the purchaser's ends everyone's (REFUND for the purchaser, REVOKE for each member). Apple refuses to tie a
    /// member's transaction to an account (Set App Account Token, 4000185): the outbox lets it go rather than asking every
    /// hour for good (before 2026-11-30 it stayed; seen failing so).
    @Test func familySharedPurchasesAreEachMembersOwnAndEndWithARevokeOrThePurchasersRefund() async throws {
        try await SuiteFixture.with { suite in
            let wes = try await Self.subscriber(suite, "wes", "pack.castle")
            func share(with member: String) async throws -> (session: String, transactionId: String) {
                let user = try await suite.register(member)
                let shared = try await suite.simulator.call(
                    SimShareWithFamily.self, .init(appleId: wes.appleId, transactionId: wes.transactionId, memberAppleId: "\(member)@icloud"))
                let redeemed = try await suite.redeem(user.session, signed: [shared.signedTransaction])
                #expect(redeemed.results.map(\.outcome) == [.granted] && redeemed.entitlements.map(\.entitlement) == ["castle"])
                return (user.session, shared.transactionId)
            }
            let xan = try await share(with: "xan")
            let yul = try await share(with: "yul")
            // Each member's purchase is their own here; nothing is owed to Apple for good.
            _ = try await suite.service.outbox.deliverOutbox()
            let owed = try await suite.store.outbox(limit: 20)
            #expect(owed.total == 0, "\(owed.items.map { "\($0.kind) \($0.key) \($0.lastError ?? "")" })")

            // Xan leaves the family: REVOKE about xan's transaction.
            let left = try await Self.deliver(suite, [try await Self.event(suite, "xan@icloud", xan.transactionId, .revokeFamilySharing)])
            #expect(left.map(\.state) == [.applied])
            #expect(try await suite.entitlements(xan.session).isEmpty)
            #expect(try await suite.entitlements(yul.session).map(\.entitlement) == ["castle"])
            #expect(try await suite.entitlements(wes.session).map(\.entitlement) == ["castle"], "the purchaser keeps it")

            // Wes is refunded: REFUND for wes, REVOKE for yul (from Notification History: no webhook is configured here).
            _ = try await suite.simulator.call(SimRefund.self, .init(appleId: wes.appleId, transactionId: wes.transactionId))
            _ = try await suite.fulfillment.call(
                FulfillmentReconcile.self, .init(adminToken: SuiteFixture.adminToken, notificationHistory: true, subscriptionStatuses: false))
            #expect(try await suite.entitlements(wes.session).isEmpty)
            #expect(try await suite.entitlements(yul.session).isEmpty)
            #expect(try await suite.ledgerIsConsistent())
        }
    }

    @Test func offerRedeemedInEverySubtypeBringsThePurchaseToAppleState() async throws {
        try await SuiteFixture.with { suite in
            // Never redeemed by the app: the first OFFER_REDEEMED grants it; the others change nothing more.
            let yan = try await suite.register("yan")
            let bought = try await suite.buy("yan@icloud", "sub.premium", appAccountToken: yan.appAccountToken)
            var payloads: [String?] = []
            for subtype in ["INITIAL_BUY", "RESUBSCRIBE", "UPGRADE", "DOWNGRADE", nil] {
                payloads.append(try await Self.notify(suite, "yan@icloud", bought.transactionId, "OFFER_REDEEMED", subtype))
            }
            let outcomes = try await Self.deliver(suite, payloads)
            #expect(outcomes.map(\.state) == Array(repeating: .applied, count: 5))
            #expect(try await suite.entitlements(yan.session).map(\.originalTransactionId) == [bought.originalTransactionId])
            #expect(try await suite.ledgerIsConsistent())
        }
    }

    @Test func ignoredWithTheirReasonTestExternalPurchaseTokensMassExtensionFailureAndUnknownTypesAndASummaryRecorded() async throws {
        try await SuiteFixture.with { suite in
            let zoe = try await Self.subscriber(suite, "zoe")
            let before = try await suite.entitlements(zoe.session)
            let cases: [(type: String, subtype: String?, reason: String)] = [
                ("EXTERNAL_PURCHASE_TOKEN", "UNREPORTED", "external purchase token"),
                ("EXTERNAL_PURCHASE_TOKEN", "ACTIVE_TOKEN_REMINDER", "external purchase token"),
                ("EXTERNAL_PURCHASE_TOKEN", "CREATED", "external purchase token"),
                ("RENEWAL_EXTENSION", "FAILURE", "did not extend"),
                ("METADATA_UPDATE", nil, "not a notification type this server acts on"),
                ("MIGRATION", nil, "not a notification type this server acts on"),
                ("PRICE_CHANGE", nil, "not a notification type this server acts on"),
            ]
            for c in cases {
                let outcome = try #require(
                    try await Self.deliver(suite, [try await Self.notify(suite, zoe.appleId, zoe.transactionId, c.type, c.subtype)]).first)
                #expect(outcome.state == .ignored, "\(c.type)/\(c.subtype ?? "-")")
                #expect(outcome.reason?.contains(c.reason) == true, "\(c.type)/\(c.subtype ?? "-"): \(outcome.reason ?? "no reason")")
            }
            // A mass extension's summary changes no entitlement; its counts are recorded (MassExtensionTests has the whole story).
            let summary = try #require(
                try await Self.deliver(suite, [try await Self.notify(suite, zoe.appleId, zoe.transactionId, "RENEWAL_EXTENSION", "SUMMARY")]).first)
            #expect(summary.state == .applied)
            let audit = try await suite.fulfillment.call(FulfillmentListAudit.self, .init(adminToken: SuiteFixture.adminToken))
            #expect(audit.entries.filter { $0.action == "massExtensionSummary" && $0.credential == "apple" }.count == 1)
            // TEST, as Request a Test Notification makes it.
            let requested = try await SupportActionsTests.verification(
                suite, VerificationRequestTestNotification.self, .init(internalToken: SuiteFixture.internalToken, environment: .production))
            let status = try await SupportActionsTests.verification(
                suite, VerificationTestNotificationStatus.self,
                .init(internalToken: SuiteFixture.internalToken, environment: .production, testNotificationToken: requested.testNotificationToken))
            let test = try #require(try await Self.deliver(suite, [status.signedPayload]).first)
            #expect(test.state == .ignored && test.reason?.contains("test notification") == true)
            #expect(try await suite.entitlements(zoe.session) == before)
            #expect(try await suite.ledgerIsConsistent())
        }
    }
}
