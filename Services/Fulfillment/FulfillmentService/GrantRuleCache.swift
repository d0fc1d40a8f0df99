import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import NIOCore

/// What catalog products grant, remembered for a short while so a redeem does not ask the catalog each time.
///
/// Every redeem and every processed notification needs the grant of the products it touches; asking the
/// catalog each time was one of the three calls on the redeem path. Products change rarely, so an answer is
/// reused for `lifetime` (measured on a monotonic clock): a grant changed in the catalog reaches redeems at
/// most that much later, on every fulfillment instance. Only products the catalog knows are kept: a product
/// added after a purchase that named it is granted as soon as the catalog has it (a redeem that found it
/// unknown was not finishable and is retried). A lifetime of zero asks the catalog every time.
final class GrantRuleCache: Sendable {
    typealias Settings = CatalogAnswerCache<GrantRule>.Settings
    private let cache: CatalogAnswerCache<GrantRule>

    var settings: Settings { cache.settings }

    init(settings: Settings = .init(), now: @escaping @Sendable () -> NIODeadline = { .now() }) {
        cache = CatalogAnswerCache(settings: settings, now: now)
    }

    /// The grant of each product in `productIds` the catalog knows; `fetch` is asked only for those not
    /// remembered or older than the lifetime.
    func rules(
        for productIds: [String], fetch: ([String]) async throws(RPCError) -> [Product]
    ) async throws(RPCError) -> [String: GrantRule] {
        try await cache.values(for: productIds) { ids throws(RPCError) in
            var rules: [String: GrantRule] = [:]
            for product in try await fetch(ids) { rules[product.productId] = GrantRule(product) }
            return rules
        }
    }
}

/// An answer of the catalog per id, remembered for `lifetime` on a monotonic clock (`GrantRuleCache`; the catalog's
/// products per Google Play id, `FulfillmentService.playCatalog`). Ids the answer lacks are asked again next time.
final class CatalogAnswerCache<Value: Sendable>: Sendable {
    struct Settings: Sendable {
        /// How long an answer of the catalog is used. Zero: no cache.
        var lifetime: TimeAmount = .seconds(2)
        /// Most ids kept (a catalog is far smaller; past this the cache starts over).
        var capacity = 10_000
    }

    private struct Entry {
        let value: Value
        let fetchedAt: NIODeadline
    }

    let settings: Settings
    private let now: @Sendable () -> NIODeadline
    private let entries = NIOLockedValueBox<[String: Entry]>([:])

    init(settings: Settings = .init(), now: @escaping @Sendable () -> NIODeadline = { .now() }) {
        self.settings = settings
        self.now = now
    }

    /// The value of each id in `ids` the catalog answers; `fetch` is asked only for those not remembered or older than
    /// the lifetime.
    func values(
        for ids: [String], fetch: ([String]) async throws(RPCError) -> [String: Value]
    ) async throws(RPCError) -> [String: Value] {
        let unique = Array(Set(ids)).sorted()
        guard !unique.isEmpty else { return [:] }
        guard settings.lifetime > .zero else { return try await fetch(unique) }
        let start = now()
        var values: [String: Value] = [:]
        let missing = entries.withLockedValue { entries in
            unique.filter { id in
                guard let entry = entries[id], start - entry.fetchedAt < settings.lifetime, entry.fetchedAt <= start else { return true }
                values[id] = entry.value
                return false
            }
        }
        guard !missing.isEmpty else { return values }
        let fetched = try await fetch(missing)
        entries.withLockedValue { entries in
            if entries.count + fetched.count > settings.capacity { entries.removeAll(keepingCapacity: true) }
            for (id, value) in fetched { entries[id] = Entry(value: value, fetchedAt: start) }
        }
        values.merge(fetched) { _, new in new }
        return values
    }
}
