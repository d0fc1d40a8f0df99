import NIOConcurrencyHelpers

/// Which throttled sign-ins the audit log already has: one row per (operator, address, lock), not one per attempt. The
/// audit log is append-only, and a client looping on a locked name wrote a row per request until 2026-11-30. Kept in
/// memory per instance (a restart or a second instance writes the row once more), bounded by `capacity`: locks that
/// ended go first, and when every entry is live they are all forgotten (a row too many, never a lock unrecorded).
final class ThrottleNotes: Sendable {
    private let noted = NIOLockedValueBox([String: Int64]())
    let capacity: Int

    init(capacity: Int = 4_096) { self.capacity = capacity }

    /// True the first time a lock ending at `lockEndsMs` is met for `name` from `address`: write it down.
    func isFirst(name: String, address: String, lockEndsMs: Int64, nowMs: Int64) -> Bool {
        let key = name + " " + address
        return noted.withLockedValue { noted in
            if noted[key] == lockEndsMs { return false }
            if noted[key] == nil, noted.count >= capacity {
                noted = noted.filter { $0.value > nowMs }
                if noted.count >= capacity { noted.removeAll() }
            }
            noted[key] = lockEndsMs
            return true
        }
    }
}
