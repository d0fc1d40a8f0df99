import FulfillmentService
import IAPProtocol
import JSONRPC
import Testing

/// The purchase-lifecycle rules on an in-memory ledger: milliseconds each, no database, no services.
/// The same rules run over SQLite in the end-to-end tests.
@Suite struct GrantRulesTests {
    static let alice = "alice", bob = "bob"
    let ledger = InMemoryLedger()

    func purchase(
        _ id: String, original: String? = nil, product: String = "coins.100", environment: String = "Production",
        quantity: Int64 = 1, purchasedAt: Int64 = 1, expires: Int64? = nil, cancelled: Int64? = nil,
        token: String? = nil
    ) -> VerifiedPurchase {
        VerifiedPurchase(
            environment: environment, transactionId: id, originalTransactionId: original ?? id, productId: product,
            quantity: quantity, purchaseDateMs: purchasedAt, expiresDateMs: expires, cancellationDateMs: cancelled,
            appAccountToken: token)
    }

    @discardableResult
    func apply(
        _ items: [(VerifiedPurchase, GrantRule?)], for account: String = alice, token: String? = nil,
        mode: FulfillmentMode = .redeem, policy: OwnershipPolicy = .refuse, scope: AccountScope = .production,
        now: Int64 = 10
    ) throws -> AppliedPurchases {
        try GrantRules.apply(
            items.map { PlannedPurchase(purchase: $0.0, rule: $0.1, scope: scope) }, accountId: account,
            appAccountToken: token, mode: mode, policy: policy, answerScope: scope, nowMs: now, in: ledger)
    }

    /// A copy carrying a refund that Apple signed before it last signed the purchase stands (a reversal) is read as not
    /// refunded, redeemed before or not; one signed later, or without a signed time, still takes the purchase back.
    @Test func aRefundInACopySignedBeforeApplesLaterWordThatItStandsNoLongerHolds() throws {
        let coins = GrantRule.coins(perUnit: 100)
        func copy(_ id: String, signedAt: Int64?) -> VerifiedPurchase {
            var p = purchase(id, cancelled: 5)
            p.signedDateMs = signedAt
            return p
        }
        try apply([(purchase("held"), coins)])
        ledger.recordStandsSigned("held", signedMs: 100)
        ledger.recordStandsSigned("unseen", signedMs: 100)
        #expect(try apply([(copy("held", signedAt: 90), coins)]).results.map(\.outcome) == [.alreadyGranted])
        #expect(try apply([(copy("unseen", signedAt: 90), coins)]).results.map(\.outcome) == [.granted], "never redeemed: granted whole")
        #expect(ledger.wallet(Holder(accountId: Self.alice, scope: .production)).balance == 200)
        #expect(try apply([(copy("held", signedAt: nil), coins)]).results.map(\.outcome) == [.revoked], "no signed time: the refund holds")
        #expect(try apply([(copy("unseen", signedAt: 110), coins)]).results.map(\.outcome) == [.revoked], "a refund after the reversal")
        #expect(ledger.wallet(Holder(accountId: Self.alice, scope: .production)).balance == 0)
        // The refunds applied keep when Apple signed them (none for the copy without a signed time).
        #expect(ledger.refunds == ["unseen": 110])
    }

    @Test func grantedPurchasesWithoutATokenAreTiedToTheAccountOnceEach() throws {
        let mine = "AAAAAAAA-0000-0000-0000-000000000000"
        let planned = [
            (purchase("r1"), GrantRule.coins(perUnit: 100)),  // a receipt's purchase: no token
            (purchase("s1", product: "sub", expires: 100), .subscription(entitlement: "pro")),
            (purchase("s2", original: "s1", product: "sub", purchasedAt: 100, expires: 200), .subscription(entitlement: "pro")),
            (purchase("k1", token: mine.lowercased()), .coins(perUnit: 100)),  // made with the account's token already
            (purchase("u1", product: "unknown"), nil),  // not granted: nothing to tie
        ]
        let items = planned.map { PlannedPurchase(purchase: $0.0, rule: $0.1, scope: .production) }
        // An Xcode-signed purchase (a developer signs any ids, a real purchase's too): Apple has none to tie.
        let xcode = PlannedPurchase(
            purchase: purchase("x1", product: "pack", environment: "Xcode"), rule: .permanent(entitlement: "castle"), scope: .sandbox)
        #expect(
            try GrantRules.apply(
                [xcode], accountId: Self.alice, appAccountToken: mine, owed: .ties, mode: .redeem, policy: .refuse, answerScope: .sandbox,
                nowMs: 10, in: ledger
            ).results.map(\.outcome) == [.granted])
        #expect(ledger.accountTokenTies.isEmpty)
        let first = try GrantRules.apply(
            items, accountId: Self.alice, appAccountToken: mine, owed: .ties, mode: .redeem, policy: .refuse, answerScope: .production,
            nowMs: 10, in: ledger)
        #expect(first.results.map(\.outcome) == [.granted, .granted, .granted, .granted, .unknownProduct])
        #expect(
            ledger.accountTokenTies == [
                PendingAccountToken(originalTransactionId: "r1", appAccountToken: mine.lowercased()),
                PendingAccountToken(originalTransactionId: "s1", appAccountToken: mine.lowercased()),
            ])
        // A second redeem of the same purchases grants nothing and ties nothing again; owing Apple nothing, no ties at all.
        ledger.accountTokenTies = []
        _ = try GrantRules.apply(
            items, accountId: Self.alice, appAccountToken: mine, owed: .ties, mode: .redeem, policy: .refuse, answerScope: .production,
            nowMs: 11, in: ledger)
        try apply([(purchase("r2"), .coins(perUnit: 100))], token: mine)
        #expect(ledger.accountTokenTies.isEmpty)
    }

    /// Finish Transaction is owed once for each transaction recorded here that Apple's server knows: granted, restored
    /// to a new owner or recorded as refunded; not for one seen before, one not granted (unknown product, another
    /// account's), or one signed by Xcode or bought in Sandbox (free to make: see `VerifiedPurchase.finishableAtApple`).
    @Test func eachTransactionRecordedHereIsFinishedAtAppleOnce() throws {
        let items: [(VerifiedPurchase, GrantRule?)] = [
            (purchase("c1"), .coins(perUnit: 100)),
            (purchase("p1", product: "pack"), .permanent(entitlement: "castle")),
            (purchase("x1", environment: "Xcode"), .coins(perUnit: 100)),
            (purchase("b1", environment: "Sandbox"), .coins(perUnit: 100)),  // free to make: not worth Apple's budget
            (purchase("r1", cancelled: 5), .coins(perUnit: 100)),  // refunded before it was seen: recorded, grants nothing
            (purchase("u1", product: "unknown"), nil),
            (purchase("o1", token: "BBBBBBBB-0000-0000-0000-000000000000"), .coins(perUnit: 100)),  // another account's
        ]
        let planned = items.map { PlannedPurchase(purchase: $0.0, rule: $0.1, scope: $0.0.environment == "Production" ? .production : .sandbox) }
        let first = try GrantRules.apply(
            planned, accountId: Self.alice, appAccountToken: "AAAAAAAA-0000-0000-0000-000000000000", owed: .finishes, mode: .redeem,
            policy: .refuse, answerScope: .production, nowMs: 10, in: ledger)
        #expect(first.results.map(\.outcome) == [.granted, .granted, .granted, .granted, .revoked, .unknownProduct, .ownedByAnotherAccount])
        #expect(ledger.finishes == ["c1", "p1", "r1"] && first.owesApple)
        // Redeemed again: nothing new is recorded, nothing more is owed.
        ledger.finishes = []
        let again = try GrantRules.apply(
            planned, accountId: Self.alice, appAccountToken: "AAAAAAAA-0000-0000-0000-000000000000", owed: .finishes, mode: .redeem,
            policy: .refuse, answerScope: .production, nowMs: 11, in: ledger)
        #expect(ledger.finishes.isEmpty && !again.owesApple)
        // Owing Apple nothing (no internal token, or finishing turned off): no finishes.
        try apply([(purchase("c2"), .coins(perUnit: 100))])
        #expect(ledger.finishes.isEmpty)
        // Restored to a new owner under the transfer policy: the restored transaction is recorded, and finished.
        let moved = try GrantRules.apply(
            [PlannedPurchase(purchase: purchase("p2", original: "p1", product: "pack"), rule: .permanent(entitlement: "castle"), scope: .production)],
            accountId: Self.bob, appAccountToken: nil, owed: .finishes, mode: .restore, policy: .transfer, answerScope: .production, nowMs: 12,
            in: ledger)
        #expect(moved.results.map(\.outcome) == [.restored] && ledger.finishes == ["p2"])
    }

    @Test func coinsAreGrantedOnceAndRestoreNeverGrantsThem() throws {
        let coins = purchase("t1", quantity: 3)
        #expect(try apply([(coins, .coins(perUnit: 100))], mode: .restore).results.isEmpty)
        #expect(try apply([(coins, .coins(perUnit: 100))]).balance == 300)
        #expect(try apply([(coins, .coins(perUnit: 100))]).results.map(\.outcome) == [.alreadyGranted])
        #expect(ledger.rows.map(\.kind) == [.grant])
        #expect(ledger.invariantsHold)
    }

    @Test func anOriginalBelongsToItsFirstAccountUnlessTransferred() throws {
        let pack = purchase("t1", product: "pack")
        try apply([(pack, .permanent(entitlement: "castle"))])
        let again = purchase("t2", original: "t1", product: "pack")
        #expect(try apply([(again, .permanent(entitlement: "castle"))], for: Self.bob).results.map(\.outcome) == [.ownedByAnotherAccount])
        // Refunded before it was seen here (the refund remembered, not in the payload): not moved either.
        ledger.earlyRevocations["t2"] = "refunded"
        #expect(
            try apply([(again, .permanent(entitlement: "castle"))], for: Self.bob, policy: .transfer).results.map(\.outcome) == [
                .ownedByAnotherAccount
            ])
        ledger.earlyRevocations = [:]
        let moved = try apply([(again, .permanent(entitlement: "castle"))], for: Self.bob, policy: .transfer)
        #expect(moved.results.map(\.outcome) == [.restored])
        #expect(moved.entitlements.map(\.entitlement) == ["castle"])
        #expect(ledger.transfers.map(\.from) == [Self.alice])
        // Refunded afterwards: taken from, and told to, the account that holds it now (it went to the first before).
        #expect(try GrantRules.revoke("t1", reason: "refunded", nowMs: 20, in: ledger))
        #expect(ledger.events.last.map { [$0.accountId, $0.type.rawValue] } == [Self.bob, "purchase.refunded"])
        #expect(try apply([], for: Self.bob, now: 30).entitlements.isEmpty)
        // Coins never move.
        try apply([(purchase("c1"), .coins(perUnit: 100))])
        #expect(
            try apply([(purchase("c2", original: "c1"), .coins(perUnit: 100))], for: Self.bob, policy: .transfer).results
                .map(\.outcome) == [.ownedByAnotherAccount])
    }

    /// A subscription moved (transfer policy) by a renewal not seen here yet keeps that renewal's period: before
    /// 2026-11-30 the renewal was recorded but the end stayed, and its notification then found it `alreadyGranted`.
    @Test func aTransferByANewRenewalMovesTheEndWithIt() throws {
        let pro = GrantRule.subscription(entitlement: "pro")
        try apply([(purchase("m1", product: "sub", purchasedAt: 0, expires: 100), pro)], now: 1)
        let renewal = purchase("m2", original: "m1", product: "sub", purchasedAt: 100, expires: 200)
        let moved = try apply([(renewal, pro)], for: Self.bob, policy: .transfer, now: 110)
        #expect(moved.results.map(\.outcome) == [.restored])
        #expect(moved.entitlements.map(\.expiresAtMs) == [200])
    }

    @Test func aPurchaseMadeWithAnotherAccountsTokenIsNotGranted() throws {
        let theirs = purchase("t1", token: "bbbbbbbb-0000-0000-0000-000000000000")
        let result = try apply([(theirs, .coins(perUnit: 100))], token: "aaaaaaaa-0000-0000-0000-000000000000")
        #expect(result.results.map(\.outcome) == [.ownedByAnotherAccount])
        #expect(result.balance == 0)
    }

    @Test func aPurchaseRefundedBeforeItWasSeenGrantsNothingAndRevokesItsOriginal() throws {
        try apply([(purchase("s1", product: "sub", expires: 100), .subscription(entitlement: "pro"))])
        let renewal = purchase("s2", original: "s1", product: "sub", purchasedAt: 100, expires: 200, cancelled: 150)
        #expect(try apply([(renewal, .subscription(entitlement: "pro"))]).results.map(\.outcome) == [.revoked])
        #expect(try apply([], now: 50).entitlements.isEmpty)
    }

    /// A purchase Apple refunded before its redeem (the payload says so, or an early revocation was kept) is recorded as
    /// granted and taken back at once: when Apple reverses the refund, it is given back whole, coins and access. (Before,
    /// it was recorded as granting nothing, and the reversal gave nothing back.)
    @Test func aPurchaseRefundedBeforeItsRedeemIsGivenBackWholeWhenTheRefundIsReversed() throws {
        ledger.earlyRevocations["c1"] = "refunded"
        let refunded = try apply([
            (purchase("c1"), .coins(perUnit: 100)), (purchase("p1", product: "pack", cancelled: 5), .permanent(entitlement: "castle")),
        ])
        #expect(refunded.results.map(\.outcome) == [.revoked, .revoked] && refunded.balance == 0 && refunded.entitlements.isEmpty)
        #expect(ledger.earlyRevocations.isEmpty, "the early revocation is spent")
        #expect(try GrantRules.reinstate("c1", nowMs: 20, in: ledger) && GrantRules.reinstate("p1", nowMs: 20, in: ledger))
        let after = try apply([], now: 30)
        #expect(after.balance == 100 && after.entitlements.map(\.entitlement) == ["castle"])
        #expect(ledger.invariantsHold)
    }

    /// A Google Play purchase of three units, seen by its first redeem with every unit refunded, is on record as three units
    /// granted and taken back (what a reversal would give back), not one; partly refunded, it grants the units left.
    @Test func aPlayPurchaseRefundedWholeBeforeItsRedeemIsRecordedForEveryUnit() throws {
        func play(_ token: String, refundable: Int) -> VerifiedPurchase {
            VerifiedPurchase(
                play: VerifiedPlayPurchase(
                    packageName: "com.example.game", productId: "coins_100", purchaseToken: token, kind: .product, orderId: "GPA.\(token)",
                    state: "PURCHASED", entitles: true, acknowledged: true, consumed: false, quantity: 3, refundableQuantity: refundable,
                    obfuscatedExternalAccountId: nil, test: false, purchaseTimeMs: 1, expiryTimeMs: nil, autoRenewing: nil, basePlanId: nil,
                    linkedPurchaseToken: nil), catalogProductId: "coins.100", nowMs: 5)
        }
        let whole = play("t-whole", refundable: 0), part = play("t-part", refundable: 2)
        #expect(whole.quantity == 3 && whole.cancellationDateMs == 5)
        #expect(part.quantity == 2 && part.cancellationDateMs == nil)
        let redeemed = try apply([(whole, .coins(perUnit: 100)), (part, .coins(perUnit: 100))])
        #expect(redeemed.results.map(\.outcome) == [.revoked, .granted] && redeemed.balance == 200)
        #expect(try GrantRules.reinstate("GPA.t-whole", nowMs: 20, in: ledger))
        #expect(try apply([], now: 30).balance == 500)
        #expect(ledger.invariantsHold)
    }

    /// A refunded renewal redeemed beside a paid later one, after an earlier renewal's refund ended the access: the refunded
    /// one is only recorded (granted first, it would give the access back to take it away at once, after the paid period
    /// began), and the paid one gives the access back.
    @Test func aRefundedRenewalRedeemedBesideAPaidOneLeavesThePaidPeriod() throws {
        try apply([(purchase("s1", product: "sub", expires: 100), .subscription(entitlement: "pro"))])
        try apply([(purchase("s2", original: "s1", product: "sub", purchasedAt: 100, expires: 200), .subscription(entitlement: "pro"))], now: 150)
        _ = try GrantRules.revoke("s2", reason: "refunded", nowMs: 160, in: ledger)
        let refunded = purchase("s3", original: "s1", product: "sub", purchasedAt: 200, expires: 300, cancelled: 210)
        let paid = purchase("s4", original: "s1", product: "sub", purchasedAt: 300, expires: 400)
        let redeemed = try apply([(refunded, .subscription(entitlement: "pro")), (paid, .subscription(entitlement: "pro"))], now: 350)
        #expect(redeemed.results.map(\.outcome) == [.revoked, .granted])
        #expect(redeemed.entitlements.map(\.expiresAtMs) == [400])
    }

    /// The refund of a period that ended takes back that period only: the later one, paid for, keeps its access, whether
    /// it was granted before the refund came or is redeemed in the same batch (after it, in Apple's order). Before, either
    /// way the whole subscription was revoked as of the refund's processing, and the paid period with it.
    @Test func aRefundOfAnEarlierPeriodLeavesTheLaterPaidOne() throws {
        try apply([(purchase("s1", product: "sub", expires: 100), .subscription(entitlement: "pro"))])
        let batch = try apply(
            [
                (purchase("s2", original: "s1", product: "sub", purchasedAt: 100, expires: 200, cancelled: 150), .subscription(entitlement: "pro")),
                (purchase("s3", original: "s1", product: "sub", purchasedAt: 200, expires: 300), .subscription(entitlement: "pro")),
            ], now: 250)
        #expect(batch.results.map(\.transactionId) == ["s2", "s3"] && batch.results.map(\.outcome) == [.revoked, .granted])
        #expect(batch.entitlements.map(\.expiresAtMs) == [300])

        try apply([(purchase("t1", product: "sub", expires: 100), .subscription(entitlement: "max"))])
        try apply([(purchase("t2", original: "t1", product: "sub", purchasedAt: 100, expires: 200), .subscription(entitlement: "max"))], now: 150)
        try apply([(purchase("t3", original: "t1", product: "sub", purchasedAt: 200, expires: 300), .subscription(entitlement: "max"))], now: 250)
        #expect(try GrantRules.revoke("t2", reason: "refunded", nowMs: 260, in: ledger), "last month's refund is on record")
        #expect(try apply([], now: 270).entitlements.filter { $0.entitlement == "max" }.map(\.expiresAtMs) == [300], "the paid period stays")
        #expect(try GrantRules.revoke("t3", reason: "refunded", nowMs: 280, in: ledger))
        #expect(try apply([], now: 290).entitlements.filter { $0.entitlement == "max" }.isEmpty, "the current period's refund ends the access")
        #expect(ledger.invariantsHold)
    }

    /// The reversal of a past period's refund gives back no access that a later period's revocation took, and an
    /// administrator revoking a past period means the access too (only a store's refund is of the period alone).
    @Test func aPastPeriodsReversalGivesBackNothingALaterRevocationTookAndAnAdministratorTakesTheAccess() throws {
        for (id, start) in [("t1", Int64(0)), ("t2", 100), ("t3", 200)] {
            try apply(
                [(purchase(id, original: "t1", product: "sub", purchasedAt: start, expires: start + 100), .subscription(entitlement: "max"))],
                now: start + 50)
        }
        #expect(try GrantRules.revoke("t2", reason: "refunded", nowMs: 260, in: ledger))
        #expect(try GrantRules.revoke("t3", reason: "fraud", nowMs: 265, in: ledger))
        #expect(try GrantRules.reinstate("t2", nowMs: 270, in: ledger), "the refund is reversed on record")
        #expect(try apply([], now: 275).entitlements.filter { $0.entitlement == "max" }.isEmpty, "the fraud's revocation holds")

        for (id, start) in [("u1", Int64(0)), ("u2", 100), ("u3", 200)] {
            try apply(
                [(purchase(id, original: "u1", product: "sub", purchasedAt: start, expires: start + 100), .subscription(entitlement: "ultra"))],
                now: start + 50)
        }
        #expect(try GrantRules.revoke("u2", reason: "chargeback", nowMs: 260, in: ledger))
        #expect(try apply([], now: 270).entitlements.filter { $0.entitlement == "ultra" }.isEmpty, "an administrator's revocation ends it")
        #expect(ledger.invariantsHold)
    }

    @Test func renewalsExtendAndARenewalAfterARevocationReinstates() throws {
        try apply([(purchase("s1", product: "sub", expires: 100), .subscription(entitlement: "pro"))])
        #expect(
            try apply(
                [(purchase("s2", original: "s1", product: "sub", purchasedAt: 100, expires: 200), .subscription(entitlement: "pro"))],
                now: 150
            ).entitlements.first?.expiresAtMs == 200)
        _ = try GrantRules.revoke("s2", reason: "refunded", nowMs: 160, in: ledger)
        #expect(try apply([], now: 170).entitlements.isEmpty)
        let later = purchase("s3", original: "s1", product: "sub", purchasedAt: 200, expires: 300)
        #expect(try apply([(later, .subscription(entitlement: "pro"))], now: 210).entitlements.first?.expiresAtMs == 300)
    }

    /// Apple's upgrade starts at once: to a shorter plan (yearly Basic to monthly Premium) its period ends before the one
    /// it replaces, and Apple refunds the rest of that. The latest plan bought holds, wherever it ends; the replaced
    /// plan's period arriving late (a receipt in purchase order, a redeem after the notification) changes nothing, nor
    /// does an older period of it. A downgrade at the renewal ends later and switches as before. (Until 2026-11-30 the
    /// upgrade was answered `restored` and Basic stayed for up to eleven months: seen failing so.)
    /// The replaced yearly period's refund processed before the upgrade's notification: the upgrade, bought before that
    /// refund was processed here but after the refunded period, is granted (until 2026-11-30 it was answered `restored`
    /// and the paid Premium month lost). A period older than a revoked one still gives nothing back.
    @Test func anUpgradeRecordedAfterTheRefundOfThePeriodItReplacedIsGranted() throws {
        let basic = GrantRule.subscription(entitlement: "basic"), premium = GrantRule.subscription(entitlement: "premium")
        try apply([(purchase("u1", product: "basic.yearly", purchasedAt: 0, expires: 365), basic)], now: 1)
        #expect(try GrantRules.revoke("u1", reason: "refunded", nowMs: 40, in: ledger))
        let upgraded = try apply([(purchase("u2", original: "u1", product: "premium.monthly", purchasedAt: 31, expires: 61), premium)], now: 41)
        #expect(upgraded.results.map(\.outcome) == [.granted] && upgraded.entitlements.map(\.entitlement) == ["premium"], "\(upgraded)")
        #expect(try GrantRules.revoke("u2", reason: "refunded", nowMs: 42, in: ledger))
        let older = try apply([(purchase("u0", original: "u1", product: "basic.yearly", purchasedAt: -365, expires: 0), basic)], now: 43)
        #expect(older.entitlements.isEmpty, "an older period does not undo the later refunds")
        #expect(ledger.invariantsHold)
    }

    /// Apple's `isUpgraded`: the period an upgrade replaced gives no access of its own (Apple: look for the transaction
    /// with the higher level of service). Redeemed alone (its upgrade not recorded here), its plan no longer runs to its
    /// old expiry, up to a year Apple refunded (until 2026-11-30 it did); the upgrade's period then holds.
    @Test func aPeriodAnUpgradeReplacedGivesNoAccessOfItsOwn() throws {
        let json =
            #"{"transactionId": "u1", "originalTransactionId": "u1", "productId": "basic.yearly", "purchaseDate": 0, "expiresDate": 365, "isUpgraded": true, "environment": "Production"}"#
        let yearly = try #require(VerifiedPurchase.fromSignedTransaction(try JSONValue(parsing: Array(json.utf8)), environment: "Production"))
        #expect(yearly.isUpgraded && yearly.expiresDateMs == 0)
        let basic = GrantRule.subscription(entitlement: "basic"), premium = GrantRule.subscription(entitlement: "premium")
        #expect(try apply([(yearly, basic)], now: 40).entitlements.isEmpty)
        let upgraded = try apply([(purchase("u2", original: "u1", product: "premium.monthly", purchasedAt: 31, expires: 61), premium)], now: 41)
        #expect(upgraded.entitlements.map(\.entitlement) == ["premium"] && upgraded.entitlements.first?.expiresAtMs == 61)
    }

    @Test func anUpgradeToAShorterPlanSwitchesAtOnceAndALateOlderPeriodDoesNotSwitchBack() throws {
        let yearly = purchase("u1", product: "basic.yearly", purchasedAt: 0, expires: 365)
        let upgrade = purchase("u2", original: "u1", product: "premium.monthly", purchasedAt: 31, expires: 61)
        let basic = GrantRule.subscription(entitlement: "basic"), premium = GrantRule.subscription(entitlement: "premium")
        try apply([(yearly, basic)], now: 1)
        let upgraded = try apply([(upgrade, premium)], now: 32)
        #expect(upgraded.results.map(\.outcome) == [.granted])
        #expect(upgraded.entitlements.map(\.entitlement) == ["premium"] && upgraded.entitlements.first?.expiresAtMs == 61)
        // The other order (the upgrade first, the yearly period late): premium stays.
        let other = InMemoryLedger()
        func applyTo(_ ledger: InMemoryLedger, _ items: [(VerifiedPurchase, GrantRule)], now: Int64) throws -> AppliedPurchases {
            try GrantRules.apply(
                items.map { PlannedPurchase(purchase: $0.0, rule: $0.1, scope: .production) }, accountId: Self.alice, appAccountToken: nil,
                mode: .redeem, policy: .refuse, answerScope: .production, nowMs: now, in: other)
        }
        _ = try applyTo(other, [(upgrade, premium)], now: 32)
        let late = try applyTo(other, [(yearly, basic)], now: 33)
        #expect(late.entitlements.map(\.entitlement) == ["premium"] && late.entitlements.first?.expiresAtMs == 61)
        // A refund of the upgrade period ends the access: the replaced yearly period, bought before it, holds nothing back;
        // reversed, it comes back. (Until 2026-11-30 the yearly period's later end kept Premium through the refund.)
        #expect(try GrantRules.revoke("u2", reason: "refunded", nowMs: 40, in: ledger))
        #expect(try apply([], now: 41).entitlements.isEmpty, "the refund of the current period ends the access")
        #expect(try GrantRules.reinstate("u2", nowMs: 42, in: ledger))
        #expect(try apply([], now: 43).entitlements.map(\.entitlement) == ["premium"])
        // A refund of the replaced yearly period takes only that period, which the upgrade ended: Premium stays.
        #expect(try GrantRules.revoke("u1", reason: "refunded", nowMs: 44, in: ledger))
        #expect(try apply([], now: 45).entitlements.map(\.entitlement) == ["premium"], "the upgrade's period holds")
        // Premium renews; then a downgrade to Basic at the next renewal switches (a later end, the latest bought).
        try apply([(purchase("u3", original: "u1", product: "premium.monthly", purchasedAt: 61, expires: 91), premium)], now: 62)
        let down = try apply([(purchase("u4", original: "u1", product: "basic.yearly", purchasedAt: 91, expires: 456), basic)], now: 92)
        #expect(down.entitlements.map(\.entitlement) == ["basic"] && down.entitlements.first?.expiresAtMs == 456)
    }

    /// Apple's prorated refund of a coin purchase (REFUND_PRORATED) refunds a share: redeemed first after it, the rest of
    /// the grant is granted (not all taken back, as a whole refund is); presented again, nothing changes.
    @Test func aProratedRefundBeforeTheFirstRedeemGrantsTheRest() throws {
        var refunded = purchase("p1", quantity: 3, purchasedAt: 1, cancelled: 5)
        refunded.proratedRefundMilli = 33_333  // one of three
        let first = try apply([(refunded, .coins(perUnit: 100))], now: 10)
        #expect(first.results.map(\.outcome) == [.granted] && first.balance == 200)
        let again = try apply([(refunded, .coins(perUnit: 100))], now: 11)
        #expect(again.results.map(\.outcome) == [.alreadyGranted] && again.balance == 200)
        // Its notification came first and was remembered: the signed copy's share still decides.
        var remembered = purchase("p2", quantity: 3, purchasedAt: 1, cancelled: 5)
        remembered.proratedRefundMilli = 33_333
        ledger.earlyRevocations["p2"] = "refunded"
        #expect(try apply([(remembered, .coins(perUnit: 100))], now: 12).balance == 400)
        // Recorded whole, then presented refunded (its notification lost): the share is taken back, once.
        try apply([(purchase("p3", quantity: 3, purchasedAt: 1), .coins(perUnit: 100))], now: 13)
        var later = purchase("p3", quantity: 3, purchasedAt: 1, cancelled: 14)
        later.proratedRefundMilli = 33_333
        #expect(try apply([(later, .coins(perUnit: 100))], now: 15).balance == 600)
        #expect(try apply([(later, .coins(perUnit: 100))], now: 16).balance == 600)
        // Its prorated REFUND remembered first, then a copy signed before the refund (no revocation in it) redeemed: the
        // remembered share is taken, not the whole grant (before 2026-11-30, all of it).
        ledger.earlyRevocations["p4"] = "refunded"
        ledger.earlyRefundShares["p4"] = 33_333
        let older = try apply([(purchase("p4", quantity: 3, purchasedAt: 1), .coins(perUnit: 100))], now: 17)
        #expect(older.results.map(\.outcome) == [.granted] && older.balance == 800)
        #expect(ledger.earlyRevocations["p4"] == nil && ledger.invariantsHold)
    }

    /// Apple reversed a prorated refund: the share it took back comes back once, the debt it left forgiven rather than paid
    /// twice (before 2026-11-30 nothing came back).
    @Test func aReversalOfAProratedRefundGivesItsShareBackOnce() throws {
        try apply([(purchase("p1", quantity: 3, purchasedAt: 1), .coins(perUnit: 100))], now: 10)
        let holder = Holder(accountId: Self.alice, scope: .production)
        #expect(try GrantRules.spend(holder, amount: 250, idempotencyKey: "k", memo: nil, nowMs: 11, in: ledger) == .spent(balance: 50))
        #expect(try GrantRules.takeBackRefundedUnits("p1", keepCoins: 200, nowMs: 12, in: ledger))
        #expect(ledger.wallet(holder) == Wallet(balance: 0, owed: 50))
        #expect(try GrantRules.reinstate("p1", nowMs: 13, in: ledger))
        #expect(ledger.wallet(holder) == Wallet(balance: 50, owed: 0), "as if never refunded: 300 granted, 250 spent")
        #expect(ledger.processed("p1")?.coinsGranted == 300)
        #expect(try !GrantRules.reinstate("p1", nowMs: 14, in: ledger), "given back once")
        #expect(ledger.wallet(holder) == Wallet(balance: 50, owed: 0) && ledger.invariantsHold)
        // A whole refund after it takes back the whole grant.
        #expect(try GrantRules.revoke("p1", reason: "refunded", nowMs: 15, in: ledger))
        #expect(ledger.wallet(holder) == Wallet(balance: 0, owed: 250))
    }

    /// A prorated refund, then a whole one, then Apple reverses: the whole grant counts again (Apple's reversal leaves
    /// nothing refunded), both refunds' debts forgiven first (before 2026-11-30 the prorated share stayed taken).
    @Test func aReversalAfterAProratedThenAWholeRefundGivesTheWholeGrantBack() throws {
        try apply([(purchase("p1", quantity: 3, purchasedAt: 1), .coins(perUnit: 100))], now: 10)
        let holder = Holder(accountId: Self.alice, scope: .production)
        #expect(try GrantRules.spend(holder, amount: 250, idempotencyKey: "k", memo: nil, nowMs: 11, in: ledger) == .spent(balance: 50))
        #expect(try GrantRules.takeBackRefundedUnits("p1", keepCoins: 200, nowMs: 12, in: ledger))
        #expect(try GrantRules.revoke("p1", reason: "refunded", nowMs: 13, in: ledger))
        #expect(ledger.wallet(holder) == Wallet(balance: 0, owed: 250))
        #expect(try GrantRules.reinstate("p1", nowMs: 14, in: ledger))
        #expect(ledger.wallet(holder) == Wallet(balance: 50, owed: 0), "as if never refunded: 300 granted, 250 spent")
        #expect(ledger.processed("p1")?.coinsGranted == 300 && ledger.processed("p1")?.revokedAtMs == nil)
        #expect(try !GrantRules.reinstate("p1", nowMs: 15, in: ledger) && ledger.invariantsHold)
    }

    @Test func passesStackAndMoveUpWhenOneBeforeThemIsRefunded() throws {
        let day: Int64 = 86_400_000
        for id in ["p1", "p2", "p3"] { try apply([(purchase(id, product: "pass"), .timeLimited(entitlement: "season", durationDays: 1))]) }
        #expect(ledger.entitlementRows["p3"]?.startsAtMs == 10 + 2 * day)
        _ = try GrantRules.revoke("p2", reason: "refunded", nowMs: 20, in: ledger)
        #expect(ledger.entitlementRows["p3"]?.startsAtMs == 10 + day)
        #expect(ledger.entitlementRows["p3"]?.expiresAtMs == 10 + 2 * day)
    }

    /// A pass lasts its length times the units bought, within a hundred years; a partial refund keeps at most the units
    /// left, so a pass granted as one unit whatever was bought (before 2026-11-30) is not cut below what was paid for.
    @Test func aPassLastsItsUnitsAndAPartialRefundKeepsAtMostTheUnitsLeft() throws {
        let day: Int64 = 86_400_000, rule = GrantRule.timeLimited(entitlement: "season", durationDays: 30)
        try apply([(purchase("p1", product: "pass", quantity: 3), rule)])
        #expect(ledger.entitlementRows["p1"]?.expiresAtMs == 10 + 90 * day)
        #expect(try GrantRules.shortenPass("p1", keepUnits: 2, ofUnits: 3, unitMs: 30 * day, nowMs: 20, in: ledger))
        #expect(ledger.entitlementRows["p1"]?.expiresAtMs == 10 + 60 * day && ledger.grantedUnitsByTransaction["p1"] == 2)
        #expect(try !GrantRules.shortenPass("p1", keepUnits: 2, ofUnits: 2, unitMs: 30 * day, nowMs: 21, in: ledger), "nothing more")
        // One lasting a single unit's length though three were bought: two units left keep all of it.
        try apply([(purchase("p2", product: "pass"), rule)], for: Self.bob)
        #expect(try GrantRules.shortenPass("p2", keepUnits: 2, ofUnits: 3, unitMs: 30 * day, nowMs: 20, in: ledger))
        #expect(ledger.entitlementRows["p2"]?.expiresAtMs == 10 + 30 * day)
        #expect(throws: LedgerLimit.self) {
            try apply([(purchase("p3", product: "pass", quantity: 1_000_000), rule)], for: "carol")
        }
        #expect(ledger.entitlementRows["p3"] == nil)
    }

    @Test func refundedSpentCoinsAreOwedAndRepaidFirst() throws {
        try apply([(purchase("c1"), .coins(perUnit: 100))])
        let holder = Holder(accountId: Self.alice, scope: .production)
        #expect(try GrantRules.spend(holder, amount: 80, idempotencyKey: "k", memo: nil, nowMs: 11, in: ledger) == .spent(balance: 20))
        #expect(try GrantRules.revoke("c1", reason: "refunded", nowMs: 12, in: ledger))
        #expect(ledger.wallet(holder) == Wallet(balance: 0, owed: 80))
        #expect(try GrantRules.spend(holder, amount: 1, idempotencyKey: "k2", memo: nil, nowMs: 13, in: ledger) == .owes(owed: 80, balance: 0))
        // A first grant too small to repay all of it repays what it can.
        #expect(try apply([(purchase("c2", quantity: 1), .coins(perUnit: 50))]).owed == 30)
        let repaid = try apply([(purchase("c3"), .coins(perUnit: 100))])
        #expect(repaid.balance == 70 && repaid.owed == 0)
        #expect(ledger.rows.map(\.kind) == [.grant, .spend, .reversal, .grant, .recovery, .grant, .recovery])
        #expect(ledger.invariantsHold)
        // Replays answer the first result; another amount with the same key is a conflict.
        #expect(try GrantRules.spend(holder, amount: 80, idempotencyKey: "k", memo: nil, nowMs: 14, in: ledger) == .replayed(balance: 20))
        #expect(try GrantRules.spend(holder, amount: 81, idempotencyKey: "k", memo: nil, nowMs: 14, in: ledger) == .keyConflict)
    }

    /// A payload naming another customer's recorded transaction id under a fresh original (what anyone can sign as an
    /// Xcode receipt) neither revokes nor restores it, in any scope.
    @Test func aPayloadReusingAnotherPurchasesTransactionIdChangesNothing() throws {
        try apply([(purchase("c1"), .coins(perUnit: 100))])
        for scope in [AccountScope.production, .sandbox] {
            let forged = try apply(
                [(purchase("c1", original: "fresh-\(scope)", environment: scope.rawValue, cancelled: 5), .coins(perUnit: 100))], for: Self.bob,
                scope: scope)
            #expect(forged.results.map(\.outcome) == [.rejected] && forged.results.allSatisfy { !$0.finishable })
        }
        #expect(ledger.wallet(Holder(accountId: Self.alice, scope: .production)).balance == 100)
        #expect(ledger.processedRows["c1"]?.revokedAtMs == nil)
    }

    @Test func scopesKeepSandboxValueApartAndATransactionOfAnotherScopeThanItsOriginalIsRefused() throws {
        try apply([(purchase("s1", environment: "Sandbox"), .coins(perUnit: 100))], scope: .sandbox)
        #expect(ledger.wallet(Holder(accountId: Self.alice, scope: .production)) == Wallet())
        #expect(ledger.wallet(Holder(accountId: Self.alice, scope: .sandbox)).balance == 100)
        try apply([(purchase("n1", product: "pack", environment: "Sandbox"), .permanent(entitlement: "castle"))], scope: .sandbox)
        // A later transaction of that original planned for Production (its own environment's scope) is refused: a
        // purchase never takes its original's scope, so a Sandbox or Xcode one cannot reach Production value.
        let refused = try apply([(purchase("n2", original: "n1", product: "pack", environment: "Production"), .permanent(entitlement: "castle"))])
        #expect(refused.results.map(\.outcome) == [.wrongEnvironment] && refused.results.allSatisfy { !$0.finishable })
        #expect(ledger.processedRows["n2"] == nil)
        #expect(try apply([]).entitlements.isEmpty)
    }

    @Test func coinAmountsNeverWrap() throws {
        #expect(throws: LedgerLimit.grantTooLarge) {
            try apply([(purchase("big", quantity: 10), .coins(perUnit: Int64.max / 4))])
        }
        #expect(throws: LedgerLimit.grantTooLarge) {
            try apply([(purchase("big2", quantity: 11), .coins(perUnit: CoinLimits.maxGrant / 10))])
        }
    }
}
