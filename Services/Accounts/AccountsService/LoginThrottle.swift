import Foundation
import ServiceSupport

/// Failed-login limits per username from one address, per username from everywhere, and per client address.
///
/// Each key counts failures within a window; past a threshold, further attempts are refused for a
/// delay that doubles with every further failure, capped. The owner is never locked out by someone else:
/// guesses from an address lock only that address's attempts at that name (`pair:` keys, `usernameThreshold`,
/// capped at `maxLockMs`), and guesses spread over many addresses only slow every attempt at the name
/// (`user:` keys, `usernameGlobalThreshold`, capped at `maxUsernameDelayMs`). A success clears the
/// name's counts (not the address's, or an attacker could clear their own with an account of theirs).
/// Counters expire with their window and the table is bounded (`maxRows`, oldest windows forgotten first).
///
/// Attempts are counted before the password is checked (`AccountsStore.admitAttempt`), so concurrent
/// attempts cannot race the limit: at most `usernameThreshold` passwords are checked per username before
/// it locks, however the attempts arrive. A success clears the username's count and takes its own
/// attempt back from the address's.
///
/// Registrations count per client address too (`register:` keys), success or not.
public struct LoginThrottlePolicy: Sendable {
    /// Failures at one username from one address.
    public var usernameThreshold = 5
    /// Failures at one username from every address together: past it, attempts at the name are only delayed.
    public var usernameGlobalThreshold = 50
    public var maxUsernameDelayMs: Int64 = 5_000
    public var addressThreshold = 20
    /// Registrations per address per window before registering from it is delayed.
    public var registrationThreshold = 30
    public var windowMs: Int64 = 15 * 60 * 1000
    public var baseLockMs: Int64 = 1_000
    public var maxLockMs: Int64 = 15 * 60 * 1000
    /// The most counters kept; past it the oldest windows are forgotten first (`AccountsStorage.expireThrottle`).
    public var maxRows = 50_000

    public init() {}

    public static func usernameKey(_ key: String) -> String { "user:\(key)" }
    public static func pairKey(_ key: String, address: String?) -> String { "pair:\(key)@\(address.map(ClientAddress.limitKey) ?? "-")" }
    /// Addresses count as `ClientAddress.limitKey` has them (an IPv6 address by its /64).
    public static func addressKey(_ address: String) -> String { "addr:\(ClientAddress.limitKey(address))" }
    /// A password change's checks of the current password, per session: limited as one address's at the name (`pair:`).
    public static func sessionKey(_ key: String, tokenHash: Data) -> String {
        "pair:\(key)@session:" + tokenHash.prefix(12).map { String(format: "%02x", $0) }.joined()
    }
    static func registrationKey(_ address: String) -> String { "register:\(ClientAddress.limitKey(address))" }

    public func threshold(for key: String) -> Int {
        if key.hasPrefix("pair:") { return usernameThreshold }
        if key.hasPrefix("user:") { return usernameGlobalThreshold }
        if key.hasPrefix("register:") { return registrationThreshold }
        return addressThreshold
    }

    /// The state after a successful sign-in took its counted attempt back (an address key).
    public func returningAttempt(_ state: ThrottleState?, key: String) -> ThrottleState? {
        guard var s = state else { return nil }
        s.failures = max(0, s.failures - 1)
        if s.failures < threshold(for: key) { s.lockedUntilMs = 0 }
        return s.failures == 0 && s.lockedUntilMs == 0 ? nil : s
    }

    /// One attempt at every key, given their stored states: how long to wait (0: admitted, the attempt counted as a failure
    /// on every key until a success gives it back), and the states to store when admitted.
    public func admitting(_ states: [(key: String, state: ThrottleState?)], nowMs: Int64) -> (
        waitMs: Int64, next: [(key: String, state: ThrottleState)]
    ) {
        let wait = states.map { retryAfterMs($0.state, nowMs: nowMs) }.max() ?? 0
        guard wait == 0 else { return (wait, []) }
        return (0, states.map { ($0.key, recordingFailure($0.state, key: $0.key, nowMs: nowMs)) })
    }

    /// Milliseconds until `state` allows another attempt (0: allowed now).
    public func retryAfterMs(_ state: ThrottleState?, nowMs: Int64) -> Int64 {
        guard let state else { return 0 }
        return max(0, state.lockedUntilMs - nowMs)
    }

    /// The state after one more failure at `nowMs`.
    public func recordingFailure(_ state: ThrottleState?, key: String, nowMs: Int64) -> ThrottleState {
        var s = state ?? .init(failures: 0, windowStartMs: nowMs, lockedUntilMs: 0)
        if nowMs - s.windowStartMs > windowMs && nowMs >= s.lockedUntilMs {
            s = .init(failures: 0, windowStartMs: nowMs, lockedUntilMs: 0)
        }
        s.failures += 1
        let over = s.failures - threshold(for: key)
        if over >= 0 {
            let factor = Int64(1) << min(over, 30)
            let cap = key.hasPrefix("user:") ? maxUsernameDelayMs : maxLockMs
            s.lockedUntilMs = nowMs + min(cap, baseLockMs.multipliedReportingOverflow(by: factor).partialValue)
        }
        return s
    }
}
