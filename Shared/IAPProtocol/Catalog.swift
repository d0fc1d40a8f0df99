import JSONRPC

// catalog.* — products, what each grants, prices per storefront (docs/contract.md).

public enum ProductType: String, Codable, Sendable, JSONSchemaEnum {
    case consumable, nonConsumable, autoRenewable, nonRenewing
}

public enum ProductStatus: String, Codable, Sendable, JSONSchemaEnum {
    case active, retired
}

/// What a product grants. On the wire one of `{coins}`, `{entitlement, content}`,
/// `{entitlement, subscriptionGroup}`, `{entitlement, durationDays}`.
public enum Grant: Sendable, Equatable {
    case coins(Int64)
    case content(entitlement: String, contentIds: [String])
    case subscription(entitlement: String, subscriptionGroup: String)
    case timeLimited(entitlement: String, durationDays: Int)
}

extension Grant: Codable, JSONSchemaDescribing {
    private enum Key: String, CodingKey { case coins, entitlement, content, subscriptionGroup, durationDays }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Key.self)
        if let coins = try c.decodeIfPresent(Int64.self, forKey: .coins) {
            self = .coins(coins)
            return
        }
        let entitlement = try c.decode(String.self, forKey: .entitlement)
        if let group = try c.decodeIfPresent(String.self, forKey: .subscriptionGroup) {
            self = .subscription(entitlement: entitlement, subscriptionGroup: group)
        } else if let days = try c.decodeIfPresent(Int.self, forKey: .durationDays) {
            self = .timeLimited(entitlement: entitlement, durationDays: days)
        } else {
            self = .content(entitlement: entitlement, contentIds: try c.decodeIfPresent([String].self, forKey: .content) ?? [])
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Key.self)
        switch self {
        case .coins(let n): try c.encode(n, forKey: .coins)
        case let .content(e, ids): try c.encode(e, forKey: .entitlement); try c.encode(ids, forKey: .content)
        case let .subscription(e, g): try c.encode(e, forKey: .entitlement); try c.encode(g, forKey: .subscriptionGroup)
        case let .timeLimited(e, d): try c.encode(e, forKey: .entitlement); try c.encode(d, forKey: .durationDays)
        }
    }

    public static var jsonSchema: JSONSchema {
        .oneOf([
            .object(properties: [.init("coins", .integer, required: true)]),
            .object(properties: [.init("entitlement", .string, required: true), .init("content", .array(.string), required: true)]),
            .object(properties: [.init("entitlement", .string, required: true), .init("subscriptionGroup", .string, required: true)]),
            .object(properties: [.init("entitlement", .string, required: true), .init("durationDays", .integer, required: true)]),
        ])
    }
    public static var schemaPlaceholder: Grant { .coins(0) }
}

public struct Price: Codable, Sendable, Equatable {
    /// ISO 3166-1 alpha-3, as the App Store uses (`USA`, `DEU`).
    public var storefront: String
    /// ISO 4217 (`USD`, `EUR`).
    public var currency: String
    /// Decimal string in major units (`"0.99"`), never a float.
    public var amount: String
    /// For display (`"$0.99"`, `"0,99 €"`).
    public var formatted: String?
    public init(storefront: String, currency: String, amount: String, formatted: String? = nil) {
        self.storefront = storefront
        self.currency = currency
        self.amount = amount
        self.formatted = formatted
    }
}

/// How Google Play sells a catalog product, when not under the product's own id: the Play Console product id (a one-time
/// product's, or a subscription's) and, for a subscription, the base plan (absent: any base plan of it).
public struct GooglePlayProductIds: Codable, Sendable, Hashable {
    public var productId: String
    public var basePlanId: String?
    public init(productId: String, basePlanId: String? = nil) {
        self.productId = productId
        self.basePlanId = basePlanId
    }
}

public struct Product: Codable, Sendable, Equatable {
    public var productId: String
    public var type: ProductType
    public var referenceName: String
    public var title: String
    public var description: String
    public var status: ProductStatus
    public var grant: Grant
    public var price: Price?
    /// Auto-renewables: its subscription offers (who may redeem each is decided per account by fulfillment).
    public var offers: [SubscriptionOffer]?
    /// Google Play's ids for it (absent: sold there, if at all, under `productId`).
    public var googlePlay: GooglePlayProductIds?
    public init(
        productId: String, type: ProductType, referenceName: String, title: String, description: String,
        status: ProductStatus, grant: Grant, price: Price? = nil, offers: [SubscriptionOffer]? = nil, googlePlay: GooglePlayProductIds? = nil
    ) {
        self.googlePlay = googlePlay
        self.offers = offers
        self.productId = productId
        self.type = type
        self.referenceName = referenceName
        self.title = title
        self.description = description
        self.status = status
        self.grant = grant
        self.price = price
    }
}

public enum CatalogListProducts: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var storefront: String?
        public var locale: String?
        public var ifNoneMatch: String?
        public init(storefront: String? = nil, locale: String? = nil, ifNoneMatch: String? = nil) {
            self.storefront = storefront
            self.locale = locale
            self.ifNoneMatch = ifNoneMatch
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var etag: String
        public var notModified: Bool
        public var products: [Product]
        public init(etag: String, notModified: Bool, products: [Product]) {
            self.etag = etag
            self.notModified = notModified
            self.products = products
        }
    }
    public static let name = "catalog.listProducts"
    public static let summary = "Active products with localized text and the storefront's prices; cheap to poll with ifNoneMatch."
}

public enum CatalogGetProducts: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var productIds: [String]
        public var storefront: String?
        public var locale: String?
        /// Also every product Google Play sells under one of these ids (its `googlePlay.productId`, or its own id when it
        /// names none), each once.
        public var googlePlayProductIds: [String]?
        public init(productIds: [String], storefront: String? = nil, locale: String? = nil, googlePlayProductIds: [String]? = nil) {
            self.productIds = productIds
            self.storefront = storefront
            self.locale = locale
            self.googlePlayProductIds = googlePlayProductIds
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var products: [Product]
        public var missing: [String]
        public init(products: [Product], missing: [String]) { self.products = products; self.missing = missing }
    }
    public static let name = "catalog.getProducts"
    public static let summary = "Products by id, retired ones included (old purchases must still be fulfilled)."
}

/// A product as an admin writes it: localized text per locale, prices per storefront.
public struct ProductDefinition: Codable, Sendable, Equatable {
    public var productId: String
    public var type: ProductType
    public var referenceName: String
    /// Locale (`en-US`) -> text. `defaultLocale` must be one of them.
    public var localizations: [String: Localization]
    public var defaultLocale: String
    public var grant: Grant
    public var prices: [PriceEntry]?
    public var status: ProductStatus?
    /// Auto-renewables: the subscription offers the server signs (`fulfillment.signOffer`).
    public var offers: [SubscriptionOffer]?
    /// Auto-renewables: what a customer about to cancel is shown (`catalog.setRetention`); never in product listings.
    public var retention: RetentionRules?
    /// Google Play's ids for the product, when it is sold there under others than `productId`.
    public var googlePlay: GooglePlayProductIds?
    public init(
        productId: String, type: ProductType, referenceName: String, localizations: [String: Localization],
        defaultLocale: String, grant: Grant, prices: [PriceEntry]? = nil, status: ProductStatus? = nil, offers: [SubscriptionOffer]? = nil,
        retention: RetentionRules? = nil, googlePlay: GooglePlayProductIds? = nil
    ) {
        self.googlePlay = googlePlay
        self.offers = offers
        self.retention = retention
        self.productId = productId
        self.type = type
        self.referenceName = referenceName
        self.localizations = localizations
        self.defaultLocale = defaultLocale
        self.grant = grant
        self.prices = prices
        self.status = status
    }
}

public struct Localization: Codable, Sendable, Equatable {
    public var title: String
    public var description: String
    public init(title: String, description: String) { self.title = title; self.description = description }
}

public struct PriceEntry: Codable, Sendable, Equatable {
    public var storefront: String
    public var currency: String
    public var amount: String
    public init(storefront: String, currency: String, amount: String) {
        self.storefront = storefront
        self.currency = currency
        self.amount = amount
    }
}

public enum CatalogUpsertProduct: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var product: ProductDefinition
        /// Lets an existing product's type, kind of grant, entitlement, subscription group or Google Play ids change
        /// (`grantChanged` otherwise): for a product nobody has bought yet, or a change the admin has weighed for its buyers.
        public var allowGrantChange: Bool?
        public init(adminToken: String, product: ProductDefinition, allowGrantChange: Bool? = nil) {
            self.adminToken = adminToken
            self.product = product
            self.allowGrantChange = allowGrantChange
        }
    }
    public typealias Result = EmptyResult
    public static let name = "catalog.upsertProduct"
    public static let summary = "Admin: create a product, or change one (keeping what it leaves out and, unless allowed, what its buyers hold)."
    public static let access = RPCAccess.admin
}

public enum CatalogSetPrices: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var productId: String
        public var prices: [PriceEntry]
        public init(adminToken: String, productId: String, prices: [PriceEntry]) {
            self.adminToken = adminToken
            self.productId = productId
            self.prices = prices
        }
    }
    public typealias Result = EmptyResult
    public static let name = "catalog.setPrices"
    public static let summary = "Admin: set a product's prices per storefront."
    public static let access = RPCAccess.admin
}

public enum CatalogRetireProduct: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var productId: String
        public init(adminToken: String, productId: String) { self.adminToken = adminToken; self.productId = productId }
    }
    public typealias Result = EmptyResult
    public static let name = "catalog.retireProduct"
    public static let summary = "Admin: hide a product from listings (it still resolves for fulfillment)."
    public static let access = RPCAccess.admin
}

public enum CatalogImportCatalog: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var products: [ProductDefinition]
        /// As `upsertProduct`'s: lets existing products' grants change.
        public var allowGrantChange: Bool?
        public init(adminToken: String, products: [ProductDefinition], allowGrantChange: Bool? = nil) {
            self.adminToken = adminToken
            self.products = products
            self.allowGrantChange = allowGrantChange
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var imported: Int
        public init(imported: Int) { self.imported = imported }
    }
    public static let name = "catalog.importCatalog"
    public static let summary = "Admin: import many products at once; all or nothing."
    public static let access = RPCAccess.admin
}
