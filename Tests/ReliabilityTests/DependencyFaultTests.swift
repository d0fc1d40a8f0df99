import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

/// Accounts, verification and catalog each cut off and slowed past fulfillment's deadline (through a
/// TCP proxy in front of the real service), then restored: fulfillment answers `unavailable` quickly,
/// writes nothing for those requests, and recovers by itself once the dependency is back.
@Suite struct DependencyFaultTests {
    /// Generous: the healthy dependencies must answer within it while CI runs every suite at once
    /// (3 s was too short with the machine four times oversubscribed). The slow proxy holds replies
    /// for 30 s, so an answer within deadline + 15 s still tells a deadline from a hang.
    static let deadlineMs: Int64 = 5_000

    /// Redeem a fresh purchase while `dependency` misbehaves; then heal it and redeem again.
    func exercise(_ dependency: String, _ fault: FaultProxy.Mode) async throws {
        try await SuiteFixture.with(dependencyDeadline: Self.deadlineMs, proxied: true) { suite in
            let alice = try await suite.register("alice")
            let bought = try await suite.buy("alice@icloud", "coins.100")
            _ = try await suite.balance(alice.session)  // every connection is up before the fault
            let proxy = try #require(suite.proxies[dependency])

            proxy.mode = fault
            for _ in 0..<2 {
                let started = Date()
                let failure = await rpcError { try await suite.redeem(alice.session, receipt: bought.receiptData) }
                let elapsedMs = Date().timeIntervalSince(started) * 1000
                #expect(failure?.code == RPCErrorCode.unavailable.rawValue, "\(dependency) \(fault): \(String(describing: failure))")
                #expect(failure?.retryable == true)
                #expect(failure?.data.extra["dependency"] == .string(dependency))
                // Well before the slow proxy would have delivered the reply (or a hang): the deadline cut it off.
                #expect(elapsedMs < Double(Self.deadlineMs) + 15_000, "answered at the deadline, not hung: \(elapsedMs) ms")
            }
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction") == 0)
            #expect(try await suite.count("SELECT COUNT(*) FROM ledger") == 0)

            proxy.mode = .pass
            let healed = try await suite.redeem(alice.session, receipt: bought.receiptData)
            #expect(healed.results.map(\.outcome) == [.granted])
            #expect(healed.balance == 100)
            let replay = try await suite.redeem(alice.session, receipt: bought.receiptData)
            #expect(replay.results.map(\.outcome) == [.alreadyGranted] && replay.balance == 100)
        }
    }

    @Test(arguments: ["accounts", "verification", "catalog"])
    func aDependencyThatIsDownMeansUnavailableAndNothingWritten(_ dependency: String) async throws {
        try await exercise(dependency, .down)
    }

    @Test(arguments: ["accounts", "verification", "catalog"])
    func aDependencySlowerThanTheDeadlineMeansUnavailableAndNothingWritten(_ dependency: String) async throws {
        try await exercise(dependency, .slow(milliseconds: 30_000))
    }

    @Test func spendsDuringAnAccountsOutageChangeNothingAndResumeAfterwards() async throws {
        try await SuiteFixture.with(dependencyDeadline: Self.deadlineMs, proxied: true) { suite in
            let alice = try await suite.register("alice")
            let bought = try await suite.buy("alice@icloud", "coins.100")
            _ = try await suite.redeem(alice.session, receipt: bought.receiptData)
            let accounts = try #require(suite.proxies["accounts"])
            accounts.mode = .down
            let spend = FulfillmentSpendCoins.Params(session: alice.session, amount: 40, idempotencyKey: "potion")
            let failure = await rpcError { try await suite.fulfillment.call(FulfillmentSpendCoins.self, spend) }
            #expect(failure?.code == RPCErrorCode.unavailable.rawValue)
            accounts.mode = .pass
            // The client retries the same key: applied once.
            #expect(try await suite.fulfillment.call(FulfillmentSpendCoins.self, spend).balance == 60)
            #expect(try await suite.fulfillment.call(FulfillmentSpendCoins.self, spend).balance == 60)
            #expect(try await suite.count("SELECT COUNT(*) FROM ledger WHERE kind = 'spend'") == 1)
        }
    }

    @Test func faultsDuringLoadLoseNothingAndGrantNothingTwice() async throws {
        try await SuiteFixture.with(dependencyDeadline: 1_000, proxied: true) { suite in
            var sessions: [String] = []
            for i in 0..<4 { sessions.append(try await suite.register("load-\(i)").session) }
            var receipts: [String] = []
            for i in 0..<60 { receipts.append(try await suite.buy("load-\(i)@icloud", "coins.100").receiptData) }
            let work = receipts
            let people = sessions
            // Clients redeem every purchase, retrying whatever comes back unavailable.
            let load = Task {
                try await withThrowingTaskGroup(of: Int.self) { group in
                    for worker in 0..<6 {
                        group.addTask {
                            var unavailable = 0
                            for i in stride(from: worker, to: work.count, by: 6) {
                                while true {
                                    do {
                                        let result = try await suite.redeem(people[i % people.count], receipt: work[i])
                                        #expect([.granted, .alreadyGranted].contains(result.results.first?.outcome))
                                        break
                                    } catch let error as RPCError where error.knownCode == .unavailable {
                                        unavailable += 1
                                    }
                                }
                            }
                            return unavailable
                        }
                    }
                    var total = 0
                    for try await n in group { total += n }
                    return total
                }
            }
            // Meanwhile each dependency in turn goes down, comes back, turns slow, comes back.
            for name in ["verification", "catalog", "accounts", "verification"] {
                let proxy = try #require(suite.proxies[name])
                for mode in [FaultProxy.Mode.down, .pass, .slow(milliseconds: 3_000), .pass] {
                    proxy.mode = mode
                    try await Task.sleep(nanoseconds: 150_000_000)  // fault timing, not synchronization
                }
            }
            let unavailable = try await load.value
            #expect(try await suite.count("SELECT COUNT(*) FROM ledger WHERE kind = 'grant'") == work.count)
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction") == work.count)
            #expect(try await suite.ledgerIsConsistent())
            var total: Int64 = 0
            for session in people { total += try await suite.balance(session) }
            #expect(total == Int64(work.count) * 100)
            print("dependency faults under load: \(work.count) purchases granted once, \(unavailable) unavailable answers retried")
        }
    }
}
