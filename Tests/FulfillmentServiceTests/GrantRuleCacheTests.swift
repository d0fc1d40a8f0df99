import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import NIOCore
import Testing

@testable import FulfillmentService

/// The rule of `GrantRuleCache` with a clock the test moves (the catalog is a closure that counts its calls;
/// the suite's end-to-end tests cover redeems through the real catalog).
@Suite struct GrantRuleCacheTests {
    final class Catalog: Sendable {
        let products = NIOLockedValueBox<[String: Int64]>(["coins.100": 100, "coins.500": 500])
        let asked = NIOLockedValueBox<[[String]]>([])

        func fetch(_ ids: [String]) throws(RPCError) -> [Product] {
            asked.withLockedValue { $0.append(ids) }
            return products.withLockedValue { products in
                ids.compactMap { id in
                    products[id].map {
                        Product(
                            productId: id, type: .consumable, referenceName: id, title: id, description: id, status: .active,
                            grant: .coins($0))
                    }
                }
            }
        }
    }

    final class Clock: Sendable {
        let now = NIOLockedValueBox(NIODeadline.uptimeNanoseconds(1_000_000_000))
        func advance(_ amount: TimeAmount) { now.withLockedValue { $0 = $0 + amount } }
    }

    @Test func answersFromMemoryWithinTheLifetimeAndAsksAgainAfterIt() async throws {
        let catalog = Catalog()
        let clock = Clock()
        let cache = GrantRuleCache(settings: .init(lifetime: .seconds(2)), now: { clock.now.withLockedValue { $0 } })
        let fetch: ([String]) async throws(RPCError) -> [Product] = { ids throws(RPCError) in try catalog.fetch(ids) }

        #expect(try await cache.rules(for: ["coins.100"], fetch: fetch) == ["coins.100": .coins(perUnit: 100)])
        catalog.products.withLockedValue { $0["coins.100"] = 150 }  // changed in the catalog
        clock.advance(.milliseconds(1_999))
        #expect(try await cache.rules(for: ["coins.100", "coins.100"], fetch: fetch) == ["coins.100": .coins(perUnit: 100)])
        #expect(catalog.asked.withLockedValue { $0 } == [["coins.100"]])

        // Only what is missing is asked for; then, past the lifetime, the change arrives.
        #expect(
            try await cache.rules(for: ["coins.500", "coins.100"], fetch: fetch) == [
                "coins.100": .coins(perUnit: 100), "coins.500": .coins(perUnit: 500),
            ])
        clock.advance(.milliseconds(1))
        #expect(try await cache.rules(for: ["coins.100"], fetch: fetch) == ["coins.100": .coins(perUnit: 150)])
        #expect(catalog.asked.withLockedValue { $0 } == [["coins.100"], ["coins.500"], ["coins.100"]])
    }

    @Test func aProductTheCatalogDoesNotKnowIsAskedForEveryTime() async throws {
        let catalog = Catalog()
        let cache = GrantRuleCache(settings: .init(lifetime: .seconds(60)))
        let fetch: ([String]) async throws(RPCError) -> [Product] = { ids throws(RPCError) in try catalog.fetch(ids) }
        #expect(try await cache.rules(for: ["gems.50"], fetch: fetch).isEmpty)
        catalog.products.withLockedValue { $0["gems.50"] = 50 }  // added after the purchase named it
        #expect(try await cache.rules(for: ["gems.50"], fetch: fetch) == ["gems.50": .coins(perUnit: 50)])
        #expect(catalog.asked.withLockedValue { $0 } == [["gems.50"], ["gems.50"]])
    }

    @Test func aLifetimeOfZeroAsksTheCatalogEachTimeAndAFailureIsPassedOn() async throws {
        let catalog = Catalog()
        let cache = GrantRuleCache(settings: .init(lifetime: .zero))
        let fetch: ([String]) async throws(RPCError) -> [Product] = { ids throws(RPCError) in try catalog.fetch(ids) }
        for _ in 0..<3 { _ = try await cache.rules(for: ["coins.100"], fetch: fetch) }
        #expect(catalog.asked.withLockedValue { $0.count } == 3)

        let remembering = GrantRuleCache(settings: .init(lifetime: .seconds(60)))
        let down: ([String]) async throws(RPCError) -> [Product] = { _ throws(RPCError) in
            throw RPCError.unavailable("catalog is down", reason: "dependencyUnavailable")
        }
        await #expect(throws: RPCError.self) { try await remembering.rules(for: ["coins.100"], fetch: down) }
        // Nothing was remembered from the failure: the next answer comes from the catalog.
        #expect(try await remembering.rules(for: ["coins.100"], fetch: fetch) == ["coins.100": .coins(perUnit: 100)])
    }

    @Test func pastItsCapacityTheCacheStartsOver() async throws {
        let catalog = Catalog()
        let cache = GrantRuleCache(settings: .init(lifetime: .seconds(60), capacity: 1))
        let fetch: ([String]) async throws(RPCError) -> [Product] = { ids throws(RPCError) in try catalog.fetch(ids) }
        _ = try await cache.rules(for: ["coins.100"], fetch: fetch)
        _ = try await cache.rules(for: ["coins.500"], fetch: fetch)  // evicts coins.100
        _ = try await cache.rules(for: ["coins.100"], fetch: fetch)
        #expect(catalog.asked.withLockedValue { $0 } == [["coins.100"], ["coins.500"], ["coins.100"]])
    }
}
