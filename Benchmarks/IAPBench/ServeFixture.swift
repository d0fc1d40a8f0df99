import ArgumentParser
import IAPProtocol
import JSONRPC
import Logging
import NIOCore
import RPCTransport
import ServiceLifecycle

/// A transport-only server: `rpc.ping` and a fixed 20-product `catalog.listProducts` reply,
/// encoded on every call, to compare with the Node.js peer (Benchmarks/peers/node-jsonrpc.js) under rpcload.
struct ServeFixture: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve-fixture",
        abstract: "Serve rpc.ping and a fixed 20-product catalog.listProducts (transport benchmark).")

    @Option(help: "Address to bind.") var host = "127.0.0.1"
    @Option(help: "Port to bind.") var port = 7900
    @Flag(help: "Serve the listing from pre-encoded bytes instead of encoding it per call.") var cached = false

    func run() async throws {
        var logger = Logger(label: "iap-bench")
        logger.logLevel = .warning
        let products = FixtureCatalog.products
        var router = RPCRouter()
        if cached {
            let encoded = JSONWriter.encodeBody(CatalogListProducts.Result(etag: FixtureCatalog.etag, notModified: false, products: products))!
            router.registerImmediateEncoded(CatalogListProducts.self) { _, _ in encoded }
        } else {
            router.registerImmediate(CatalogListProducts.self) { _, _ in
                CatalogListProducts.Result(etag: FixtureCatalog.etag, notModified: false, products: products)
            }
        }
        let server = RPCServer(
            configuration: .init(serviceName: "bench-fixture", host: host, port: port),
            router: router, logger: logger)
        let group = ServiceGroup(services: [server], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        try await group.run()
    }
}

/// The 20 products of the fixture reply (same count and kind as the Node peer's).
enum FixtureCatalog {
    static let etag = "\"fixture-v1\""
    static let products: [Product] = (0..<20).map { i in
        Product(
            productId: "com.example.coins.\(i)", type: .consumable, referenceName: "Coins pack \(i)",
            title: "Pack \(i)", description: "\(100 * (i + 1)) coins", status: .active,
            grant: .coins(Int64(100 * (i + 1))),
            price: Price(storefront: "USA", currency: "USD", amount: "\(i).99", formatted: "$\(i).99"))
    }
}
