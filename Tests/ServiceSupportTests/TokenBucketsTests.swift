import NIOConcurrencyHelpers
import ServiceSupport
import Testing

/// The per-key token buckets that budget logins, registrations and calls to Apple: a burst at once, refilled at a
/// rate, a refused request takes nothing, and a flood of keys cannot grow the table past its bound.
@Suite struct TokenBucketsTests {
    final class Clock: Sendable {
        let seconds = NIOLockedValueBox(0.0)
        func advance(_ by: Double) { seconds.withLockedValue { $0 += by } }
        var now: @Sendable () -> Double { { [seconds] in seconds.withLockedValue { $0 } } }
    }

    @Test func aBurstThenTheRefillRateAndARefusalTakesNothing() {
        let clock = Clock()
        let buckets = TokenBuckets(burst: 3, perSecond: 1, now: clock.now)
        #expect((0..<3).map { _ in buckets.take("a") } == [nil, nil, nil])
        #expect(buckets.take("a") == 1, "empty: one token a second")
        #expect(buckets.take("b") == nil, "each key has its own bucket")
        clock.advance(0.5)
        #expect(buckets.take("a") == 0.5, "refused, and nothing taken: still half a token")
        clock.advance(0.5)
        #expect(buckets.take("a") == nil)
        // A cost above the burst is paid by a full bucket, never refused for ever.
        clock.advance(10)
        #expect(buckets.take("a", cost: 5) == nil)
        #expect(buckets.take("a", cost: 2) == 2)
    }

    @Test func aFloodOfKeysStaysBounded() {
        let clock = Clock()
        let buckets = TokenBuckets(burst: 2, perSecond: 1, maxAddresses: 1_000, now: clock.now)
        for i in 0..<100_000 { _ = buckets.take("key-\(i)") }
        #expect(buckets.count <= 1_000)
        // Drained buckets are kept over refilled ones: a key that just spent its burst is still refused.
        _ = buckets.take("spender")
        _ = buckets.take("spender")
        #expect(buckets.take("spender") != nil)
    }
}
