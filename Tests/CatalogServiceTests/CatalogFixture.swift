import CatalogService
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import PostgresSupport
import RPCTestSupport
import RPCTransport
import ServiceSupport

/// A real catalog service on a free port: SQLite in a temp directory, a manual clock, a price source
/// of the test's choosing, seeded with `standardCatalog`.
final class CatalogFixture: Sendable {
    static let adminToken = "admin-secret-for-tests"
    let directory: URL
    let clock: ManualClock
    let store: any CatalogStorage
    /// The PostgreSQL database's URL when the fixture runs on PostgreSQL (`IAP_TEST_ENGINE=postgres`).
    let databaseURL: String?
    let service: CatalogService
    let server: RPCServer
    let client: RPCClient
    let logs: LogCapture

    static func start(
        seed: [ProductDefinition] = standardCatalog,
        source makeSource: (any CatalogStorage) -> any PriceSource = { DatabasePriceSource(store: $0) },
        configure: (inout CatalogConfiguration) -> Void = { _ in }
    ) async throws -> CatalogFixture {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("catalog-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        var config = CatalogConfiguration()
        config.adminToken = adminToken
        configure(&config)
        let clock = ManualClock()
        let logs = LogCapture()
        let logger = logs.logger(label: "catalog-test")
        let databaseURL = TestPostgres.suiteUsesPostgres ? try await TestPostgres.newDatabase() : nil
        let store = try await openStore(directory: dir, databaseURL: databaseURL)
        let source = makeSource(store)
        let service = try await CatalogService(store: store, source: source, configuration: config, clock: clock.clock, logger: logger)
        if !seed.isEmpty {
            try await service.importProducts(
                seed.map { p in
                    var p = p
                    if !source.acceptsAdminPrices { p.prices = nil }
                    return p
                }, field: "products")
        }
        var quiet = Logger(label: "catalog-test-server")
        quiet.logLevel = .critical
        let server = RPCServer(configuration: .init(serviceName: "catalog"), router: service.router(), logger: quiet)
        try await server.start()
        return CatalogFixture(
            directory: dir, databaseURL: databaseURL, clock: clock, store: store, service: service, server: server,
            client: RPCClient(host: "127.0.0.1", port: server.localPort!, configuration: .patient),
            logs: logs)
    }

    private init(
        directory: URL, databaseURL: String?, clock: ManualClock, store: any CatalogStorage, service: CatalogService, server: RPCServer,
        client: RPCClient, logs: LogCapture
    ) {
        self.directory = directory
        self.databaseURL = databaseURL
        self.clock = clock
        self.store = store
        self.service = service
        self.server = server
        self.client = client
        self.logs = logs
    }

    var port: Int { server.localPort! }

    /// SQLite in `directory`, or PostgreSQL at `databaseURL`.
    static func openStore(directory: URL, databaseURL: String?) async throws -> any CatalogStorage {
        guard let databaseURL else { return try CatalogStore.open(directory: directory) }
        var quiet = Logger(label: "catalog-test-db")
        quiet.logLevel = .critical
        return try await PostgresCatalogStore(
            pool: try PostgresPool(url: try PostgresURL(databaseURL), schema: "catalog", connections: 2, logger: quiet))
    }

    /// A second store on the same database, as a second instance has.
    func openAnotherStore() async throws -> any CatalogStorage {
        try await Self.openStore(directory: directory, databaseURL: databaseURL)
    }

    func stop() async {
        await client.close()
        await server.shutdown()
        try? store.close()
    }

    var target: ContractTarget { ContractTarget(port: port, stop: { await self.stop() }) }

    func list(_ storefront: String? = nil, locale: String? = nil, ifNoneMatch: String? = nil) async throws -> CatalogListProducts.Result {
        try await client.call(CatalogListProducts.self, .init(storefront: storefront, locale: locale, ifNoneMatch: ifNoneMatch))
    }

    static let standardCatalog: [ProductDefinition] = [
        ProductDefinition(
            productId: "coins.100", type: .consumable, referenceName: "100 coins",
            localizations: [
                "en-US": .init(title: "100 Coins", description: "A pouch of coins"),
                "de-DE": .init(title: "100 Münzen", description: "Ein Beutel Münzen"),
            ],
            defaultLocale: "en-US", grant: .coins(100),
            prices: [
                .init(storefront: "USA", currency: "USD", amount: "0.99"),
                .init(storefront: "DEU", currency: "EUR", amount: "1.09"),
                .init(storefront: "JPN", currency: "JPY", amount: "160"),
            ]),
        ProductDefinition(
            productId: "premium.unlock", type: .nonConsumable, referenceName: "Premium",
            localizations: ["en-US": .init(title: "Premium", description: "Everything, forever")],
            defaultLocale: "en-US", grant: .content(entitlement: "premium", contentIds: ["level-pack-1"]),
            prices: [.init(storefront: "USA", currency: "USD", amount: "4.99")]),
        ProductDefinition(
            productId: "pro.monthly", type: .autoRenewable, referenceName: "Pro monthly",
            localizations: [
                "en-US": .init(title: "Pro", description: "Monthly"),
                "fr-FR": .init(title: "Pro", description: "Mensuel"),
            ],
            defaultLocale: "en-US", grant: .subscription(entitlement: "pro", subscriptionGroup: "pro"),
            prices: [.init(storefront: "USA", currency: "USD", amount: "2.99")]),
        ProductDefinition(
            productId: "season.pass", type: .nonRenewing, referenceName: "Season pass",
            localizations: ["en-US": .init(title: "Season Pass", description: "90 days")],
            defaultLocale: "en-US", grant: .timeLimited(entitlement: "season", durationDays: 90), prices: []),
    ]
}
