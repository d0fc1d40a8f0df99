import CatalogService
import Foundation
import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import Testing

/// A price source whose answers, failures and pace the test controls, counting its fetches.
final class ScriptedPriceSource: PriceSource {
    let name = "scripted"
    let acceptsAdminPrices = false
    private struct State {
        var prices: [String: StoredPrice] = ["coins.100": StoredPrice(storefront: "USA", currency: "USD", amountMinor: 99)]
        var failing = false
        var fetches = 0
        var gateOpen = true
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = NIOLockedValueBox(State())

    var fetches: Int { state.withLockedValue { $0.fetches } }

    func setPrice(_ minor: Int64) {
        state.withLockedValue { $0.prices["coins.100"] = StoredPrice(storefront: "USA", currency: "USD", amountMinor: minor) }
    }

    func setFailing(_ failing: Bool) { state.withLockedValue { $0.failing = failing } }

    func closeGate() { state.withLockedValue { $0.gateOpen = false } }

    func openGate() {
        let waiters = state.withLockedValue { s -> [CheckedContinuation<Void, Never>] in
            s.gateOpen = true
            defer { s.waiters = [] }
            return s.waiters
        }
        for w in waiters { w.resume() }
    }

    struct SourceDown: Error {}

    func fetch(storefront: String) async throws -> PriceTable {
        let mustWait = state.withLockedValue { s -> Bool in
            s.fetches += 1
            return !s.gateOpen
        }
        if mustWait {
            await withCheckedContinuation { c in
                let resumeNow = state.withLockedValue { s -> Bool in
                    if s.gateOpen { return true }
                    s.waiters.append(c)
                    return false
                }
                if resumeNow { c.resume() }
            }
        }
        let (prices, failing) = state.withLockedValue { ($0.prices, $0.failing) }
        if failing { throw SourceDown() }
        return PriceTable(storefront: storefront, prices: prices.filter { $0.value.storefront == storefront })
    }
}

@Suite struct PriceCacheTests {
    private func start(_ source: ScriptedPriceSource, ttlMs: Int64 = 60_000, staleWindowMs: Int64 = 600_000) async throws -> CatalogFixture {
        try await CatalogFixture.start(source: { _ in source }) {
            $0.priceCache.ttlMs = ttlMs
            $0.priceCache.staleWindowMs = staleWindowMs
        }
    }

    private func price(_ f: CatalogFixture) async throws -> String? {
        try await f.list().products.first { $0.productId == "coins.100" }?.price?.amount
    }

    @Test func freshPricesComeFromTheCacheAndExpiredOnesAreFetchedAgain() async throws {
        let source = ScriptedPriceSource()
        let f = try await start(source, staleWindowMs: 0)
        defer { Task { await f.stop() } }
        #expect(try await price(f) == "0.99")
        #expect(try await price(f) == "0.99")
        #expect(source.fetches == 1)
        source.setPrice(149)
        f.clock.advance(ms: 59_999)
        #expect(try await price(f) == "0.99")  // still fresh
        f.clock.advance(ms: 1)
        #expect(try await price(f) == "1.49")  // expired, no stale window: fetched before answering
        #expect(source.fetches == 2)
    }

    @Test func stalePricesAreServedWhileOneFetchRevalidates() async throws {
        let source = ScriptedPriceSource()
        let f = try await start(source)
        defer { Task { await f.stop() } }
        #expect(try await price(f) == "0.99")
        source.setPrice(199)
        f.clock.advance(ms: 60_000)
        #expect(try await price(f) == "0.99")  // stale, answered at once
        await f.service.settlePrices()
        #expect(try await price(f) == "1.99")  // the background fetch landed
        #expect(source.fetches == 2)
    }

    @Test func aFailingSourceLeavesTheLastGoodPricesInServiceWithAWarning() async throws {
        let source = ScriptedPriceSource()
        let f = try await start(source, staleWindowMs: 0)
        defer { Task { await f.stop() } }
        #expect(try await price(f) == "0.99")
        source.setFailing(true)
        f.clock.advance(ms: 120_000)
        #expect(try await price(f) == "0.99")
        #expect(f.logs.contains(.warning, "serving the last good prices"))
        // Not hammered: within the retry delay, no new fetch.
        let fetches = source.fetches
        #expect(try await price(f) == "0.99")
        #expect(source.fetches == fetches)
        // Recovers once the source does.
        source.setFailing(false)
        source.setPrice(249)
        f.clock.advance(ms: 1_000)
        _ = try await price(f)
        await f.service.settlePrices()
        #expect(try await price(f) == "2.49")
    }

    @Test func withNoPricesCachedAFailingSourceIsUnavailable() async throws {
        let source = ScriptedPriceSource()
        source.setFailing(true)
        let f = try await start(source)
        defer { Task { await f.stop() } }
        do throws(RPCError) {
            _ = try await f.client.call(CatalogListProducts.self, .init())
            Issue.record("expected unavailable")
        } catch {
            #expect(error.knownCode == .unavailable)
            #expect(error.reason == "priceSourceUnavailable")
        }
        // getProducts still resolves products (fulfillment needs grants, not prices).
        let got = try await f.client.call(CatalogGetProducts.self, .init(productIds: ["coins.100"]))
        #expect(got.products.map(\.productId) == ["coins.100"])
        #expect(got.products.first?.price == nil)
    }

    @Test func fiftyConcurrentMissesMakeOneUpstreamFetch() async throws {
        let source = ScriptedPriceSource()
        source.closeGate()
        let f = try await start(source)
        defer { Task { await f.stop() } }
        let listings = Task {
            try await withThrowingTaskGroup(of: String?.self) { group in
                for _ in 0..<50 {
                    group.addTask { try await self.price(f) }
                }
                var out: [String?] = []
                for try await p in group { out.append(p) }
                return out
            }
        }
        // Every caller is now waiting on the one gated fetch (or will join it); release it.
        while source.fetches == 0 { await Task.yield() }
        source.openGate()
        let prices = try await listings.value
        #expect(prices.count == 50)
        #expect(prices.allSatisfy { $0 == "0.99" })
        #expect(source.fetches == 1)
    }
}

@Suite struct ListingTests {
    @Test func theEtagChangesExactlyWhenTheListingDoes() async throws {
        let f = try await CatalogFixture.start()
        defer { Task { await f.stop() } }
        let first = try await f.list()
        #expect(try await f.list().etag == first.etag)
        #expect(try await f.list(ifNoneMatch: first.etag).notModified)
        // A price change elsewhere (DEU) does not change the USA listing...
        try await f.service.setPrices(
            .init(
                adminToken: CatalogFixture.adminToken, productId: "coins.100",
                prices: [
                    .init(storefront: "USA", currency: "USD", amount: "0.99"), .init(storefront: "DEU", currency: "EUR", amount: "1.19"),
                ]))
        #expect(try await f.list(ifNoneMatch: first.etag).notModified)
        // ...a USA price change does.
        try await f.service.setPrices(
            .init(
                adminToken: CatalogFixture.adminToken, productId: "coins.100",
                prices: [
                    .init(storefront: "USA", currency: "USD", amount: "1.29")
                ]))
        let changed = try await f.list(ifNoneMatch: first.etag)
        #expect(!changed.notModified)
        #expect(changed.etag != first.etag)
        #expect(changed.products.first?.price?.amount == "1.29")
    }

    @Test func anotherInstancesChangesAreSeenWithinTheRecheckInterval() async throws {
        let a = try await CatalogFixture.start()
        defer { Task { await a.stop() } }
        // A second service on the same database file, as a second instance would be.
        let b = try await CatalogService(
            store: try await a.openAnotherStore(), source: DatabasePriceSource(store: a.store),
            configuration: {
                var c = CatalogConfiguration(); c.adminToken = "x"; return c
            }(),
            clock: a.clock.clock, logger: .init(label: "b"))
        let before = try await b.getProducts(.init(productIds: ["coins.100"])).products.first?.title
        try await a.service.upsertProduct(
            .init(
                adminToken: CatalogFixture.adminToken,
                product: ProductDefinition(
                    productId: "coins.100", type: .consumable, referenceName: "100 coins",
                    localizations: ["en-US": .init(title: "Renamed", description: "")], defaultLocale: "en-US", grant: .coins(100))))
        #expect(try await b.getProducts(.init(productIds: ["coins.100"])).products.first?.title == before)
        a.clock.advance(ms: CatalogConfiguration().catalogRecheckMs)
        #expect(try await b.getProducts(.init(productIds: ["coins.100"])).products.first?.title == "Renamed")
    }

    @Test func aPriceFeedIsReadFromItsFileAndAdminPricesAreRefused() async throws {
        let feedURL = FileManager.default.temporaryDirectory.appendingPathComponent("feed-\(UUID().uuidString).json")
        func writeFeed(_ amount: String) throws {
            try Data(
                """
                {"products":[{"productId":"coins.100","prices":[{"territory":"USA","currency":"USD","customerPrice":"\(amount)"},
                 {"territory":"DEU","currency":"EUR","customerPrice":"1.09"}]}]}
                """.utf8
            ).write(to: feedURL)
        }
        try writeFeed("0.89")
        let f = try await CatalogFixture.start(source: { _ in PriceFeedSource(path: feedURL.path) }) { $0.priceCache.staleWindowMs = 0 }
        defer { Task { await f.stop() } }
        #expect(try await f.list().products.first?.price?.amount == "0.89")
        // The operator replaces the file: seen after the TTL.
        try writeFeed("0.79")
        f.clock.advance(ms: 60_000)
        #expect(try await f.list().products.first?.price?.amount == "0.79")
        // A broken file keeps the last good prices.
        try Data("{ not json".utf8).write(to: feedURL)
        f.clock.advance(ms: 60_000)
        #expect(try await f.list().products.first?.price?.amount == "0.79")
        #expect(f.logs.contains(.warning, "serving the last good prices"))
        do {
            try await f.service.setPrices(.init(adminToken: CatalogFixture.adminToken, productId: "coins.100", prices: []))
            Issue.record("expected a conflict")
        } catch {
            #expect(error.reason == "pricesFromFeed")
        }
    }
}
