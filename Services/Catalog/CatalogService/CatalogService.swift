import Crypto
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import ServiceSupport

public struct CatalogConfiguration: Sendable {
    /// Admin token for upsert/setPrices/retire/import; admin methods refuse every call when nil.
    public var adminToken: String?
    /// The suite's internal token: `catalog.getRetention` (fulfillment's retention answers) refuses every call without it.
    public var internalToken: String?
    /// Storefront used when a request names none.
    public var defaultStorefront = "USA"
    public var priceCache = PriceCache.Settings()
    /// How often the catalog checks the database for changes made by another instance.
    public var catalogRecheckMs: Int64 = 60_000
    /// Most encoded listings kept (storefront x known locale). Keys are normalized to known values
    /// first, so this is a backstop: past it the cache starts over.
    public var maxCachedListings = 1_024

    public init() {}
}

/// What the app sells, at what price, in which language. Listings are built once per catalog
/// revision, price-table version, storefront and locale, then served as pre-encoded bytes with an
/// etag derived from their content.
public final class CatalogService: Sendable {
    let store: any CatalogStorage
    private let prices: PriceCache
    private let source: any PriceSource
    let configuration: CatalogConfiguration
    private let clock: ServiceClock
    let logger: Logger
    private let state: NIOLockedValueBox<State>

    private struct State {
        var snapshot: CatalogSnapshot
        var checkedAtMs: Int64
        var listings: [ListingKey: Listing] = [:]
    }

    struct ListingKey: Hashable {
        let storefront: String
        let locale: String?
    }

    struct Listing {
        let revision: Int64
        let priceVersion: Int
        let etag: String
        /// The full `catalog.listProducts` result, encoded.
        let encoded: [UInt8]
    }

    public init(
        store: any CatalogStorage, source: any PriceSource, configuration: CatalogConfiguration,
        clock: ServiceClock = .system, logger: Logger
    ) async throws {
        self.store = store
        self.source = source
        self.configuration = configuration
        self.clock = clock
        self.logger = logger
        self.prices = PriceCache(source: source, settings: configuration.priceCache, clock: clock, logger: logger)
        self.state = NIOLockedValueBox(State(snapshot: try await store.snapshot(), checkedAtMs: clock.nowMs))
    }

    // MARK: reading

    /// `catalog.listProducts`, encoded. Active products only.
    public func listProducts(_ p: CatalogListProducts.Params) async throws(RPCError) -> [UInt8] {
        let storefront = p.storefront ?? configuration.defaultStorefront
        try Storefronts.check(storefront, field: "storefront")
        if let locale = p.locale { try ProductValidation.checkLocale(locale, field: "locale") }
        let snapshot = try await currentSnapshot()
        let table = try await prices.table(for: storefront)
        // A caller's locale becomes a cache key only as one of the catalog's own (docs/security.md).
        let key = ListingKey(storefront: storefront, locale: Self.knownLocale(p.locale, in: snapshot))
        let listing =
            state.withLockedValue { s -> Listing? in
                guard let l = s.listings[key], l.revision == snapshot.revision, l.priceVersion == table.version else { return nil }
                return l
            } ?? buildListing(key, snapshot: snapshot, table: table)
        if let etag = p.ifNoneMatch, etag == listing.etag {
            return JSONWriter.encodeBody(CatalogListProducts.Result(etag: etag, notModified: true, products: []))!
        }
        return listing.encoded
    }

    private func buildListing(_ key: ListingKey, snapshot: CatalogSnapshot, table: PriceCache.Versioned) -> Listing {
        let products = snapshot.products.filter { $0.status == .active }.map {
            Self.present($0.definition, status: $0.status, locale: key.locale, table: table.table)
        }
        let productBytes = JSONWriter.encodeBody(products) ?? []
        let digest = SHA256.hash(data: productBytes + Array(key.storefront.utf8))
        let etag = "\"" + digest.prefix(12).map { String(format: "%02x", $0) }.joined() + "\""
        let encoded = JSONWriter.encodeBody(CatalogListProducts.Result(etag: etag, notModified: false, products: products)) ?? []
        let listing = Listing(revision: snapshot.revision, priceVersion: table.version, etag: etag, encoded: encoded)
        if table.version != 0 {  // version 0: prices read around an invalidation; do not keep
            let bound = configuration.maxCachedListings
            state.withLockedValue { s in
                guard s.snapshot.revision == snapshot.revision else { return }
                if s.listings[key] == nil && s.listings.count >= bound { s.listings.removeAll(keepingCapacity: true) }
                s.listings[key] = listing
            }
        }
        return listing
    }

    /// `catalog.getProducts`: retired products included; unknown ids listed in `missing`.
    public func getProducts(_ p: CatalogGetProducts.Params) async throws(RPCError) -> CatalogGetProducts.Result {
        guard p.productIds.count <= 1000, (p.googlePlayProductIds?.count ?? 0) <= 1000 else {
            throw RPCError.invalidParams("at most 1000 productIds (and googlePlayProductIds) per call", field: "productIds", reason: "tooMany")
        }
        let storefront = p.storefront ?? configuration.defaultStorefront
        try Storefronts.check(storefront, field: "storefront")
        if let locale = p.locale { try ProductValidation.checkLocale(locale, field: "locale") }
        let snapshot = try await currentSnapshot()
        // A price source that is down must not stop fulfillment from resolving what a product grants.
        let table = try? await prices.table(for: storefront)
        var byId: [String: (definition: ProductDefinition, status: ProductStatus)] = [:]
        for entry in snapshot.products { byId[entry.definition.productId] = entry }
        var found: [Product] = []
        var missing: [String] = []
        for id in p.productIds {
            if let entry = byId[id] {
                found.append(Self.present(entry.definition, status: entry.status, locale: p.locale, table: table?.table))
            } else {
                missing.append(id)
            }
        }
        if let playIds = p.googlePlayProductIds.map(Set.init), !playIds.isEmpty {
            for entry in snapshot.products where playIds.contains(entry.definition.googlePlayKey.productId) {
                guard !found.contains(where: { $0.productId == entry.definition.productId }) else { continue }
                found.append(Self.present(entry.definition, status: entry.status, locale: p.locale, table: table?.table))
            }
        }
        return .init(products: found, missing: missing)
    }

    /// Listings cached now (tests check the bound).
    package var cachedListingCount: Int { state.withLockedValue { $0.listings.count } }

    /// The catalog's own locale closest to `requested`: the same one (any letter case), else the first
    /// (sorted) of the same language, else nil (each product's default). Unknown locales therefore
    /// share a listing instead of each making one.
    static func knownLocale(_ requested: String?, in snapshot: CatalogSnapshot) -> String? {
        guard let requested else { return nil }
        let wanted = requested.lowercased()
        if let exact = snapshot.locales.first(where: { $0.lowercased() == wanted }) { return exact }
        let language = wanted.split(separator: "-").first.map(String.init) ?? wanted
        return snapshot.locales.first { ($0.lowercased().split(separator: "-").first.map(String.init) ?? "") == language }
    }

    /// A product as apps see it: text in the best locale (exact, then same language, then the product's
    /// default), and the storefront's price if it has one.
    static func present(_ d: ProductDefinition, status: ProductStatus, locale: String?, table: PriceTable?) -> Product {
        let text = localization(d, locale: locale)
        let price = table?.prices[d.productId].map {
            Price(
                storefront: $0.storefront, currency: $0.currency, amount: Currencies.formatAmount($0.amountMinor, currency: $0.currency),
                formatted: Currencies.display($0.amountMinor, currency: $0.currency, locale: locale))
        }
        return Product(
            productId: d.productId, type: d.type, referenceName: d.referenceName, title: text.title,
            description: text.description, status: status, grant: d.grant, price: price, offers: d.offers, googlePlay: d.googlePlay)
    }

    static func localization(_ d: ProductDefinition, locale: String?) -> Localization {
        if let locale {
            if let exact = d.localizations[locale] { return exact }
            let language = locale.split(separator: "-").first.map(String.init) ?? locale
            if let sameLanguage = d.localizations.keys.sorted().first(where: { $0 == language || $0.hasPrefix(language + "-") }) {
                return d.localizations[sameLanguage]!
            }
        }
        return d.localizations[d.defaultLocale]!
    }

    /// Waits for background price refreshes (for tests that observe one landing).
    public func settlePrices() async {
        await prices.settle()
    }

    // MARK: admin

    public func upsertProduct(_ p: CatalogUpsertProduct.Params) async throws(RPCError) {
        try checkAdmin(p.adminToken)
        try await importProducts([p.product], field: "product", allowGrantChange: p.allowGrantChange == true)
    }

    public func importCatalog(_ p: CatalogImportCatalog.Params) async throws(RPCError) -> Int {
        try checkAdmin(p.adminToken)
        try await importProducts(p.products, field: "products", allowGrantChange: p.allowGrantChange == true)
        return p.products.count
    }

    /// Validates every product first; writes all of them in one transaction, or none.
    public func importProducts(_ products: [ProductDefinition], field: String, allowGrantChange: Bool = false) async throws(RPCError) {
        guard products.count <= ProductValidation.maxProducts else {
            throw RPCError.invalidParams("at most \(ProductValidation.maxProducts) products per import", field: field, reason: "tooMany")
        }
        var seen = Set<String>()
        var validated: [(ProductDefinition, [StoredPrice]?)] = []
        for (i, product) in products.enumerated() {
            let path = products.count == 1 && field == "product" ? field : "\(field)[\(i)]"
            try ProductValidation.check(product, field: path)
            guard seen.insert(product.productId).inserted else {
                throw RPCError.invalidParams(
                    "productId \(product.productId) appears twice", field: "\(path).productId",
                    reason: "duplicateProductId")
            }
            if product.prices != nil && !source.acceptsAdminPrices {
                throw pricesFromFeed
            }
            validated.append(
                (
                    product,
                    try product.prices.map { ps throws(RPCError) in
                        try ProductValidation.checkPrices(ps, field: "\(path).prices")
                    }
                ))
        }
        try await checkGooglePlayIds(products, field: field)
        // Checked on this instance's snapshot for the caller's field path, and again inside the write (another instance's
        // change a moment before).
        if !allowGrantChange { try await checkFixedParts(products, field: field) }
        let ready = validated
        try await write { try await self.store.upsert(ready, allowGrantChange: allowGrantChange) }
        logger.info("catalog updated", metadata: ["products": "\(products.count)"])
    }

    /// An existing product keeps what its buyers hold (`ProductDefinition.fixedChange`): a change is refused, `grantChanged`.
    /// A product newly sold under one base plan of a Google Play subscription that a stored product sells under every base
    /// plan of is refused too: that product's buyers of the plan would get this one's grant at their next renewal.
    func checkFixedParts(_ products: [ProductDefinition], field: String) async throws(RPCError) {
        let stored = Dictionary(try await currentSnapshot().products.map { ($0.definition.productId, $0.definition) }) { a, _ in a }
        func path(_ i: Int) -> String { products.count == 1 && field == "product" ? field : "\(field)[\(i)]" }
        for (i, product) in products.enumerated() {
            guard let before = stored[product.productId] else { continue }
            try product.refuseFixedChange(from: before, path: path(i))
        }
        let everyPlan = Dictionary(stored.values.filter { $0.googlePlayKey.basePlanId == nil }.map { ($0.googlePlayKey.productId, $0.productId) }) {
            a, _ in a
        }
        for (i, product) in products.enumerated() {
            let key = product.googlePlayKey(keeping: stored[product.productId])
            guard let plan = key.basePlanId, let owner = everyPlan[key.productId], owner != product.productId,
                stored[product.productId]?.googlePlayKey != key
            else { continue }
            throw RPCError.invalidParams(
                "\(product.productId) cannot take Google Play's \(key.productId)/\(plan) from \(owner), which sells every base plan of it: "
                    + "its buyers of that plan would get this product's grant; pass allowGrantChange (iap catalog --allow-grant-change) "
                    + "if nobody bought it", field: "\(path(i)).googlePlay", reason: "grantChanged")
        }
    }

    /// Google Play's ids name one product each: a product whose Play ids (its `googlePlay`, else its own id) another product
    /// of the catalog after this import already claims is refused, so a Play purchase always grants one product's grant.
    func checkGooglePlayIds(_ products: [ProductDefinition], field: String) async throws(RPCError) {
        var claimed: [GooglePlayProductIds: String] = [:]
        let replaced = Set(products.map(\.productId))
        let snapshot = try await currentSnapshot().products
        for entry in snapshot where !replaced.contains(entry.definition.productId) {
            claimed[entry.definition.googlePlayKey] = entry.definition.productId
        }
        let stored = Dictionary(snapshot.map { ($0.definition.productId, $0.definition) }) { a, _ in a }
        for product in products {
            let key = product.googlePlayKey(keeping: stored[product.productId])
            if let other = claimed.updateValue(product.productId, forKey: key), other != product.productId {
                throw RPCError.invalidParams(
                    "\(product.productId) is sold on Google Play under the ids \(other) already has", field: "\(field).googlePlay",
                    reason: "googlePlayIdTaken")
            }
        }
    }

    public func setPrices(_ p: CatalogSetPrices.Params) async throws(RPCError) {
        try checkAdmin(p.adminToken)
        guard source.acceptsAdminPrices else { throw pricesFromFeed }
        try ProductValidation.checkProductId(p.productId, field: "productId")
        let validated = try ProductValidation.checkPrices(p.prices, field: "prices")
        let change = try await write { try await self.store.setPrices(productId: p.productId, validated) }
        guard change == .done else { throw RPCError.notFound("no product \(p.productId)", reason: "unknownProduct") }
    }

    /// Replaces a product's offers, keeping the rest of its definition, its status and its prices.
    public func setOffers(_ p: CatalogSetOffers.Params) async throws(RPCError) {
        try checkAdmin(p.adminToken)
        try ProductValidation.checkProductId(p.productId, field: "productId")
        guard let entry = try await currentSnapshot().products.first(where: { $0.definition.productId == p.productId }) else {
            throw RPCError.notFound("no product \(p.productId)", reason: "unknownProduct")
        }
        // A product's type never changes (`fixedChange`): the snapshot's will do.
        try ProductValidation.checkOffers(p.offers, type: entry.definition.type, field: "offers")
        let offers = p.offers
        let change = try await write {
            try await self.store.amend(productId: p.productId) { definition throws(RPCError) in
                definition.offers = offers.isEmpty ? nil : offers
                // Retention rules name offers: one still in use is not removed.
                if let retention = definition.retention { try RetentionValidation.check(retention, product: definition, field: "offers") }
            }
        }
        guard change == .done else { throw RPCError.notFound("no product \(p.productId)", reason: "unknownProduct") }
        logger.info("offers set", metadata: ["productId": "\(p.productId)", "offers": "\(p.offers.count)"])
    }

    public func retireProduct(_ p: CatalogRetireProduct.Params) async throws(RPCError) {
        try checkAdmin(p.adminToken)
        let change = try await write { try await self.store.retire(productId: p.productId) }
        guard change == .done else { throw RPCError.notFound("no product \(p.productId)", reason: "unknownProduct") }
    }

    private var pricesFromFeed: RPCError {
        RPCError.conflict("prices come from the price feed (\(source.name)); change the feed file instead", reason: "pricesFromFeed")
    }

    func checkAdmin(_ token: String) throws(RPCError) {
        try TokenGate.admin.check(token, configured: configuration.adminToken)
    }

    /// Runs a database change, then reloads the snapshot and drops cached prices and listings.
    func write<T: Sendable>(_ body: @Sendable () async throws -> T) async throws(RPCError) -> T {
        try await StorageCalls(logger: logger).run {
            let result = try await body()
            let snapshot = try await store.snapshot()
            state.withLockedValue { s in
                s.snapshot = snapshot
                s.checkedAtMs = clock.nowMs
                s.listings.removeAll()
            }
            await prices.invalidate()
            return result
        }
    }

    /// Another instance changed the catalog (on PostgreSQL, its NOTIFY): re-reads it now rather than at the next
    /// recheck, and drops cached prices (they may be admin-set ones that changed).
    public func changedElsewhere() async {
        state.withLockedValue { $0.checkedAtMs = clock.nowMs - configuration.catalogRecheckMs }
        _ = try? await currentSnapshot()
        await prices.invalidate()
    }

    /// The in-memory catalog, re-read when another instance changed the database (checked at most
    /// once per `catalogRecheckMs`).
    func currentSnapshot() async throws(RPCError) -> CatalogSnapshot {
        let now = clock.nowMs
        let (snapshot, due) = state.withLockedValue { s -> (CatalogSnapshot, Bool) in
            let due = now - s.checkedAtMs >= configuration.catalogRecheckMs
            if due { s.checkedAtMs = now }
            return (s.snapshot, due)
        }
        guard due else { return snapshot }
        do {
            guard try await store.revision() != snapshot.revision else { return snapshot }
            let fresh = try await store.snapshot()
            state.withLockedValue { s in
                if fresh.revision > s.snapshot.revision {
                    s.snapshot = fresh
                    s.listings.removeAll()
                }
            }
            return fresh
        } catch {
            logger.warning("could not re-read the catalog; serving the one in memory", metadata: ["error": "\(error)"])
            return snapshot
        }
    }
}
