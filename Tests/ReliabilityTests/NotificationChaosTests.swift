import EdgeService
import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

/// Apple's delivery at its worst, against the real `fulfillment-service` executable behind the edge's
/// webhook: customers buy coins and a subscription, refunds come and are reversed, auto-renew goes off
/// and on, billing fails and recovers, months pass; the simulated App Store drops 30% of deliveries,
/// duplicates 10%, reorders them, and fulfillment is SIGKILLed and restarted along the way. After a
/// reconciliation (Notification History), every account must hold exactly what the App Store's own
/// records say (read through its App Store Server API), and no notification may have been applied twice.
///
/// Bounded for CI (6 customers, 100 events, 3 kills). The long version: `IAP_CHAOS_CUSTOMERS=50 IAP_CHAOS_EVENTS=1000 IAP_CHAOS_KILLS=10
/// swift test --filter NotificationChaosTests`.
@Suite(.serialized) struct NotificationChaosTests {
    /// A small deterministic generator, so a failing run can be repeated with IAP_CHAOS_SEED.
    struct SeededGenerator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    struct Customer {
        let username: String
        let appleId: String
        let session: String
        let token: String
        let subscription: String
        var coins: [String] = []
        var refunded: Set<String> = []
    }

    @Test func whateverAppleDeliveryDoesEveryAccountEndsAsTheAppStoreRecordsSay() async throws {
        let env = ProcessInfo.processInfo.environment
        let customerCount = Int(env["IAP_CHAOS_CUSTOMERS"] ?? "") ?? 6
        let events = Int(env["IAP_CHAOS_EVENTS"] ?? "") ?? 100
        let kills = Int(env["IAP_CHAOS_KILLS"] ?? "") ?? 3
        let seed = UInt64(env["IAP_CHAOS_SEED"] ?? "") ?? UInt64.random(in: 1...UInt64.max)
        var rng = SeededGenerator(state: seed)
        try await SuiteFixture.with { suite in
            let process = CrashSafetyTests.FulfillmentProcess(
                port: try LoopbackPort.free(), dataDir: suite.directory.appendingPathComponent("chaos-fulfillment"), suite: suite,
                extraArguments: ["--reconcile-interval-s", "0"])
            try await process.start()
            // Generous deadlines: a reconciliation, or a delivery pass of every retry that fell due, does a lot at once.
            let fulfillment = RPCClient(host: "127.0.0.1", port: process.port, configuration: .init(connections: 2, callTimeout: .seconds(300)))
            defer { Task { await fulfillment.close() } }
            let edge = EdgeService(
                accounts: suite.accounts, catalog: suite.catalog, fulfillment: fulfillment,
                configuration: {
                    var config = EdgeConfiguration()
                    config.internalToken = SuiteFixture.internalToken
                    return config
                }(),
                logger: EdgeFixture.quiet)
            try await EdgeFixture.serving(edge) { port in
                let sim = RPCClient(
                    host: "127.0.0.1", port: suite.ports["appstore-sim"] ?? 0, configuration: .init(connections: 2, callTimeout: .seconds(300)))
                defer { Task { await sim.close() } }
                _ = try await sim.call(
                    SimSetNotificationURL.self, .init(environment: .production, url: "http://127.0.0.1:\(port)/v1/notifications/appstore"))
                _ = try await sim.call(SimSetNotificationFault.self, .init(dropPercent: 30, duplicatePercent: 10, reorder: true))

                var customers: [Customer] = []
                for i in 0..<customerCount {
                    let account = try await suite.register("chaos-\(i)")
                    let sub = try await suite.buy("chaos-\(i)@icloud", "sub.premium", appAccountToken: account.appAccountToken)
                    customers.append(
                        Customer(
                            username: "chaos-\(i)", appleId: "chaos-\(i)@icloud", session: account.session, token: account.appAccountToken,
                            subscription: sub.transactionId))
                }
                let killAt = Set((0..<kills).map { _ in Int.random(in: 0..<events, using: &rng) })
                var advancedDays = 0
                for event in 0..<events {
                    if killAt.contains(event) {
                        await process.kill()
                        try await process.start()
                    }
                    let c = Int.random(in: 0..<customers.count, using: &rng)
                    let customer = customers[c]
                    switch Int.random(in: 0..<10, using: &rng) {
                    case 0...3:
                        let bought = try await suite.buy(customer.appleId, "coins.100", appAccountToken: customer.token)
                        customers[c].coins.append(bought.transactionId)
                    case 4:
                        if let coin = customer.coins.filter({ !customer.refunded.contains($0) }).randomElement(using: &rng) {
                            _ = try await sim.call(SimRefund.self, .init(appleId: customer.appleId, transactionId: coin))
                            customers[c].refunded.insert(coin)
                        }
                    case 5:
                        if let coin = customer.refunded.sorted().randomElement(using: &rng) {
                            _ = try await sim.call(SimRefundDecision.self, .init(appleId: customer.appleId, transactionId: coin, event: .reverse))
                            customers[c].refunded.remove(coin)
                        }
                    case 6:
                        // Ended subscriptions refuse: that is the App Store's answer, not a failure here.
                        _ = try? await sim.call(
                            SimSetAutoRenew.self,
                            .init(appleId: customer.appleId, transactionId: customer.subscription, enabled: Bool.random(using: &rng)))
                    case 7:
                        let event: SimBillingEvent = Bool.random(using: &rng) ? .fail : .recover
                        _ = try? await sim.call(
                            SimBilling.self,
                            .init(
                                appleId: customer.appleId, transactionId: customer.subscription, event: event,
                                gracePeriodDays: Bool.random(using: &rng) ? 3 : 0))
                    case 8:
                        // Months pass (within Notification History's 180 days).
                        if advancedDays < 150 {
                            let days = Int.random(in: 1...6, using: &rng)
                            advancedDays += days
                            _ = try await sim.call(SimAdvanceClock.self, .init(seconds: Int64(days) * 86_400))
                        }
                    default:
                        if let coin = customer.coins.filter({ !customer.refunded.contains($0) }).randomElement(using: &rng) {
                            _ = try? await sim.call(SimRefundDecision.self, .init(appleId: customer.appleId, transactionId: coin, event: .decline))
                        }
                    }
                    if event % 3 == 0 { _ = try await sim.call(SimDeliverNotifications.self, EmptyParams()) }
                }

                // Apple stops misbehaving; whatever it still retries arrives; then reconciliation.
                _ = try await sim.call(SimSetNotificationFault.self, .init())
                _ = try await sim.call(SimDeliverNotifications.self, EmptyParams())
                let reconciled = try await fulfillment.call(FulfillmentReconcile.self, .init(adminToken: SuiteFixture.adminToken))
                // A notification a killed process left mid-way waits for its lease; an operator processes it now.
                let pending = try await fulfillment.call(
                    FulfillmentListNotifications.self, .init(adminToken: SuiteFixture.adminToken, state: .pending, limit: 500))
                for entry in pending.notifications {
                    _ = try await fulfillment.call(
                        FulfillmentRetryNotification.self, .init(adminToken: SuiteFixture.adminToken, notificationUUID: entry.notificationUUID))
                }
                let parked = try await fulfillment.call(
                    FulfillmentListNotifications.self, .init(adminToken: SuiteFixture.adminToken, state: .parked, limit: 500))
                #expect(parked.notifications.isEmpty, "seed \(seed): parked \(parked.notifications)")

                // The oracle: the App Store's own records, through its App Store Server API.
                let verification = RPCClient(host: "127.0.0.1", port: suite.verificationPort)
                defer { Task { await verification.close() } }
                for customer in customers {
                    let history = try await verification.call(
                        VerificationTransactionHistory.self, .init(internalToken: SuiteFixture.internalToken, transactionId: customer.subscription))
                    let validCoins = history.transactions.filter {
                        $0.transaction?["productId"]?.stringValue == "coins.100" && $0.transaction?["revocationDate"] == nil
                    }.count
                    let statuses = try await verification.call(
                        VerificationSubscriptionStatuses.self,
                        .init(internalToken: SuiteFixture.internalToken, transactionId: customer.subscription))
                    let status = try #require(statuses.subscriptions.first)
                    let wallet = try await fulfillment.call(FulfillmentGetBalance.self, .init(session: customer.session))
                    #expect(wallet.balance == Int64(validCoins) * 100 && wallet.owed == 0, "seed \(seed) \(customer.username): \(wallet)")
                    let entitlements = try await fulfillment.call(FulfillmentGetEntitlements.self, .init(session: customer.session))
                    let premium = entitlements.entitlements.first { $0.entitlement == "premium" }
                    #expect(
                        premium?.expiresAtMs == status.transaction["expiresDate"]?.intValue,
                        "seed \(seed) \(customer.username): \(String(describing: premium)) vs Apple's \(status.transaction)")
                    let retrying = status.renewalInfo["isInBillingRetryPeriod"]?.boolValue ?? false
                    #expect(premium?.inBillingRetry == retrying, "seed \(seed) \(customer.username)")
                    #expect(
                        premium?.willRenew == (status.renewalInfo["autoRenewStatus"]?.intValue == 1 && !retrying),
                        "seed \(seed) \(customer.username): \(String(describing: premium)) vs \(status.renewalInfo)")
                }
                // A backend that follows the event feed from cursor 0 (the kills, drops and duplicates above included).
                var feed: [FulfillmentEvent] = []
                var cursor = "0"
                while true {
                    let page = try await fulfillment.call(
                        FulfillmentListEvents.self, .init(adminToken: SuiteFixture.adminToken, after: cursor, limit: 1000))
                    feed += page.events
                    cursor = page.next
                    if page.events.count < 1000 { break }
                }
                await process.kill()
                // The ledger adds up, and no refund or reversal was applied twice.
                let store = try FulfillmentStore.open(directory: suite.directory.appendingPathComponent("chaos-fulfillment"))
                defer { try? store.close() }
                // The feed rebuilds every account exactly: its wallet (the last event's state, and the sum of what each moved)
                // and each entitlement's end (the last event about its original).
                #expect(Set(feed.map(\.id)).count == feed.count, "seed \(seed): an event read twice")
                for customer in customers {
                    let accountId = try #require(try await store.owner(originalTransactionId: customer.subscription)?.accountId)
                    let mine = feed.filter { $0.accountId == accountId && $0.scope == .production }
                    #expect(mine.map(\.sequence) == mine.map(\.sequence).sorted(), "seed \(seed)")
                    let wallet = try await store.balance(accountId: accountId, scope: .production)
                    #expect(
                        (mine.last?.balance ?? 0, mine.last?.owed ?? 0) == (wallet.balance, wallet.owed),
                        "seed \(seed) \(customer.username): the feed's last state vs \(wallet)")
                    #expect(mine.reduce(0) { $0 + ($1.delta ?? 0) } == wallet.balance, "seed \(seed) \(customer.username)")
                    let record = try #require(try await store.entitlement(originalTransactionId: customer.subscription))
                    let last = mine.last { $0.originalTransactionId == customer.subscription && $0.entitlement != nil }
                    #expect(
                        last?.entitlementEndsAtMs == (record.revokedAtMs ?? record.expiresAtMs),
                        "seed \(seed) \(customer.username): the feed says \(String(describing: last)) vs \(record)")
                }
                #expect(try await store.ledgerMismatches().isEmpty, "seed \(seed)")
                let unclaimed = try await store.claimMismatches()
                #expect(unclaimed.isEmpty, "seed \(seed): \(unclaimed)")
                let doubled = try await store.duplicateLedgerEffects()
                #expect(doubled.isEmpty, "seed \(seed): \(doubled)")
                #expect(reconciled.notificationsSeen > 0)
                let coins = customers.reduce(0) { $0 + $1.coins.count }
                let refunded = customers.reduce(0) { $0 + $1.refunded.count }
                FileHandle.standardError.write(
                    Data(
                        ("chaos seed \(seed): \(customers.count) customers, \(events) events, \(killAt.count) kills, \(coins) coin purchases "
                            + "(\(refunded) refunded at the end), \(advancedDays) days passed; reconciliation saw \(reconciled.notificationsSeen) "
                            + "and took in \(reconciled.notificationsTakenIn); \(pending.notifications.count) left pending by kills\n").utf8))
            }
        }
    }
}
