import Foundation
import GRDB
import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

/// The real `fulfillment-service` executable, killed with SIGKILL at random moments while clients redeem
/// and spend, restarted, and the clients retrying whatever was not acknowledged. Afterwards its SQLite
/// file must show every purchase granted exactly once, every idempotency key applied at most once, and
/// every balance equal to the sum of its ledger.
///
/// Bounded for CI (20 kills). The long version: `IAP_CRASH_KILLS=200 IAP_CRASH_PURCHASES=3000 swift test
/// --filter CrashSafetyTests`.
@Suite(.serialized) struct CrashSafetyTests {
    /// One fulfillment-service process on a fixed port and data directory.
    final class FulfillmentProcess: Sendable {
        let port: Int
        let arguments: [String]
        private let current = NIOLockedValueBox<Subprocess?>(nil)

        init(port: Int, dataDir: URL, suite: SuiteFixture, extraArguments: [String] = []) {
            self.port = port
            let env = suite.environment
            arguments =
                [
                    "--port", "\(port)", "--data-dir", dataDir.path, "--log-level", "error",
                    "--accounts-addr", env["IAP_ACCOUNTS_ADDR"]!, "--verification-addr", env["IAP_VERIFICATION_ADDR"]!,
                    "--catalog-addr", env["IAP_CATALOG_ADDR"]!, "--admin-token", SuiteFixture.adminToken,
                    "--internal-token", SuiteFixture.internalToken,
                    "--dependency-timeout-ms", "5000",
                ] + extraArguments
        }

        static var executable: URL { BuiltExecutables.url("fulfillment-service") }

        /// Starts it and waits (polling, bounded) until it answers rpc.ping.
        func start() async throws {
            let process = try Subprocess.spawn(Self.executable.path, arguments)
            current.withLockedValue { $0 = process }
            let probe = RPCClient(host: "127.0.0.1", port: port, configuration: .init(connections: 1, callTimeout: .milliseconds(500)))
            defer { Task { await probe.close() } }
            let deadline = Date().addingTimeInterval(30)
            while Date() < deadline {
                if (try? await probe.call(RPCPing.self, EmptyParams())) != nil { return }
                guard process.isRunning else { throw HarnessFailure("fulfillment-service exited during start-up") }
                try await Task.sleep(nanoseconds: 20_000_000)  // polling for readiness, bounded by the deadline
            }
            throw HarnessFailure("fulfillment-service did not answer within 30 s")
        }

        /// SIGKILL: no drain, no clean close of the database.
        func kill() async {
            guard let process = current.withLockedValue({ $0 }) else { return }
            process.kill(SIGKILL)
            _ = await process.wait()
        }
    }

    struct HarnessFailure: Error, CustomStringConvertible {
        let description: String
        init(_ d: String) { description = d }
    }

    enum Op: Sendable {
        case redeem(session: Int, receipt: String, transactionId: String)
        case spend(session: Int, key: String, amount: Int64)
    }

    struct CrashRun {
        let redeemIds: [String]
        /// Idempotency key -> the balance the spend was answered with.
        let acknowledgedSpends: [String: Int64]
        let kills: Int
        let operations: Int
        let attempts: Int
    }

    /// Redeems `purchases` purchases and makes as many spends through `instances` (one client over all of them),
    /// each retried until acknowledged, while one instance at a time is SIGKILLed at random moments (`kills`
    /// times) and restarted.
    static func runUnderKills(suite: SuiteFixture, instances: [FulfillmentProcess], kills: Int, purchases: Int) async throws -> CrashRun {
        let spends = purchases
        var sessions: [String] = []
        for i in 0..<8 { sessions.append(try await suite.register("crash-\(i)").session) }
        var ops: [Op] = []
        for i in 0..<purchases {
            let bought = try await suite.buy("crash-\(i)@icloud", "coins.100")
            ops.append(.redeem(session: i % sessions.count, receipt: bought.receiptData, transactionId: bought.transactionId))
        }
        for i in 0..<spends { ops.append(.spend(session: i % sessions.count, key: "spend-\(i)", amount: 7)) }
        ops.shuffle()
        let allOps = ops
        let redeemIds = ops.compactMap { op -> String? in if case let .redeem(_, _, t) = op { return t } else { return nil } }

        // Clients: each op is retried until acknowledged (a reply, success or refusal). Acknowledged
        // spends keep the balance they were answered with.
        let client = try RPCClient(
            address: instances.map { "127.0.0.1:\($0.port)" }.joined(separator: ","),
            configuration: .init(connections: 4, callTimeout: .seconds(10)))
        let next = NIOLockedValueBox(0)
        let acknowledgedSpends = NIOLockedValueBox<[String: Int64]>([:])
        let attempts = NIOLockedValueBox(0)
        let sessionsCopy = sessions
        let load = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<12 {
                    group.addTask {
                        while true {
                            let index = next.withLockedValue { v in
                                defer { v += 1 }; return v
                            }
                            guard index < allOps.count else { return }
                            while true {
                                attempts.withLockedValue { $0 += 1 }
                                do {
                                    switch allOps[index] {
                                    case let .redeem(s, receipt, _):
                                        _ = try await client.call(FulfillmentRedeem.self, .init(session: sessionsCopy[s], receiptData: receipt))
                                    case let .spend(s, key, amount):
                                        let balance = try await client.call(
                                            FulfillmentSpendCoins.self,
                                            .init(session: sessionsCopy[s], amount: amount, idempotencyKey: key))
                                        acknowledgedSpends.withLockedValue { $0[key] = balance.balance }
                                    }
                                    break
                                } catch let error as RPCError where error.knownCode == .unavailable || error.knownCode == .internalError {
                                    try await Task.sleep(nanoseconds: 5_000_000)  // the service is down: try again shortly
                                } catch let error as RPCError where error.knownCode == .insufficientFunds {
                                    break  // acknowledged: refused, nothing changed
                                }
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
        }

        // Kill one instance at random moments while the load runs, and bring it back.
        var performed = 0
        while performed < kills {
            try await Task.sleep(nanoseconds: UInt64.random(in: 30_000_000...250_000_000))  // a random moment, not a sync point
            let victim = instances.randomElement()!
            await victim.kill()
            performed += 1
            try await victim.start()
        }
        try await load.value
        await client.close()
        for instance in instances { await instance.kill() }
        return CrashRun(
            redeemIds: redeemIds, acknowledgedSpends: acknowledgedSpends.withLockedValue { $0 }, kills: performed,
            operations: allOps.count, attempts: attempts.withLockedValue { $0 })

    }

    /// The outbox on the real executable: an item whose receiver fails (Apple's API answering 503) is written with the
    /// grant, tried at once and again, survives a SIGKILL, and is delivered by the restarted process once Apple answers;
    /// the grant's Finish Transaction (on by default) reaches Apple after the restart.
    @Test func anOutboxItemSurvivesSIGKILLAndIsDeliveredWhenTheReceiverRecovers() async throws {
        try await SuiteFixture.with { suite in
            let instance = FulfillmentProcess(
                port: try LoopbackPort.free(), dataDir: suite.directory.appendingPathComponent("outbox-instance"), suite: suite)
            try await instance.start()
            do {
                try await Self.outboxStory(suite, instance)
            } catch {
                await instance.kill()  // a failed expectation must not leave the process running
                throw error
            }
        }
    }

    static func outboxStory(_ suite: SuiteFixture, _ instance: FulfillmentProcess) async throws {
        do {
            let client = RPCClient(host: "127.0.0.1", port: instance.port, configuration: .init(connections: 1, callTimeout: .seconds(30)))
            let kim = try await suite.register("kim")
            let pack = try await suite.buy("kim@icloud", "pack.castle")  // no appAccountToken: a tie is owed
            _ = try await suite.simulator.call(SimSetFault.self, .init(mode: .http503))
            let redeemed = try await client.call(FulfillmentRedeem.self, .init(session: kim.session, signedTransactions: [pack.signedTransaction]))
            #expect(redeemed.results.map(\.outcome) == [.granted])
            func outbox() async throws -> FulfillmentListOutbox.Result {
                try await client.call(FulfillmentListOutbox.self, .init(adminToken: SuiteFixture.adminToken))
            }
            var deadline = Date().addingTimeInterval(120)
            while try await outbox().items.first?.attempts ?? 0 < 1 {
                try #require(Date() < deadline, "the first attempt never happened")
                try await Task.sleep(nanoseconds: 50_000_000)  // polling the worker, bounded by the deadline
            }
            #expect(try await outbox().items.first?.lastError != nil)
            await instance.kill()
            await client.close()
            _ = try await suite.simulator.call(SimSetFault.self, .init(mode: SimFaultMode.none))
            try await instance.start()
            let verification = RPCClient(host: "127.0.0.1", port: suite.verificationPort)
            defer { Task { await verification.close() } }
            deadline = Date().addingTimeInterval(120)
            while try await verification.call(
                VerificationTransactionInfo.self, .init(internalToken: SuiteFixture.internalToken, transactionId: pack.transactionId)
            ).transaction?["appAccountToken"]?.stringValue != kim.appAccountToken.lowercased() {
                try #require(Date() < deadline, "the tie was never made after the restart")
                try await Task.sleep(nanoseconds: 100_000_000)  // polling Apple's side, bounded by the deadline
            }
            let after = RPCClient(host: "127.0.0.1", port: instance.port, configuration: .init(connections: 1, callTimeout: .seconds(30)))
            deadline = Date().addingTimeInterval(60)
            while try await after.call(FulfillmentListOutbox.self, .init(adminToken: SuiteFixture.adminToken)).total != 0 {
                try #require(Date() < deadline, "delivered but never settled")
                try await Task.sleep(nanoseconds: 50_000_000)  // the settle follows the delivery, bounded by the deadline
            }
            await after.close()
            // The grant's Finish Transaction, owed with it, survived the kill made before it reached Apple (each earlier
            // attempt was one request, refused with 503 before Apple recorded anything) and was delivered after the restart.
            // Once as a rule; a second call only when an attempt's answer was lost (a timeout under load: the outbox delivers
            // at least once, and Apple's finish is idempotent). Exactly once where no answer is lost: FinishAtAppleTests.
            let finishes = try await suite.simulator.call(SimServerFinishes.self, .init(transactionId: pack.transactionId)).finishedAtMs
            #expect(!finishes.isEmpty, "\(finishes)")
            await instance.kill()
        }
    }

    /// Google Play's acknowledgement on the real executable: owed with the grant, refused by Google (503) at once and again,
    /// it survives a SIGKILL and is made by the restarted process once Google answers, so Google's three-day refund never
    /// reaches the purchase.
    @Test func aPlayAcknowledgementSurvivesSIGKILLAndIsMadeWithinGooglesWindow() async throws {
        try await SuiteFixture.with(play: true) { suite in
            let play = try #require(suite.play)
            let instance = FulfillmentProcess(
                port: try LoopbackPort.free(), dataDir: suite.directory.appendingPathComponent("play-instance"), suite: suite)
            try await instance.start()
            do {
                let client = RPCClient(host: "127.0.0.1", port: instance.port, configuration: .init(connections: 1, callTimeout: .seconds(30)))
                let kim = try await suite.register("kim")
                var bought = 0
                var refused: PlayPurchaseState?
                var deadline = Date().addingTimeInterval(120)
                while refused == nil, bought < 5 {
                    let coins = try await play.buy("coins.100", accountToken: kim.appAccountToken)
                    bought += 1
                    let redeemed = try await client.call(
                        FulfillmentRedeem.self,
                        .init(session: kim.session, googlePlay: [.init(productId: "coins.100", purchaseToken: coins.purchaseToken)]))
                    #expect(redeemed.results.map(\.outcome) == [.granted])
                    // Google refuses every call from now on: the consumption owed is tried and fails. (The worker's first
                    // attempt starts as the grant commits: one made before the fault was set consumed the purchase, which then
                    // shows nothing of what follows, so another is bought.)
                    _ = try await play.client.call(PlaySetFault.self, .init(mode: .http503))
                    while try await client.call(FulfillmentListOutbox.self, .init(adminToken: SuiteFixture.adminToken)).items.first?.attempts ?? 0 < 1
                    {
                        if try await play.purchase(coins.purchaseToken).consumed { break }
                        try #require(Date() < deadline, "the first attempt never happened")
                        try await Task.sleep(nanoseconds: 50_000_000)  // polling the worker, bounded by the deadline
                    }
                    if try await !play.purchase(coins.purchaseToken).consumed {
                        refused = coins
                    } else {
                        _ = try await play.client.call(PlaySetFault.self, .init(mode: PlayFaultMode.none))
                    }
                }
                let coins = try #require(refused, "each of \(bought) consumptions was made before Google's fault was set")
                await instance.kill()
                await client.close()
                _ = try await play.client.call(PlaySetFault.self, .init(mode: PlayFaultMode.none))
                try await instance.start()
                deadline = Date().addingTimeInterval(120)
                while try await !play.purchase(coins.purchaseToken).consumed {
                    try #require(Date() < deadline, "the consumption was never made after the restart")
                    try await Task.sleep(nanoseconds: 100_000_000)  // polling Google's side, bounded by the deadline
                }
                _ = try await play.client.call(PlayAdvanceClock.self, .init(seconds: 3 * 86_400 + 3_600))
                #expect(try await play.purchase(coins.purchaseToken).state == "purchased")
                let after = RPCClient(host: "127.0.0.1", port: instance.port, configuration: .init(connections: 1, callTimeout: .seconds(30)))
                #expect(try await after.call(FulfillmentGetBalance.self, .init(session: kim.session)).balance == 100 * Int64(bought))
                await after.close()
                await instance.kill()
            } catch {
                await instance.kill()  // a failed expectation must not leave the process running
                throw error
            }
        }
    }

    @Test func killedAtRandomMomentsItLosesNothingAndGrantsNothingTwice() async throws {
        let environment = ProcessInfo.processInfo.environment
        let kills = Int(environment["IAP_CRASH_KILLS"] ?? "") ?? 20
        let purchases = Int(environment["IAP_CRASH_PURCHASES"] ?? "") ?? 240
        try await SuiteFixture.with { suite in
            let dataDir = suite.directory.appendingPathComponent("crash-fulfillment")
            let service = FulfillmentProcess(port: try LoopbackPort.free(), dataDir: dataDir, suite: suite)
            try await service.start()
            let run = try await Self.runUnderKills(suite: suite, instances: [service], kills: kills, purchases: purchases)
            let redeemIds = run.redeemIds
            // The database as the last crash left it.
            let db = try DatabaseQueue(path: dataDir.appendingPathComponent("fulfillment.sqlite").path)
            try await db.read { db in
                let grants = try [String: Int](
                    uniqueKeysWithValues: Row.fetchAll(
                        db,
                        sql: """
                            SELECT transaction_id, COUNT(*) AS n FROM ledger WHERE kind = 'grant' GROUP BY transaction_id
                            """
                    ).map { ($0["transaction_id"], $0["n"]) })
                #expect(grants.count == redeemIds.count, "every purchase granted")
                #expect(redeemIds.allSatisfy { grants[$0] == 1 }, "each exactly once")
                #expect(try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM processed_transaction") == redeemIds.count)
                let spendRows = try [String: Int64](
                    uniqueKeysWithValues: Row.fetchAll(
                        db,
                        sql: """
                            SELECT idempotency_key, balance FROM ledger WHERE kind = 'spend'
                            """
                    ).map { ($0["idempotency_key"], $0["balance"]) })
                let acknowledged = run.acknowledgedSpends
                #expect(acknowledged.allSatisfy { spendRows[$0.key] == $0.value }, "every acknowledged spend is there, once, as answered")
                #expect(try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ledger WHERE kind = 'spend'") == spendRows.count)
                let mismatched = try Int.fetchOne(
                    db,
                    sql: """
                        SELECT COUNT(*) FROM wallet w LEFT JOIN (SELECT account_id, SUM(delta) AS total FROM ledger GROUP BY account_id) l
                        ON l.account_id = w.account_id WHERE w.balance != COALESCE(l.total, 0)
                        """)
                #expect(mismatched == 0, "balance = sum of ledger for every account")
                let total = try Int64.fetchOne(db, sql: "SELECT SUM(balance) FROM wallet") ?? 0
                #expect(total == Int64(redeemIds.count) * 100 - Int64(spendRows.count) * 7)
                #expect(try String.fetchOne(db, sql: "PRAGMA integrity_check") == "ok")
            }
            print("crash safety: \(run.kills) SIGKILLs, \(run.operations) operations, \(run.attempts) attempts")
        }
    }
}

/// The crash test on PostgreSQL with three fulfillment instances on one database: one client spreads the load
/// over all three, a random instance is SIGKILLed at random moments (its open transactions roll back) and
/// restarted, and a retried operation may land on another instance than its first attempt. The same invariants
/// as on SQLite, read from the database with psql.
@Suite(.serialized, .enabled(if: TestPostgres.isAvailable, "PostgreSQL is not installed"))
struct PostgresCrashSafetyTests {
    @Test func threeInstancesKilledAtRandomLoseNothingAndGrantNothingTwice() async throws {
        let environment = ProcessInfo.processInfo.environment
        let kills = Int(environment["IAP_CRASH_KILLS"] ?? "") ?? 20
        let purchases = Int(environment["IAP_CRASH_PURCHASES"] ?? "") ?? 240
        try await SuiteFixture.with { suite in
            let url = try await TestPostgres.newDatabase()
            var instances: [CrashSafetyTests.FulfillmentProcess] = []
            for i in 0..<3 {
                instances.append(
                    CrashSafetyTests.FulfillmentProcess(
                        port: try LoopbackPort.free(), dataDir: suite.directory.appendingPathComponent("crash-pg-\(i)"), suite: suite,
                        extraArguments: ["--database-url", url, "--database-pool-size", "4"]))
            }
            for instance in instances { try await instance.start() }
            let run = try await CrashSafetyTests.runUnderKills(suite: suite, instances: instances, kills: kills, purchases: purchases)

            func rows(_ sql: String) async throws -> [String: Int64] {
                var out: [String: Int64] = [:]
                for line in try await TestPostgres.psql(url, sql).split(separator: "\n") {
                    let parts = line.split(separator: "|")
                    out[String(parts[0])] = Int64(parts[1])
                }
                return out
            }
            func number(_ sql: String) async throws -> Int64 { Int64(try await TestPostgres.psql(url, sql)) ?? -1 }

            let grants = try await rows("SELECT transaction_id, COUNT(*) FROM fulfillment.ledger WHERE kind = 'grant' GROUP BY transaction_id")
            #expect(grants.count == run.redeemIds.count, "every purchase granted")
            #expect(run.redeemIds.allSatisfy { grants[$0] == 1 }, "each exactly once")
            #expect(try await number("SELECT COUNT(*) FROM fulfillment.processed_transaction") == Int64(run.redeemIds.count))
            let spendRows = try await rows("SELECT idempotency_key, balance FROM fulfillment.ledger WHERE kind = 'spend'")
            #expect(
                run.acknowledgedSpends.allSatisfy { spendRows[$0.key] == $0.value }, "every acknowledged spend is there, once, as answered")
            #expect(try await number("SELECT COUNT(*) FROM fulfillment.ledger WHERE kind = 'spend'") == Int64(spendRows.count))
            let mismatched = try await number(
                """
                SELECT COUNT(*) FROM fulfillment.wallet w LEFT JOIN (
                    SELECT account_id, scope, SUM(delta) AS total FROM fulfillment.ledger GROUP BY account_id, scope) l
                ON l.account_id = w.account_id AND l.scope = w.scope WHERE w.balance != COALESCE(l.total, 0)
                """)
            #expect(mismatched == 0, "balance = sum of ledger for every account")
            let total = try await number("SELECT COALESCE(SUM(balance), 0) FROM fulfillment.wallet")
            #expect(total == Int64(run.redeemIds.count) * 100 - Int64(spendRows.count) * 7)
            print("crash safety on PostgreSQL, 3 instances: \(run.kills) SIGKILLs, \(run.operations) operations, \(run.attempts) attempts")
        }
    }
}
