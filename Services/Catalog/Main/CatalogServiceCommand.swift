import ArgumentParser
import CatalogService
import Foundation
import IAPProtocol
import Logging
import PostgresSupport
import RPCTransport
import ServiceLifecycle
import ServiceSupport

@main
struct CatalogServiceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "catalog-service",
        abstract: "Products, what each grants, localized text and prices per storefront for the in-app purchase suite.")

    @OptionGroup var options: ServiceOptions
    @OptionGroup var database: DatabaseOptions

    @Option(name: .customLong("admin-token"), help: "Token for the admin methods (env IAP_ADMIN_TOKEN).")
    var adminToken: String?

    @Option(
        name: .customLong("internal-token"),
        help: "The suite's internal token (env IAP_INTERNAL_TOKEN): catalog.getRetention, which fulfillment calls, needs it.")
    var internalToken: String?

    @Option(help: "Import this catalog JSON ({\"products\": [...]}, as catalog.importCatalog) at start.")
    var seed: String?

    @Option(name: .customLong("price-feed"), help: "Take prices from this JSON price feed file instead of the database.")
    var priceFeed: String?

    @Option(name: .customLong("price-ttl-seconds"), help: "How long fetched prices are fresh. Default 60.")
    var priceTTLSeconds: Int = 60

    @Option(name: .customLong("default-storefront"), help: "Storefront for requests that name none. Default USA.")
    var defaultStorefront: String = "USA"

    func validate() throws {
        guard priceTTLSeconds > 0 else { throw ValidationError("--price-ttl-seconds must be positive") }
        guard Storefronts.all.contains(defaultStorefront) else { throw ValidationError("--default-storefront must be an ISO 3166-1 alpha-3 code") }
    }

    func run() async throws {
        let logger = options.logger(label: "catalog")
        var config = CatalogConfiguration()
        config.adminToken = try Environment.token(adminToken, flagName: "--admin-token", env: "IAP_ADMIN_TOKEN")
        config.internalToken = try Environment.token(internalToken, flagName: "--internal-token", env: "IAP_INTERNAL_TOKEN")
        config.defaultStorefront = defaultStorefront
        config.priceCache.ttlMs = Int64(priceTTLSeconds) * 1000
        if config.adminToken == nil {
            logger.warning("no admin token configured (--admin-token or IAP_ADMIN_TOKEN): admin methods will refuse every call")
        }
        let store: any CatalogStorage
        var pool: PostgresPool?
        if let url = database.resolvedURL() {
            pool = try PostgresPool(url: try PostgresURL(url), schema: "catalog", connections: try database.resolvedPoolSize(), logger: logger)
            store = try await PostgresCatalogStore(pool: pool!)
            logger.info("catalog store: PostgreSQL \(pool!.url.redacted)")
        } else {
            store = try CatalogStore.open(directory: options.resolvedDataDir())
        }
        let source: any PriceSource = priceFeed.map { PriceFeedSource(path: $0) } ?? DatabasePriceSource(store: store)
        let service = try await CatalogService(store: store, source: source, configuration: config, logger: logger)
        // Other instances' writes, heard at once (SQLite: one instance per file, nothing to hear); it listens while the
        // service group runs it.
        let listener = try pool.map { pool in
            try PostgresListener(pool: pool, channel: PostgresCatalogStore.changesChannel) { await service.changedElsewhere() }
        }
        if let seed {
            struct SeedFile: Decodable { let products: [ProductDefinition] }
            let file = try JSONDecoder().decode(SeedFile.self, from: Data(contentsOf: URL(fileURLWithPath: seed)))
            do {
                // The seed is the catalog as its file says at every start (the development stack's): applied as it stands,
                // grant changes included.
                try await service.importProducts(file.products, field: "products", allowGrantChange: true)
            } catch {
                throw ValidationError("seed \(seed) was not imported: \(error.message)")
            }
            logger.info("seeded the catalog", metadata: ["file": "\(seed)", "products": "\(file.products.count)"])
        }
        let server = RPCServer(
            configuration: try options.serverConfiguration(serviceName: "catalog", defaultPort: DefaultPorts.catalog),
            router: service.router(), logger: logger)
        // Resources first: the group stops the server, then the listener, before closing the store.
        let closing = ClosingService(pool == nil ? "catalog.sqlite" : "catalog database", logger: logger) { try store.close() }
        try await options.runUntilSignalled([closing] + (listener.map { [$0] } ?? []) + [server], logger: logger)
    }
}
