import NIOConcurrencyHelpers

/// Which throttled sign-ins the audit log already has: one row per (operator, address, lock), not one per attempt. The
/// audit log is append-only, and a client looping on a locked name wrote a row per request until 2026-11-30. Every lock
/// met is kept (not only the latest per operator and address: two locks of unknown names from one address, taken in
/// turns, would each look new). Kept in memory per instance (a restart or a second instance writes the row once more),
/// bounded by `capacity`: locks that ended go first, and when every entry is live they are all forgotten (a row too
/// many, never a lock unrecorded).
final class ThrottleNotes: Sendable {
    /// "name address lockEnd" -> the lock's end.
    private let noted = NIOLockedValueBox([String: Int64]())
    let capacity: Int

    init(capacity: Int = 4_096) { self.capacity = capacity }

    /// True the first time a lock ending at `lockEndsMs` is met for `name` from `address`: write it down.
    func isFirst(name: String, address: String, lockEndsMs: Int64, nowMs: Int64) -> Bool {
        let key = "\(name) \(address) \(lockEndsMs)"
        return noted.withLockedValue { noted in
            guard noted[key] == nil else { return false }
            if noted.count >= capacity {
                noted = noted.filter { $0.value > nowMs }
                if noted.count >= capacity { noted.removeAll() }
            }
            noted[key] = lockEndsMs
            return true
        }
    }
}
