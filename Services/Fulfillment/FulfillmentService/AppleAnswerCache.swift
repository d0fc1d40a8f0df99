import NIOConcurrencyHelpers

/// What Apple answered a moment ago, by key, for `lifetimeMs`: the customers' subscriptions read for offers (a paywall's
/// eligibility question and the signature that follows cost one history read), the tokens Apple holds for receipt
/// purchases (a receipt redeemed again and again, or by many devices at once, is looked up once). Bounded: at
/// `capacity`, expired entries go first, then half of the rest.
final class AppleAnswerCache<Value: Sendable>: Sendable {
    private struct Entry {
        var readAtMs: Int64
        var value: Value
    }

    private let lifetimeMs: Int64
    private let capacity: Int
    private let entries = NIOLockedValueBox<[String: Entry]>([:])

    init(lifetimeMs: Int64, capacity: Int = 10_000) {
        self.lifetimeMs = lifetimeMs
        self.capacity = max(2, capacity)
    }

    func value(_ key: String, nowMs: Int64) -> Value? {
        entries.withLockedValue { all in
            guard let entry = all[key], nowMs >= entry.readAtMs, nowMs - entry.readAtMs < lifetimeMs else { return nil }
            return entry.value
        }
    }

    func keep(_ value: Value, for key: String, nowMs: Int64) {
        entries.withLockedValue { all in
            if all[key] == nil, all.count >= capacity {
                all = all.filter { nowMs >= $0.value.readAtMs && nowMs - $0.value.readAtMs < lifetimeMs }
                if all.count >= capacity / 2 {
                    for key in all.keys.prefix(all.count - capacity / 2) { all[key] = nil }
                }
            }
            all[key] = Entry(readAtMs: nowMs, value: value)
        }
    }
}
