import AccountsService
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import RPCTestSupport
import RPCTransport
import ServiceSupport

/// A real accounts service on a free port: its own SQLite file in a temp directory, a manual clock,
/// cheap scrypt parameters (the cost is configuration; the code path is the production one).
final class AccountsFixture: Sendable {
    let directory: URL
    let clock: ManualClock
    let service: AccountsService
    let server: RPCServer
    let client: RPCClient
    let configuration: AccountsConfiguration
    static let internalToken = "internal-secret-for-tests"

    static func start(directory: URL? = nil, configure: (inout AccountsConfiguration) -> Void = { _ in }) async throws -> AccountsFixture {
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
        let service = AccountsService(
            store: try AccountsStore.open(directory: dir), configuration: config,
            clock: clock.clock, logger: logger)
        let server = RPCServer(configuration: .init(serviceName: "accounts"), router: service.router(), logger: logger)
        try await server.start()
        return AccountsFixture(
            directory: dir, clock: clock, service: service, server: server, configuration: config,
            client: RPCClient(
                host: "127.0.0.1", port: server.localPort!,
                configuration: .patient))
    }

    private init(
        directory: URL, clock: ManualClock, service: AccountsService, server: RPCServer,
        configuration: AccountsConfiguration, client: RPCClient
    ) {
        self.directory = directory
        self.clock = clock
        self.service = service
        self.server = server
        self.configuration = configuration
        self.client = client
    }

    var port: Int { server.localPort! }
    var databasePath: String { directory.appendingPathComponent("accounts.sqlite").path }

    func stop() async {
        await client.close()
        await server.shutdown()
        await service.shutdown()
    }

    func register(_ username: String, _ password: String = "correct horse battery", device: String? = nil) async throws -> SignedIn {
        try await client.call(AccountsRegister.self, .init(username: username, password: password, deviceName: device))
    }

    func login(_ username: String, _ password: String = "correct horse battery", device: String? = nil) async throws(RPCError) -> SignedIn {
        try await client.call(AccountsLogin.self, .init(username: username, password: password, deviceName: device))
    }

    func authenticate(_ token: String) async throws(RPCError) -> AuthenticatedAccount {
        try await client.call(AccountsAuthenticate.self, .init(session: token))
    }
}
