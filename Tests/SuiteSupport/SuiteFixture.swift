import AccountsService
import AppStoreServerAPI
import AppStoreSimulator
import CatalogService
import Crypto
import Foundation
import FulfillmentService
import GRDB
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import PostgresSupport
import RPCTestSupport
import RPCTransport
import Receipts
import ServiceSupport
import VerificationService
import X509

/// The whole suite in one process (for fulfillment and CLI tests), every service on its own real TCP port with its own SQLite file:
/// the App Store simulator, accounts, catalog, verification (trusting the simulator's roots) and
/// fulfillment, which reaches the other three only through RPC clients.
public final class SuiteFixture: Sendable {
    /// Addresses for `IAP_*_ADDR`, to point the CLI (or anything else) at this suite.
    public var environment: [String: String] {
        [
            "IAP_ACCOUNTS_ADDR": accounts.address, "IAP_CATALOG_ADDR": catalog.address, "IAP_VERIFICATION_ADDR": "127.0.0.1:\(verificationPort)",
            "IAP_FULFILLMENT_ADDR": fulfillment.address, "IAP_SIM_ADDR": simulator.address, "IAP_ADMIN_TOKEN": Self.adminToken,
            "IAP_INTERNAL_TOKEN": Self.internalToken,
        ].merging(play.map { ["IAP_PLAY_ADDR": $0.client.address] } ?? [:]) { $1 }
    }

    /// At least 32 bytes: the service executables refuse shorter tokens.
    public static let adminToken = "admin-token-for-tests-0123456789abcdef"
    public static let internalToken = "internal-token-for-tests-0123456789abcdef"
    public static let bundleId = "com.example.game"
    public static let contentId = "castle-pack.bin"

    public let directory: URL
    public let clock: ManualClock
    public let simulator: RPCClient
    public let accounts: RPCClient
    public let catalog: RPCClient
    public let fulfillment: RPCClient
    /// Fulfillment's store: SQLite in `directory`, or PostgreSQL (a database of its own) with `IAP_TEST_ENGINE=postgres`.
    public let store: any FulfillmentStorage & FulfillmentInvariants
    /// Accounts' and catalog's stores (closed by `stop`: on PostgreSQL each holds a pool of threads).
    let otherStores: [@Sendable () throws -> Void]
    public let content: [UInt8]
    private let servers: NIOLockedValueBox<[String: RPCServer]>
    private let routers: [String: RPCRouter]
    /// Each service's port, kept across `stopService`/`restartService`.
    public let ports: [String: Int]
    public var verificationPort: Int { ports["verification"]! }
    private let simHTTP: Task<Void, any Error>
    /// The fulfillment service's processing of notifications recorded with `processLater` (the executable runs it
    /// inside its `InboxWorker`).
    private let laterProcessing: Task<Void, Never>
    /// The simulator's HTTP port: verifyReceipt, the App Store Server API (`/inApps`, `/sandbox/inApps`), `/ocsp`.
    public let simHTTPPort: Int
    /// The simulator's App Store Server API (its request count).
    public let simAPI: AppStoreServerAPIEndpoint
    /// With `play`: the Google Play simulator, which verification asks as Google.
    public let play: PlayStand?
    /// The fulfillment service itself (its RPC router is what `fulfillment` calls), for driving its inbox worker.
    public let service: FulfillmentService
    /// With `proxied`: the proxy in front of each dependency ("accounts", "verification", "catalog").
    public let proxies: [String: FaultProxy]

    public static let products: [ProductDefinition] = [
        product("coins.100", .consumable, .coins(100)),
        product("pack.castle", .nonConsumable, .content(entitlement: "castle", contentIds: [contentId])),
        {
            var premium = product("sub.premium", .autoRenewable, .subscription(entitlement: "premium", subscriptionGroup: "premium"))
            premium.offers = [
                SubscriptionOffer(offerId: "winback", eligibility: .init(kind: .lapsed)),
                SubscriptionOffer(offerId: "welcome", eligibility: .init(kind: .neverSubscribed)),
                SubscriptionOffer(offerId: "loyal", eligibility: .init(kind: .subscribedAtMost, times: 1)),
            ]
            return premium
        }(),
        product("sub.basic", .autoRenewable, .subscription(entitlement: "basic", subscriptionGroup: "premium")),
        product("pass.season", .nonRenewing, .timeLimited(entitlement: "season-pass", durationDays: 30)),
    ]

    public static func product(_ id: String, _ type: ProductType, _ grant: Grant) -> ProductDefinition {
        ProductDefinition(
            productId: id, type: type, referenceName: id, localizations: ["en-US": .init(title: id, description: id)],
            defaultLocale: "en-US", grant: grant, prices: [.init(storefront: "USA", currency: "USD", amount: "0.99")])
    }

    /// `proxied`: fulfillment reaches accounts, verification and catalog through a `FaultProxy` each
    /// (`proxies[name]`), so a test can slow or cut the network to one of them.
    /// `allowXcode`: verification runs with `--allow-xcode` (Xcode StoreKit-testing receipts and JWS).
    /// `appStoreAPI`: verification is given the simulator's App Store Server API (false: as deployed without a key).
    public static func start(
        configure: (inout FulfillmentConfiguration) -> Void = { _ in }, dependencyDeadline: Int64 = 15_000,
        proxied: Bool = false, allowXcode: Bool = false, appStoreAPI: Bool = true, logs: (@Sendable (String) -> LogHandler)? = nil,
        ocsp: RevocationChecker.Configuration? = nil, accountsConfigure: (inout AccountsConfiguration) -> Void = { _ in }, play: Bool = false
    ) async throws -> SuiteFixture {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("suite-\(UUID().uuidString)")
        for sub in ["sim", "accounts", "catalog", "fulfillment/content"] {
            try FileManager.default.createDirectory(at: dir.appendingPathComponent(sub), withIntermediateDirectories: true)
        }
        // The test's own clients wait long: these tests check outcomes, not speed, and CI runs every
        // suite at once on two cores.
        let patient = RPCClientConfiguration.patient
        var quiet = Logger(label: "suite-test")
        quiet.logLevel = .critical
        if let logs {
            quiet = Logger(label: "suite-test", factory: logs)
            quiet.logLevel = .trace
        }
        var servers: [String: RPCServer] = [:]
        var routers: [String: RPCRouter] = [:]
        func serve(_ name: String, _ router: RPCRouter, port: Int = 0) async throws -> Int {
            let server = RPCServer(configuration: .init(serviceName: name, port: port), router: router, logger: quiet)
            try await server.start()
            servers[name] = server
            routers[name] = router
            return server.localPort!
        }

        // Generating its RSA and ECDSA PKI takes a while: on a GCD thread, neither on the few cooperative threads
        // every test in this process shares nor on NIO's blocking pool (the simulators' API handlers run there).
        let simDirectory = dir.appendingPathComponent("sim")
        // With `ocsp`, the simulator's HTTP port is chosen first: its certificates name the responder on it.
        let ocspPort = ocsp == nil ? 0 : try LoopbackPort.free()
        let ocspURL = ocsp == nil ? nil : "http://127.0.0.1:\(ocspPort)/ocsp"
        // Patient realtime retention deadlines: every test shares the machine, and speed is the benchmarks' to measure
        // (deployments keep the 2 s wait and Apple's 700 ms performance threshold).
        let sim = try await Self.offThePools {
            try AppStoreSimulator(directory: simDirectory, ocspURL: ocspURL, realtimeDeadline: .seconds(30), performanceThresholdMs: 30_000)
        }
        let simHTTPPort = AsyncStream<Int>.makeStream()
        // `sim.setFault` makes its HTTP endpoints (verifyReceipt, the App Store Server API) misbehave.
        let faults = SimHTTPFaults()
        let simEndpoint = try VerifyReceiptEndpoint(simulator: sim, sharedSecret: nil, faults: faults)
        let simClient = RPCClient(
            host: "127.0.0.1", port: try await serve("appstore-sim", sim.router(endpoint: simEndpoint)), configuration: patient)

        var accountsConfig = AccountsConfiguration()
        accountsConfig.passwordHashing = .testing
        accountsConfig.internalToken = internalToken
        // Every test client registers from 127.0.0.1; the per-address registration limit has its own test.
        accountsConfig.throttle.registrationThreshold = 1_000_000
        accountsConfigure(&accountsConfig)
        // With IAP_TEST_ENGINE=postgres every store is on one new PostgreSQL database, each service in its schema.
        let databaseURL = TestPostgres.suiteUsesPostgres ? try await TestPostgres.newDatabase() : nil
        func pool(_ schema: String) throws -> PostgresPool {
            try PostgresPool(url: try PostgresURL(databaseURL!), schema: schema, connections: 4, logger: quiet)
        }
        let accountsStore: any AccountsStorage
        let accountsListener: PostgresListener?
        if databaseURL == nil {
            accountsStore = try AccountsStore.open(directory: dir.appendingPathComponent("accounts"))
            accountsListener = nil
        } else {
            // As deployed: the session cache fed by its listener.
            let postgres = try await PostgresAccountsStore(pool: try pool("accounts"))
            let listener = try postgres.revocationsListener()
            Task { try? await listener.run() }
            accountsListener = listener
            accountsStore = postgres
        }

        var catalogConfig = CatalogConfiguration()
        catalogConfig.adminToken = adminToken
        catalogConfig.internalToken = internalToken
        let catalogStore: any CatalogStorage =
            databaseURL == nil
            ? try CatalogStore.open(directory: dir.appendingPathComponent("catalog"))
            : try await PostgresCatalogStore(pool: try pool("catalog"))
        let catalog = try await CatalogService(
            store: catalogStore, source: DatabasePriceSource(store: catalogStore),
            configuration: catalogConfig, logger: quiet)
        try await catalog.importProducts(products, field: "products")
        let catalogPort = try await serve("catalog", catalog.router())

        let anchors = try await simClient.call(SimTrustAnchor.self, EmptyParams())
        var verificationConfig = VerificationConfiguration()
        verificationConfig.extraRoots = try [anchors.receiptRoot, anchors.jwsRoot].map {
            try Certificate(derEncoded: Array(Data(base64Encoded: $0)!))
        }
        verificationConfig.bundleIds = [bundleId]
        verificationConfig.allowXcode = allowXcode
        verificationConfig.revocation = ocsp.map { RevocationChecker(configuration: $0, transport: OCSPHTTPTransport.post) }
        // The simulator as Apple's App Store Server API, on its own HTTP port, for verification.
        let simAPI = AppStoreServerAPIEndpoint(simulator: sim, faults: faults)
        let simHTTP = simEndpoint.application(
            host: "127.0.0.1", port: ocspPort, logger: quiet, api: simAPI
        ) { port in simHTTPPort.continuation.yield(port) }
        // The stream ends if the server stops (a port it could not bind): then this fails instead of waiting.
        let simHTTPTask = Task {
            defer { simHTTPPort.continuation.finish() }
            try await simHTTP.run()
        }
        var ports = simHTTPPort.stream.makeAsyncIterator()
        guard let apiPort = await ports.next() else { throw SuiteFixtureError("the simulator's HTTP server did not start (port \(ocspPort))") }
        let key = sim.apiKeyResult()
        var apiConfig = AppStoreServerAPIClient.Configuration()
        apiConfig.productionURL = "http://127.0.0.1:\(apiPort)"
        apiConfig.sandboxURL = "http://127.0.0.1:\(apiPort)/sandbox"
        verificationConfig.appStoreAPI =
            appStoreAPI
            ? AppStoreServerAPIClient(
                credentials: try AppStoreAPICredentials(
                    keyId: key.keyId, issuerId: key.issuerId, bundleId: bundleId, privateKeyPEM: key.privateKey),
                verifier: SignedPayloadVerifier(roots: verificationConfig.signedPayloadRoots + verificationConfig.extraRoots),
                configuration: apiConfig) : nil
        verificationConfig.internalToken = internalToken
        // The simulated App Store's app Apple ID: its Production retention requests name it.
        verificationConfig.appAppleId = 1_234_567_890
        let playStand =
            play
            ? try await PlayStand.start(
                directory: dir.appendingPathComponent("play"), logger: quiet, serve: { router in try await serve("play-sim", router) },
                configure: &verificationConfig) : nil
        let verificationRouter = VerificationService(configuration: verificationConfig, logger: quiet).router()
        let verificationPort = try await serve("verification", verificationRouter)
        // Accounts checks the app transactions apps link with this verification service, over TCP as deployed.
        let accountsVerification = RPCClient(host: "127.0.0.1", port: verificationPort, configuration: patient)
        let accounts = AccountsService(
            store: accountsStore, configuration: accountsConfig, logger: quiet,
            appTransactionVerifier: { jws in
                try await accountsVerification.call(VerificationVerifyAppTransaction.self, .init(signedAppTransaction: jws))
            })
        let accountsPort = try await serve("accounts", accounts.router())

        var content = [UInt8](repeating: 0, count: 300_001)
        var rng = SystemRandomNumberGenerator()
        for i in content.indices { content[i] = rng.next() }
        try Data(content).write(to: dir.appendingPathComponent("fulfillment/content/\(contentId)"))

        var config = FulfillmentConfiguration()
        config.adminToken = adminToken
        config.internalToken = internalToken
        // Subscription offers signed with the key the simulated App Store checks them with (sim.offerKey).
        config.offerKey = try OfferSigningKey(
            keyId: sim.offerKey.keyId, issuerId: sim.offerKey.issuerId, bundleId: bundleId, pem: sim.offerKey.privateKey.pemRepresentation)
        // On in deployments (and in the real executable's tests); off here, so a test counting what the outbox owes counts
        // what it is about. FinishAtAppleTests turn it on.
        config.finishAtApple = false
        configure(&config)
        let clock = ManualClock(startMs: ServiceClock.system.nowMs)
        var proxies: [String: FaultProxy] = [:]
        func route(_ name: String, _ port: Int) async throws -> Int {
            guard proxied else { return port }
            let proxy = FaultProxy(targetPort: port)
            proxies[name] = proxy
            return try await proxy.start()
        }
        var dependencies = try Dependencies(
            accounts: "127.0.0.1:\(try await route("accounts", accountsPort))",
            verification: "127.0.0.1:\(try await route("verification", verificationPort))",
            catalog: "127.0.0.1:\(try await route("catalog", catalogPort))", connections: 2,
            deadline: .milliseconds(dependencyDeadline))
        dependencies.internalToken = internalToken
        let store: any FulfillmentStorage & FulfillmentInvariants =
            databaseURL == nil
            ? try FulfillmentStore.open(directory: dir.appendingPathComponent("fulfillment"))
            : try await PostgresFulfillmentStore(pool: try pool("fulfillment"))
        let service = FulfillmentService(
            store: store, dependencies: dependencies,
            content: ContentLibrary(directory: dir.appendingPathComponent("fulfillment/content")),
            configuration: config, clock: clock.clock, logger: quiet)
        let fulfillmentPort = try await serve("fulfillment", service.router())
        return SuiteFixture(
            directory: dir, clock: clock, simulator: simClient,
            accounts: RPCClient(host: "127.0.0.1", port: accountsPort, configuration: patient),
            catalog: RPCClient(host: "127.0.0.1", port: catalogPort, configuration: patient),
            fulfillment: RPCClient(host: "127.0.0.1", port: fulfillmentPort, configuration: patient),
            store: store, otherStores: [{ accountsListener?.stop() }, accountsStore.close, catalogStore.close], service: service,
            content: content, servers: servers,
            routers: routers, proxies: proxies,
            simHTTP: simHTTPTask, simHTTPPort: apiPort, simAPI: simAPI, play: playStand)
    }

    /// Starts a suite, runs `body` with it, and stops it (servers, proxies, files) however `body` ends:
    /// returning or throwing.
    public static func with<T>(
        configure: (inout FulfillmentConfiguration) -> Void = { _ in }, dependencyDeadline: Int64 = 15_000,
        proxied: Bool = false, allowXcode: Bool = false, appStoreAPI: Bool = true, logs: (@Sendable (String) -> LogHandler)? = nil,
        ocsp: RevocationChecker.Configuration? = nil, accountsConfigure: (inout AccountsConfiguration) -> Void = { _ in }, play: Bool = false,
        _ body: (SuiteFixture) async throws -> T
    ) async throws -> T {
        let suite = try await start(
            configure: configure, dependencyDeadline: dependencyDeadline, proxied: proxied, allowXcode: allowXcode,
            appStoreAPI: appStoreAPI, logs: logs, ocsp: ocsp,
            accountsConfigure: accountsConfigure, play: play)
        do {
            let result = try await body(suite)
            await suite.stop()
            return result
        } catch {
            await suite.stop()
            throw error
        }
    }

    private init(
        directory: URL, clock: ManualClock, simulator: RPCClient, accounts: RPCClient, catalog: RPCClient, fulfillment: RPCClient,
        store: any FulfillmentStorage & FulfillmentInvariants, otherStores: [@Sendable () throws -> Void], service: FulfillmentService,
        content: [UInt8], servers: [String: RPCServer],
        routers: [String: RPCRouter], proxies: [String: FaultProxy], simHTTP: Task<Void, any Error>, simHTTPPort: Int,
        simAPI: AppStoreServerAPIEndpoint, play: PlayStand?
    ) {
        self.play = play
        self.simAPI = simAPI
        self.simHTTP = simHTTP
        self.laterProcessing = Task { await service.processLaterQueue() }
        self.simHTTPPort = simHTTPPort
        self.proxies = proxies
        self.directory = directory
        self.clock = clock
        self.simulator = simulator
        self.accounts = accounts
        self.catalog = catalog
        self.fulfillment = fulfillment
        self.store = store
        self.otherStores = otherStores
        self.content = content
        self.servers = NIOLockedValueBox(servers)
        self.routers = routers
        self.ports = servers.mapValues { $0.localPort! }
        self.service = service
    }

    /// Runs slow synchronous work (key generation) on a GCD thread and waits for it.
    public static func offThePools<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try work() }) }
        }
    }

    public func stop() async {
        simHTTP.cancel()
        await play?.stop()
        laterProcessing.cancel()
        for proxy in proxies.values { await proxy.stop() }
        for server in servers.withLockedValue({ Array($0.values) }) { await server.shutdown() }
        await service.webhookSender.shutdown()
        if store is PostgresFulfillmentStore {
            try? store.close()
            for close in otherStores { try? close() }
        }
        try? FileManager.default.removeItem(at: directory)
    }

    // MARK: dependency faults

    /// Stops one service ("accounts", "catalog", "verification", "fulfillment", "appstore-sim"): its port refuses connections.
    public func stopService(_ name: String) async {
        let server = servers.withLockedValue { $0.removeValue(forKey: name) }
        await server?.shutdown()
    }

    /// Starts a stopped service again on the port the others know, with the same state.
    public func restartService(_ name: String) async throws {
        var quiet = Logger(label: "suite-test")
        quiet.logLevel = .critical
        let server = RPCServer(configuration: .init(serviceName: name, port: ports[name]!), router: routers[name]!, logger: quiet)
        try await server.start()
        servers.withLockedValue { $0[name] = server }
    }

    public func stopVerification() async { await stopService("verification") }
    public func restartVerification() async throws { try await restartService("verification") }

    // MARK: story helpers

    /// Registers a user; answers the session token and account id.
    public func register(_ username: String) async throws -> (session: String, accountId: String, appAccountToken: String) {
        let signed = try await accounts.call(AccountsRegister.self, .init(username: username, password: "correct horse \(username)"))
        return (signed.session.token, signed.accountId, signed.appAccountToken)
    }

    /// A second session for the same user (another device).
    public func login(_ username: String) async throws -> String {
        try await accounts.call(AccountsLogin.self, .init(username: username, password: "correct horse \(username)", deviceName: "second device"))
            .session.token
    }

    public func buy(
        _ appleId: String, _ productId: String, quantity: Int? = nil, appAccountToken: String? = nil,
        receipt: SimReceiptOptions? = nil, environment: SimEnvironment? = nil,
        bundleId: String = SuiteFixture.bundleId
    ) async throws -> SimPurchase.Result {
        let type = Self.products.first { $0.productId == productId }?.type ?? .consumable
        return try await simulator.call(
            SimPurchase.self,
            .init(
                appleId: appleId, bundleId: bundleId, productId: productId,
                productType: type, quantity: quantity, appAccountToken: appAccountToken,
                receipt: receipt, environment: environment))
    }

    public func redeem(_ session: String, receipt: String? = nil, signed: [String]? = nil) async throws -> RedeemResult {
        try await fulfillment.call(FulfillmentRedeem.self, .init(session: session, receiptData: receipt, signedTransactions: signed))
    }

    public func balance(_ session: String, _ scope: AccountScope? = nil) async throws -> Int64 {
        try await fulfillment.call(FulfillmentGetBalance.self, .init(session: session, environment: scope)).balance
    }

    public func entitlements(_ session: String, _ scope: AccountScope? = nil) async throws -> [Entitlement] {
        try await fulfillment.call(FulfillmentGetEntitlements.self, .init(session: session, environment: scope)).entitlements
    }

    public func ledger(_ session: String, _ scope: AccountScope? = nil) async throws -> [LedgerEntry] {
        try await fulfillment.call(FulfillmentListLedger.self, .init(session: session, limit: 500, environment: scope)).entries
    }

    // MARK: the database, read directly (the real file)

    /// Fulfillment's SQLite file (the SQLite engine's).
    public var fulfillmentSQLitePath: String { directory.appendingPathComponent("fulfillment/fulfillment.sqlite").path }

    /// `sql` may name tables and columns in camelCase (`processedTransaction`): both engines' schemas spell them in
    /// snake_case (`processed_transaction`).
    public func count(_ sql: String) async throws -> Int {
        let snake = sql.replacing(/([a-z0-9])([A-Z])/) { "\($0.output.1)_\($0.output.2.lowercased())" }
        if let postgres = store as? PostgresFulfillmentStore { return try await postgres.count(snake) }
        let queue = try DatabaseQueue(path: fulfillmentSQLitePath)
        return try await queue.read { db in try Int.fetchOne(db, sql: snake) ?? 0 }
    }

    /// Runs `sql` on fulfillment's SQLite file beside the service (a trigger a test plants to make one write fail); false
    /// on PostgreSQL, where nothing is run.
    public func executeOnSQLite(_ sql: String) async throws -> Bool {
        guard !(store is PostgresFulfillmentStore) else { return false }
        let queue = try DatabaseQueue(path: fulfillmentSQLitePath)
        try await queue.write { db in try db.execute(sql: sql) }
        return true
    }

    /// Waits (bounded) until `listEvents` shows every event committed: on PostgreSQL a reader is given only events of
    /// transactions older than every transaction running anywhere in the cluster, and other suites' tests run beside.
    public func eventFeedSettled() async throws { try await Self.eventFeedSettled(store) }

    /// `eventFeedSettled` for any fulfillment store (SQLite's feed shows what committed at once).
    public static func eventFeedSettled(_ store: any FulfillmentStorage) async throws {
        guard let postgres = store as? PostgresFulfillmentStore else { return }
        let deadline = ContinuousClock.now + .seconds(30)
        while try await postgres.count("SELECT COUNT(*) FROM event") != store.events(after: .start, limit: 100_000, accountId: nil, types: nil).count
        {
            guard ContinuousClock.now < deadline else { throw SuiteFixtureError("the event feed never caught up with what committed") }
            try await Task.sleep(for: .milliseconds(10))  // polling the horizon, bounded by the deadline
        }
    }

    /// Every account's wallet equals the sum of its ledger; no wallet is negative.
    public func ledgerIsConsistent() async throws -> Bool {
        try await store.ledgerMismatches().isEmpty
    }
}

/// A part of the suite that could not be started.
struct SuiteFixtureError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
