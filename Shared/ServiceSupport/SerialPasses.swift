import NIOConcurrencyHelpers

/// Passes of some work that run one at a time, in the order asked (a simulator's notification deliveries: two passes
/// overlapping would send a notification twice). `run` answers once its own pass is over; a caller that is cancelled
/// cancels its pass, so nothing new starts after a shutdown.
public final class SerialPasses<Result: Sendable>: Sendable {
    private let tail = NIOLockedValueBox<Task<Result, Never>?>(nil)

    public init() {}

    public func run(_ pass: @escaping @Sendable () async -> Result) async -> Result {
        let task = tail.withLockedValue { tail -> Task<Result, Never> in
            let previous = tail
            let next = Task {
                _ = await previous?.value
                return await pass()
            }
            tail = next
            return next
        }
        return await withTaskCancellationHandler {
            await task.value
        } onCancel: {
            task.cancel()
        }
    }
}
