import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import RPCTransport
import ServiceSupport
import SuiteTestSupport
import Testing

/// Google Play purchases redeemed end to end: the suite's verification asks the Play simulator (as Google, with the key
/// file it issued) about each purchase token, fulfillment grants by the same rules as App Store purchases, and its outbox
/// acknowledges (consumes, for coins) at Google after the grant commits. One test at a time: each starts a whole suite
/// and a Play simulator, and the PostgreSQL pass runs beside everything else on two cores.
@Suite(.serialized) struct GooglePlayRedeemTests {
    static func redeem(_ suite: SuiteFixture, _ session: String, _ purchases: [GooglePlayPurchase]) async throws -> RedeemResult {
        try await suite.fulfillment.call(FulfillmentRedeem.self, .init(session: session, googlePlay: purchases))
    }

    @Test func coinsBoughtOnPlayAreGrantedOnceAndConsumedAtGoogle() async throws {
        try await SuiteFixture.with(play: true) { suite in
            let play = try #require(suite.play)
            let ann = try await suite.register("ann")
            let bought = try await play.buy("coins.100", accountToken: ann.appAccountToken.uppercased(), quantity: 2)
            let ref = GooglePlayPurchase(productId: "coins.100", purchaseToken: bought.purchaseToken)
            let first = try await Self.redeem(suite, ann.session, [ref])
            #expect(first.results.map(\.outcome) == [.granted] && first.balance == 200)
            #expect(first.results.first?.transactionId == bought.orderIds.first && first.results.first?.originalTransactionId == bought.purchaseToken)
            // Retried (the app never heard the answer): nothing more.
            let again = try await Self.redeem(suite, ann.session, [ref])
            #expect(again.results.map(\.outcome) == [.alreadyGranted] && again.balance == 200)
            #expect(try await play.purchase(bought.purchaseToken).consumed == false)
            // The outbox consumes it at Google (which acknowledges it): Google's three-day refund cannot happen now.
            #expect(try await suite.service.outbox.deliverOutbox() >= 1)
            let at = try await play.purchase(bought.purchaseToken)
            #expect(at.consumed && at.acknowledged && at.state == "purchased")
            #expect(try await suite.service.outbox.deliverOutbox() == 0)
            // The event names the store (once the feed shows what committed: `eventFeedSettled`).
            try await suite.eventFeedSettled()
            let events = try await suite.fulfillment.call(
                FulfillmentListEvents.self, .init(adminToken: SuiteFixture.adminToken, accountId: ann.accountId))
            #expect(events.events.contains { $0.type == .purchaseGranted && $0.store == "googlePlay" })
        }
    }

    @Test func aPurchaseMadeForAnotherAccountOrUnknownToGoogleGrantsNothing() async throws {
        try await SuiteFixture.with(play: true) { suite in
            let play = try #require(suite.play)
            let ann = try await suite.register("ann")
            let bob = try await suite.register("bob")
            let anns = try await play.buy("pack.castle", accountToken: ann.appAccountToken)
            // Bob presents Ann's token: the app bound it to Ann's account when she bought it.
            let stolen = try await Self.redeem(suite, bob.session, [.init(productId: "pack.castle", purchaseToken: anns.purchaseToken)])
            #expect(stolen.results.map(\.outcome) == [.ownedByAnotherAccount] && stolen.entitlements.isEmpty)
            // A made-up token, a product the catalog does not sell, a token of another product: nothing.
            let forged = try await Self.redeem(
                suite, bob.session,
                [
                    .init(productId: "coins.100", purchaseToken: "made.up.token"),
                    .init(productId: "no.such.product", purchaseToken: "another.made.up.token"),
                    .init(productId: "coins.100", purchaseToken: anns.purchaseToken),
                ])
            #expect(forged.results.map(\.outcome).sorted { $0.rawValue < $1.rawValue } == [.rejected, .rejected, .unknownProduct])
            #expect(forged.balance == 0)
            // Another app's package is refused by verification's allow-list.
            let other = try await Self.redeem(
                suite, bob.session, [.init(productId: "coins.100", purchaseToken: anns.purchaseToken, packageName: "com.other.app")])
            #expect(other.results.map(\.outcome) == [.rejected])
            // Ann's own redeem grants it; nothing of it was acknowledged for Bob.
            let hers = try await Self.redeem(suite, ann.session, [.init(productId: "pack.castle", purchaseToken: anns.purchaseToken)])
            #expect(hers.results.map(\.outcome) == [.granted] && hers.entitlements.map(\.entitlement) == ["castle"])
            #expect(try await suite.service.outbox.deliverOutbox() == 1)
            let acknowledged = try await play.purchase(anns.purchaseToken)
            #expect(acknowledged.acknowledged && !acknowledged.consumed)
        }
    }

    @Test func aSubscriptionGrantsItsEntitlementToItsExpiryAndATestersPurchaseStaysInSandbox() async throws {
        try await SuiteFixture.with(play: true) { suite in
            let play = try #require(suite.play)
            let ann = try await suite.register("ann")
            let sub = try await play.buy("sub.premium", accountToken: ann.appAccountToken, basePlanId: "monthly")
            let redeemed = try await Self.redeem(suite, ann.session, [.init(productId: "sub.premium", purchaseToken: sub.purchaseToken)])
            #expect(redeemed.results.map(\.outcome) == [.granted])
            let premium = try #require(redeemed.entitlements.first { $0.entitlement == "premium" })
            #expect(premium.expiresAtMs == sub.expiryTimeMs)
            #expect(try await suite.service.outbox.deliverOutbox() == 1)
            #expect(try await play.purchase(sub.purchaseToken).acknowledged)
            // A license tester's purchase is free: it lands in the Sandbox scope, never in Production's balance.
            let test = try await play.buy("coins.100", accountToken: ann.appAccountToken, test: true)
            let sandbox = try await Self.redeem(suite, ann.session, [.init(productId: "coins.100", purchaseToken: test.purchaseToken)])
            #expect(sandbox.results.map(\.outcome) == [.granted] && sandbox.environment == .sandbox && sandbox.balance == 100)
            #expect(try await suite.balance(ann.session, .production) == 0)
        }
    }

    /// An upgrade redeemed ends the plan it replaced even without its push, and also when the customer upgraded signed in
    /// as another account (Google links only the same Google account's plans, and stops charging for the old one): before,
    /// only a push ended it, and only on the same account, so the first account kept the old plan to its end for free.
    @Test func anUpgradeRedeemedEndsThePlanItReplacedWhicheverAccountHeldIt() async throws {
        try await SuiteFixture.with(play: true) { suite in
            let play = try #require(suite.play)
            let ann = try await suite.register("ann")
            let bob = try await suite.register("bob")
            let basic = try await play.buy("sub.basic", accountToken: ann.appAccountToken, basePlanId: "monthly")
            _ = try await Self.redeem(suite, ann.session, [.init(productId: "sub.basic", purchaseToken: basic.purchaseToken)])
            #expect(try await suite.entitlements(ann.session).map(\.entitlement) == ["basic"])
            let premium = try await play.upgrade(to: "sub.premium", accountToken: bob.appAccountToken, replacing: basic.purchaseToken)
            let upgraded = try await Self.redeem(suite, bob.session, [.init(productId: "sub.premium", purchaseToken: premium.purchaseToken)])
            #expect(upgraded.results.map(\.outcome) == [.granted] && upgraded.entitlements.map(\.entitlement) == ["premium"])
            // The suite's clock past the moment of the upgrade (it started with the suite; the test takes seconds under load).
            suite.clock.advance(ms: max(1_000, ServiceClock.system.nowMs - suite.clock.clock.nowMs + 1_000))
            #expect(try await suite.entitlements(ann.session).isEmpty, "the replaced plan ended on Ann's account")
            // The sweep asks Google about the ended plan: canceled by its replacement, with its old expiry, it gives nothing
            // back (before 2026-11-30 it did, to the old expiry: seen failing so).
            #expect(try await play.purchase(basic.purchaseToken).state == "canceled")
            #expect(try await Self.sweep(suite).playSubscriptionsChecked >= 1)
            #expect(try await suite.entitlements(ann.session).isEmpty, "Google's word about the replaced plan does not bring it back")
            // Nor can it be restarted or replaced again at Google: its access went to the replacement.
            await #expect(throws: RPCError.self) {
                try await play.client.call(PlaySubscriptionEvent.self, .init(purchaseToken: basic.purchaseToken, action: .restart))
            }
            await #expect(throws: RPCError.self) {
                try await play.upgrade(to: "sub.premium", accountToken: ann.appAccountToken, replacing: basic.purchaseToken)
            }
            // Redeemed again: ended once.
            _ = try await Self.redeem(suite, bob.session, [.init(productId: "sub.premium", purchaseToken: premium.purchaseToken)])
            try await suite.eventFeedSettled()
            let events = try await suite.fulfillment.call(
                FulfillmentListEvents.self, .init(adminToken: SuiteFixture.adminToken, accountId: ann.accountId))
            #expect(events.events.filter { $0.type == .subscriptionExpired }.map(\.store) == ["googlePlay"])
        }
    }

    /// A DEFERRED downgrade: Google issues the new purchase at once, carrying the premium plan to its paid end (the Purchase
    /// the app gets lists premium), and switches it to basic then (a renewal, its first charge). Before 2026-11-30 the token
    /// was read by the product the app named, else its first item: named basic (no expiry yet), the rest of the paid premium
    /// period was lost; the sweep after the switch could read the old item.
    @Test func aDeferredDowngradeKeepsThePaidPlanToItsEndThenSwitches() async throws {
        try await SuiteFixture.with(play: true) { suite in
            let play = try #require(suite.play)
            let ann = try await suite.register("ann")
            let (premium, paidEnd) = try await Self.subscribe(suite, play, ann)
            let basic = try await play.upgrade(to: "sub.basic", accountToken: ann.appAccountToken, replacing: premium, mode: .DEFERRED)
            #expect(try await play.purchase(premium).state == "expired" && basic.productId == "sub.premium")
            // Named by the plan to come, which holds nothing yet: refused, and the paid plan stays where it was.
            let early = try await Self.redeem(suite, ann.session, [.init(productId: "sub.basic", purchaseToken: basic.purchaseToken)])
            #expect(early.results.map(\.outcome) == [.rejected] && early.entitlements.map(\.expiresAtMs) == [paidEnd], "\(early)")
            let redeemed = try await Self.redeem(suite, ann.session, [.init(productId: "sub.premium", purchaseToken: basic.purchaseToken)])
            #expect(redeemed.results.map(\.outcome) == [.granted], "\(redeemed.results)")
            suite.clock.advance(ms: max(1_000, ServiceClock.system.nowMs - suite.clock.clock.nowMs + 1_000))
            var held = try await suite.entitlements(ann.session)
            #expect(held.map(\.entitlement) == ["premium"] && held.first?.expiresAtMs == paidEnd, "the paid period, on the new token: \(held)")
            #expect(held.first?.originalTransactionId == basic.purchaseToken)
            _ = try await suite.service.outbox.deliverOutbox()
            #expect(try await play.purchase(basic.purchaseToken).acknowledged, "acknowledged in time: Google does not refund it")
            // The paid period ends: Google starts basic on the same token (a renewal) and nobody here heard; the sweep asks.
            try await Self.advance(suite, play, days: 31)
            #expect(try await play.purchase(basic.purchaseToken).productId == "sub.basic")
            #expect(try await Self.sweep(suite).playSubscriptionsUpdated == 1)
            held = try await suite.entitlements(ann.session)
            #expect(held.map(\.entitlement) == ["basic"] && (held.first?.expiresAtMs ?? 0) > paidEnd + 29 * 86_400_000, "\(held)")
            let again = try await Self.redeem(suite, ann.session, [.init(productId: "sub.basic", purchaseToken: basic.purchaseToken)])
            #expect(again.entitlements.map(\.entitlement) == ["basic"], "\(again.entitlements)")
            #expect(try await suite.store.ledgerMismatches().isEmpty)
        }
    }

    @Test func aPurchaseGoogleRevokedIsNotGrantedAndConcurrentRedeemsGrantOnce() async throws {
        // Twenty-one calls to Google from one account: more than the default budget of calls to the stores.
        try await SuiteFixture.with(configure: { $0.appleCallBurst = 100 }, play: true) { suite in
            let play = try #require(suite.play)
            let ann = try await suite.register("ann")
            // Three units, all refunded before the redeem: on record (and in the feed) as the three granted and taken back.
            let refunded = try await play.buy("coins.100", accountToken: ann.appAccountToken, quantity: 3)
            _ = try await play.client.call(PlayRefund.self, .init(purchaseToken: refunded.purchaseToken))
            let revoked = try await Self.redeem(suite, ann.session, [.init(productId: "coins.100", purchaseToken: refunded.purchaseToken)])
            #expect(revoked.results.map(\.outcome) == [.revoked] && revoked.balance == 0)
            try await suite.eventFeedSettled()
            let feed = try await suite.fulfillment.call(
                FulfillmentListEvents.self, .init(adminToken: SuiteFixture.adminToken, accountId: ann.accountId)
            ).events.filter { $0.originalTransactionId == refunded.purchaseToken }
            #expect(feed.map(\.type) == [.purchaseGranted, .purchaseRefunded] && feed.map(\.delta) == [300, -300])
            // Both name Google Play: the refund's event is written from the record (it said appStore before).
            #expect(feed.map(\.store) == ["googlePlay", "googlePlay"])
            // Twenty redeems of one purchase at once, from Ann's two devices: one grant.
            let second = try await suite.login("ann")
            let bought = try await play.buy("coins.100", accountToken: ann.appAccountToken)
            let outcomes = try await withThrowingTaskGroup(of: [RedeemOutcome].self) { group in
                for i in 0..<20 {
                    group.addTask {
                        try await Self.redeem(
                            suite, i % 2 == 0 ? ann.session : second, [.init(productId: "coins.100", purchaseToken: bought.purchaseToken)]
                        )
                        .results.map(\.outcome)
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            #expect(outcomes.filter { $0 == .granted }.count == 1 && outcomes.filter { $0 == .alreadyGranted }.count == 19)
            #expect(try await suite.balance(ann.session) == 100)
            #expect(try await suite.store.ledgerMismatches().isEmpty)
        }
    }
}

extension GooglePlayRedeemTests {
    @Test func googlesAcknowledgementsNeverWaitBehindApplesWhenAppleCannotBeAsked() async throws {
        // No App Store Server API: a receipt redeem owes Apple a tie that waits ten minutes at a time; the Play purchase's
        // acknowledgement owed after it must still go out (Google refunds what is not acknowledged within three days).
        try await SuiteFixture.with(appStoreAPI: false, play: true) { suite in
            let play = try #require(suite.play)
            let ann = try await suite.register("ann")
            let apple = try await suite.buy("ann@icloud", "pack.castle")
            _ = try await suite.redeem(ann.session, receipt: apple.receiptData)
            let bought = try await play.buy("sub.premium", accountToken: ann.appAccountToken, basePlanId: "monthly")
            let redeemed = try await Self.redeem(suite, ann.session, [.init(productId: "sub.premium", purchaseToken: bought.purchaseToken)])
            #expect(redeemed.results.map(\.outcome) == [.granted])
            _ = try await suite.service.outbox.deliverOutbox()
            #expect(try await play.purchase(bought.purchaseToken).acknowledged)
        }
    }

    @Test func whatGoogleSaysGivesNoAccessIsNotGrantedAndAFloodOfTokensIsRationed() async throws {
        // The budget barely refills while the test runs: what it spends is what it counts.
        try await SuiteFixture.with(configure: { $0.appleCallsPerMinute = 0.01 }, play: true) { suite in
            let play = try #require(suite.play)
            let ann = try await suite.register("ann")
            // A subscription on hold (its payment failed past the grace period): no access now, so nothing is granted.
            let held = try await play.buy("sub.premium", accountToken: ann.appAccountToken, basePlanId: "monthly")
            let first = try await Self.redeem(suite, ann.session, [.init(productId: "sub.premium", purchaseToken: held.purchaseToken)])
            #expect(first.results.map(\.outcome) == [.granted])
            _ = try await suite.service.outbox.deliverOutbox()
            #expect(try await play.purchase(held.purchaseToken).acknowledged)
            _ = try await play.client.call(PlaySubscriptionEvent.self, .init(purchaseToken: held.purchaseToken, action: .declinePayment))
            _ = try await play.client.call(PlayAdvanceClock.self, .init(seconds: 38 * 86_400))
            #expect(try await play.purchase(held.purchaseToken).state == "onHold")
            let onHold = try await Self.redeem(suite, ann.session, [.init(productId: "sub.premium", purchaseToken: held.purchaseToken)])
            #expect(onHold.results.map(\.outcome) == [.rejected])
            // A path-changing token is refused before anyone is asked.
            let dots = await #expect(throws: RPCError.self) {
                try await Self.redeem(suite, ann.session, [.init(productId: "coins.100", purchaseToken: "..")])
            }
            #expect(dots?.reason == "invalidValue")
            // Made-up tokens spend the account's budget of calls to the stores (20 at once, two spent above): then it is refused.
            let made = (0..<18).map { GooglePlayPurchase(productId: "coins.100", purchaseToken: "made.up.\($0)") }
            _ = try await Self.redeem(suite, ann.session, made)
            let more = await #expect(throws: RPCError.self) {
                try await Self.redeem(suite, ann.session, [.init(productId: "coins.100", purchaseToken: "made.up.again")])
            }
            #expect(more?.knownCode == .rateLimited)
        }
    }
}

extension GooglePlayRedeemTests {
    @Test func googleUnavailableFailsTheRedeemWithNothingWrittenAndTheAcknowledgementWaits() async throws {
        try await SuiteFixture.with(play: true) { suite in
            let play = try #require(suite.play)
            let ann = try await suite.register("ann")
            let bought = try await play.buy("coins.100", accountToken: ann.appAccountToken)
            let ref = GooglePlayPurchase(productId: "coins.100", purchaseToken: bought.purchaseToken)
            // Google answers 503 (and the client's one retry too): the redeem fails, retryable, and nothing is written.
            _ = try await play.client.call(PlaySetFault.self, .init(mode: .http503))
            let down = await #expect(throws: RPCError.self) { try await Self.redeem(suite, ann.session, [ref]) }
            #expect(down?.knownCode == .unavailable && down?.retryable == true)
            #expect(try await suite.balance(ann.session) == 0)
            _ = try await play.client.call(PlaySetFault.self, .init(mode: .none))
            #expect(try await Self.redeem(suite, ann.session, [ref]).results.map(\.outcome) == [.granted])
            // The consumption owed waits out a quota error in the outbox and goes out once Google answers again.
            _ = try await play.client.call(PlaySetFault.self, .init(mode: .http429))
            #expect(try await suite.service.outbox.deliverOutbox() == 1)
            #expect(try await play.purchase(bought.purchaseToken).consumed == false)
            _ = try await play.client.call(PlaySetFault.self, .init(mode: .none))
            suite.clock.advance(ms: 60_000)
            #expect(try await suite.service.outbox.deliverOutbox() == 1)
            #expect(try await play.purchase(bought.purchaseToken).consumed)
        }
    }
}

extension GooglePlayRedeemTests {
    @Test func googlesThreeDayRefundNeverReachesAPurchaseGrantedHereAndAnAcknowledgementOwedForADayIsCounted() async throws {
        try await SuiteFixture.with(play: true) { suite in
            let play = try #require(suite.play)
            let ann = try await suite.register("ann")
            let granted = try await play.buy("coins.100", accountToken: ann.appAccountToken)
            let forgotten = try await play.buy("coins.100", accountToken: ann.appAccountToken)  // the app never redeems it
            _ = try await Self.redeem(suite, ann.session, [.init(productId: "coins.100", purchaseToken: granted.purchaseToken)])
            // Google is unavailable for the first delivery (two attempts): the consumption stays owed.
            _ = try await play.client.call(PlaySetFault.self, .init(mode: .http503, count: 2))
            _ = try await suite.service.outbox.deliverOutbox()
            #expect(try await !play.purchase(granted.purchaseToken).consumed)
            // A day later it is still owed: the alarm's count (iap_play_acknowledgements_overdue) says so.
            suite.clock.advance(ms: 86_400_000 + 60_000)
            let day = suite.clock.clock.nowMs - 86_400_000
            #expect(try await suite.store.playAcknowledgementsOwed(createdBeforeMs: day).count == 1)
            // Google answers again: delivered, and nothing is owed any more.
            _ = try await suite.service.outbox.deliverOutbox()
            #expect(try await play.purchase(granted.purchaseToken).consumed)
            #expect(try await suite.store.playAcknowledgementsOwed(createdBeforeMs: day).count == 0)
            // Three days on, Google refunds what nobody acknowledged, never what the suite granted.
            _ = try await play.client.call(PlayAdvanceClock.self, .init(seconds: 3 * 86_400 + 3_600))
            #expect(try await play.purchase(forgotten.purchaseToken).state == "canceled")
            #expect(try await play.purchase(granted.purchaseToken).state == "purchased")
        }
    }
}

extension GooglePlayRedeemTests {
    static func product(_ id: String, _ type: ProductType, _ grant: Grant, play: GooglePlayProductIds?) -> ProductDefinition {
        ProductDefinition(
            productId: id, type: type, referenceName: id, localizations: ["en-US": .init(title: id, description: "")], defaultLocale: "en-US",
            grant: grant, googlePlay: play)
    }

    @Test func aProductSoldOnGooglePlayUnderOtherIdsGrantsItsOwnGrantAndEachBasePlanItsProduct() async throws {
        try await SuiteFixture.with(play: true) { suite in
            let play = try #require(suite.play)
            let vip = Grant.subscription(entitlement: "vip", subscriptionGroup: "vip")
            for product in [
                Self.product("gems.small", .consumable, .coins(50), play: .init(productId: "com.game.gems")),
                Self.product("vip.monthly", .autoRenewable, vip, play: .init(productId: "vip", basePlanId: "monthly")),
                Self.product("vip.yearly", .autoRenewable, vip, play: .init(productId: "vip", basePlanId: "yearly")),
            ] {
                _ = try await suite.catalog.call(CatalogUpsertProduct.self, .init(adminToken: SuiteFixture.adminToken, product: product))
            }
            // Two products claiming the same Play ids, or a base plan on a one-time product: refused.
            for (refused, reason) in [
                (Self.product("gems.other", .consumable, .coins(5), play: .init(productId: "com.game.gems")), "googlePlayIdTaken"),
                (Self.product("vip.again", .autoRenewable, vip, play: .init(productId: "vip", basePlanId: "yearly")), "googlePlayIdTaken"),
                (Self.product("gems.plan", .consumable, .coins(5), play: .init(productId: "com.game.x", basePlanId: "p")), "basePlanNotAllowed"),
            ] {
                let error = await #expect(throws: RPCError.self) {
                    try await suite.catalog.call(CatalogUpsertProduct.self, .init(adminToken: SuiteFixture.adminToken, product: refused))
                }
                #expect(error?.data.reason == reason)
            }
            let ann = try await suite.register("ann")
            let gems = try await play.buy("com.game.gems", accountToken: ann.appAccountToken)
            let yearly = try await play.buy("vip", accountToken: ann.appAccountToken, basePlanId: "yearly")
            let redeemed = try await Self.redeem(
                suite, ann.session,
                [.init(productId: "com.game.gems", purchaseToken: gems.purchaseToken), .init(productId: "vip", purchaseToken: yearly.purchaseToken)])
            #expect(redeemed.results.map(\.outcome) == [.granted, .granted] && redeemed.balance == 50)
            #expect(Set(redeemed.results.map(\.productId)) == ["gems.small", "vip.yearly"])
            #expect(redeemed.entitlements.map(\.productId) == ["vip.yearly"])
            // A base plan the catalog does not sell is not granted.
            let weekly = try await play.buy("vip", accountToken: ann.appAccountToken, basePlanId: "weekly")
            let unsold = try await Self.redeem(suite, ann.session, [.init(productId: "vip", purchaseToken: weekly.purchaseToken)])
            #expect(unsold.results.map(\.outcome) == [.unknownProduct])
            // Acknowledged (consumed, for the gems) at Google under Google's ids.
            _ = try await suite.service.outbox.deliverOutbox()
            #expect(try await play.purchase(gems.purchaseToken).consumed)
            #expect(try await play.purchase(yearly.purchaseToken).acknowledged)
        }
    }
}

extension GooglePlayRedeemTests {
    static func sweep(_ suite: SuiteFixture) async throws -> FulfillmentReconcile.Result {
        try await suite.fulfillment.call(
            FulfillmentReconcile.self, .init(adminToken: SuiteFixture.adminToken, notificationHistory: false, subscriptionStatuses: false))
    }

    /// A monthly subscription bought on Google Play, redeemed by the app and acknowledged at Google: its token and the end of
    /// its first period.
    static func subscribe(_ suite: SuiteFixture, _ play: PlayStand, _ who: (session: String, accountId: String, appAccountToken: String)) async throws
        -> (token: String, end: Int64)
    {
        let bought = try await play.buy("sub.premium", accountToken: who.appAccountToken, basePlanId: "monthly")
        let first = try await redeem(suite, who.session, [.init(productId: "sub.premium", purchaseToken: bought.purchaseToken)])
        let end = try #require(first.entitlements.first?.expiresAtMs)
        _ = try await suite.service.outbox.deliverOutbox()
        #expect(try await play.purchase(bought.purchaseToken).acknowledged)
        return (bought.purchaseToken, end)
    }

    /// Both clocks, Google's and the suite's, `days` later.
    static func advance(_ suite: SuiteFixture, _ play: PlayStand, days: Int64) async throws {
        _ = try await play.client.call(PlayAdvanceClock.self, .init(seconds: days * 86_400))
        suite.clock.advance(ms: days * 86_400_000)
    }

    @Test func aSubscriptionWhosePushesWereAllLostIsRenewedByTheSweepAndAnEndGoogleConfirmsIsAskedOnce() async throws {
        try await SuiteFixture.with(play: true) { suite in
            let play = try #require(suite.play)
            let ann = try await suite.register("ann")
            // Nothing pushes to this suite: every notification about the subscription is lost.
            let (token, firstEnd) = try await Self.subscribe(suite, play, ann)
            // 32 days later on both clocks: Google renewed it; nobody here heard, so access ended with the first period.
            try await Self.advance(suite, play, days: 32)
            #expect(try await suite.entitlements(ann.session).isEmpty)
            // Due for the sweep, with the package the grant kept (Google's API is addressed by package).
            let due = try await suite.store.playSubscriptionsToCheck(nowMs: suite.clock.clock.nowMs, limit: 10)
            #expect(
                due.map { [$0.purchaseToken, "\($0.expiresAtMs)", $0.packageName] } == [[token, "\(firstEnd)", PlayStand.packageName]])
            let swept = try await Self.sweep(suite)
            #expect(swept.playSubscriptionsChecked == 1 && swept.playSubscriptionsUpdated == 1)
            let renewed = try #require(try await suite.entitlements(ann.session).first)
            #expect(renewed.entitlement == "premium" && (renewed.expiresAtMs ?? 0) > firstEnd + 27 * 86_400_000)
            // Nothing to ask about until that end passes.
            #expect(try await Self.sweep(suite).playSubscriptionsChecked == 0)
            // Cancelled on the phone, and that period ends too: Google confirms the end, which is asked about once.
            _ = try await play.client.call(PlaySubscriptionEvent.self, .init(purchaseToken: token, action: .cancel))
            try await Self.advance(suite, play, days: 32)
            let ended = try await Self.sweep(suite)
            #expect(ended.playSubscriptionsChecked == 1 && ended.playSubscriptionsUpdated == 0)
            #expect(try await suite.entitlements(ann.session).isEmpty)
            #expect(try await Self.sweep(suite).playSubscriptionsChecked == 0)
            #expect(try await suite.store.ledgerMismatches().isEmpty)
        }
    }
}

extension GooglePlayRedeemTests {
    @Test func aGracePeriodGoogleGrantsKeepsTheAccessUntilItsEndThenTheHoldEndsIt() async throws {
        try await SuiteFixture.with(play: true) { suite in
            let play = try #require(suite.play)
            let ann = try await suite.register("ann")
            let (token, firstEnd) = try await Self.subscribe(suite, play, ann)
            // The renewal's payment fails: Google keeps her entitled for the base plan's grace period (7 days), same order.
            _ = try await play.client.call(PlaySubscriptionEvent.self, .init(purchaseToken: token, action: .declinePayment))
            try await Self.advance(suite, play, days: 32)
            #expect(try await play.purchase(token).state == "inGracePeriod")
            #expect(try await suite.entitlements(ann.session).isEmpty)
            // Every push lost: the sweep asks Google, and her access follows Google's end of the grace period.
            let swept = try await Self.sweep(suite)
            #expect(swept.playSubscriptionsChecked == 1)
            let graced = try #require(try await suite.entitlements(ann.session).first)
            #expect((graced.expiresAtMs ?? 0) > firstEnd + 5 * 86_400_000)
            // The grace period ends unpaid (account hold): her access ends with it, and nothing gives it back.
            try await Self.advance(suite, play, days: 7)
            #expect(try await play.purchase(token).state == "onHold")
            #expect(try await Self.sweep(suite).playSubscriptionsChecked == 1)
            #expect(try await suite.entitlements(ann.session).isEmpty)
        }
    }
}
