import CatalogService
import Foundation
import IAPProtocol
import JSONRPC
import RPCTransport
import Testing

/// `catalog.setRetention` and `catalog.getRetention` over TCP: rules checked before anything is written, kept out of
/// product listings, read back by the internal token only.
@Suite struct RetentionRulesTests {
    static let message = "0f6e1c2a-9b1d-4c59-8a55-0e1b2c3d4e5f"
    static let internalToken = "internal-token-for-catalog-tests"

    static func set(_ catalog: CatalogFixture, _ productId: String, _ rules: RetentionRules?) async throws(RPCError) {
        _ = try await catalog.client.call(
            CatalogSetRetention.self, .init(adminToken: CatalogFixture.adminToken, productId: productId, retention: rules))
    }

    /// pro.monthly offers "stay" to anyone: what the retention rules here name.
    static func offerStay(_ catalog: CatalogFixture) async throws {
        try await catalog.client.call(
            CatalogSetOffers.self,
            .init(
                adminToken: CatalogFixture.adminToken, productId: "pro.monthly",
                offers: [.init(offerId: "stay", eligibility: OfferEligibilityRule(kind: .anyone))]))
    }

    @Test func rulesAreCheckedKeptOutOfListingsAndReadByTheInternalTokenOnly() async throws {
        let catalog = try await CatalogFixture.start(configure: { $0.internalToken = Self.internalToken })
        defer { Task { await catalog.stop() } }
        try await Self.offerStay(catalog)
        func refusal(_ productId: String, _ choice: RetentionChoice) async -> String? {
            do {
                try await Self.set(catalog, productId, RetentionRules(choices: [choice]))
                return nil
            } catch { return error.data.reason }
        }
        #expect(await refusal("coins.100", .init(id: "a", kind: .message, messageIdentifier: Self.message)) == "retentionNotAllowed")
        #expect(await refusal("pro.monthly", .init(id: "a", kind: .message, messageIdentifier: "not-a-uuid")) == "invalidValue")
        #expect(
            await refusal("pro.monthly", .init(id: "a", kind: .promotionalOffer, messageIdentifier: Self.message, offerId: "gone")) == "unknownOffer")
        #expect(
            await refusal("pro.monthly", .init(id: "a", kind: .alternateProduct, messageIdentifier: Self.message, alternateProductId: "coins.100"))
                == "unknownProduct")
        #expect(
            await refusal(
                "pro.monthly", .init(id: "a", kind: .message, messageIdentifier: Self.message, when: .init(minTenureDays: 9, maxTenureDays: 3)))
                == "invalidValue")
        #expect(await refusal("pro.monthly", .init(id: "a", kind: .message, messageIdentifier: Self.message, offerId: "stay")) == "invalidValue")
        #expect(
            await refusal("pro.monthly", .init(id: "a", kind: .message, messageIdentifier: Self.message, locales: ["English"])) == "invalidLocale")

        let rules = RetentionRules(
            choices: [.init(id: "stay", kind: .promotionalOffer, messageIdentifier: Self.message, offerId: "stay", when: .init(minRenewals: 2))],
            defaultMessageIdentifier: Self.message)
        try await Self.set(catalog, "pro.monthly", rules)
        let read = try await catalog.client.call(CatalogGetRetention.self, .init(internalToken: Self.internalToken, productId: "pro.monthly"))
        #expect(read.retention == rules && read.subscriptionGroup == "pro" && read.offers?.map(\.offerId) == ["stay"])
        // Apps list products; the rules are the store's strategy and not theirs to read.
        let listing = try await catalog.client.callRaw(method: CatalogListProducts.name, params: Array("{}".utf8))
        #expect(!String(decoding: listing, as: UTF8.self).contains("retention"))
        await #expect(throws: RPCError.self) {
            try await catalog.client.call(CatalogGetRetention.self, .init(internalToken: "wrong", productId: "pro.monthly"))
        }
        // An offer a rule uses stays until the rule goes.
        await #expect(throws: RPCError.self) {
            try await catalog.client.call(
                CatalogSetOffers.self, .init(adminToken: CatalogFixture.adminToken, productId: "pro.monthly", offers: []))
        }
        try await Self.set(catalog, "pro.monthly", nil)
        #expect(
            try await catalog.client.call(CatalogGetRetention.self, .init(internalToken: Self.internalToken, productId: "pro.monthly")).retention
                == nil)
    }

    /// A retired product is no longer sold: no rule may offer it instead, and a rule naming one retired since is left out of
    /// what fulfillment reads (it comes back with the product).
    @Test func aRetiredProductIsNeverOfferedInstead() async throws {
        let catalog = try await CatalogFixture.start(configure: { $0.internalToken = Self.internalToken })
        defer { Task { await catalog.stop() } }
        var yearly = try #require(CatalogFixture.standardCatalog.first { $0.productId == "pro.monthly" })
        yearly.productId = "pro.yearly"
        try await catalog.client.call(CatalogUpsertProduct.self, .init(adminToken: CatalogFixture.adminToken, product: yearly))
        let instead = RetentionChoice(id: "yearly", kind: .alternateProduct, messageIdentifier: Self.message, alternateProductId: "pro.yearly")
        let stay = RetentionChoice(id: "stay", kind: .message, messageIdentifier: Self.message)
        try await Self.set(catalog, "pro.monthly", RetentionRules(choices: [instead, stay]))
        func read() async throws -> [String]? {
            try await catalog.client.call(CatalogGetRetention.self, .init(internalToken: Self.internalToken, productId: "pro.monthly"))
                .retention?.choices.map(\.id)
        }
        #expect(try await read() == ["yearly", "stay"])
        try await catalog.client.call(CatalogRetireProduct.self, .init(adminToken: CatalogFixture.adminToken, productId: "pro.yearly"))
        #expect(try await read() == ["stay"])
        do {
            try await Self.set(catalog, "pro.monthly", RetentionRules(choices: [instead]))
            Issue.record("a retired alternate was accepted")
        } catch {
            #expect(error.data.reason == "productRetired" && error.data.extra["field"]?.stringValue == "retention.choices[0].alternateProductId")
        }
        yearly.status = .active
        try await catalog.client.call(CatalogUpsertProduct.self, .init(adminToken: CatalogFixture.adminToken, product: yearly))
        #expect(try await read() == ["yearly", "stay"])
    }

    /// Offers and retention rules are written into the product as stored, not as this instance last read it: another
    /// instance's retire (here, a write straight to the store, which this service's snapshot has not seen) stays.
    @Test func offersAndRulesSetOnAStaleSnapshotKeepAnotherInstancesChange() async throws {
        let catalog = try await CatalogFixture.start(configure: { $0.internalToken = Self.internalToken })
        defer { Task { await catalog.stop() } }
        #expect(try await catalog.store.retire(productId: "pro.monthly") == .done)
        try await catalog.client.call(
            CatalogSetOffers.self,
            .init(
                adminToken: CatalogFixture.adminToken, productId: "pro.monthly",
                offers: [.init(offerId: "stay", eligibility: OfferEligibilityRule(kind: .anyone))]))
        try await Self.set(catalog, "pro.monthly", RetentionRules(choices: [.init(id: "a", kind: .message, messageIdentifier: Self.message)]))
        let stored = try #require(try await catalog.store.snapshot().products.first { $0.definition.productId == "pro.monthly" })
        #expect(stored.status == .retired)
        #expect(stored.definition.offers?.map(\.offerId) == ["stay"] && stored.definition.retention?.choices.map(\.id) == ["a"])
    }
}
