import FulfillmentService
import IAPProtocol
import Testing

/// The notification's decision alone, from facts: no database, no services. The same decisions run over both engines
/// in the end-to-end notification tests.
@Suite struct NotificationRulesTests {
    static let alice = Holder(accountId: "alice", scope: .production)

    static func purchase(_ id: String, original: String? = nil, cancelled: Int64? = nil, expires: Int64? = nil, token: String? = nil)
        -> VerifiedPurchase
    {
        VerifiedPurchase(
            environment: "Production", transactionId: id, originalTransactionId: original ?? id, productId: "coins.100",
            purchaseDateMs: 1, expiresDateMs: expires, cancellationDateMs: cancelled, appAccountToken: token)
    }

    static func processed(_ id: String, revoked: Int64? = nil) -> ProcessedTransaction {
        ProcessedTransaction(
            environment: "Production", holder: alice, originalTransactionId: id, productId: "coins.100", grantKind: "coins",
            coinsGranted: 100, revokedAtMs: revoked)
    }

    static func facts(
        _ type: AppleNotificationType, _ raw: String, snapshot: VerifiedPurchase?, current: VerifiedPurchase? = nil,
        renewal: RenewalState? = nil, signed: Int64? = 50, tokenAccount: String? = nil
    ) -> NotificationRules.Facts {
        NotificationRules.Facts(
            disposition: NotificationDisposition.of(type: raw, subtype: nil), type: type, snapshot: snapshot, current: current,
            renewal: renewal, signedDateMs: signed, scope: .production, rule: .coins(perUnit: 100), tokenAccountId: tokenAccount)
    }

    static func grant(_ p: VerifiedPurchase, to account: String = "alice", token: String? = nil) -> NotificationRules.Effect {
        .grant(p, accountId: account, scope: .production, rule: .coins(perUnit: 100), appAccountToken: token)
    }

    @Test func aRefundRevokesWhatWasGrantedAndIsRememberedWhenNeverSeen() {
        let refunded = Self.purchase("t1", cancelled: 40)
        let seen = NotificationRules.decide(
            Self.facts(.refund, "REFUND", snapshot: refunded), stored: .init(processed: Self.processed("t1"), owner: Self.alice))
        #expect(seen.effects == [.revoke(transactionId: "t1", reason: "refunded")])
        #expect(seen.applied)

        let unseen = NotificationRules.decide(Self.facts(.revoke, "REVOKE", snapshot: refunded), stored: .init())
        #expect(unseen.effects == [.rememberEarlyRevocation(transactionId: "t1", reason: "revoked")])

        // A refunded renewal of an original owned here also takes back what the original granted.
        let renewal = Self.purchase("t2", original: "t1", cancelled: 40)
        let owned = NotificationRules.decide(Self.facts(.refund, "REFUND", snapshot: renewal), stored: .init(owner: Self.alice))
        #expect(owned.effects == [Self.grant(renewal), .rememberEarlyRevocation(transactionId: "t2", reason: "refunded")])
    }

    @Test func applesCurrentWordDecidesWhateverTheNotificationSays() {
        // A late purchase notice about a refunded purchase: Apple says it is valid again -> given back.
        let valid = Self.purchase("t1")
        let revokedHere = NotificationRules.Stored(processed: Self.processed("t1", revoked: 30), owner: Self.alice)
        let asked = NotificationRules.decide(
            Self.facts(.oneTimeCharge, "ONE_TIME_CHARGE", snapshot: valid, current: valid), stored: revokedHere)
        #expect(asked.effects == [.reinstate(transactionId: "t1")])
        #expect(asked.standsSignedMs == 50, "the notification's signed time: a copy signed before it no longer takes anything")
        // Apple's current copy, signed later, dates the word; a refunded one, or a Google Play one, dates nothing.
        var signedLater = valid
        signedLater.signedDateMs = 70
        #expect(
            NotificationRules.decide(Self.facts(.oneTimeCharge, "ONE_TIME_CHARGE", snapshot: valid, current: signedLater), stored: revokedHere)
                .standsSignedMs == 70)
        #expect(
            NotificationRules.decide(
                Self.facts(.oneTimeCharge, "ONE_TIME_CHARGE", snapshot: valid, current: valid),
                stored: .init(processed: Self.processed("t1"), owner: Self.alice)
            ).standsSignedMs == nil, "never refunded here: nothing to keep")
        // A reversal Apple signed before a refund it signed later (applied here from a redeemed copy) gives nothing back.
        var refundedLater = revokedHere
        refundedLater.refundSignedMs = 60
        let late = NotificationRules.decide(Self.facts(.refundReversed, "REFUND_REVERSED", snapshot: valid), stored: refundedLater)
        #expect(late.effects.isEmpty && late.ignoredBecause == "superseded: Apple signed a refund of this purchase after it")
        refundedLater.refundSignedMs = 40
        #expect(
            NotificationRules.decide(Self.facts(.refundReversed, "REFUND_REVERSED", snapshot: valid), stored: refundedLater).effects
                == [.reinstate(transactionId: "t1")])
        let refundedNow = Self.purchase("t1", cancelled: 60)
        #expect(
            NotificationRules.decide(Self.facts(.refund, "REFUND", snapshot: refundedNow, current: refundedNow), stored: revokedHere)
                .standsSignedMs == nil)
        #expect(
            NotificationRules.decide(Self.facts(.refund, "REFUND", snapshot: refundedNow), stored: .init(processed: Self.processed("t1")))
                .refundSignedMs == 50, "a refund's signed time is kept")

        // The same notice without Apple's word gives nothing back: only a reversal does.
        let unasked = NotificationRules.decide(Self.facts(.oneTimeCharge, "ONE_TIME_CHARGE", snapshot: valid), stored: revokedHere)
        #expect(unasked.effects.isEmpty)
        #expect(unasked.ignoredBecause == "revoked here; only a refund reversal gives it back")
        let reversal = NotificationRules.decide(Self.facts(.refundReversed, "REFUND_REVERSED", snapshot: valid), stored: revokedHere)
        #expect(reversal.effects == [.reinstate(transactionId: "t1")])

        // A prorated refund took a share (100 of 300 left 200): its reversal, or Apple's word that it is valid, gives it back;
        // an older notice without Apple's word does not.
        var partly = NotificationRules.Stored(processed: Self.processed("t1"), owner: Self.alice)
        partly.processed?.coinsGranted = 200
        partly.grantedCoins = 300
        #expect(
            NotificationRules.decide(Self.facts(.refundReversed, "REFUND_REVERSED", snapshot: valid), stored: partly).effects
                == [.reinstate(transactionId: "t1")])
        #expect(
            NotificationRules.decide(Self.facts(.oneTimeCharge, "ONE_TIME_CHARGE", snapshot: valid, current: valid), stored: partly).effects
                == [.reinstate(transactionId: "t1")])
        #expect(
            NotificationRules.decide(Self.facts(.oneTimeCharge, "ONE_TIME_CHARGE", snapshot: valid), stored: partly).effects
                == [Self.grant(valid)])
        var prorated = Self.purchase("t2", cancelled: 40)
        prorated.proratedRefundMilli = 33_333
        #expect(
            NotificationRules.decide(Self.facts(.refund, "REFUND", snapshot: prorated), stored: .init()).effects
                == [.rememberEarlyRevocation(transactionId: "t2", reason: "refunded", refundShareMilli: 33_333)])

        // A refund notice when Apple says the refund was reversed meanwhile: granted, not revoked.
        let notice = NotificationRules.decide(
            Self.facts(.refund, "REFUND", snapshot: Self.purchase("t1", cancelled: 40), current: valid),
            stored: .init(processed: Self.processed("t1"), owner: Self.alice))
        #expect(notice.effects == [Self.grant(valid)])
    }

    @Test func withoutApplesWordAnOlderNoticeIsSupersededByANewerOneApplied() {
        let refunded = Self.purchase("t1", cancelled: 40)
        let stored = NotificationRules.Stored(processed: Self.processed("t1"), owner: Self.alice, latestStandingAppliedMs: 60)
        let older = NotificationRules.decide(Self.facts(.refund, "REFUND", snapshot: refunded, signed: 50), stored: stored)
        #expect(older.effects.isEmpty)
        #expect(older.ignoredBecause?.hasPrefix("superseded") == true)
        let newer = NotificationRules.decide(Self.facts(.refund, "REFUND", snapshot: refunded, signed: 70), stored: stored)
        #expect(newer.effects == [.revoke(transactionId: "t1", reason: "refunded")])
        // Apple's current word is never superseded.
        let asked = NotificationRules.decide(
            Self.facts(.refund, "REFUND", snapshot: refunded, current: refunded, signed: 50), stored: stored)
        #expect(asked.effects == [.revoke(transactionId: "t1", reason: "refunded")])
    }

    @Test func aPurchaseGoesToItsOwnerElseToItsTokensAccountElseNowhere() {
        let p = Self.purchase("t1", token: "tok")
        let owned = NotificationRules.decide(Self.facts(.oneTimeCharge, "ONE_TIME_CHARGE", snapshot: p), stored: .init(owner: Self.alice))
        #expect(owned.effects == [Self.grant(p)])
        let byToken = NotificationRules.decide(
            Self.facts(.oneTimeCharge, "ONE_TIME_CHARGE", snapshot: p, tokenAccount: "bob"), stored: .init())
        #expect(byToken.effects == [Self.grant(p, to: "bob", token: "tok")])
        let unknown = NotificationRules.decide(Self.facts(.oneTimeCharge, "ONE_TIME_CHARGE", snapshot: p), stored: .init())
        #expect(unknown.effects.isEmpty)
        #expect(unknown.ignoredBecause?.contains("account is not known") == true)
        var refused = Self.facts(.oneTimeCharge, "ONE_TIME_CHARGE", snapshot: p)
        refused.scope = nil  // a sandbox purchase under `--sandbox-policy refuse`
        #expect(NotificationRules.decide(refused, stored: .init(owner: Self.alice)).effects.isEmpty)
    }

    @Test func renewalStateMovesForwardOnlyAndIgnoredTypesChangeNothing() {
        let sub = Self.purchase("s1", expires: 100)
        let state = RenewalState(originalTransactionId: "s1", autoRenew: false, inBillingRetry: false, signedDateMs: 50)
        let status = Self.facts(.didChangeRenewalStatus, "DID_CHANGE_RENEWAL_STATUS", snapshot: sub, renewal: state)
        #expect(NotificationRules.decide(status, stored: .init(keptRenewalSignedMs: 40)).effects == [.keepRenewal(state)])
        let stale = NotificationRules.decide(status, stored: .init(keptRenewalSignedMs: 60))
        #expect(stale.effects.isEmpty)
        #expect(stale.ignoredBecause == "an equal or newer renewal state was already kept")

        // A refund's renewal info is kept beside the refund itself.
        let refund = Self.facts(.refund, "REFUND", snapshot: Self.purchase("s1", cancelled: 40, expires: 100), renewal: state)
        #expect(
            NotificationRules.decide(refund, stored: .init(processed: Self.processed("s1"), owner: Self.alice)).effects == [
                .keepRenewal(state), .revoke(transactionId: "s1", reason: "refunded"),
            ])

        let test = NotificationRules.decide(Self.facts(.test, "TEST", snapshot: nil, renewal: state), stored: .init())
        #expect(test.effects.isEmpty)
        #expect(test.ignoredBecause?.contains("test notification") == true)

        let extended = NotificationRules.decide(Self.facts(.renewalExtended, "RENEWAL_EXTENDED", snapshot: sub), stored: .init())
        #expect(extended.effects == [.moveSubscriptionEnd(originalTransactionId: "s1", expiresAtMs: 100)])
    }

    @Test func aConsumptionRequestOwesItsAnswerToAppleOnlyWhenThereIsOne() {
        var facts = Self.facts(.consumptionRequest, "CONSUMPTION_REQUEST", snapshot: Self.purchase("t1"))
        let unanswered = NotificationRules.decide(facts, stored: .init())
        #expect(unanswered.ignoredBecause?.hasPrefix("not answered") == true && unanswered.effects.isEmpty)
        let answer = OwedConsumptionAnswer(
            request: .init(customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: false, consumptionPercentage: 0),
            deadlineMs: 43_200_000)
        facts.consumption = answer
        let answered = NotificationRules.decide(facts, stored: .init())
        #expect(answered.applied && answered.effects == [.answerConsumption(transactionId: "t1", answer)])
    }

    @Test func googlesPartialRefundOfAPassKeepsTheUnrefundedUnitsLengthOnce() {
        // Three passes in one purchase; Google now counts two as refundable: one was refunded.
        var two = Self.purchase("GPA.2", original: "token")
        two.quantity = 2
        two.play = PlayFacts(
            packageName: "com.example.game", productId: "pass.season", purchaseToken: "token", kind: .product, acknowledged: true,
            consumed: true, purchasedQuantity: 3)
        var granted = Self.processed("GPA.2")
        granted.originalTransactionId = "token"
        granted.grantKind = "timeLimited"  // GrantRule.timeLimitedKind
        let facts = NotificationRules.Facts(
            disposition: .bringToAppleState, type: .unknown("googlePlay"), snapshot: nil, current: two, scope: .production,
            rule: .timeLimited(entitlement: "season-pass", durationDays: 30))
        let first = NotificationRules.decide(facts, stored: .init(processed: granted, owner: Self.alice, grantedUnits: 3))
        #expect(first.effects == [.shortenPass(transactionId: "GPA.2", keepUnits: 2, ofUnits: 3, unitMs: 30 * 86_400_000)])
        // The same word again: the units kept say it was done.
        let again = NotificationRules.decide(facts, stored: .init(processed: granted, owner: Self.alice, grantedUnits: 2))
        #expect(again.effects.isEmpty && !again.applied)
        // A product the catalog no longer sells as a pass: its unit's length is unknown, nothing is cut.
        var unknown = facts
        unknown.rule = nil
        let unsold = NotificationRules.decide(unknown, stored: .init(processed: granted, owner: Self.alice, grantedUnits: 3))
        #expect(unsold.effects.isEmpty && !unsold.applied)
    }

    @Test func googlesPartialRefundKeepsTheUnrefundedUnitsCoinsOnceAndAFullRefundTakesTheRest() {
        // Five units bought (500 coins granted); Google now counts three as refundable: two were refunded.
        var three = Self.purchase("GPA.1", original: "token")
        three.quantity = 3
        three.play = PlayFacts(
            packageName: "com.example.game", productId: "coins.100", purchaseToken: "token", kind: .product, acknowledged: true, consumed: true,
            purchasedQuantity: 5)
        var granted = Self.processed("GPA.1")
        granted.originalTransactionId = "token"
        granted.coinsGranted = 500
        func google(_ current: VerifiedPurchase) -> NotificationRules.Facts {
            NotificationRules.Facts(
                disposition: .bringToAppleState, type: .unknown("googlePlay"), snapshot: nil, current: current, scope: .production,
                rule: .coins(perUnit: 100))
        }
        let facts = google(three)
        let first = NotificationRules.decide(facts, stored: .init(processed: granted, owner: Self.alice, grantedCoins: 500))
        #expect(first.effects == [.takeBackRefundedUnits(transactionId: "GPA.1", keepCoins: 300)])
        // The same word again (a duplicate push, the list, a sweep): nothing more.
        granted.coinsGranted = 300
        let again = NotificationRules.decide(facts, stored: .init(processed: granted, owner: Self.alice, grantedCoins: 500))
        #expect(again.effects.isEmpty && !again.applied)
        // A second refund (one unit): 100 more.
        three.quantity = 2
        let second = NotificationRules.decide(
            google(three),
            stored: .init(processed: granted, owner: Self.alice, grantedCoins: 500))
        #expect(second.effects == [.takeBackRefundedUnits(transactionId: "GPA.1", keepCoins: 200)])
        // The rest refunded (Google cancels the purchase): revoked, which takes what is left.
        three.cancellationDateMs = 60
        let whole = NotificationRules.decide(
            google(three),
            stored: .init(processed: granted, owner: Self.alice, grantedCoins: 500))
        #expect(whole.effects == [.revoke(transactionId: "GPA.1", reason: "refunded")])
        // Granted after a partial refund (for the three units then left, 300 coins): a later refund of one more unit takes 100.
        var granted3 = granted
        granted3.coinsGranted = 300
        three.cancellationDateMs = nil
        three.quantity = 2
        let late = NotificationRules.decide(
            google(three), stored: .init(processed: granted3, owner: Self.alice, grantedCoins: 300, grantedUnits: 3))
        #expect(late.effects == [.takeBackRefundedUnits(transactionId: "GPA.1", keepCoins: 200)])
        // Google's word about a purchase revoked here never gives it back (Google does not reverse refunds).
        three.quantity = 5
        var revoked = granted
        revoked.revokedAtMs = 70
        let after = NotificationRules.decide(google(three), stored: .init(processed: revoked, owner: Self.alice, grantedCoins: 500))
        #expect(after.effects.isEmpty && !after.applied)
        // An App Store purchase never takes this path, whatever its quantity.
        var apple = Self.purchase("t9")
        apple.quantity = 1
        let appleDecision = NotificationRules.decide(
            Self.facts(.oneTimeCharge, "ONE_TIME_CHARGE", snapshot: apple, current: apple),
            stored: .init(processed: Self.processed("t9"), owner: Self.alice, grantedCoins: 100))
        #expect(appleDecision.effects == [Self.grant(apple)])
    }
}
