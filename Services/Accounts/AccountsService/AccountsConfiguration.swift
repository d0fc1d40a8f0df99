import Foundation
import ServiceSupport

/// Settings of the accounts service, with production defaults.
public struct AccountsConfiguration: Sendable {
    /// How long a session lives without use; every use extends it (sliding expiry).
    public var sessionLifetimeMs: Int64 = 30 * 24 * 3600 * 1000
    /// How long a session lives at most, however much it is used (a stolen token does not live forever).
    public var sessionAbsoluteLifetimeMs: Int64 = 90 * 24 * 3600 * 1000
    /// Sessions per account; signing in past it evicts the oldest.
    public var maxSessionsPerAccount = 20
    /// A session's `lastSeenAtMs` and expiry are written at most this often, so the hot
    /// `authenticate` path is a read, not a write, for a session in steady use.
    public var sessionTouchIntervalMs: Int64 = 60 * 1000
    /// Password hashing cost for new hashes; existing hashes are upgraded on the next login.
    public var passwordHashing: ScryptParameters = .default
    /// Password hashes computed at once (each takes tens of milliseconds of one core).
    public var hashingConcurrency: Int = ProcessInfo.processInfo.activeProcessorCount
    /// Password hashes waiting or running at most; past it, sign-ins and registrations answer `rateLimited`.
    public var hashingQueueLimit = 64
    /// The suite's service-to-service token; internal methods refuse every call when nil.
    public var internalToken: String?
    public var throttle: LoginThrottlePolicy = .init()

    public init() {}
}
