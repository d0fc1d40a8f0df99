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
    struct Settings: Sendable {
        /// How long an answer of the catalog is used. Zero: no cache.
        var lifetime: TimeAmount = .seconds(2)
        /// Most products kept (a catalog is far smaller; past this the cache starts over).
        var capacity = 10_000
    }

    private struct Entry {
        let rule: GrantRule
        let fetchedAt: NIODeadline
    }

    let settings: Settings
    private let now: @Sendable () -> NIODeadline
    private let entries = NIOLockedValueBox<[String: Entry]>([:])

    init(settings: Settings = .init(), now: @escaping @Sendable () -> NIODeadline = { .now() }) {
        self.settings = settings
        self.now = now
    }

    /// The grant of each product in `productIds` the catalog knows; `fetch` is asked only for those not
    /// remembered or older than the lifetime.
    func rules(
        for productIds: [String], fetch: ([String]) async throws(RPCError) -> [Product]
    ) async throws(RPCError) -> [String: GrantRule] {
        let unique = Array(Set(productIds)).sorted()
        guard !unique.isEmpty else { return [:] }
        guard settings.lifetime > .zero else { return Self.rules(of: try await fetch(unique)) }
        let start = now()
        var rules: [String: GrantRule] = [:]
        let missing = entries.withLockedValue { entries in
            unique.filter { id in
                guard let entry = entries[id], start - entry.fetchedAt < settings.lifetime, entry.fetchedAt <= start else { return true }
                rules[id] = entry.rule
                return false
            }
        }
        guard !missing.isEmpty else { return rules }
        let fetched = Self.rules(of: try await fetch(missing))
        entries.withLockedValue { entries in
            if entries.count + fetched.count > settings.capacity { entries.removeAll(keepingCapacity: true) }
            for (id, rule) in fetched { entries[id] = Entry(rule: rule, fetchedAt: start) }
        }
        rules.merge(fetched) { _, new in new }
        return rules
    }

    private static func rules(of products: [Product]) -> [String: GrantRule] {
        var rules: [String: GrantRule] = [:]
        for product in products { rules[product.productId] = GrantRule(product) }
        return rules
    }
}
