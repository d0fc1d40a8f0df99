import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import RPCTransport

/// Addresses of a running suite (compose/up.sh), shared by the end-to-end scenarios.
struct SuiteAddresses: ParsableArguments {
    @Option(help: "fulfillment-service address.") var fulfillment = Self.env("IAP_FULFILLMENT_ADDR", "127.0.0.1:7104")
    @Option(help: "accounts-service address.") var accounts = Self.env("IAP_ACCOUNTS_ADDR", "127.0.0.1:7101")
    @Option(help: "appstore-sim address.") var sim = Self.env("IAP_SIM_ADDR", "127.0.0.1:7105")
    @Option(name: .customLong("bundle-id"), help: "Bundle id of the simulated purchases.") var bundleId = "com.example.game"
    @Option(help: "Signed-in accounts the load is spread over.") var users = 32
    @Option(name: .customLong("internal-token"), help: "The suite's internal token (default: IAP_INTERNAL_TOKEN, else data/internal-token).")
    var internalToken: String?

    /// The internal token for internal methods (accounts.authenticate), as the CLI resolves it.
    var resolvedInternalToken: String? {
        internalToken ?? ProcessInfo.processInfo.environment["IAP_INTERNAL_TOKEN"]
            ?? (try? String(contentsOfFile: "data/internal-token", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func env(_ name: String, _ fallback: String) -> String {
        ProcessInfo.processInfo.environment[name].flatMap { $0.isEmpty ? nil : $0 } ?? fallback
    }

    /// Registers `users` fresh accounts; returns their session tokens.
    func signIn(run: String) async throws -> [String] {
        try await signInAccounts(run: run).map(\.session)
    }

    /// Registers `users` fresh accounts; returns their session tokens and appAccountTokens, in order.
    func signInAccounts(run: String) async throws -> [(session: String, appAccountToken: String)] {
        let client = try RPCClient(address: accounts, configuration: .init(connections: 2, callTimeout: .seconds(60)))
        defer { Task { await client.close() } }
        return try await withThrowingTaskGroup(of: (Int, String, String).self) { group in
            for i in 0..<users {
                group.addTask {
                    do {
                        let signedIn = try await client.call(
                            AccountsRegister.self, .init(username: "bench-\(run)-\(i)", password: "benchmark passphrase \(i)"))
                        return (i, signedIn.session.token, signedIn.appAccountToken)
                    } catch let error as RPCError where error.reason == "rateLimited" {
                        // accounts allows 30 registrations per address by default; the load comes from one address.
                        throw ValidationError(
                            "\(error.message): start the suite with IAP_REGISTRATIONS_PER_ADDRESS=1000000 to register \(users) accounts from here")
                    }
                }
            }
            var out: [(Int, String, String)] = []
            for try await s in group { out.append(s) }
            return out.sorted { $0.0 < $1.0 }.map { ($0.1, $0.2) }
        }
    }

    /// Buys `count` purchases in the simulator, each by its own Apple ID (so every receipt holds one).
    /// With `appAccountTokens`, purchase i is made with token i % count (StoreKit's appAccountToken option).
    func mint(
        count: Int, productId: String, type: ProductType, quantity: Int? = nil, appAccountTokens: [String] = [], run: String
    ) async throws -> [SimPurchase.Result] {
        let client = try RPCClient(address: sim, configuration: .init(connections: 4, callTimeout: .seconds(60)))
        defer { Task { await client.close() } }
        let (bundleId, tokens) = (bundleId, appAccountTokens)
        return try await inParallel(count) { i in
            try await client.call(
                SimPurchase.self,
                .init(
                    appleId: "bench-\(run)-\(i)@icloud", bundleId: bundleId, productId: productId, productType: type, quantity: quantity,
                    appAccountToken: tokens.isEmpty ? nil : tokens[i % tokens.count]))
        }
    }

    /// Stops the simulator's notification deliveries (compose/up.sh points them at the edge): otherwise every
    /// purchase minted for a run is also delivered, verified and processed while it runs, on the same cores,
    /// and the run measures that too. Restarting compose/up.sh turns them back on.
    func silenceSimulatorNotifications() async throws {
        let client = try RPCClient(address: sim, configuration: .init(connections: 1, callTimeout: .seconds(30)))
        defer { Task { await client.close() } }
        for environment in [SimEnvironment.production, .sandbox] {
            _ = try await client.call(SimSetNotificationURL.self, .init(environment: environment))
        }
        FileHandle.standardError.write(
            Data("the simulator's notification deliveries are off for this run (restart compose/up.sh to turn them on)\n".utf8))
    }

    func fulfillmentClients(_ n: Int) throws -> [RPCClient] {
        try (0..<n).map { _ in try RPCClient(address: fulfillment, configuration: .init(connections: 1, callTimeout: .seconds(30))) }
    }
}

/// `fulfillment.redeem` end to end (accounts + verification + catalog + one SQLite commit per call),
/// every call a new purchase minted in the simulator before timing starts.
struct RedeemBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "redeem",
        abstract: "Redeems/s and latency, every redeem a new transaction (needs the running suite).")
    @OptionGroup var suite: SuiteAddresses
    @OptionGroup var load: LoadOptions
    @Option(help: "Purchases to mint before timing (the run stops early if it uses them all).") var purchases = 15_000
    @Option(
        help:
            "Redeem the app receipt (receipt), the StoreKit 2 signed transaction (jws), the transaction id (id: the server fetches it from the App Store Server API), or a Google Play purchase token (play: the server asks the Play simulator)."
    )
    var via = "receipt"
    @OptionGroup var play: PlayAddress
    @Option(help: "Consumable product to buy (must be in the catalog).") var product = "coins.100"
    @Flag(help: "With one active webhook endpoint: a receiver in this process gets every event while the load runs.") var webhook = false
    @OptionGroup var admin: AdminTokenOptions

    func validate() throws {
        guard ["receipt", "jws", "id", "play"].contains(via) else { throw ValidationError("--via must be receipt, jws, id or play") }
    }

    func run() async throws {
        let runId = String(UUID().uuidString.prefix(8)).lowercased()
        FileHandle.standardError.write(Data("signing in \(suite.users) accounts, minting \(purchases) purchases...\n".utf8))
        try await suite.silenceSimulatorNotifications()
        let accounts = try await suite.signInAccounts(run: runId)
        let sessions = accounts.map(\.session)
        // By id, only purchases made with the caller's appAccountToken are granted: purchase i is made with the token of
        // account i % users, and redeemed by that account.
        // On Google Play, purchase i is bound (obfuscatedAccountId) to account i % users, which redeems it.
        let viaPlay = via == "play"
        if viaPlay { try await play.pushTo(nil) }
        let minted =
            viaPlay
            ? []
            : try await suite.mint(
                count: purchases, productId: product, type: .consumable, appAccountTokens: via == "id" ? accounts.map(\.appAccountToken) : [],
                run: runId)
        let playTokens = viaPlay ? try await play.mint(count: purchases, productId: product, accountTokens: accounts.map(\.appAccountToken)) : []
        let available = viaPlay ? playTokens.count : minted.count
        let receiver = webhook ? try await BenchReceiver.start() : nil
        defer { receiver?.stop() }
        let setup = try RPCClient(address: suite.fulfillment, configuration: .init(connections: 1, callTimeout: .seconds(600)))
        defer { Task { await setup.close() } }
        let hook =
            if let receiver {
                try await setup.call(FulfillmentAddWebhook.self, .init(adminToken: try admin.resolved, url: receiver.url, allowPrivateAddress: true))
            } else { FulfillmentAddWebhook.Result?.none }
        let clients = try suite.fulfillmentClients(load.connections)
        let granted = NIOLockedValueBox(0)
        let viaJWS = via == "jws"
        let viaId = via == "id"
        let driver = LoadDriver(options: load)
        let report = try await driver.run(
            scenario: "redeem (\(via))", clients: clients,
            notes: ["durability": durabilityNote]
        ) { client, i in
            guard i < available else { return nil }
            do {
                let params: FulfillmentRedeem.Params
                if viaPlay {
                    params = .init(session: sessions[i % sessions.count], googlePlay: [.init(productId: product, purchaseToken: playTokens[i])])
                } else {
                    let p = minted[i]
                    params = .init(
                        session: sessions[i % sessions.count], receiptData: viaJWS || viaId ? nil : p.receiptData,
                        signedTransactions: viaJWS ? [p.signedTransaction] : nil, transactionIds: viaId ? [p.transactionId] : nil)
                }
                // As the edge sends them: one session's calls go to one instance (RPCClient's affinity).
                let result = try await client.call(FulfillmentRedeem.self, params, affinity: params.session)
                guard result.results.first?.outcome == .granted else { return .failed(code: CallOutcome.unexpectedResult) }
                granted.withLockedValue { $0 += 1 }
                return .ok
            } catch let error as RPCError {
                return .failed(code: error.code)
            } catch {
                return .failed(code: CallOutcome.otherError)
            }
        }
        var withCheck = report
        withCheck.notes["check"] = try await balanceCheck(sessions: sessions, expected: Int64(granted.withLockedValue { $0 }) * 100)
        if let receiver, let hook {
            let events = granted.withLockedValue { $0 }, during = receiver.counts.received
            let drained = await receiver.waitFor(events, timeout: .seconds(600))
            let counts = receiver.counts
            withCheck.notes["webhook"] =
                "\(during) of \(events) events delivered when the load stopped, \(counts.received) in the end"
                + "\(drained ? "" : " (INCOMPLETE)"); repeats \(counts.repeats), out of order \(counts.outOfOrder)"
            _ = try await setup.call(FulfillmentDeleteWebhook.self, .init(adminToken: try admin.resolved, id: hook.id))
        }
        driver.print(withCheck)
        for c in clients { await c.close() }
    }

    /// Every granted redeem (warm-up included) shows in the balances exactly once.
    private func balanceCheck(sessions: [String], expected: Int64) async throws -> String {
        let client = try RPCClient(address: suite.fulfillment)
        var total: Int64 = 0
        for s in sessions { total += try await client.call(FulfillmentGetBalance.self, .init(session: s)).balance }
        await client.close()
        return total == expected ? "balances sum to 100 x granted redeems (\(total))" : "MISMATCH: balances \(total), expected \(expected)"
    }
}

/// `fulfillment.spendCoins`: one coin per call, every call a new idempotency key.
struct SpendBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "spend",
        abstract: "Spends/s and latency, each with its own idempotency key (needs the running suite).")
    @OptionGroup var suite: SuiteAddresses
    @OptionGroup var load: LoadOptions
    @Option(help: "Consumable that funds each account (bought 10 times over in one purchase).") var fundProduct = "coins.1000"

    func run() async throws {
        let runId = String(UUID().uuidString.prefix(8)).lowercased()
        FileHandle.standardError.write(Data("signing in and funding \(suite.users) accounts...\n".utf8))
        let sessions = try await suite.signIn(run: runId)
        let funding = try await suite.mint(count: sessions.count, productId: fundProduct, type: .consumable, quantity: 10, run: runId)
        let setup = try RPCClient(address: suite.fulfillment)
        var funded: Int64 = 0
        for (session, purchase) in zip(sessions, funding) {
            funded += try await setup.call(FulfillmentRedeem.self, .init(session: session, receiptData: purchase.receiptData)).balance
        }
        let clients = try suite.fulfillmentClients(load.connections)
        let spent = NIOLockedValueBox(0)
        let driver = LoadDriver(options: load)
        let report = try await driver.run(
            scenario: "spend", clients: clients,
            notes: ["durability": durabilityNote]
        ) { client, i in
            do {
                let session = sessions[i % sessions.count]
                _ = try await client.call(
                    FulfillmentSpendCoins.self, .init(session: session, amount: 1, idempotencyKey: "bench-\(runId)-\(i)"),
                    affinity: session)
                spent.withLockedValue { $0 += 1 }
                return .ok
            } catch let error as RPCError {
                return .failed(code: error.code)
            } catch {
                return .failed(code: CallOutcome.otherError)
            }
        }
        var total: Int64 = 0
        for s in sessions { total += try await setup.call(FulfillmentGetBalance.self, .init(session: s)).balance }
        let expected = funded - Int64(spent.withLockedValue { $0 })
        var withCheck = report
        withCheck.notes["check"] =
            total == expected
            ? "balances = funded - successful spends (\(total))"
            : "MISMATCH: balances \(total), expected \(expected)"
        driver.print(withCheck)
        await setup.close()
        for c in clients { await c.close() }
    }
}

/// `fulfillment.signOffer`: promotional offers signed per second (each: the session checked with accounts,
/// the product read from the catalog, the account's subscriptions read, two ECDSA P-256 signatures), with
/// the single-core P-256 signing rate of this machine (swift-crypto, in this process) as the peer.
struct OffersBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "offers", abstract: "Signed promotional offers per second (needs the running suite with an offer key).")
    @OptionGroup var suite: SuiteAddresses
    @OptionGroup var load: LoadOptions
    @Option(help: "catalog-service address (the offer is defined there first).") var catalog = SuiteAddresses.env(
        "IAP_CATALOG_ADDR", "127.0.0.1:7102")
    @Option(help: "An auto-renewable product of the catalog.") var product = "pro.monthly"
    @Option(name: .customLong("admin-token"), help: "Catalog admin token (default IAP_ADMIN_TOKEN).") var adminToken = SuiteAddresses.env(
        "IAP_ADMIN_TOKEN", "")

    func run() async throws {
        let runId = String(UUID().uuidString.prefix(8)).lowercased()
        let admin = try RPCClient(address: catalog)
        let current = try await admin.call(CatalogGetProducts.self, .init(productIds: [product])).products.first?.offers ?? []
        let offerId = "bench-anyone"
        try await admin.call(
            CatalogSetOffers.self,
            .init(
                adminToken: adminToken, productId: product,
                offers: current.filter { $0.offerId != offerId } + [SubscriptionOffer(offerId: offerId, eligibility: .init(kind: .anyone))]))
        await admin.close()
        FileHandle.standardError.write(Data("signing in \(suite.users) accounts...\n".utf8))
        let sessions = try await suite.signIn(run: runId)
        let clients = try suite.fulfillmentClients(load.connections)
        let driver = LoadDriver(options: load)
        let report = try await driver.run(
            scenario: "signOffer", clients: clients,
            notes: [
                "machine": MachinePeer.note() + "; each offer makes two",
                "offer": "\(product) / \(offerId) (eligibility: anyone)",
            ]
        ) { client, i in
            do {
                _ = try await client.call(
                    FulfillmentSignOffer.self, .init(session: sessions[i % sessions.count], productId: product, offerId: offerId))
                return .ok
            } catch let error as RPCError {
                return .failed(code: error.code)
            } catch {
                return .failed(code: CallOutcome.otherError)
            }
        }
        driver.print(report)
        for c in clients { await c.close() }
    }
}

/// What a commit waits for, as the suite under test was told (IAP_DATABASE_URL set, or IAP_POSTGRES=1 as compose/up.sh
/// takes it: PostgreSQL, whose `synchronous_commit` the server decides; compose/up.sh's own server has it on).
let durabilityNote =
    ProcessInfo.processInfo.environment["IAP_DATABASE_URL"] == nil && ProcessInfo.processInfo.environment["IAP_POSTGRES"] != "1"
    ? "SQLite synchronous=FULL (fulfillment.sqlite, WAL)" : "PostgreSQL: see its synchronous_commit (compose/up.sh: on)"
