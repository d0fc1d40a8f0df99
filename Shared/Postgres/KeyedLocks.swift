import NIOConcurrencyHelpers

/// In-process limits by name, taken before a database advisory lock of the same name: at most `permits` callers
/// per key go on to take a pool thread and a connection (one holding the database lock, the next ones already
/// waiting in the database so the lock passes on without a round trip through this process); the rest wait here,
/// suspended. Without it a burst
/// of writes for one key (a flood of sign-ins from one address, say) could take every pool thread, each blocked on
/// that one key's database lock (which another instance may hold), and the pool would serve nobody else.
///
/// Waiters of a key are served in arrival order; several keys are taken in sorted order, as the database takes
/// them, so callers wanting the same keys cannot wait for each other in a cycle.
final class KeyedLocks: Sendable {
    private struct Entry {
        var holders = 0
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let table = NIOLockedValueBox<[String: Entry]>([:])
    let permits: Int

    init(permits: Int) {
        self.permits = max(1, permits)
    }

    func withLocks<T: Sendable>(_ keys: [String], _ body: () async throws -> T) async throws -> T {
        let sorted = Set(keys).sorted()
        for key in sorted { await acquire(key) }
        defer { for key in sorted.reversed() { release(key) } }
        return try await body()
    }

    /// How many callers wait here for `key` (all its permits taken); for tests.
    func waiting(_ key: String) -> Int {
        table.withLockedValue { $0[key]?.waiters.count ?? 0 }
    }

    private func acquire(_ key: String) async {
        let granted = table.withLockedValue { table -> Bool in
            var entry = table[key] ?? Entry()
            guard entry.holders < permits else { return false }
            entry.holders += 1
            table[key] = entry
            return true
        }
        if granted { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let grantedMeanwhile = table.withLockedValue { table -> Bool in
                var entry = table[key] ?? Entry()
                defer { table[key] = entry }
                guard entry.holders < permits else {
                    entry.waiters.append(continuation)
                    return false
                }
                entry.holders += 1
                return true
            }
            if grantedMeanwhile { continuation.resume() }
        }
    }

    private func release(_ key: String) {
        let next = table.withLockedValue { table -> CheckedContinuation<Void, Never>? in
            guard var entry = table[key] else { return nil }
            defer { table[key] = entry.holders == 0 && entry.waiters.isEmpty ? nil : entry }
            guard !entry.waiters.isEmpty else {
                entry.holders -= 1
                return nil
            }
            return entry.waiters.removeFirst()  // the permit passes to the first waiter
        }
        next?.resume()
    }
}
