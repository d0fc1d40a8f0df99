import NIOConcurrencyHelpers
import NIOPosix

#if canImport(Glibc)
    import Glibc
#else
    import Darwin
#endif

/// Works around a lost wake-up in Swift concurrency's global executor on Linux (libdispatch's cooperative
/// pool, Swift 6.3): now and then, once the pool's idle threads have exited, jobs enqueued for it stay queued
/// with no thread running them, until something else is enqueued. A process whose tasks all wait on one
/// another (our test process: services, clients and tests in one) then stops for good; a service stops until
/// its next request. Seen as the test run hanging after ~100 s with every thread idle (event loops in
/// `epoll_wait` with no timer, no dispatch worker alive); enqueueing a single job into the pool from outside
/// (with gdb) woke it and every waiting test finished normally.
///
/// The heartbeat is one thread that enqueues an empty task at each common priority every 100 ms, so a
/// stranded job waits at most that long. It costs a wake-up of a parked thread per beat.
public enum CooperativePoolHeartbeat {
    private static let started = NIOLockedValueBox(false)

    /// Starts the heartbeat once per process (later calls do nothing).
    public static func start() {
        let first = started.withLockedValue { started in
            defer { started = true }
            return !started
        }
        guard first else { return }
        let thread = NIOThreadPool(numberOfThreads: 1)  // for the life of the process
        thread.start()
        thread.submit { _ in
            while true {
                for priority in [TaskPriority.high, .medium, .low, .background] {
                    Task.detached(priority: priority) {}
                }
                Task.detached {}
                usleep(100_000)
            }
        }
    }
}
