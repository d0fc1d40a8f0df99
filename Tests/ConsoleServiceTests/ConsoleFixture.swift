import AccountsService
import ConsoleService
import Foundation
import Hummingbird
import Logging
import NIOSSL
import RPCTransport
import ServiceSupport
import SuiteTestSupport

/// A console on a free loopback port in front of a live suite, with its own SQLite store in a temporary directory.
final class ConsoleFixture: Sendable {
    let service: ConsoleService
    let store: ConsoleStore
    let port: Int
    let directory: URL
    private let app: Task<Void, any Error>
    let hasher = PasswordHasher(parameters: .testing, concurrency: 1)

    var url: String { "http://127.0.0.1:\(port)" }

    private init(service: ConsoleService, store: ConsoleStore, port: Int, directory: URL, app: Task<Void, any Error>) {
        self.service = service
        self.store = store
        self.port = port
        self.directory = directory
        self.app = app
    }

    static func start(
        accountsPort: Int, fulfillmentPort: Int, catalogPort: Int, clock: ServiceClock = .system, tls: TLSConfiguration? = nil,
        configure: (inout ConsoleConfiguration) -> Void = { _ in }
    ) async throws -> ConsoleFixture {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("console-\(UUID().uuidString)")
        let store = try ConsoleStore.open(directory: directory)
        var config = ConsoleConfiguration(adminToken: SuiteFixture.adminToken, internalToken: SuiteFixture.internalToken)
        config.clock = clock
        config.secureCookies = tls != nil
        configure(&config)
        var logger = Logger(label: "console-test")
        logger.logLevel = .error
        let service = try ConsoleService(
            store: store, accounts: RPCClient(host: "127.0.0.1", port: accountsPort),
            fulfillment: RPCClient(host: "127.0.0.1", port: fulfillmentPort), catalog: RPCClient(host: "127.0.0.1", port: catalogPort),
            configuration: config, hasher: PasswordHasher(parameters: .testing, concurrency: 1), logger: logger)
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let application = try service.application(host: "127.0.0.1", port: 0, tls: tls) { continuation.yield($0) }
        let task = Task { try await application.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else { throw CancellationError() }
        return ConsoleFixture(service: service, store: store, port: port, directory: directory, app: task)
    }

    static func start(_ suite: SuiteFixture, clock: ServiceClock = .system, tls: TLSConfiguration? = nil) async throws -> ConsoleFixture {
        try await start(
            accountsPort: suite.ports["accounts"]!, fulfillmentPort: suite.ports["fulfillment"]!, catalogPort: suite.ports["catalog"]!, clock: clock,
            tls: tls)
    }

    /// A new operator: its password and base32 TOTP secret.
    func addOperator(_ name: String, _ role: OperatorRole) async throws -> (password: String, totpSecret: String) {
        try await ConsoleService.addOperator(name, role: role, store: store, hasher: hasher, nowMs: ServiceClock.system.nowMs)
    }

    func stop() async {
        app.cancel()
        _ = await app.result
        await service.close()
        await hasher.shutdown()
        try? FileManager.default.removeItem(at: directory)
    }
}
