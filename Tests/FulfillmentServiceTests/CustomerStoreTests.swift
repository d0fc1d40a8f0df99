import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import Testing

/// What the support console reads and writes about one customer, on both engines: coin adjustments (one ledger row of
/// kind `adjustment` with its event and audit entry, once per key, never below zero, concurrent ones serialized per
/// account), the customer's purchases with their states, and the account behind a transaction id.
@Suite struct CustomerStoreTests {
    static func events(_ all: [FulfillmentEvent]) -> FulfillmentEvent { all.first { $0.type == .coinsAdjusted }! }

    static let audit = AuditFacts(action: "adjustCoins", reason: "ticket 7", credential: "c0ffee", operatorName: "sam")

    static func coins(_ id: String, original: String? = nil) -> PlannedPurchase {
        PlannedPurchase(
            purchase: VerifiedPurchase(
                environment: "Production", transactionId: id, originalTransactionId: original ?? id, productId: "coins.100", purchaseDateMs: 1),
            rule: .coins(perUnit: 100))
    }

    @Test(arguments: StoreEngine.available)
    func anAdjustmentIsOneLedgerRowWithItsEventAndAuditEntryOncePerKey(engine: StoreEngine) async throws {
        func events(_ all: [FulfillmentEvent]) -> FulfillmentEvent { Self.events(all) }
        try await engine.open().with { db in
            let store = db.first
            let alice = Holder(accountId: "alice", scope: .production)
            let given = try await store.adjust(alice, delta: 50, idempotencyKey: "adjustment:k1", audit: Self.audit, nowMs: 10)
            guard case .adjusted(let row, let wallet) = given else { Issue.record("not adjusted: \(given)"); return }
            #expect(row.kind == .adjustment && row.delta == 50 && row.balance == 50 && row.memo == "support adjustment" && wallet.balance == 50)
            // The same key again: the same row, nothing written.
            #expect(try await store.adjust(alice, delta: 50, idempotencyKey: "adjustment:k1", audit: Self.audit, nowMs: 11) == .replayed(row, wallet))
            #expect(try await store.adjust(alice, delta: 51, idempotencyKey: "adjustment:k1", audit: Self.audit, nowMs: 11) == .keyConflict)
            #expect(events(try await EventFeedTests.all(store, account: "alice")).reason == "ticket 7", "the reason goes to the event")
            // A take-back past the balance changes nothing.
            #expect(
                try await store.adjust(alice, delta: -51, idempotencyKey: "adjustment:k2", audit: Self.audit, nowMs: 12) == .insufficient(balance: 50)
            )
            guard
                case .adjusted(_, let after) = try await store.adjust(
                    alice, delta: -20, idempotencyKey: "adjustment:k3", audit: Self.audit, nowMs: 13)
            else { Issue.record("take-back refused"); return }
            #expect(after == Wallet(balance: 30, owed: 0))
            // A spend's key is not an adjustment's: a conflict, never a replay of the spend.
            _ = try await store.spend(
                accountId: "alice", scope: .production, amount: 5, idempotencyKey: "shared", memo: "support adjustment", nowMs: 14)
            #expect(try await store.adjust(alice, delta: -5, idempotencyKey: "shared", audit: Self.audit, nowMs: 15) == .keyConflict)

            let ledger = try await store.ledger(accountId: "alice", scope: .production, after: 0, limit: 10).entries
            #expect(ledger.map(\.kind) == [.adjustment, .adjustment, .spend] && ledger.map(\.delta) == [50, -20, -5])
            #expect(try await store.ledgerMismatches().isEmpty)
            let audit = try await store.audit(accountId: "alice", limit: 10)
            #expect(
                audit.map(\.action) == ["adjustCoins", "adjustCoins"] && audit.allSatisfy { $0.operatorName == "sam" && $0.credential == "c0ffee" })
            let events = try await EventFeedTests.all(store, account: "alice")
            #expect(
                events.map(\.type) == [.coinsAdjusted, .supportActionTaken, .coinsAdjusted, .supportActionTaken, .coinsSpent],
                "\(events.map(\.type))")
            #expect(events[0].delta == 50 && events[0].balance == 50 && events[2].delta == -20 && events[2].balance == 30)
        }
    }

    @Test(arguments: StoreEngine.available)
    func concurrentTakeBacksNeverGoBelowZeroAndOneKeyAdjustsOnce(engine: StoreEngine) async throws {
        try await engine.open(instances: 2).with { db in
            let bob = Holder(accountId: "bob", scope: .production)
            _ = try await db.first.adjust(bob, delta: 50, idempotencyKey: "adjustment:seed", audit: Self.audit, nowMs: 1)
            // Ten take-backs of 10 from two instances at once: five fit.
            let outcomes = try await withThrowingTaskGroup(of: AdjustOutcome.self) { group in
                for i in 0..<10 {
                    group.addTask { try await db[i].adjust(bob, delta: -10, idempotencyKey: "adjustment:t\(i)", audit: Self.audit, nowMs: 2) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(outcomes.filter { if case .adjusted = $0 { true } else { false } }.count == 5)
            #expect(outcomes.filter { $0 == .insufficient(balance: 0) }.count == 5)
            // One key sent eight times at once: one row.
            let again = try await withThrowingTaskGroup(of: AdjustOutcome.self) { group in
                for i in 0..<8 {
                    group.addTask { try await db[i].adjust(bob, delta: 7, idempotencyKey: "adjustment:once", audit: Self.audit, nowMs: 3) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(again.filter { if case .adjusted = $0 { true } else { false } }.count == 1)
            #expect(try await db.first.balance(accountId: "bob", scope: .production) == Wallet(balance: 7, owed: 0))
            #expect(try await db.first.ledgerMismatches().isEmpty)
            #expect(try await db.first.audit(accountId: "bob", limit: 50).count == 1 + 5 + 1)
        }
    }

    @Test(arguments: StoreEngine.available)
    func aCustomersPurchasesCarryTheirStateAndAnyTransactionIdFindsTheAccount(engine: StoreEngine) async throws {
        try await engine.open().with { db in
            let store = db.first
            for id in ["3001", "3002", "3003"] {
                _ = try await store.apply([Self.coins(id)], accountId: "carol", appAccountToken: nil, mode: .redeem, policy: .refuse, nowMs: 5)
            }
            _ = try await store.revoke(transactionId: "3001", reason: "refunded", nowMs: 6)
            _ = try await store.revoke(transactionId: "3002", reason: "refunded", nowMs: 6)
            _ = try await store.reinstate(transactionId: "3002", nowMs: 7)
            _ = try await store.revoke(transactionId: "3003", reason: "family sharing", nowMs: 8)
            _ = try await store.apply(
                [Self.coins("3005", original: "3004")], accountId: "carol", appAccountToken: nil, mode: .redeem, policy: .refuse, nowMs: 9)

            let customer = try await store.customer(accountId: "carol", ledgerLimit: 3, nowMs: 10)
            let states = Dictionary(uniqueKeysWithValues: customer.purchases.map { ($0.transactionId, $0.state) })
            #expect(states == ["3001": .refunded, "3002": .reinstated, "3003": .revoked, "3005": .granted])
            #expect(customer.purchases.first { $0.transactionId == "3001" }?.revokeReason == "refunded")
            let production = try #require(customer.scopes.first)
            #expect(
                production.environment == .production && production.balance == 200 && customer.scopes.map(\.environment) == [.production, .sandbox])
            // The newest three rows, newest first, each with the balance after it.
            #expect(production.ledger.count == 3 && production.ledger.map(\.id) == production.ledger.map(\.id).sorted(by: >))
            #expect(production.ledger.first?.balance == 200 && production.ledger.first?.transactionId == "3005")
            #expect(try await store.accountId(transactionId: "3004") == "carol", "by original transaction id")
            #expect(try await store.accountId(transactionId: "3003") == "carol")
            #expect(try await store.accountId(transactionId: "9999") == nil)
        }
    }
}

/// The overview's figures on both engines: per UTC day, Production purchases, grants, refunds and revenue per currency
/// from each purchase's signed price, unpriced purchases apart, Sandbox left out.
@Suite struct OverviewStoreTests {
    static let day: Int64 = 86_400_000

    static func purchase(_ id: String, at ms: Int64, price: Int64?, currency: String?, environment: String = "Production") -> PlannedPurchase {
        var p = VerifiedPurchase(environment: environment, transactionId: id, originalTransactionId: id, productId: "coins.100", purchaseDateMs: ms)
        p.price = price
        p.currency = currency
        return PlannedPurchase(purchase: p, rule: .coins(perUnit: 100), scope: environment == "Production" ? .production : .sandbox)
    }

    @Test(arguments: StoreEngine.available)
    func daysCountPurchasesGrantsRefundsAndRevenuePerCurrency(engine: StoreEngine) async throws {
        try await engine.open().with { db in
            let store = db.first
            let today = 1_767_225_600_000 + 40 * Self.day  // 00:00 UTC
            let now = today + 3_600_000
            let yesterday = today - Self.day
            for (id, at, price, currency, env) in [
                ("4001", yesterday + 10, Int64?(990), String?("USD"), "Production"), ("4002", today + 10, 1990, "USD", "Production"),
                ("4003", today + 20, 1290, "EUR", "Production"), ("4004", today + 30, nil, nil, "Production"),
                ("4005", today + 40, 5000, "USD", "Sandbox"),
            ] {
                _ = try await store.apply(
                    [Self.purchase(id, at: at, price: price, currency: currency, environment: env)], accountId: "dora", appAccountToken: nil,
                    mode: .redeem, policy: .refuse, nowMs: at + 5)
            }
            _ = try await store.revoke(transactionId: "4002", reason: "refunded", nowMs: now)
            let o = try await store.overview(days: 2, nowMs: now)
            #expect(o.days.map(\.dayStartMs) == [yesterday, today])
            #expect(o.days.map(\.purchases) == [1, 3] && o.days.map(\.grants) == [1, 3] && o.days.map(\.refunds) == [0, 1])
            #expect(o.days[0].revenue == [CurrencyAmount(currency: "USD", milliunits: 990)])
            #expect(o.days[1].revenue == [CurrencyAmount(currency: "EUR", milliunits: 1290), CurrencyAmount(currency: "USD", milliunits: 1990)])
            #expect(o.days.map(\.unpriced) == [0, 1], "the receipt-like purchase is unpriced, never zero")
            let customer = try await store.customer(accountId: "dora", ledgerLimit: 1, nowMs: now)
            #expect(customer.purchases.first { $0.transactionId == "4003" }.map { [$0.price.map(String.init), $0.currency] } == ["1290", "EUR"])
        }
    }
}

/// Dismissing a parked notification on both engines: only a parked one, set aside as `ignored` with the reason, its
/// audit entry naming the account that holds the purchase, in one transaction.
@Suite struct DismissNotificationStoreTests {
    @Test(arguments: StoreEngine.available)
    func onlyAParkedNotificationIsDismissedAndTheDismissalIsAudited(engine: StoreEngine) async throws {
        try await engine.open().with { db in
            let store = db.first
            _ = try await store.apply(
                [CustomerStoreTests.coins("5001")], accountId: "erin", appAccountToken: nil, mode: .redeem, policy: .refuse, nowMs: 1)
            for (uuid, state) in [
                ("6a1f0c1e-0000-4000-8000-000000000001", NotificationState.parked), ("6a1f0c1e-0000-4000-8000-000000000002", .pending),
            ] {
                _ = try await store.recordNotification(
                    InboxEntry(
                        notificationUUID: uuid, notificationType: "REFUND", subtype: nil, signedDateMs: 2, signedPayload: "h.p.s",
                        notification: Array("{}".utf8), receivedAtMs: 2, nextAttemptAtMs: 2, originalTransactionId: "5001"))
                try await store.settleNotification(uuid, state: state, attempts: 10, nextAttemptAtMs: 3, lastError: "kept failing", nowMs: 3)
            }
            let audit = AuditFacts(action: "dismissNotification", reason: "known bad", credential: "c0ffee", operatorName: "sam")
            #expect(
                try await store.dismiss(notificationUUID: "6a1f0c1e-0000-4000-8000-000000000002", reason: "x", audit: audit, nowMs: 4)
                    == .notParked(.pending))
            #expect(
                try await store.dismiss(notificationUUID: "6a1f0c1e-0000-4000-8000-00000000000f", reason: "x", audit: audit, nowMs: 4) == .unknown)
            #expect(
                try await store.dismiss(notificationUUID: "6a1f0c1e-0000-4000-8000-000000000001", reason: "known bad", audit: audit, nowMs: 5)
                    == .dismissed)
            let entry = try #require(try await store.notification("6a1f0c1e-0000-4000-8000-000000000001"))
            #expect(entry.state == .ignored && entry.lastError == "dismissed by an operator: known bad" && entry.processedAtMs == 5)
            #expect(
                try await store.dismiss(notificationUUID: "6a1f0c1e-0000-4000-8000-000000000001", reason: "again", audit: audit, nowMs: 6)
                    == .notParked(.ignored))
            // A retry that was already running when it was dismissed applies nothing and leaves the row dismissed.
            let refund = VerifiedPurchase(
                environment: "Production", transactionId: "5001", originalTransactionId: "5001", productId: "coins.100", purchaseDateMs: 1,
                cancellationDateMs: 2)
            let late = try await store.applyNotification(
                NotificationRulesTests.facts(.refund, "REFUND", snapshot: refund), uuid: "6a1f0c1e-0000-4000-8000-000000000001", attempts: 11,
                owed: [], nowMs: 7)
            #expect(late.effects.isEmpty && late.ignoredBecause == "settled meanwhile")
            #expect(try await store.notification("6a1f0c1e-0000-4000-8000-000000000001")?.lastError == "dismissed by an operator: known bad")
            let entries = try await store.audit(accountId: "erin", limit: 10)
            #expect(entries.map(\.action) == ["dismissNotification"] && entries[0].operatorName == "sam" && entries[0].transactionId == "5001")
            #expect(try await store.balance(accountId: "erin", scope: .production) == Wallet(balance: 100, owed: 0), "nothing else changed")
        }
    }
}

/// A signed transaction's price is kept only when it is one: a whole number of milliunits from 0 to 10^12, with an ISO
/// 4217 currency (three upper-case letters); anything else is unpriced, never zero.
@Suite struct PriceParsingTests {
    static func price(_ price: JSONValue?, _ currency: JSONValue?) -> (Int64?, String?) {
        var fields: [String: JSONValue] = ["transactionId": .string("1"), "productId": .string("coins.100")]
        if let price { fields["price"] = price }
        if let currency { fields["currency"] = currency }
        let t = AppleTransaction(.object(fields))
        return (t?.price, t?.currency)
    }

    @Test func onlyARealPriceWithARealCurrencyIsKept() {
        #expect(Self.price(.int(990), .string("USD")) == (990, "USD"))
        #expect(Self.price(.int(0), .string("EUR")) == (0, "EUR"), "a free offer period is priced zero")
        #expect(Self.price(.int(1_000_000_000_001), .string("USD")) == (nil, nil))
        #expect(Self.price(.int(-1), .string("USD")) == (nil, nil))
        #expect(Self.price(.int(990), .string("usd")) == (nil, nil))
        #expect(Self.price(.int(990), .string("US")) == (nil, nil))
        #expect(Self.price(.int(990), nil) == (nil, nil))
        #expect(Self.price(nil, .string("USD")) == (nil, nil))
    }
}
