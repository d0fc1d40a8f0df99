import NIOCore
import NIOEmbedded
import RPCTransport
import Testing

@Suite struct LineFrameDecoderTests {
    private func frames(_ chunks: [String], max: Int = 16) -> [LineFrame] {
        var decoder = LineFrameDecoder(maxLineBytes: max)
        var buffer = ByteBuffer()
        var out: [LineFrame] = []
        for chunk in chunks {
            buffer.writeString(chunk)
            while let f = decoder.nextFrame(&buffer) { out.append(f) }
        }
        return out
    }

    private func line(_ s: String) -> LineFrame { .line(ByteBuffer(string: s)) }

    @Test func splitsLinesAcrossReads() {
        #expect(frames(["ab", "c\nde", "f\n"]) == [line("abc"), line("def")])
    }

    @Test func dropsTrailingCarriageReturnAndBlankLines() {
        #expect(frames(["a\r\n\n  \n\r\nb\n"]) == [line("a"), line("b")])
    }

    @Test func flagsAnOverlongLineOnceAndDecodesNothingAfter() {
        #expect(frames(["0123456789abcdefX\nok\n"]) == [.tooLong])
        // Also when the newline has not arrived yet: the cap bounds what is buffered.
        #expect(frames(["0123456789", "abcdefgh", "more\nok\n"]) == [.tooLong])
    }

    @Test func aLineExactlyAtTheCapIsAccepted() {
        #expect(frames(["0123456789abcdef\n"]) == [line("0123456789abcdef")])
    }

    @Test func worksInAPipeline() throws {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(LineFrameDecoder(maxLineBytes: 8)))
        try channel.writeInbound(ByteBuffer(string: "one\ntw"))
        try channel.writeInbound(ByteBuffer(string: "o\n"))
        #expect(try channel.readInbound(as: LineFrame.self) == line("one"))
        #expect(try channel.readInbound(as: LineFrame.self) == line("two"))
        #expect(try channel.readInbound(as: LineFrame.self) == nil)
        _ = try channel.finish()
    }
}
