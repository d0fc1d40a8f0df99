import NIOCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// One frame of the line-delimited protocol.
public enum LineFrame: Sendable, Equatable {
    /// A line without its `\n` (and without a trailing `\r`). Blank lines are never emitted.
    case line(ByteBuffer)
    /// A line grew past the cap before its newline arrived. Nothing more is decoded afterwards.
    case tooLong
}

/// Splits a byte stream into lines, with a hard cap on line length so a peer that never sends a
/// newline cannot make us buffer without bound (NIO's `LineBasedFrameDecoder` has no cap).
public struct LineFrameDecoder: ByteToMessageDecoder {
    public typealias InboundOut = LineFrame

    public let maxLineBytes: Int
    /// Bytes of the buffer already searched for a newline, so a long line is scanned once.
    private var searched = 0
    private var overflowed = false

    public init(maxLineBytes: Int) {
        self.maxLineBytes = maxLineBytes
    }

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let frame = nextFrame(&buffer) else { return .needMoreData }
        context.fireChannelRead(wrapInboundOut(frame))
        return .continue
    }

    public mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        if let frame = nextFrame(&buffer) {
            context.fireChannelRead(wrapInboundOut(frame))
            return .continue
        }
        // A final line without its newline is still a line.
        if !overflowed, buffer.readableBytes > 0, let rest = buffer.readSlice(length: buffer.readableBytes),
            let line = Self.trimmed(rest)
        {
            context.fireChannelRead(wrapInboundOut(.line(line)))
        }
        return .needMoreData
    }

    /// The framing logic without a channel, so it can be tested directly.
    public mutating func nextFrame(_ buffer: inout ByteBuffer) -> LineFrame? {
        while true {
            if overflowed {
                buffer.moveReaderIndex(to: buffer.writerIndex)
                return nil
            }
            let readable = buffer.readableBytes
            let from = min(searched, readable)
            // memchr: a byte-at-a-time search through a Collection was 2% of a service's CPU on 8 KB lines.
            let found: Int? = buffer.withUnsafeReadableBytes { bytes in
                guard from < bytes.count, let base = bytes.baseAddress,
                    let hit = memchr(base + from, Int32(UInt8(ascii: "\n")), bytes.count - from)
                else { return nil }
                return UnsafeRawPointer(hit) - base
            }
            guard let length = found else {
                searched = readable
                if searched > maxLineBytes {
                    overflowed = true
                    buffer.moveReaderIndex(to: buffer.writerIndex)
                    return .tooLong
                }
                return nil
            }
            searched = 0
            if length > maxLineBytes {
                overflowed = true
                buffer.moveReaderIndex(to: buffer.writerIndex)
                return .tooLong
            }
            let raw = buffer.readSlice(length: length)!
            buffer.moveReaderIndex(forwardBy: 1)
            if let line = Self.trimmed(raw) { return .line(line) }
            // Blank line: ignored, keep looking.
        }
    }

    /// Drops one trailing `\r`; returns nil for a line that holds only spaces and tabs.
    private static func trimmed(_ raw: ByteBuffer) -> ByteBuffer? {
        var line = raw
        if line.readableBytesView.last == UInt8(ascii: "\r") { line.moveWriterIndex(to: line.writerIndex - 1) }
        if line.readableBytesView.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { return nil }
        return line
    }
}
