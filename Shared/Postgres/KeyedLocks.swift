import NIOConcurrencyHelpers

/// In-process locks by name, taken before a database advisory lock of the same name: a burst of writes for one
/// key (a flood of sign-ins from one address, say) then waits here, suspended, with at most one of them holding a
/// pool thread and a connection while it waits for the database lock (which other instances may hold). Without
/// it, every pool thread could end up blocked on that one key and the pool would serve nobody else.
///
/// Waiters of a key are served in arrival order; several keys are taken in sorted order, as the database takes
/// them, so two callers wanting the same keys cannot wait for each other.
final class KeyedLocks: Sendable {
    /// Per held key, the callers waiting for it (empty: held, nobody waiting). An absent key is free.
    private let held = NIOLockedValueBox<[String: [CheckedContinuation<Void, Never>]]>([:])

    func withLocks<T: Sendable>(_ keys: [String], _ body: () async throws -> T) async throws -> T {
        let sorted = Set(keys).sorted()
        for key in sorted { await lock(key) }
        defer { for key in sorted.reversed() { unlock(key) } }
        return try await body()
    }

    /// How many callers wait for `key` (held by another); for tests.
    func waiting(_ key: String) -> Int {
        held.withLockedValue { $0[key]?.count ?? 0 }
    }

    private func lock(_ key: String) async {
        // Claimed at once when free; otherwise queued, and resumed by `unlock` already owning the key.
        let claimed = held.withLockedValue { table -> Bool in
            guard table[key] == nil else { return false }
            table[key] = []
            return true
        }
        if claimed { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let claimedMeanwhile = held.withLockedValue { table -> Bool in
                guard table[key] != nil else {
                    table[key] = []
                    return true
                }
                table[key]!.append(continuation)
                return false
            }
            if claimedMeanwhile { continuation.resume() }
        }
    }

    private func unlock(_ key: String) {
        let next = held.withLockedValue { table -> CheckedContinuation<Void, Never>? in
            guard var waiters = table[key], !waiters.isEmpty else {
                table[key] = nil
                return nil
            }
            let first = waiters.removeFirst()
            table[key] = waiters
            return first
        }
        next?.resume()  // ownership passes to the first waiter
    }
}
