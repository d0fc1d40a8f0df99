/// The flow control of one server connection, as a value: what to do with a frame that arrived, whether
/// to ask the socket for more, when to close. `RPCConnectionHandler` feeds it events and performs the
/// actions it returns (Hummingbird's `HTTPConnectionStateHandler` works the same way), so every rule
/// lives here once and is tested without a socket or a clock.
///
/// Rules: up to `maxInFlight` requests (or batches) are worked on at once; frames that arrive beyond that
/// wait in arrival order and reading pauses until there is room; a drain (server shutdown) or an idle
/// deadline closes the connection only once nothing is in flight or waiting; an over-long line closes it
/// after its error reply.
package struct ConnectionStateMachine<Frame> {
    package enum State: Equatable {
        /// Serving.
        case open
        /// Shutting down: no more reads; close once everything in flight is answered.
        case draining
        /// Closing or closed: nothing more is processed.
        case closed
    }

    package private(set) var state: State = .open
    package private(set) var inFlight = 0
    private var waiting: [Frame] = []
    private var waitingHead = 0
    /// A read was asked for while we could not take more; issue it when we can.
    private var readHeld = false
    private let maxInFlight: Int

    package init(maxInFlight: Int) {
        self.maxInFlight = max(1, maxInFlight)
    }

    private var isSaturated: Bool { inFlight >= maxInFlight }
    package var waitingCount: Int { waiting.count - waitingHead }
    package var isIdle: Bool { inFlight == 0 && waitingCount == 0 }

    package enum FrameAction: Equatable {
        /// Work on it now.
        case process
        /// At the cap (or behind frames already waiting): it waits its turn.
        case queued
        /// The connection is closing: drop it.
        case drop
    }

    /// A frame arrived from the socket.
    package mutating func frameReceived(_ frame: Frame) -> FrameAction {
        guard state != .closed else { return .drop }
        if isSaturated || waitingCount > 0 {
            waiting.append(frame)
            return .queued
        }
        return .process
    }

    /// A request (or batch) that answers later was started.
    package mutating func requestStarted() { inFlight += 1 }

    /// A request finished: its reply is written. Next, take `nextWaitingFrame()` until nil, then ask
    /// `shouldResumeReading` and `shouldCloseNow`.
    package mutating func requestFinished() { inFlight -= 1 }

    /// The next waiting frame to process now, if there is room.
    package mutating func nextWaitingFrame() -> Frame? {
        guard state != .closed, !isSaturated, waitingCount > 0 else { return nil }
        let frame = waiting[waitingHead]
        waitingHead += 1
        if waitingHead == waiting.count {
            waiting.removeAll(keepingCapacity: true)
            waitingHead = 0
        }
        return frame
    }

    package enum ReadAction: Equatable { case read, hold }

    /// The pipeline asks for more bytes.
    package mutating func readRequested(writable: Bool) -> ReadAction {
        if state != .open || isSaturated || waitingCount > 0 || !writable {
            readHeld = true
            return .hold
        }
        return .read
    }

    /// After a request finished or the channel became writable: whether to issue the held read now.
    package mutating func shouldResumeReading(writable: Bool) -> Bool {
        guard readHeld, state == .open, !isSaturated, waitingCount == 0, writable else { return false }
        readHeld = false
        return true
    }

    /// The server is shutting down. True: close now (nothing in flight).
    package mutating func drainRequested() -> Bool {
        guard state == .open else { return false }
        state = .draining
        return shouldCloseNow()
    }

    /// While draining: true once nothing is in flight or waiting (and the connection becomes closed).
    package mutating func shouldCloseNow() -> Bool {
        guard state == .draining, isIdle else { return false }
        state = .closed
        return true
    }

    /// The idle deadline passed with no bytes read. True: close (only when nothing is in flight or waiting).
    package mutating func idleDeadlinePassed() -> Bool {
        guard state != .closed, isIdle else { return false }
        state = .closed
        return true
    }

    /// A line over the limit: its error is answered, then the connection closes; nothing else is processed.
    package mutating func lineTooLong() {
        state = .closed
    }
}
