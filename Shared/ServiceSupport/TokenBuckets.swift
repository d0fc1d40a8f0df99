import Foundation
import NIOConcurrencyHelpers

/// One token bucket per key (a client address, an account): `burst` requests at once, refilled at `perSecond`. Bounded: past
/// `maxAddresses` buckets, full (idle) ones are forgotten first, so a flood of addresses cannot grow it forever.
public final class TokenBuckets: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: Double
    }

    private let burst: Double
    private let perSecond: Double
    private let maxAddresses: Int
    private let now: @Sendable () -> Double
    private let buckets = NIOLockedValueBox<[String: Bucket]>([:])

    public init(
        burst: Double, perSecond: Double, maxAddresses: Int = 100_000,
        now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }
    ) {
        self.burst = max(1, burst)
        self.perSecond = max(0.001, perSecond)
        self.maxAddresses = maxAddresses
        self.now = now
    }

    /// Takes `cost` tokens for `address`: nil when allowed, else the seconds until they are available.
    /// A refused request takes nothing.
    public func take(_ address: String, cost requested: Double = 1) -> Double? {
        let cost = min(requested, burst)  // a cost above the burst could never be paid: a full bucket pays it
        let t = now()
        return buckets.withLockedValue { all in
            var bucket = all[address] ?? Bucket(tokens: burst, updated: t)
            bucket.tokens = min(burst, bucket.tokens + (t - bucket.updated) * perSecond)
            bucket.updated = t
            defer {
                if all[address] == nil, all.count >= maxAddresses { evict(&all, at: t) }
                all[address] = bucket
            }
            guard bucket.tokens >= cost else { return (cost - bucket.tokens) / perSecond }
            bucket.tokens -= cost
            return nil
        }
    }

    /// At the cap: forget the buckets that have refilled (they hold no state worth keeping); if a flood
    /// of drained addresses leaves none, forget half of them, so each eviction frees room for many new
    /// addresses and the work stays amortized constant per request.
    private func evict(_ all: inout [String: Bucket], at t: Double) {
        all = all.filter { min(burst, $0.value.tokens + (t - $0.value.updated) * perSecond) < burst }
        if all.count >= maxAddresses / 2 {
            for key in all.keys.prefix(all.count - maxAddresses / 2) { all[key] = nil }
        }
    }

    public var count: Int { buckets.withLockedValue { $0.count } }
}
