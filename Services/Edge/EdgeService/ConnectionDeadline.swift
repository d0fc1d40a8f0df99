import NIOCore

/// A per-connection deadline: one repeating check (every quarter of `timeout`) while the connection is active,
/// which closes the connection once `expired()` says so. Requests only update what `expired()` reads, so a
/// deadline costs nothing per request (scheduling a timer per response cost the edge ~3% of its CPU).
protocol ConnectionDeadline: ChannelDuplexHandler, RemovableChannelHandler {
    var timeout: TimeAmount { get }
    var check: RepeatedTask? { get set }
    /// Whether the connection has waited too long (read on each check, on the event loop).
    func expired() -> Bool
}

extension ConnectionDeadline {
    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { startChecking(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        startChecking(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        stopChecking()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stopChecking()
    }

    private func startChecking(_ context: ChannelHandlerContext) {
        guard check == nil else { return }
        let period = TimeAmount.nanoseconds(max(timeout.nanoseconds / 4, 1_000_000))
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        check = context.eventLoop.scheduleRepeatedTask(initialDelay: period, delay: period) { _ in
            let (handler, context) = loopBound.value
            if handler.expired() {
                handler.stopChecking()
                context.close(promise: nil)
            }
        }
    }

    private func stopChecking() {
        check?.cancel()
        check = nil
    }
}
