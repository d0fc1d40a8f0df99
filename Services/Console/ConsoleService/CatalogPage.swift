import Foundation
import Hummingbird
import IAPProtocol
import JSONRPC
import RPCTransport

/// The catalog for admins: what is sold in a storefront at what price, and the two changes an operator makes most
/// (replacing a product's prices, retiring a product), through catalog's own admin methods; each change in the
/// console's audit log.
extension ConsoleService {
    func catalogPage(_ request: Request, _ session: OperatorSession, message: String? = nil) async throws -> Response {
        let storefront = (request.uri.queryParameters["storefront"].map(String.init) ?? "USA").uppercased()
        guard storefront.count == 3, storefront.allSatisfy({ $0.isASCII && $0.isLetter }) else {
            return problem(.badRequest, "Not found", "a storefront is three letters (ISO 3166-1 alpha-3, e.g. USA)", session: session)
        }
        let listing = try await catalog.call(CatalogListProducts.self, .init(storefront: storefront))
        let products = listing.products.map { p -> [String: Any] in
            [
                "productId": p.productId, "type": p.type.rawValue, "title": p.title, "grant": Self.describe(p.grant),
                "price": p.price.map { "\($0.amount) \($0.currency)" } ?? "not sold here", "csrf": session.csrfToken,
            ]
        }
        return page(
            "catalog", title: "Catalog", ["products": products, "storefront": storefront, "csrf": session.csrfToken], session: session,
            message: message)
    }

    static func describe(_ grant: Grant) -> String {
        switch grant {
        case .coins(let n): "\(n) coins"
        case .content(let entitlement, let content): "\(entitlement)" + (content.isEmpty ? "" : " + \(content.joined(separator: ", "))")
        case .subscription(let entitlement, let group): "\(entitlement) (subscription, group \(group))"
        case .timeLimited(let entitlement, let days): "\(entitlement) for \(days) days"
        }
    }

    /// `set-prices` (every storefront's price replaced by the list, as `iap catalog set-price`) or `retire`.
    func catalogPosted(_ request: Request, _ form: [String: String], _ session: OperatorSession, _ context: ConsoleRequestContext) async throws
        -> Response
    {
        let productId = form["productId"] ?? ""
        guard (1...200).contains(productId.utf8.count) else { return problem(.badRequest, "Not done", "no product id", session: session) }
        let admin = configuration.adminToken
        let message: String
        do {
            switch form["action"] {
            case "set-prices":
                var entries: [PriceEntry] = []
                for spec in (form["prices"] ?? "").split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\r" || $0 == "," }) {
                    let parts = spec.split(separator: ":").map(String.init)
                    guard parts.count == 3 else {
                        return problem(.badRequest, "Not done", "prices are STOREFRONT:CURRENCY:AMOUNT, e.g. USA:USD:0.99", session: session)
                    }
                    entries.append(PriceEntry(storefront: parts[0], currency: parts[1], amount: parts[2]))
                }
                guard !entries.isEmpty else { return problem(.badRequest, "Not done", "give at least one price", session: session) }
                _ = try await catalog.call(CatalogSetPrices.self, .init(adminToken: admin, productId: productId, prices: entries))
                let detail = entries.map { "\($0.storefront):\($0.currency):\($0.amount)" }.joined(separator: " ")
                try await audit(session, "setPrices", "\(productId): \(detail)", context)
                message = "\(productId): prices now \(detail)."
            case "retire":
                _ = try await catalog.call(CatalogRetireProduct.self, .init(adminToken: admin, productId: productId))
                try await audit(session, "retireProduct", productId, context)
                message = "\(productId) is retired: no longer listed, still honoured."
            default:
                return problem(.badRequest, "Not done", "unknown action", session: session)
            }
        } catch let error as RPCError {
            try await audit(session, "catalogRefused", "\(productId): \(error.message)", context)
            return problem(.conflict, "Not done", error.message, session: session)
        }
        // Done: the page read again after the change, outside the catch (a failed read is not a refused change).
        return try await catalogPage(request, session, message: message)
    }
}
