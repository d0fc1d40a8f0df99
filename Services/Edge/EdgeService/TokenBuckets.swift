import Foundation
import NIOConcurrencyHelpers

/// One token bucket per client address: `burst` requests at once, refilled at `perSecond`. Bounded: past
/// `maxAddresses` buckets, full (idle) ones are forgotten first, so a flood of addresses cannot grow it forever.
final class TokenBuckets: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: Double
    }

    private let burst: Double
    private let perSecond: Double
    private let maxAddresses: Int
    private let now: @Sendable () -> Double
    private let buckets = NIOLockedValueBox<[String: Bucket]>([:])

    init(
        burst: Double, perSecond: Double, maxAddresses: Int = 100_000,
        now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }
    ) {
        self.burst = max(1, burst)
        self.perSecond = max(0.001, perSecond)
        self.maxAddresses = maxAddresses
        self.now = now
    }

    /// Takes one token for `address`: nil when allowed, else the seconds until one is available.
    func take(_ address: String) -> Double? {
        let t = now()
        return buckets.withLockedValue { all in
            var bucket = all[address] ?? Bucket(tokens: burst, updated: t)
            bucket.tokens = min(burst, bucket.tokens + (t - bucket.updated) * perSecond)
            bucket.updated = t
            defer {
                if all.count >= maxAddresses, all[address] == nil {
                    all = all.filter { min(burst, $0.value.tokens + (t - $0.value.updated) * perSecond) < burst }
                }
                all[address] = bucket
            }
            guard bucket.tokens >= 1 else { return (1 - bucket.tokens) / perSecond }
            bucket.tokens -= 1
            return nil
        }
    }
}
