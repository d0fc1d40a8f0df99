import CatalogService
import Foundation
import IAPProtocol
import JSONRPC
import RPCTransport
import Testing

/// Catalog writes racing another instance's: what is checked and merged inside the store's write, not on this instance's
/// snapshot.
@Suite struct CatalogWriteTests {
    /// What a product's buyers hold is checked inside the write too: a product another instance created a moment before
    /// (here written straight to the store, unseen by this service's snapshot) keeps its grant.
    @Test func aGrantChangeIsRefusedInsideTheWriteToo() async throws {
        let catalog = try await CatalogFixture.start()
        defer { Task { await catalog.stop() } }
        var gems = try #require(CatalogFixture.standardCatalog.first { $0.productId == "coins.100" })
        gems.productId = "gems.5"
        gems.prices = nil
        try await catalog.store.upsert([(gems, nil)], allowGrantChange: false)
        var changed = gems
        changed.type = .nonConsumable
        changed.grant = .content(entitlement: "gems", contentIds: [])
        do {
            try await catalog.client.call(CatalogUpsertProduct.self, .init(adminToken: CatalogFixture.adminToken, product: changed))
            Issue.record("the grant of a product another instance created was changed")
        } catch {
            #expect(error.data.reason == "grantChanged" && error.data.extra["field"]?.stringValue == "products[0].type")
        }
        #expect(try await catalog.store.snapshot().products.first { $0.definition.productId == "gems.5" }?.definition.grant == .coins(100))
    }
}
