import AccountsService
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import PostgresSupport
import RPCTestSupport
import RPCTransport
import Receipts
import ServiceSupport
import VerificationService

/// A real accounts service on a free port: its own SQLite file in a temp directory (or, with
/// `IAP_TEST_ENGINE=postgres`, a PostgreSQL database of its own, whose URL is kept in that directory so a restart
/// on the same directory finds the same records), a manual clock, cheap scrypt parameters (the cost is
/// configuration; the code path is the production one).
final class AccountsFixture: Sendable {
    let directory: URL
    let clock: ManualClock
    let store: any AccountsStorage
    let listener: PostgresListener?
    /// What the listener reported, in order (PostgreSQL).
    let heard: AsyncStream<PostgresListenerEvent>
    let service: AccountsService
    let server: RPCServer
    let client: RPCClient
    let configuration: AccountsConfiguration
    static let internalToken = "internal-secret-for-tests"
    /// Signs the app transactions the tests hand to `accounts.linkAppTransaction`; the fixture's verification trusts it.
    static let appPKI = try! JWSSigningPKI.generate()
    /// The verification service (in this process: its code, not a stand-in) that checks them, for com.example.game.
    static let verification: VerificationService = {
        var config = VerificationConfiguration()
        config.bundleIds = ["com.example.game"]
        config.extraRoots = [appPKI.root]
        return VerificationService(configuration: config)
    }()

    /// A signed AppTransaction as StoreKit hands it to the app (`JWSAppTransactionDecodedPayload`'s fields).
    static func appTransaction(_ id: String, bundleId: String = "com.example.game", environment: String = "Production") throws -> String {
        let payload: [String: Any] = [
            "appTransactionId": id, "bundleId": bundleId, "receiptType": environment, "appAppleId": 1_234_567_890,
            "applicationVersion": "1", "originalApplicationVersion": "1", "originalPlatform": "iOS",
            "originalPurchaseDate": 1_772_366_000_000, "receiptCreationDate": 1_772_366_400_000,
        ]
        return try appPKI.sign(payload: Array(try JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys])))
    }

    /// `databaseURL`: this PostgreSQL database whatever the engine (instances sharing one database).
    /// `sessionTrustMs`: how long the PostgreSQL store's session cache trusts a row it read. `listening: false`: no
    /// listener feeds that cache (a test tells it what it hears).
    static func start(
        directory: URL? = nil, databaseURL: String? = nil, sessionTrustMs: Int64 = SessionCache.defaultTrustMs, listening: Bool = true,
        configure: (inout AccountsConfiguration) -> Void = { _ in }
    ) async throws
        -> AccountsFixture
    {
        let dir = directory ?? FileManager.default.temporaryDirectory.appendingPathComponent("accounts-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        var config = AccountsConfiguration()
        config.passwordHashing = .testing
        config.internalToken = internalToken
        // Tests register from 127.0.0.1 freely; the registration limit has its own test.
        config.throttle.registrationThreshold = 1_000_000
        configure(&config)
        let clock = ManualClock()
        var logger = Logger(label: "accounts-test")
        logger.logLevel = .critical
        let store = try await openStore(directory: dir, databaseURL: databaseURL, sessionTrustMs: sessionTrustMs, logger: logger)
        // As deployed (AccountsServiceCommand): on PostgreSQL the session cache is fed by its listener.
        let heard = AsyncStream<PostgresListenerEvent>.makeStream()
        let listener = try (listening ? store as? PostgresAccountsStore : nil).map { postgres in
            try postgres.revocationsListener { heard.continuation.yield($0) }
        }
        if let listener { Task { try? await listener.run() } }
        let service = AccountsService(
            store: store, configuration: config, clock: clock.clock, logger: logger,
            appTransactionVerifier: { jws in try await Self.verification.verifyAppTransaction(.init(signedAppTransaction: jws)) })
        let server = RPCServer(configuration: .init(serviceName: "accounts"), router: service.router(), logger: logger)
        try await server.start()
        return AccountsFixture(
            directory: dir, clock: clock, store: store, listener: listener, heard: heard.stream, service: service, server: server,
            configuration: config,
            client: RPCClient(
                host: "127.0.0.1", port: server.localPort!,
                configuration: .patient))
    }

    private init(
        directory: URL, clock: ManualClock, store: any AccountsStorage, listener: PostgresListener?,
        heard: AsyncStream<PostgresListenerEvent>, service: AccountsService,
        server: RPCServer, configuration: AccountsConfiguration, client: RPCClient
    ) {
        self.directory = directory
        self.clock = clock
        self.store = store
        self.listener = listener
        self.heard = heard
        self.service = service
        self.server = server
        self.configuration = configuration
        self.client = client
    }

    /// The engine `IAP_TEST_ENGINE` names: SQLite in `directory`, or the PostgreSQL database named in
    /// `directory/postgres-url` (created on first use).
    static func openStore(
        directory: URL, databaseURL: String? = nil, sessionTrustMs: Int64 = SessionCache.defaultTrustMs, logger: Logger
    ) async throws -> any AccountsStorage {
        guard TestPostgres.suiteUsesPostgres || databaseURL != nil else { return try AccountsStore.open(directory: directory) }
        let file = directory.appendingPathComponent("postgres-url")
        let url: String
        if let databaseURL {
            url = databaseURL
        } else if let kept = try? String(contentsOf: file, encoding: .utf8) {
            url = kept
        } else {
            url = try await TestPostgres.newDatabase()
            try url.write(to: file, atomically: true, encoding: .utf8)
        }
        return try await PostgresAccountsStore(
            pool: try PostgresPool(url: try PostgresURL(url), schema: "accounts", connections: 4, logger: logger),
            sessions: SessionCache(trustMs: sessionTrustMs))
    }

    var port: Int { server.localPort! }
    var databasePath: String { directory.appendingPathComponent("accounts.sqlite").path }

    func stop() async {
        await client.close()
        await server.shutdown()
        await service.shutdown()
        listener?.stop()
        try? store.close()
    }

    func register(_ username: String, _ password: String = "correct horse battery", device: String? = nil) async throws -> SignedIn {
        try await client.call(AccountsRegister.self, .init(username: username, password: password, deviceName: device))
    }

    func login(_ username: String, _ password: String = "correct horse battery", device: String? = nil) async throws(RPCError) -> SignedIn {
        try await client.call(AccountsLogin.self, .init(username: username, password: password, deviceName: device))
    }

    func authenticate(_ token: String) async throws(RPCError) -> AuthenticatedAccount {
        try await client.call(AccountsAuthenticate.self, .init(session: token, internalToken: Self.internalToken))
    }
}
