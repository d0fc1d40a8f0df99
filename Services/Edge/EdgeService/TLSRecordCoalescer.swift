import HummingbirdCore
import Logging
import NIOCore
import NIOSSL

/// Gathers the writes above TLS into full records. NIOSSL seals every write as a record of its own, and HTTP/2 writes
/// each DATA frame as two: its 9-byte header, then its payload; an HTTP/1.1 answer is a head and a body. So a
/// download over HTTP/2 became a 9-byte record, a 16 KiB record, a 9-byte record... twice the sealing work for the
/// edge and a stream AsyncHTTPClient read at 30-130 MiB/s against 500 from nginx, which gathers into 16 KiB records
/// (`ssl_buffer_size`). Here bytes are copied into a buffer and handed on in whole records (multiples of 16 KiB),
/// the rest at each flush; a write of 16 KiB or more with nothing gathered goes on as it is (no copy). Each write's
/// promise completes with the handing-on of its last byte. Sits right above `NIOSSLHandler`.
final class TLSRecordCoalescer: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// TLS's largest record's plaintext.
    static let recordBytes = 16 * 1024

    private var gathered = ByteBuffer()
    /// Bytes taken in and handed on since the handler was added; promises wait for the handing-on of their last byte.
    private var taken = 0
    private var handedOn = 0
    private var waiting: [(end: Int, promise: EventLoopPromise<Void>)] = []

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        var buffer = unwrapOutboundIn(data)
        if gathered.readableBytes == 0 && buffer.readableBytes >= Self.recordBytes {
            taken += buffer.readableBytes
            handedOn += buffer.readableBytes
            context.write(data, promise: promise)
            return
        }
        if gathered.capacity == 0 { gathered = context.channel.allocator.buffer(capacity: 4 * Self.recordBytes) }
        taken += buffer.readableBytes
        gathered.writeBuffer(&buffer)
        if let promise { waiting.append((taken, promise)) }
        let whole = gathered.readableBytes - gathered.readableBytes % Self.recordBytes
        if whole > 0 { handOn(whole, context: context) }
    }

    func flush(context: ChannelHandlerContext) {
        if gathered.readableBytes > 0 { handOn(gathered.readableBytes, context: context) }
        context.flush()
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        // Unflushed bytes go on as unflushed writes: TLS does with them what it does at a close.
        if mode != .input, gathered.readableBytes > 0 { handOn(gathered.readableBytes, context: context) }
        context.close(mode: mode, promise: promise)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        let left = waiting
        waiting = []
        for (_, promise) in left { promise.fail(ChannelError.ioOnClosedChannel) }
    }

    private func handOn(_ count: Int, context: ChannelHandlerContext) {
        let slice = gathered.readSlice(length: count)!
        handedOn += count
        var done = 0
        while done < waiting.count, waiting[done].end <= handedOn { done += 1 }
        var promise: EventLoopPromise<Void>?
        if done > 0 {
            let completed = waiting[..<done].map(\.promise)
            waiting.removeFirst(done)
            if completed.count == 1 {
                promise = completed[0]
            } else {
                let all = context.eventLoop.makePromise(of: Void.self)
                for each in completed { all.futureResult.cascade(to: each) }
                promise = all
            }
        }
        // The slice still shares the buffer's storage: what is left moves to a buffer of its own (under a record).
        if gathered.readableBytes == 0 {
            gathered = ByteBuffer()
        } else {
            var rest = context.channel.allocator.buffer(capacity: 4 * Self.recordBytes)
            rest.writeBuffer(&gathered)
            gathered = rest
        }
        context.write(wrapOutboundOut(slice), promise: promise)
    }
}

/// A TLS server child channel with `TLSRecordCoalescer` right above its `NIOSSLServerHandler`.
struct TLSRecordCoalescingChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value
    let base: Base

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let value = base.setup(channel: channel, logger: logger)
        do {
            let tls = try channel.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self)
            try channel.pipeline.syncOperations.addHandler(TLSRecordCoalescer(), position: .after(tls))
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        return value
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}
