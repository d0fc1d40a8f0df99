import IAPProtocol

/// What the catalog needs from storage: the SQLite `CatalogStore` implements it (and a PostgreSQL store
/// will). The rules that use it are `CatalogService`, `ProductValidation`, `Money` and `PriceCache`.
public protocol CatalogStorage: Sendable {
    /// A number bumped by every change, so instances notice each other's writes.
    func revision() async throws -> Int64
    /// Every product with its status, sorted by productId, at one revision.
    func snapshot() async throws -> CatalogSnapshot
    /// Creates or replaces products (and, when given, their prices) in one transaction: an import's or an upsert's, whose
    /// left-out status, offers and retention rules keep the stored ones (`ProductDefinition.keepingUnsaid`). Unless
    /// `allowGrantChange`, a product changing what its buyers hold (`fixedChange`) refuses the whole write, `grantChanged`.
    func upsert(_ products: [(ProductDefinition, [StoredPrice]?)], allowGrantChange: Bool) async throws
    /// Changes one stored product's definition as `change` says, reading it inside the write (never from a snapshot that
    /// may predate another instance's change); its status and prices stay as stored. An error `change` throws writes nothing.
    func amend(productId: String, _ change: @escaping @Sendable (inout ProductDefinition) throws -> Void) async throws -> CatalogChange
    func setPrices(productId: String, _ prices: [StoredPrice]) async throws -> CatalogChange
    func retire(productId: String) async throws -> CatalogChange
    /// The admin-set prices of one storefront, by productId.
    func prices(storefront: String) async throws -> [String: StoredPrice]
    /// Closes the storage after the server has drained.
    func close() throws
}

/// The whole catalog at one revision.
public struct CatalogSnapshot: Sendable {
    public let revision: Int64
    /// Sorted by productId.
    public let products: [(definition: ProductDefinition, status: ProductStatus)]
    /// Every locale some product is localized in, sorted: what callers' locales are normalized to,
    /// derived once per revision (not per request).
    public let locales: [String]

    public init(revision: Int64, products: [(definition: ProductDefinition, status: ProductStatus)]) {
        self.revision = revision
        self.products = products
        self.locales = Set(products.flatMap { $0.definition.localizations.keys }).sorted()
    }
}

public enum CatalogChange: Sendable { case done, notFound }
