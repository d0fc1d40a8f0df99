import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC

/// `iap catalog list|get|import|set-price|retire`.
struct CatalogCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "catalog", abstract: "What the app sells and at what price; admin changes.",
        subcommands: [List.self, Get.self, Upsert.self, Import.self, SetPrice.self, Retire.self])

    struct Upsert: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a product, or change one, from a JSON file (a ProductDefinition); what it leaves out stays as stored.")
        @Argument(help: "Product JSON file (- for standard input), shaped like one entry of compose/demo-catalog.json.") var file: String
        @Flag(
            name: .customLong("allow-grant-change"), help: "Let an existing product's type, grant kind, entitlement, group or Google Play ids change."
        )
        var allowGrantChange = false
        @OptionGroup var admin: Admin
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let product: ProductDefinition
            do { product = try JSONDecoder().decode(ProductDefinition.self, from: Data(try textArgument(file).utf8)) } catch {
                throw ValidationError("\(file) is not a product definition: \(error)")
            }
            await ServiceCall(options: client).run(
                .catalog, CatalogUpsertProduct.self,
                .init(adminToken: try admin.token(), product: product, allowGrantChange: allowGrantChange ? true : nil)
            ) { _ in
                "saved \(product.productId)"
            }
        }
    }

    struct Localized: ParsableArguments {
        @Option(help: "Storefront, ISO 3166-1 alpha-3 (default: the catalog's, USA).") var storefront: String?
        @Option(help: "Locale for titles and price formatting, e.g. de-DE.") var locale: String?
    }

    static func rows(_ products: [Product]) -> String {
        table(
            ["product", "type", "title", "price", "grants", "status"],
            products.map { p in
                [
                    p.productId, p.type.rawValue, p.title, p.price?.formatted ?? p.price.map { "\($0.amount) \($0.currency)" } ?? "-",
                    grantText(p.grant), p.status.rawValue,
                ]
            })
    }

    static func grantText(_ grant: Grant) -> String {
        switch grant {
        case .coins(let n): return "\(n) coins"
        case let .content(e, ids): return "\(e) + \(ids.joined(separator: ", "))"
        case let .subscription(e, g): return "\(e) (group \(g))"
        case let .timeLimited(e, days): return "\(e) for \(days) days"
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Active products with prices for a storefront.")
        @OptionGroup var localized: Localized
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .catalog, CatalogListProducts.self,
                .init(storefront: localized.storefront, locale: localized.locale)
            ) { rows($0.products) }
        }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Products by id (retired ones too).")
        @Argument(help: "Product ids.") var productIds: [String]
        @OptionGroup var localized: Localized
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .catalog, CatalogGetProducts.self,
                .init(productIds: productIds, storefront: localized.storefront, locale: localized.locale)
            ) {
                rows($0.products) + ($0.missing.isEmpty ? "" : "\nnot in the catalog: \($0.missing.joined(separator: ", "))")
            }
        }
    }

    struct Admin: ParsableArguments {
        @Option(name: .customLong("admin-token"), help: "Admin token (default: IAP_ADMIN_TOKEN, else $IAP_DATA_DIR/admin-token or data/admin-token).")
        var adminToken: String?
        func token() throws -> String {
            guard let token = try resolveAdminToken(adminToken) else {
                throw ValidationError("no admin token: pass --admin-token or set IAP_ADMIN_TOKEN")
            }
            return token
        }
    }

    struct Import: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Import products from a JSON file ({\"products\": [...]}, as compose/demo-catalog.json).")
        @Argument(help: "Catalog JSON file.") var file: String
        @Flag(
            name: .customLong("allow-grant-change"),
            help: "Let existing products' types, grant kinds, entitlements, groups or Google Play ids change.")
        var allowGrantChange = false
        @OptionGroup var admin: Admin
        @OptionGroup var client: ClientOptions
        func run() async throws {
            struct File: Decodable { let products: [ProductDefinition] }
            guard let data = FileManager.default.contents(atPath: file) else { throw ValidationError("cannot read \(file)") }
            let parsed: File
            do { parsed = try JSONDecoder().decode(File.self, from: data) } catch {
                throw ValidationError("\(file) is not a catalog file: \(error)")
            }
            await ServiceCall(options: client).run(
                .catalog, CatalogImportCatalog.self,
                .init(adminToken: try admin.token(), products: parsed.products, allowGrantChange: allowGrantChange ? true : nil)
            ) {
                "imported \($0.imported) product(s)"
            }
        }
    }

    struct SetPrice: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-price", abstract: "Replace a product's prices: one STOREFRONT:CURRENCY:AMOUNT per storefront.",
            discussion: "Example: iap catalog set-price coins.100 USA:USD:0.99 DEU:EUR:1.09 JPN:JPY:160")
        @Argument(help: "Product id.") var productId: String
        @Argument(help: "Prices as STOREFRONT:CURRENCY:AMOUNT, e.g. USA:USD:0.99.") var prices: [String]
        @OptionGroup var admin: Admin
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let entries = try prices.map { spec -> PriceEntry in
                let parts = spec.split(separator: ":").map(String.init)
                guard parts.count == 3 else { throw ValidationError("\(spec): expected STOREFRONT:CURRENCY:AMOUNT, e.g. USA:USD:0.99") }
                return PriceEntry(storefront: parts[0], currency: parts[1], amount: parts[2])
            }
            await ServiceCall(options: client).run(
                .catalog, CatalogSetPrices.self,
                .init(
                    adminToken: try admin.token(), productId: productId, prices: entries)
            ) { _ in
                "\(productId): " + entries.map { "\($0.amount) \($0.currency) in \($0.storefront)" }.joined(separator: ", ")
            }
        }
    }

    struct Retire: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Stop selling a product (existing purchases keep working).")
        @Argument(help: "Product id.") var productId: String
        @OptionGroup var admin: Admin
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(.catalog, CatalogRetireProduct.self, .init(adminToken: try admin.token(), productId: productId)) {
                _ in
                "retired \(productId)"
            }
        }
    }
}
