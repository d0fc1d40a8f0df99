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

    /// An import that clears a product's offers while its kept retention rules still name one is refused whole, as
    /// `setOffers` refuses it: the rules would name an offer the product no longer has.
    @Test func anImportCannotRemoveAnOfferKeptRetentionRulesName() async throws {
        let catalog = try await CatalogFixture.start()
        defer { Task { await catalog.stop() } }
        try await RetentionRulesTests.offerStay(catalog)
        let rule = RetentionChoice(id: "stay", kind: .promotionalOffer, messageIdentifier: RetentionRulesTests.message, offerId: "stay")
        try await RetentionRulesTests.set(catalog, "pro.monthly", RetentionRules(choices: [rule]))
        var product = try #require(CatalogFixture.standardCatalog.first { $0.productId == "pro.monthly" })
        product.offers = []
        product.prices = nil
        do {
            try await catalog.client.call(CatalogUpsertProduct.self, .init(adminToken: CatalogFixture.adminToken, product: product))
            Issue.record("the offer a retention rule names was removed")
        } catch {
            #expect(error.data.extra["field"]?.stringValue?.hasPrefix("products[0].offers") == true, "\(error)")
        }
        let stored = try #require(try await catalog.store.snapshot().products.first { $0.definition.productId == "pro.monthly" })
        #expect(stored.definition.offers?.map(\.offerId) == ["stay"])
    }

    /// The Google Play ids a product is sold under are kept as its grant is: fulfillment finds a Play purchase's product
    /// by them at every renewal, refund and restore. Two products swapping theirs in one import (each claim unique after
    /// it) would give the Play buyers of one the other's grant: refused whole unless `allowGrantChange`. (Before
    /// 2026-11-30, accepted: seen failing so.)
    @Test func productsCannotSwapTheirGooglePlayIdsUnlessAllowed() async throws {
        let catalog = try await CatalogFixture.start()
        defer { Task { await catalog.stop() } }
        var coins = try #require(CatalogFixture.standardCatalog.first { $0.productId == "coins.100" })
        var premium = try #require(CatalogFixture.standardCatalog.first { $0.productId == "premium.unlock" })
        coins.prices = nil
        premium.prices = nil
        coins.googlePlay = GooglePlayProductIds(productId: "premium.unlock")
        premium.googlePlay = GooglePlayProductIds(productId: "coins.100")
        do {
            try await catalog.client.call(CatalogImportCatalog.self, .init(adminToken: CatalogFixture.adminToken, products: [coins, premium]))
            Issue.record("two products swapped their Google Play ids")
        } catch {
            #expect(error.data.reason == "grantChanged" && error.data.extra["field"]?.stringValue == "products[0].googlePlay", "\(error)")
        }
        let stored = try await catalog.store.snapshot().products.first { $0.definition.productId == "coins.100" }
        #expect(stored?.definition.googlePlay == nil)
        try await catalog.client.call(
            CatalogImportCatalog.self, .init(adminToken: CatalogFixture.adminToken, products: [coins, premium], allowGrantChange: true))
        let moved = try await catalog.store.snapshot().products.first { $0.definition.productId == "coins.100" }
        #expect(moved?.definition.googlePlay?.productId == "premium.unlock", "allowed, the admin has weighed it")
    }

    /// A new product taking one base plan of a Google Play subscription a stored product sells under every base plan of
    /// moves that product's Play buyers of the plan to its grant: refused unless `allowGrantChange`. (Before 2026-11-30,
    /// accepted: each claim was unique on its own. Seen failing so.) Leaving a product's Play ids out of an upsert keeps
    /// them (before, it dropped them).
    @Test func aNewProductCannotTakeABasePlanAnotherSellsUnlessAllowed() async throws {
        let catalog = try await CatalogFixture.start()
        defer { Task { await catalog.stop() } }
        let yearly = ProductDefinition(
            productId: "gold.yearly", type: .autoRenewable, referenceName: "Gold yearly",
            localizations: ["en-US": .init(title: "Gold", description: "Yearly")], defaultLocale: "en-US",
            grant: .subscription(entitlement: "gold", subscriptionGroup: "gold"),
            googlePlay: GooglePlayProductIds(productId: "pro.monthly", basePlanId: "yearly"))
        do {
            try await catalog.client.call(CatalogUpsertProduct.self, .init(adminToken: CatalogFixture.adminToken, product: yearly))
            Issue.record("a base plan pro.monthly's buyers hold moved to another product")
        } catch {
            #expect(error.data.reason == "grantChanged" && error.data.extra["field"]?.stringValue == "product.googlePlay", "\(error)")
        }
        try await catalog.client.call(
            CatalogUpsertProduct.self, .init(adminToken: CatalogFixture.adminToken, product: yearly, allowGrantChange: true))
        var texts = yearly
        texts.googlePlay = nil
        texts.localizations = ["en-US": .init(title: "Gold", description: "Every year")]
        try await catalog.client.call(CatalogUpsertProduct.self, .init(adminToken: CatalogFixture.adminToken, product: texts))
        let kept = try await catalog.store.snapshot().products.first { $0.definition.productId == "gold.yearly" }
        #expect(kept?.definition.googlePlay?.basePlanId == "yearly", "left out, the Play ids stay as stored")
    }

    /// Google Play's ids are checked against the whole catalog inside the write too: a product another instance created a
    /// moment before under the same ids (written straight to the store, unseen by this service's catalog) refuses the
    /// second.
    @Test func aPlayIdAnotherInstanceJustClaimedIsRefusedInsideTheWrite() async throws {
        let catalog = try await CatalogFixture.start()
        defer { Task { await catalog.stop() } }
        var first = try #require(CatalogFixture.standardCatalog.first { $0.productId == "coins.100" })
        first.productId = "gems.a"
        first.prices = nil
        first.googlePlay = GooglePlayProductIds(productId: "com.game.gems")
        try await catalog.store.upsert([(first, nil)], allowGrantChange: false)
        var second = first
        second.productId = "gems.b"
        do {
            try await catalog.client.call(CatalogUpsertProduct.self, .init(adminToken: CatalogFixture.adminToken, product: second))
            Issue.record("two products were sold under one Google Play id")
        } catch {
            #expect(error.data.reason == "googlePlayIdTaken", "\(error)")
        }
        #expect(try await catalog.store.snapshot().products.contains { $0.definition.productId == "gems.b" } == false)
    }
}
