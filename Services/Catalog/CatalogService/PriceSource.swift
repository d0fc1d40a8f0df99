import Foundation
import JSONRPC

/// One storefront's prices: productId -> price.
public struct PriceTable: Sendable, Equatable {
    public let storefront: String
    public let prices: [String: StoredPrice]

    public init(storefront: String, prices: [String: StoredPrice]) {
        self.storefront = storefront
        self.prices = prices
    }
}

/// Where prices come from. Fetches may be slow or fail; `PriceCache` is what callers use.
public protocol PriceSource: Sendable {
    /// A short name for logs and errors (`database`, `feed:/path`).
    var name: String { get }
    func fetch(storefront: String) async throws -> PriceTable
    /// True when admins set prices through `catalog.setPrices` (false for a feed the operator replaces).
    var acceptsAdminPrices: Bool { get }
}

/// Prices an admin set with `catalog.setPrices` or in an import.
public struct DatabasePriceSource: PriceSource {
    let store: any CatalogStorage
    public var name: String { "database" }
    public var acceptsAdminPrices: Bool { true }

    public init(store: any CatalogStorage) {
        self.store = store
    }

    public func fetch(storefront: String) async throws -> PriceTable {
        PriceTable(storefront: storefront, prices: try await store.prices(storefront: storefront))
    }
}

/// A JSON price feed file the operator replaces, shaped like an App Store Connect price-schedule export:
///
///     {"products": [{"productId": "coins.100",
///                    "prices": [{"territory": "USA", "currency": "USD", "customerPrice": "0.99"}]}]}
///
/// The file is re-read when the cache's TTL runs out; a file that fails to parse or validate fails the
/// fetch (the cache then keeps serving the last good prices, with a warning).
public struct PriceFeedSource: PriceSource {
    public let path: String
    public var name: String { "feed:\(path)" }
    public var acceptsAdminPrices: Bool { false }

    public init(path: String) {
        self.path = path
    }

    struct Feed: Decodable {
        struct Product: Decodable {
            let productId: String
            let prices: [Price]
        }
        struct Price: Decodable {
            let territory: String
            let currency: String
            let customerPrice: String
        }
        let products: [Product]
    }

    public struct InvalidFeed: Error, CustomStringConvertible {
        public let description: String
    }

    public func fetch(storefront: String) async throws -> PriceTable {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let feed: Feed
        do {
            feed = try JSONDecoder().decode(Feed.self, from: data)
        } catch {
            throw InvalidFeed(description: "price feed \(path) is not valid: \(error)")
        }
        var prices: [String: StoredPrice] = [:]
        for product in feed.products {
            for p in product.prices where p.territory == storefront {
                do throws(RPCError) {
                    try Currencies.check(p.currency, field: "currency")
                    let minor = try Currencies.parseAmount(p.customerPrice, currency: p.currency, field: "customerPrice")
                    prices[product.productId] = StoredPrice(storefront: storefront, currency: p.currency, amountMinor: minor)
                } catch {
                    throw InvalidFeed(description: "price feed \(path), product \(product.productId): \(error.message)")
                }
            }
        }
        return PriceTable(storefront: storefront, prices: prices)
    }
}
