import Foundation
import NIOCore
import NIOPosix

/// Closed-loop JSON-RPC load driven on NIO's event loops, the way `rpcload` and wrk drive theirs: each connection
/// keeps `inFlight` request lines written and writes the next one when an answer line arrives, with no task or
/// continuation per request. `LoadDriver`'s task-per-call workers cost about as much CPU per verifyReceipt as the
/// service itself (24 us against 32 us, 2026-11-24), and on a machine where the load generator shares the cores
/// with the service, that CPU is taken from the service under test. For one-method scenarios whose answers can be
/// checked by their first bytes (`verify-receipt`, `verify-transaction`: `--pipelined`).
enum PipelinedLoad {
    struct Outcome: Sendable {
        var latenciesUs: [UInt32] = []
        var errors: [Int: Int] = [:]
        /// From the start of measuring to the last answer to a request sent while measuring.
        var seconds: Double = 0
    }

    /// The measuring window, shared by every connection.
    struct Window: Sendable {
        let measureFromNs: UInt64
        let endNs: UInt64
    }

    /// Runs `warmup` seconds of load, then `seconds` measured. Request `i` is `method` with `params(i)` (JSON);
    /// an answer counts as ok when its `result` starts with `expect`.
    static func run(
        host: String, port: Int, connections: Int, inFlight: Int, warmup: Double, seconds: Double,
        method: String, params: @escaping @Sendable (Int) -> [UInt8], expect: [UInt8]
    ) async throws -> Outcome {
        let group = MultiThreadedEventLoopGroup.singleton
        var channels: [(Channel, EventLoopFuture<Outcome>)] = []
        for index in 0..<connections {
            let promise = group.next().makePromise(of: Outcome.self)
            let channel = try await ClientBootstrap(group: group)
                .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            ConnectionLoad(
                                first: index, stride: connections, inFlight: inFlight, method: method, params: params,
                                expect: expect, done: promise))
                    }
                }
                .connect(host: host, port: port).get()
            channels.append((channel, promise.futureResult))
        }
        let now = DispatchTime.now().uptimeNanoseconds
        let measureFrom = now + UInt64(warmup * 1e9)
        let window = Window(measureFromNs: measureFrom, endNs: measureFrom + UInt64(seconds * 1e9))
        for (channel, _) in channels { channel.pipeline.fireUserInboundEventTriggered(window) }
        var total = Outcome()
        for (channel, result) in channels {
            let part = try await result.get()
            total.latenciesUs += part.latenciesUs
            total.errors.merge(part.errors, uniquingKeysWith: +)
            total.seconds = max(total.seconds, part.seconds)
            try? await channel.close()
        }
        return total
    }

    /// One connection's requests, answers and samples; everything on the channel's event loop.
    final class ConnectionLoad: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer

        private let stride: Int
        private let inFlight: Int
        private let linePrefix: [UInt8]
        private let params: @Sendable (Int) -> [UInt8]
        private let expect: [UInt8]
        private let done: EventLoopPromise<Outcome>
        private var next: Int
        private var window: Window?
        private var sentAtNs: [Int: UInt64] = [:]
        private var buffered = ByteBuffer()
        private var outcome = Outcome()
        private var lastMeasuredNs: UInt64 = 0
        /// `done` is completed once: when the last answer after the window arrives, or when the connection closes.
        private var finished = false

        init(
            first: Int, stride: Int, inFlight: Int, method: String, params: @escaping @Sendable (Int) -> [UInt8], expect: [UInt8],
            done: EventLoopPromise<Outcome>
        ) {
            self.next = first
            self.stride = stride
            self.inFlight = inFlight
            self.linePrefix = Array(#"{"jsonrpc":"2.0","method":"\#(method)","params":"#.utf8)
            self.params = params
            self.expect = Array(#","result":"#.utf8) + expect
            self.done = done
        }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            guard let window = event as? Window else { return context.fireUserInboundEventTriggered(event) }
            self.window = window
            for _ in 0..<inFlight { send(context) }
            context.flush()
        }

        private func send(_ context: ChannelHandlerContext) {
            let id = next
            next += stride
            let body = params(id)
            var line = context.channel.allocator.buffer(capacity: linePrefix.count + body.count + 32)
            line.writeBytes(linePrefix)
            line.writeBytes(body)
            line.writeString(#","id":\#(id)}"#)
            line.writeInteger(UInt8(ascii: "\n"))
            sentAtNs[id] = DispatchTime.now().uptimeNanoseconds
            context.write(wrapOutboundOut(line), promise: nil)
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var incoming = unwrapInboundIn(data)
            buffered.writeBuffer(&incoming)
            guard let window else { return }
            while let length = buffered.withUnsafeReadableBytes({ raw -> Int? in
                guard let base = raw.baseAddress, let hit = memchr(base, 0x0A, raw.count) else { return nil }
                return base.distance(to: UnsafeRawPointer(hit))
            }) {
                let line = buffered.readSlice(length: length)!
                buffered.moveReaderIndex(forwardBy: 1)
                answered(line, context: context, window: window)
            }
            buffered.discardReadBytes()
        }

        func channelReadComplete(context: ChannelHandlerContext) {
            context.flush()
        }

        private func answered(_ line: ByteBuffer, context: ChannelHandlerContext, window: Window) {
            let now = DispatchTime.now().uptimeNanoseconds
            let bytes = line.readableBytesView
            guard let id = Self.id(in: bytes), let sent = sentAtNs.removeValue(forKey: id) else {
                outcome.errors[CallOutcome.otherError, default: 0] += 1
                return finishIfDrained()
            }
            if sent >= window.measureFromNs && sent < window.endNs {
                if Self.contains(bytes, expect) {
                    outcome.latenciesUs.append(UInt32(min((now - sent) / 1000, UInt64(UInt32.max))))
                } else {
                    outcome.errors[Self.errorCode(in: bytes) ?? CallOutcome.unexpectedResult, default: 0] += 1
                }
                lastMeasuredNs = max(lastMeasuredNs, now)
            }
            if now < window.endNs { send(context) } else { finishIfDrained() }
        }

        private func finishIfDrained() {
            guard sentAtNs.isEmpty, window != nil else { return }
            finish()
        }

        func channelInactive(context: ChannelHandlerContext) {
            if !finished {
                outcome.errors[CallOutcome.otherError, default: 0] += sentAtNs.count
                sentAtNs.removeAll()
            }
            finish()
        }

        private func finish() {
            guard !finished else { return }
            finished = true
            if let window { outcome.seconds = Double(max(lastMeasuredNs, window.endNs) - window.measureFromNs) / 1e9 }
            done.succeed(outcome)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }

        /// The number after the first `"id":` of an answer line.
        static func id(in bytes: ByteBufferView) -> Int? {
            guard let at = find(bytes, Array(#""id":"#.utf8)) else { return nil }
            var value = 0
            var i = at
            var digits = 0
            while i < bytes.endIndex, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i]), digits < 18 {
                value = value * 10 + Int(bytes[i] - UInt8(ascii: "0"))
                i += 1
                digits += 1
            }
            return digits > 0 ? value : nil
        }

        /// The JSON-RPC error code of an error answer.
        static func errorCode(in bytes: ByteBufferView) -> Int? {
            guard let at = find(bytes, Array(#""error":{"code":"#.utf8)) else { return nil }
            let negative = at < bytes.endIndex && bytes[at] == UInt8(ascii: "-")
            var i = negative ? at + 1 : at
            var value = 0
            while i < bytes.endIndex, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i]), value < 1_000_000 {
                value = value * 10 + Int(bytes[i] - UInt8(ascii: "0"))
                i += 1
            }
            return negative ? -value : value
        }

        static func contains(_ bytes: ByteBufferView, _ needle: [UInt8]) -> Bool { find(bytes, needle) != nil }

        /// The index just past the first occurrence of `needle`.
        static func find(_ bytes: ByteBufferView, _ needle: [UInt8]) -> Int? {
            guard !needle.isEmpty, bytes.count >= needle.count else { return nil }
            var i = bytes.startIndex
            let last = bytes.endIndex - needle.count
            while i <= last {
                if bytes[i] == needle[0] {
                    var j = 1
                    while j < needle.count && bytes[i + j] == needle[j] { j += 1 }
                    if j == needle.count { return i + needle.count }
                }
                i += 1
            }
            return nil
        }
    }
}
