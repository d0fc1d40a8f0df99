import NIOConcurrencyHelpers

/// Writes with the same key take turns on an instance, in the order they came, as SQLite's one writer orders them: the
/// store's writes by lock key (an account's), spends by holder (`KnownWallets`). On PostgreSQL a write's first attempt
/// takes no lock, so two redeems of one account running at once here would both read the account's last event and one
/// would fail and run again behind the lock; taking turns here, the second starts on what the first committed. Across
/// instances the database still decides (the unique event number and the advisory lock).
final class WriteTurns<Key: Hashable & Sendable>: Sendable {
    private struct Line {
        /// Writes holding or awaiting the key's turn here; the first of them runs.
        var count = 0
        var waiting: [CheckedContinuation<Void, Never>] = []
    }
    private let lines = NIOLockedValueBox([Key: Line]())

    /// Writes with `key` here, running or waiting.
    func count(_ key: Key) -> Int { lines.withLockedValue { $0[key]?.count ?? 0 } }

    /// Returns once every write that began before it with `key` here has ended; each call is followed by one `end`.
    func begin(_ key: Key) async {
        await withCheckedContinuation { (turn: CheckedContinuation<Void, Never>) in
            let first = lines.withLockedValue { lines in
                var line = lines[key] ?? Line()
                line.count += 1
                if line.count > 1 { line.waiting.append(turn) }
                lines[key] = line
                return line.count == 1
            }
            if first { turn.resume() }
        }
    }

    /// The write that `begin` let in is done: the next one with `key` goes.
    func end(_ key: Key) {
        let next: CheckedContinuation<Void, Never>? = lines.withLockedValue { lines in
            guard var line = lines[key] else { return nil }
            line.count -= 1
            guard line.count > 0 else {
                lines[key] = nil
                return nil
            }
            let next = line.waiting.removeFirst()
            lines[key] = line
            return next
        }
        next?.resume()
    }
}

extension WriteTurns where Key: Comparable {
    /// Runs `body` once every write that came before it with one of `keys` has ended here. Keys are taken one at a time
    /// in sorted order, so two writes sharing several keys can never wait for each other.
    func inTurn<T>(_ keys: [Key], _ body: () async throws -> T) async throws -> T {
        let ordered = Array(Set(keys)).sorted()
        for key in ordered { await begin(key) }
        defer { for key in ordered.reversed() { end(key) } }
        return try await body()
    }
}
