import IAPProtocol
import JSONRPC
import RPCTransport

extension CatalogService {
    /// The `catalog.*` methods of the v1 contract, on this service.
    public func router() -> RPCRouter {
        var r = RPCRouter()
        r.registerEncoded(CatalogListProducts.self) { p, _ in try await self.listProducts(p) }
        r.register(CatalogGetProducts.self) { p, _ in try await self.getProducts(p) }
        r.register(CatalogUpsertProduct.self) { p, _ in
            try await self.upsertProduct(p)
            return EmptyResult()
        }
        r.register(CatalogSetPrices.self) { p, _ in
            try await self.setPrices(p)
            return EmptyResult()
        }
        r.register(CatalogRetireProduct.self) { p, _ in
            try await self.retireProduct(p)
            return EmptyResult()
        }
        r.register(CatalogSetOffers.self) { p, _ in
            try await self.setOffers(p)
            return EmptyResult()
        }
        r.register(CatalogSetRetention.self) { p, _ in
            try await self.setRetention(p)
            return EmptyResult()
        }
        r.register(CatalogGetRetention.self) { p, _ in try await self.getRetention(p) }
        r.register(CatalogImportCatalog.self) { p, _ in .init(imported: try await self.importCatalog(p)) }
        return r
    }
}
