import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import PlaySimulator
import RPCTransport
import ServiceSupport
import SuiteTestSupport
import Testing

/// Google Play's real-time developer notifications end to end: the Play simulator pushes them as Pub/Sub would (each
/// with an OIDC token its Google-shaped key signs) to the edge's `POST /v1/notifications/googleplay`; verification checks
/// the token against the simulator's certs URL; fulfillment records the message by its id and brings the purchase to
/// what the simulator (as Google's Play Developer API) says now. One test at a time: each starts a whole suite.
@Suite(.serialized) struct GooglePlayNotificationTests {
    static func redeem(_ suite: SuiteFixture, _ session: String, _ purchases: [GooglePlayPurchase]) async throws -> RedeemResult {
        try await suite.fulfillment.call(FulfillmentRedeem.self, .init(session: session, googlePlay: purchases))
    }

    static func playRows(_ suite: SuiteFixture) async throws -> [NotificationSummary] {
        try await suite.fulfillment.call(FulfillmentListNotifications.self, .init(adminToken: SuiteFixture.adminToken, limit: 100))
            .notifications.filter { $0.notificationUUID.hasPrefix("googlePlay:") }
    }

    /// A Pub/Sub push body carrying `notification` as its data (`messageId`: digits, as Pub/Sub's).
    static func pushBody(_ notification: [String: Any], messageId: String) throws -> String {
        let data = try JSONSerialization.data(withJSONObject: notification).base64EncodedString()
        return #"{"message":{"data":"\#(data)","messageId":"\#(messageId)","attributes":{}},"subscription":"projects/p/subscriptions/s"}"#
    }

    /// A DeveloperNotification carrying `field` (`voidedPurchaseNotification`, `subscriptionNotification`, ...), signed as
    /// Google signs pushes, POSTed to the edge: its HTTP status.
    static func postPush(_ play: PlayStand, _ base: String, _ field: String, _ value: [String: Any], messageId: String) async throws -> Int {
        let body = try pushBody(
            ["version": "1.0", "packageName": PlayStand.packageName, "eventTimeMillis": "1", field: value], messageId: messageId)
        let bearer = try play.simulator.accounts.pushToken(audience: PlayStand.pushAudience, nowSeconds: Int64(Date().timeIntervalSince1970))
        return try await EdgeTests.post(base + "/v1/notifications/googleplay", body, bearer: bearer).status
    }

    /// A voided purchase push about `purchaseToken` naming `orderId`: its HTTP status.
    static func postVoidedPush(
        _ play: PlayStand, _ base: String, purchaseToken: String, orderId: String, productType: Int, messageId: String
    ) async throws -> Int {
        try await postPush(
            play, base, "voidedPurchaseNotification",
            ["purchaseToken": purchaseToken, "orderId": orderId, "productType": productType, "refundType": 1], messageId: messageId)
    }

    @Test func aPurchaseWhoseNotificationArrivesFirstIsGrantedOnceToTheAccountTheAppBoundItTo() async throws {
        try await EdgeFixture.withPlayEdge { suite, play, _ in
            let ann = try await suite.register("ann")
            let bought = try await play.buy("coins.100", accountToken: ann.appAccountToken)
            // The push comes before the app redeems (the app was killed after paying): Ann has her coins anyway.
            // (The simulator pushes on its own right after the purchase; `deliver` returns once every push due has its answer.)
            #expect(try await play.deliverAll().pending == 0)
            #expect(try await suite.balance(ann.session) == 100)
            #expect(try await Self.playRows(suite).map(\.state) == [.applied])
            // Then the app redeems it: nothing more.
            let redeemed = try await Self.redeem(suite, ann.session, [.init(productId: "coins.100", purchaseToken: bought.purchaseToken)])
            #expect(redeemed.results.map(\.outcome) == [.alreadyGranted] && redeemed.balance == 100)
            // Consumed at Google through the outbox, as after a redeem.
            _ = try await suite.service.outbox.deliverOutbox()
            #expect(try await play.purchase(bought.purchaseToken).consumed)
            // A purchase bound to no account is left for the redeem of whoever holds its token.
            let unbound = try await play.buy("coins.100", accountToken: nil)
            _ = try await play.deliverAll()
            #expect(try await Self.playRows(suite).filter { $0.state == .ignored }.count == 1)
            let bob = try await suite.register("bob")
            let bobs = try await Self.redeem(suite, bob.session, [.init(productId: "coins.100", purchaseToken: unbound.purchaseToken)])
            #expect(bobs.results.map(\.outcome) == [.granted] && bobs.balance == 100)
            #expect(try await suite.balance(ann.session) == 100)
        }
    }

    @Test func aPushWithAForgedExpiredWrongAudienceOrWrongEmailTokenIsRefusedAndChangesNothing() async throws {
        try await EdgeFixture.withPlayEdge { suite, play, base in
            let url = base + "/v1/notifications/googleplay"
            // The simulator pushes with another audience than verification expects.
            try await play.pushTo(url, audience: "https://elsewhere.example.com/push")
            let ann = try await suite.register("ann")
            let bought = try await play.buy("coins.100", accountToken: ann.appAccountToken)
            let body = try Self.pushBody(
                [
                    "version": "1.0", "packageName": PlayStand.packageName, "eventTimeMillis": "1",
                    "oneTimeProductNotification": [
                        "version": "1.0", "notificationType": 1, "purchaseToken": bought.purchaseToken, "sku": "coins.100",
                    ],
                ], messageId: "4242")
            let now = Int64(Date().timeIntervalSince1970)
            let accounts = play.simulator.accounts
            let good = try accounts.pushToken(audience: PlayStand.pushAudience, nowSeconds: now)
            // Without a token; a token whose claims were changed after signing (another audience); one issued two hours
            // ago; one signed for another audience; one for another service account: all refused, nothing recorded.
            #expect(try await EdgeTests.post(url, body).status == 401)
            let parts = good.split(separator: ".")
            let otherClaims = Data(
                #"{"iss":"https://accounts.google.com","aud":"x","email":"e","email_verified":true,"iat":1,"exp":9999999999}"#.utf8
            )
            .base64EncodedString().replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            for bearer in [
                "\(parts[0]).\(otherClaims).\(parts[2])",
                try accounts.pushToken(audience: PlayStand.pushAudience, nowSeconds: now - 7_200),
                try accounts.pushToken(audience: "https://elsewhere.example.com/push", nowSeconds: now),
                try accounts.pushToken(audience: PlayStand.pushAudience, email: "intruder@evil.iam.gserviceaccount.com", nowSeconds: now),
            ] {
                #expect(try await EdgeTests.post(url, body, bearer: bearer).status == 403)
            }
            #expect(try await Self.playRows(suite).isEmpty)
            #expect(try await suite.balance(ann.session) == 0)
            // The simulator pushing with the wrong audience, then the wrong email: refused, so Pub/Sub keeps the message.
            #expect(try await play.deliver().pending == 1)
            try await play.pushTo(url, email: "intruder@evil.iam.gserviceaccount.com")
            #expect(try await play.deliver().pending == 1)
            #expect(try await Self.playRows(suite).isEmpty)
            #expect(try await suite.balance(ann.session) == 0)
            // Configured right again: the kept message arrives, once; the well-signed one posted by hand is accepted too,
            // and grants nothing more (state-based, exactly once).
            try await play.pushTo(url)
            // (Pub/Sub backs off after refusals: two minutes later the message is due again.)
            _ = try await play.client.call(PlayAdvanceClock.self, .init(seconds: 120))
            #expect(try await play.deliverAll().pending == 0)
            #expect(try await EdgeTests.post(url, body, bearer: good).status == 200)
            #expect(try await EdgeTests.post(url, body, bearer: good).status == 200)
            #expect(try await suite.balance(ann.session) == 100)
            #expect(try await Self.playRows(suite).count == 2)
        }
    }

    /// A push naming itself the server's own read of Google's voided-purchases list (its unsigned `subscription` field)
    /// is a push like any other: Google is asked, and a purchase it still counts as bought is not taken back. Before, that
    /// field chose the branch that revokes without asking, so anyone holding one valid push token and an order could
    /// revoke it.
    @Test func aPushCannotPassItselfOffAsGooglesVoidedList() async throws {
        try await EdgeFixture.withPlayEdge { suite, play, base in
            let ann = try await suite.register("ann")
            let bought = try await play.buy("coins.100", accountToken: ann.appAccountToken)
            _ = try await play.deliverAll()
            #expect(try await suite.balance(ann.session) == 100)
            let data = try JSONSerialization.data(
                withJSONObject: [
                    "version": "1.0", "packageName": PlayStand.packageName, "eventTimeMillis": "1",
                    "voidedPurchaseNotification": ["purchaseToken": bought.purchaseToken, "orderId": try #require(bought.orderId), "productType": 2],
                ] as [String: Any]
            ).base64EncodedString()
            let body = #"{"message":{"data":"\#(data)","messageId":"777001","attributes":{}},"subscription":"voidedpurchases.list"}"#
            let token = try play.simulator.accounts.pushToken(audience: PlayStand.pushAudience, nowSeconds: Int64(Date().timeIntervalSince1970))
            #expect(try await EdgeTests.post(base + "/v1/notifications/googleplay", body, bearer: token).status == 200)
            #expect(try await suite.balance(ann.session) == 100, "Google still counts it as bought")
            #expect(try await play.purchase(bought.purchaseToken).state == "purchased")
        }
    }

    /// A voided push about a purchase not recorded here is checked with Google: one Google does not show voided (its
    /// answer lagging, or a push about another state) grants nothing, although the purchase is bound to an account; one it
    /// confirms is remembered, so the redeem records it taken back.
    @Test func aVoidedPushAboutAPurchaseNotRecordedHereNeverGrantsIt() async throws {
        try await EdgeFixture.withPlayEdge { suite, play, base in
            let ann = try await suite.register("ann")
            _ = try await play.client.call(PlaySetPushFault.self, .init(dropPercent: 100))
            let bought = try await play.buy("coins.100", accountToken: ann.appAccountToken, quantity: 2)
            func voidedPush(_ id: String) async throws -> Int {
                try await Self.postVoidedPush(
                    play, base, purchaseToken: bought.purchaseToken, orderId: try #require(bought.orderId), productType: 2, messageId: id)
            }
            #expect(try await voidedPush("777002") == 200)
            #expect(try await suite.balance(ann.session) == 0, "a void never grants")
            #expect(try await Self.playRows(suite).map(\.state) == [.ignored])
            // Voided at Google: the push is remembered for the redeem (which asked Google before the void).
            let verification = RPCClient(host: "127.0.0.1", port: suite.verificationPort)
            defer { Task { await verification.close() } }
            let seen = try await verification.call(
                VerificationVerifyPlayPurchase.self,
                PlayPurchaseReference(
                    internalToken: SuiteFixture.internalToken, packageName: nil, productId: "coins.100", purchaseToken: bought.purchaseToken,
                    kind: .product))
            _ = try await play.client.call(PlayRefund.self, .init(purchaseToken: bought.purchaseToken))
            #expect(try await voidedPush("777003") == 200)
            _ = try await suite.store.apply(
                [
                    PlannedPurchase(
                        purchase: VerifiedPurchase(play: seen, catalogProductId: "coins.100", nowMs: suite.clock.nowMs), rule: .coins(perUnit: 100))
                ],
                accountId: ann.accountId, appAccountToken: ann.appAccountToken, mode: .redeem, policy: .refuse, nowMs: suite.clock.nowMs)
            #expect(try await suite.balance(ann.session) == 0)
            #expect(try await suite.store.claimMismatches().isEmpty)
            #expect(try await suite.store.ledgerMismatches().isEmpty)
        }
    }

    /// A voided push is believed for the order it names only when that order is the confirmed purchase's own: a push
    /// carrying a revoked subscription's token beside someone else's order (a replayed bearer token, a forged body) does
    /// not take that order back from its buyer.
    @Test func aVoidedPushCannotNameAnotherPurchasesOrder() async throws {
        try await EdgeFixture.withPlayEdge { suite, play, base in
            let ann = try await suite.register("ann"), mallory = try await suite.register("mallory")
            _ = try await play.client.call(PlaySetPushFault.self, .init(dropPercent: 100))
            let own = try await play.buy("sub.premium", accountToken: mallory.appAccountToken, basePlanId: "monthly")
            _ = try await play.client.call(PlayRefund.self, .init(purchaseToken: own.purchaseToken))
            let anns = try await play.buy("coins.100", accountToken: ann.appAccountToken)
            let status = try await Self.postVoidedPush(
                play, base, purchaseToken: own.purchaseToken, orderId: try #require(anns.orderId), productType: 1, messageId: "777010")
            #expect(status == 200)
            let redeemed = try await Self.redeem(suite, ann.session, [.init(productId: "coins.100", purchaseToken: anns.purchaseToken)])
            #expect(redeemed.results.map(\.outcome) == [.granted] && redeemed.balance == 100)
        }
    }

    /// A subscription push naming another product than the token's item that holds the access (an add-on, a deferred
    /// plan change's next plan) is decided by the token: a revocation it carries still ends the access (it was ignored
    /// for good as a product mismatch).
    @Test func aRevocationPushNamingAnotherProductOfTheTokenStillEndsTheAccess() async throws {
        try await EdgeFixture.withPlayEdge { suite, play, base in
            let ann = try await suite.register("ann")
            let sub = try await play.buy("sub.premium", accountToken: ann.appAccountToken, basePlanId: "monthly")
            _ = try await play.deliverAll()
            #expect(try await suite.entitlements(ann.session).map(\.entitlement) == ["premium"])
            _ = try await play.client.call(PlaySetPushFault.self, .init(dropPercent: 100))
            _ = try await play.client.call(PlayRefund.self, .init(purchaseToken: sub.purchaseToken))
            let revoked: [String: Any] = [
                "version": "1.0", "notificationType": 12, "purchaseToken": sub.purchaseToken, "subscriptionId": "sub.premium.addon",
            ]
            #expect(try await Self.postPush(play, base, "subscriptionNotification", revoked, messageId: "777020") == 200)
            #expect(try await suite.entitlements(ann.session).isEmpty)
            let rows = try await Self.playRows(suite)
            #expect(rows.filter { $0.notificationUUID.contains(":777020@") }.map(\.state) == [.applied], "\(rows)")
        }
    }

    @Test func aVoidAfterSpendingLeavesDebtAndARevokedSubscriptionEnds() async throws {
        try await EdgeFixture.withPlayEdge { suite, play, _ in
            let ann = try await suite.register("ann")
            let coins = try await play.buy("coins.100", accountToken: ann.appAccountToken)
            _ = try await play.deliverAll()
            _ = try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: ann.session, amount: 60, idempotencyKey: "sword"))
            // Refunded in Play Console after 60 were spent: 40 taken back, 60 owed.
            _ = try await play.client.call(PlayRefund.self, .init(purchaseToken: coins.purchaseToken))
            #expect(try await play.deliverAll().pending == 0)
            let wallet = try await suite.fulfillment.call(FulfillmentGetBalance.self, .init(session: ann.session))
            #expect(wallet.balance == 0 && wallet.owed == 60)
            // Delivered again (Pub/Sub's at-least-once): nothing more.
            #expect(try await suite.store.ledgerMismatches().isEmpty)
            // A subscription, then refunded and revoked: its access ends.
            let sub = try await play.buy("sub.premium", accountToken: ann.appAccountToken, basePlanId: "monthly")
            _ = try await play.deliverAll()
            #expect(try await suite.entitlements(ann.session).map(\.entitlement) == ["premium"])
            _ = try await play.client.call(PlayRefund.self, .init(purchaseToken: sub.purchaseToken))
            #expect(try await play.deliverAll().pending == 0)
            #expect(try await suite.entitlements(ann.session).isEmpty)
        }
    }

    @Test func anUpgradeGrantsTheNewPlanAndEndsTheOldOneOnceAndATestPurchaseStaysInSandbox() async throws {
        try await EdgeFixture.withPlayEdge { suite, play, _ in
            let ann = try await suite.register("ann")
            let basic = try await play.buy("sub.basic", accountToken: ann.appAccountToken, basePlanId: "monthly")
            _ = try await play.deliverAll()
            #expect(try await suite.entitlements(ann.session).map(\.entitlement) == ["basic"])
            // Bob moves to a plan this catalog does not sell: refused here, so the plan it replaces is not ended here either.
            let bob = try await suite.register("bob")
            let bobs = try await play.buy("sub.basic", accountToken: bob.appAccountToken, basePlanId: "monthly")
            _ = try await play.deliverAll()
            _ = try await play.upgrade(to: "sub.unsold", accountToken: bob.appAccountToken, replacing: bobs.purchaseToken)
            _ = try await play.deliverAll()
            suite.clock.advance(ms: max(1_000, ServiceClock.system.nowMs - suite.clock.clock.nowMs + 1_000))
            #expect(try await suite.entitlements(bob.session).map(\.entitlement) == ["basic"])
            // Upgraded on the phone: a new purchase token linked to the old one, which Google ends.
            let premium = try await play.upgrade(to: "sub.premium", accountToken: ann.appAccountToken, replacing: basic.purchaseToken)
            _ = try await play.deliverAll()
            // The suite's clock past the moment of the upgrade (it started with the suite; the test takes seconds under load).
            suite.clock.advance(ms: max(1_000, ServiceClock.system.nowMs - suite.clock.clock.nowMs + 1_000))
            #expect(try await suite.entitlements(ann.session).map(\.entitlement) == ["premium"])
            // Redeemed as well by the app, and pushed again: the old plan ended once.
            _ = try await Self.redeem(suite, ann.session, [.init(productId: "sub.premium", purchaseToken: premium.purchaseToken)])
            // (On PostgreSQL the feed holds back what committed after the oldest transaction running in the cluster.)
            try await suite.eventFeedSettled()
            let events = try await suite.fulfillment.call(
                FulfillmentListEvents.self, .init(adminToken: SuiteFixture.adminToken, accountId: ann.accountId))
            #expect(events.events.filter { $0.type == .subscriptionExpired }.count == 1)
            #expect(try await suite.entitlements(ann.session).map(\.entitlement) == ["premium"])
            // A license tester's purchase, notified first: Sandbox only.
            _ = try await play.buy("coins.100", accountToken: ann.appAccountToken, test: true)
            _ = try await play.deliverAll()
            #expect(try await suite.balance(ann.session, .production) == 0)
            #expect(try await suite.balance(ann.session, .sandbox) == 100)
        }
    }

    /// A DEFERRED downgrade known by its pushes alone (the app never redeems it): the old token's SUBSCRIPTION_EXPIRED and
    /// the new one's SUBSCRIPTION_PURCHASED keep the paid premium plan to its end on the new token; its SUBSCRIPTION_RENEWED
    /// at that end switches it to basic.
    @Test func aDeferredDowngradeByPushesKeepsThePaidPlanThenSwitches() async throws {
        try await EdgeFixture.withPlayEdge { suite, play, _ in
            let ann = try await suite.register("ann")
            let premium = try await play.buy("sub.premium", accountToken: ann.appAccountToken, basePlanId: "monthly")
            _ = try await play.deliverAll()
            let paidEnd = try #require(try await suite.entitlements(ann.session).first?.expiresAtMs)
            let basic = try await play.upgrade(to: "sub.basic", accountToken: ann.appAccountToken, replacing: premium.purchaseToken, mode: .DEFERRED)
            _ = try await play.deliverAll()
            suite.clock.advance(ms: max(1_000, ServiceClock.system.nowMs - suite.clock.clock.nowMs + 1_000))
            var held = try await suite.entitlements(ann.session)
            #expect(held.map(\.entitlement) == ["premium"] && held.first?.expiresAtMs == paidEnd, "\(held)")
            #expect(held.first?.originalTransactionId == basic.purchaseToken)
            // Acknowledged at Google by the outbox, as the push granted it (else Google refunds it after three days).
            _ = try await suite.service.outbox.deliverOutbox()
            #expect(try await play.purchase(basic.purchaseToken).acknowledged)
            _ = try await play.client.call(PlayAdvanceClock.self, .init(seconds: 31 * 86_400))
            suite.clock.advance(ms: 31 * 86_400_000)
            _ = try await play.deliverAll()
            held = try await suite.entitlements(ann.session)
            #expect(held.map(\.entitlement) == ["basic"] && (held.first?.expiresAtMs ?? 0) > paidEnd + 29 * 86_400_000, "\(held)")
            let rows = try await Self.playRows(suite)
            #expect(rows.allSatisfy { $0.state == .applied || $0.state == .ignored }, "\(rows)")
        }
    }

    @Test func droppedAndDuplicatedPushesStillEndWithEveryVoidAppliedOnceWithReconciliation() async throws {
        try await EdgeFixture.withPlayEdge(configure: { $0.appleCallBurst = 100 }) { suite, play, _ in
            let ann = try await suite.register("ann")
            let bob = try await suite.register("bob")
            var bought: [(session: String, token: String, order: String)] = []
            for i in 0..<12 {
                let who = i % 2 == 0 ? ann : bob
                let purchase = try await play.buy("coins.100", accountToken: who.appAccountToken)
                bought.append((who.session, purchase.purchaseToken, try #require(purchase.orderIds.first)))
            }
            _ = try await play.deliverAll()
            #expect(try await [suite.balance(ann.session), suite.balance(bob.session)] == [600, 600])
            // Pub/Sub loses 30% of the refunds' pushes and sends 10% twice.
            _ = try await play.client.call(PlaySetPushFault.self, .init(dropPercent: 30, duplicatePercent: 10))
            for purchase in bought { _ = try await play.client.call(PlayRefund.self, .init(purchaseToken: purchase.token)) }
            _ = try await play.deliver()  // one pass: what it drops stays undelivered for now
            // Reconciliation reads Google's voided purchases: whatever the pushes missed is taken back now.
            let reconciled = try await suite.fulfillment.call(
                FulfillmentReconcile.self, .init(adminToken: SuiteFixture.adminToken, notificationHistory: false, subscriptionStatuses: false))
            #expect(reconciled.playVoidsSeen == 12)
            #expect(try await [suite.balance(ann.session), suite.balance(bob.session)] == [0, 0])
            // The lost pushes arrive at last (Pub/Sub retries for days): nothing more is taken.
            _ = try await play.client.call(PlaySetPushFault.self, .init())
            _ = try await play.client.call(PlayAdvanceClock.self, .init(seconds: 3_600))
            #expect(try await play.deliverAll().pending == 0)
            _ = try await suite.fulfillment.call(FulfillmentReconcile.self, .init(adminToken: SuiteFixture.adminToken, notificationHistory: false))
            for session in [ann.session, bob.session] {
                let reversals = try await suite.ledger(session).filter { $0.kind == .reversal }
                #expect(reversals.count == 6 && Set(reversals.compactMap(\.transactionId)).count == 6)
            }
            #expect(try await [suite.balance(ann.session), suite.balance(bob.session)] == [0, 0])
            #expect(try await suite.store.ledgerMismatches().isEmpty)
        }
    }
}

extension GooglePlayNotificationTests {
    /// A pass bought in several units lasts as long as all of them (it lasted one unit's time); a refund of some shortens
    /// it by theirs, once however often Google says so, moving the pass queued behind it up; a refund of the rest ends it.
    @Test func aPassBoughtInSeveralUnitsLastsThemAllAndARefundOfSomeShortensIt() async throws {
        try await EdgeFixture.withPlayEdge { suite, play, _ in
            let ann = try await suite.register("ann")
            func pass(_ token: String) async throws -> (starts: Int, days: Int) {
                // Lower-cased: `count` spells camelCase as snake_case, in a literal too.
                let row = "FROM entitlement WHERE lower(originalTransactionId) = '\(token.lowercased())'"
                let starts = try await suite.count("SELECT startsAtMs \(row)")
                return (starts, try await suite.count("SELECT expiresAtMs - startsAtMs \(row)") / 86_400_000)
            }
            let three = try await play.buy("pass.season", accountToken: ann.appAccountToken, quantity: 3)
            #expect(try await play.deliverAll().pending == 0)
            let one = try await play.buy("pass.season", accountToken: ann.appAccountToken)
            #expect(try await play.deliverAll().pending == 0)
            let first = try await pass(three.purchaseToken)
            #expect(first.days == 90)
            #expect(try await pass(one.purchaseToken) == (first.starts + 90 * 86_400_000, 30))
            // One of the three refunded: 60 days, and the queued pass moves up; Google's list read again changes nothing.
            _ = try await play.client.call(PlayRefund.self, .init(purchaseToken: three.purchaseToken, quantity: 1))
            #expect(try await play.deliverAll().pending == 0)
            #expect(try await pass(three.purchaseToken) == (first.starts, 60))
            #expect(try await pass(one.purchaseToken) == (first.starts + 60 * 86_400_000, 30))
            _ = try await suite.fulfillment.call(
                FulfillmentReconcile.self, .init(adminToken: SuiteFixture.adminToken, notificationHistory: false, subscriptionStatuses: false))
            #expect(try await pass(three.purchaseToken) == (first.starts, 60))
            // The other two refunded: the pass ends, and the one behind it starts now.
            _ = try await play.client.call(PlayRefund.self, .init(purchaseToken: three.purchaseToken))
            #expect(try await play.deliverAll().pending == 0)
            #expect(try await suite.count("SELECT COUNT(*) FROM entitlement WHERE revokedAtMs IS NOT NULL") == 1)
            #expect(try await pass(one.purchaseToken).starts <= Int(suite.clock.nowMs))
            #expect(try await suite.entitlements(ann.session).map(\.originalTransactionId) == [one.purchaseToken])
            let memos = try await suite.ledger(ann.session).filter { $0.kind == .reversal }.compactMap(\.memo)
            #expect(memos.sorted() == ["partially refunded: pass.season", "refunded: pass.season"], "\(memos)")
            #expect(try await suite.store.ledgerMismatches().isEmpty)
            #expect(try await suite.store.duplicateLedgerEffects().isEmpty)
        }
    }

    @Test func partialRefundsTakeBackTheirUnitsOnceByPushOrFromTheListAndAFullRefundTakesTheRest() async throws {
        try await EdgeFixture.withPlayEdge { suite, play, _ in
            let ann = try await suite.register("ann")
            let five = try await play.buy("coins.100", accountToken: ann.appAccountToken, quantity: 5)
            _ = try await play.deliverAll()
            #expect(try await suite.balance(ann.session) == 500)
            _ = try await suite.fulfillment.call(FulfillmentSpendCoins.self, .init(session: ann.session, amount: 350, idempotencyKey: "armor"))
            func wallet() async throws -> [Int64] {
                let w = try await suite.fulfillment.call(FulfillmentGetBalance.self, .init(session: ann.session))
                return [w.balance, w.owed]
            }
            // Two of the five refunded: 200 taken back, 150 of it from the balance and 50 owed.
            _ = try await play.client.call(PlayRefund.self, .init(purchaseToken: five.purchaseToken, quantity: 2))
            #expect(try await play.deliverAll().pending == 0)
            #expect(try await wallet() == [0, 50])
            // One more, its push lost: reconciliation reads it from Google's list.
            _ = try await play.client.call(PlaySetPushFault.self, .init(dropPercent: 100))
            _ = try await play.client.call(PlayRefund.self, .init(purchaseToken: five.purchaseToken, quantity: 1))
            _ = try await play.deliver()
            #expect(try await wallet() == [0, 50])
            let reconciled = try await suite.fulfillment.call(
                FulfillmentReconcile.self, .init(adminToken: SuiteFixture.adminToken, notificationHistory: false, subscriptionStatuses: false))
            #expect(reconciled.playVoidsSeen == 2)
            #expect(try await wallet() == [0, 150])
            // The lost push arrives at last, and the list is read again: nothing more.
            _ = try await play.client.call(PlaySetPushFault.self, .init())
            _ = try await play.client.call(PlayAdvanceClock.self, .init(seconds: 3_600))
            #expect(try await play.deliverAll().pending == 0)
            _ = try await suite.fulfillment.call(
                FulfillmentReconcile.self, .init(adminToken: SuiteFixture.adminToken, notificationHistory: false, subscriptionStatuses: false))
            #expect(try await wallet() == [0, 150])
            // The last two refunded (Google cancels the purchase): the 200 left is taken, so all 350 spent is owed.
            _ = try await play.client.call(PlayRefund.self, .init(purchaseToken: five.purchaseToken))
            #expect(try await play.deliverAll().pending == 0)
            #expect(try await wallet() == [0, 350])
            let reversals = try await suite.ledger(ann.session).filter { $0.kind == .reversal }.sorted { $0.id < $1.id }
            #expect(reversals.map { $0.delta - ($0.shortfall ?? 0) } == [-200, -100, -200])
            // Bob's purchase of four is partly refunded before his app redeems it: granted for the three left, and the
            // refund's push, arriving after, takes nothing more; a later refund of one more unit takes 100.
            let bob = try await suite.register("bob")
            _ = try await play.client.call(PlaySetPushFault.self, .init(dropPercent: 100))
            let four = try await play.buy("coins.100", accountToken: bob.appAccountToken, quantity: 4)
            _ = try await play.client.call(PlayRefund.self, .init(purchaseToken: four.purchaseToken, quantity: 1))
            let redeemed = try await Self.redeem(suite, bob.session, [.init(productId: "coins.100", purchaseToken: four.purchaseToken)])
            #expect(redeemed.results.map(\.outcome) == [.granted] && redeemed.balance == 300)
            _ = try await play.client.call(PlaySetPushFault.self, .init())
            _ = try await play.client.call(PlayAdvanceClock.self, .init(seconds: 3_600))
            #expect(try await play.deliverAll().pending == 0)
            #expect(try await suite.balance(bob.session) == 300)
            _ = try await play.client.call(PlayRefund.self, .init(purchaseToken: four.purchaseToken, quantity: 1))
            #expect(try await play.deliverAll().pending == 0)
            #expect(try await suite.balance(bob.session) == 200)
            #expect(try await suite.store.ledgerMismatches().isEmpty)
            #expect(try await suite.store.duplicateLedgerEffects().isEmpty)
        }
    }

    /// A void that crosses a purchase's first redeem (the redeem asked Google before the void, and commits after the void
    /// was read) is remembered for it: the redeem's grant is taken back, for a one-time purchase and for a subscription,
    /// whether Google's list or a push brought the void. Before, a void of a purchase not recorded yet was ignored, its
    /// inbox key spent, and the redeem kept everything for good.
    @Test(arguments: [false, true]) func aVoidCrossingTheFirstRedeemIsTakenBackFromIt(subscription: Bool) async throws {
        try await EdgeFixture.withPlayEdge { suite, play, _ in
            let ann = try await suite.register("ann")
            _ = try await play.client.call(PlaySetPushFault.self, .init(dropPercent: 100))  // Google's list is the only word
            let bought =
                subscription
                ? try await play.buy("sub.premium", accountToken: ann.appAccountToken, basePlanId: "monthly")
                : try await play.buy("coins.100", accountToken: ann.appAccountToken, quantity: 3)
            let verification = RPCClient(host: "127.0.0.1", port: suite.verificationPort)
            defer { Task { await verification.close() } }
            // The redeem asks Google: paid.
            let seen = try await verification.call(
                VerificationVerifyPlayPurchase.self,
                PlayPurchaseReference(
                    internalToken: SuiteFixture.internalToken, packageName: nil, productId: subscription ? "sub.premium" : "coins.100",
                    purchaseToken: bought.purchaseToken, kind: subscription ? .subscription : .product))
            #expect(seen.entitles)
            // Google voids it, and the list is read before the redeem commits.
            _ = try await play.client.call(PlayRefund.self, .init(purchaseToken: bought.purchaseToken))
            let reconciled = try await suite.fulfillment.call(
                FulfillmentReconcile.self, .init(adminToken: SuiteFixture.adminToken, notificationHistory: false, subscriptionStatuses: false))
            #expect(reconciled.playVoidsSeen == 1)
            // The redeem commits what it verified.
            let rule: GrantRule = subscription ? .subscription(entitlement: "premium") : .coins(perUnit: 100)
            let purchase = VerifiedPurchase(play: seen, catalogProductId: subscription ? "sub.premium" : "coins.100", nowMs: suite.clock.nowMs)
            _ = try await suite.store.apply(
                [PlannedPurchase(purchase: purchase, rule: rule)], accountId: ann.accountId, appAccountToken: ann.appAccountToken,
                mode: .redeem, policy: .refuse, nowMs: suite.clock.nowMs)
            #expect(try await suite.balance(ann.session) == 0)
            #expect(try await suite.entitlements(ann.session).isEmpty, "the voided subscription gives no access")
            #expect(try await suite.store.claimMismatches().isEmpty)
            #expect(try await suite.store.ledgerMismatches().isEmpty)
        }
    }
}
