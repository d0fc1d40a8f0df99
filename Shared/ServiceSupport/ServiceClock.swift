import Foundation
import NIOConcurrencyHelpers

/// Wall-clock time in Unix milliseconds, injectable so tests can move time (session expiry, rate
/// limits) without sleeping.
public struct ServiceClock: Sendable {
    private let read: @Sendable () -> Int64

    public init(_ read: @escaping @Sendable () -> Int64) {
        self.read = read
    }

    public var nowMs: Int64 { read() }

    public static let system = ServiceClock { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }
}

/// A clock that moves only when told to (tests, the simulator).
public final class ManualClock: Sendable {
    private let value: NIOLockedValueBox<Int64>

    public init(startMs: Int64 = 1_767_225_600_000) {  // 2026-01-01T00:00:00Z
        value = NIOLockedValueBox(startMs)
    }

    public var nowMs: Int64 { value.withLockedValue { $0 } }

    public func advance(ms: Int64) {
        value.withLockedValue { $0 += ms }
    }

    public var clock: ServiceClock { ServiceClock { [value] in value.withLockedValue { $0 } } }
}
