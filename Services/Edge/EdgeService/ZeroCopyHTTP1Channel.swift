import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOPosix

/// Hummingbird's HTTP/1.1 channel plus `FileRegionResponses` between NIO's HTTP/1 encoder and the HTTP-types
/// codec, so a plain-HTTP content download is sent with `sendfile(2)` (the kernel copies the file to the socket;
/// no read into user-space buffers). Used only without TLS: an encrypted connection must see the bytes.
/// Otherwise the same pipeline as `HTTP1Channel` (same decoder limits, pipelining assistance and idle timeout).
struct ZeroCopyHTTP1Channel: HTTPChannelHandler {
    typealias Value = NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>

    let responder: HTTPChannelHandler.Responder
    let configuration: HTTP1Channel.Configuration

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            var limits = NIOHTTPDecoderLimitConfiguration()
            limits.maxHeaderFieldSize = configuration.httpDecoder.maxHeaderFieldSize
            limits.maxHeaderListSize = configuration.httpDecoder.maxHeaderListSize
            limits.maxHeaderFieldCount = configuration.httpDecoder.maxHeaderFieldCount
            let pipeline = channel.pipeline.syncOperations
            try pipeline.configureHTTPServerPipeline(
                withPipeliningAssistance: false, withErrorHandling: false,  // as HTTP1Channel: NIOAsyncChannel keeps requests in order

                withOutboundHeaderValidation: false, withEncoderConfiguration: .init(), withDecoderLimitConfiguration: limits)
            try pipeline.addHandler(FileRegionResponses())
            try pipeline.addHandler(HTTP1ToHTTPServerCodec(secure: false))
            try pipeline.addHandlers(configuration.additionalChannelHandlers())
            try pipeline.addHandler(HTTPConnectionStateHandler(idleTimeout: configuration.idleTimeout.map { .init($0) }, logger: logger))
            return try NIOAsyncChannel(wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
        }
    }

    func handle(value asyncChannel: Value, logger: Logger) async {
        await handleHTTP(asyncChannel: asyncChannel, logger: logger)
    }
}

/// Turns a response head carrying `FileRegionResponses.header` (`OFFSET LENGTH PATH`, set only by the edge's own
/// content route after it checked the signed URL and the range) into the head without that header followed by
/// the file's bytes as a `FileRegion`. The file is opened on NIO's blocking pool; parts written meanwhile (the
/// response's end, a next response) wait behind it in order, and so does a close until the body is out (NIO fails
/// writes still pending at a full close, as graceful shutdown makes after a response's end, which would cut the
/// file short; a half close, the usual end of a connection, waits for pending writes by itself).
/// The header never reaches the client.
final class FileRegionResponses: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    static let header = "iap-edge-file-region"
    static let regionBytes = 1 << 20
    struct MalformedFileRegionHeader: Error {}
    private static let fileIO = NonBlockingFileIO(threadPool: .singleton)

    /// True while a file is being opened: writes, a flush and a close wait in `held`, `flushHeld`, `closeHeld`.
    private var opening = false
    private var held: [(HTTPServerResponsePart, EventLoopPromise<Void>?)] = []
    private var flushHeld = false
    /// File bodies handed to the channel and not yet written out; a close waits for them too.
    private var regionsInFlight = 0
    private var closeHeld: (mode: CloseMode, promise: EventLoopPromise<Void>?)?

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let part = unwrapOutboundIn(data)
        if opening {
            held.append((part, promise))
            return
        }
        guard case .head(var head) = part, let value = head.headers[Self.header].first else {
            context.write(data, promise: promise)
            return
        }
        head.headers.remove(name: Self.header)
        let fields = value.split(separator: " ", maxSplits: 2)
        guard fields.count == 3, let offset = Int(fields[0]), let length = Int(fields[1]), offset >= 0, length > 0 else {
            promise?.fail(MalformedFileRegionHeader())
            context.close(promise: nil)
            return
        }
        opening = true
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        Self.fileIO.openFile(_deprecatedPath: String(fields[2]), eventLoop: context.eventLoop).whenComplete { result in
            let (handler, context) = loopBound.value
            handler.opening = false
            switch result {
            case .success(let (file, _)):
                context.write(handler.wrapOutboundOut(.head(head)), promise: promise)
                // In regions of `regionBytes`: each one the kernel takes is progress `WriteProgressDeadline` sees.
                handler.regionsInFlight += 1
                var start = offset
                var last: EventLoopFuture<Void>?
                while start < offset + length {
                    let end = min(start + Self.regionBytes, offset + length)
                    last = context.write(handler.wrapOutboundOut(.body(.fileRegion(FileRegion(fileHandle: file, readerIndex: start, endIndex: end)))))
                    start = end
                }
                // Writes complete in order (a failure fails the rest): the last one's completion ends the body.
                last?.whenComplete { _ in
                    try? file.close()
                    let (handler, context) = loopBound.value
                    handler.regionsInFlight -= 1
                    handler.closeIfHeld(context: context)
                }
            case .failure(let error):
                // The route saw the file a moment ago; it went away since. No head is sent: the client sees the
                // connection close and can retry (its signed URL is still good if the file comes back).
                promise?.fail(error)
                context.close(promise: nil)
            }
            handler.releaseHeld(context: context)
        }
    }

    func flush(context: ChannelHandlerContext) {
        if opening { flushHeld = true } else { context.flush() }
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        // Closing the input never cuts a body short: it goes through at once.
        guard mode != .input, opening || regionsInFlight > 0 else {
            context.close(mode: mode, promise: promise)
            return
        }
        if let earlier = closeHeld {
            // Two closes wait: the wider one is made, and both promises follow it.
            closeHeld = (earlier.mode == .all || mode == .all ? .all : earlier.mode, earlier.promise ?? promise)
            if let promise, let first = earlier.promise { first.futureResult.cascade(to: promise) }
        } else {
            closeHeld = (mode, promise)
        }
    }

    private func releaseHeld(context: ChannelHandlerContext) {
        let parts = held
        held = []
        let flush = flushHeld
        flushHeld = false
        for (index, (part, promise)) in parts.enumerated() {
            // A later head may carry a file of its own: `write` opens it and holds what follows it again.
            if opening {
                held.append(contentsOf: parts[index...])
                flushHeld = flush
                return
            }
            write(context: context, data: wrapOutboundOut(part), promise: promise)
        }
        if flush { self.flush(context: context) }
        closeIfHeld(context: context)
    }

    private func closeIfHeld(context: ChannelHandlerContext) {
        guard !opening, regionsInFlight == 0, let (mode, promise) = closeHeld else { return }
        closeHeld = nil
        context.close(mode: mode, promise: promise)
    }
}
