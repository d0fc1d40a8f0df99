import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOEmbedded
import NIOSSL
import ServiceSupport
import SuiteTestSupport
import Testing

@testable import EdgeService

/// Writes above TLS gathered into whole records (`TLSRecordCoalescer`): the handler's rule on an embedded channel,
/// then downloads over real TLS, HTTP/2 and HTTP/1.1, byte for byte.
@Suite struct TLSRecordCoalescerTests {
    static func bytes(_ count: Int, _ value: UInt8) -> ByteBuffer { ByteBuffer(repeating: value, count: count) }

    @Test func smallWritesGoOnInWholeRecordsInOrderAndAreDoneOnceWritten() throws {
        let channel = EmbeddedChannel(handler: TLSRecordCoalescer())
        let record = TLSRecordCoalescer.recordBytes
        var completed: [Int] = []
        func write(_ buffer: ByteBuffer, _ index: Int) {
            let promise = channel.eventLoop.makePromise(of: Void.self)
            promise.futureResult.whenSuccess { completed.append(index) }
            channel.write(buffer, promise: promise)
        }
        // HTTP/2's pattern: a 9-byte frame header, then its 16 KiB payload, twice.
        write(Self.bytes(9, 1), 0)
        write(Self.bytes(record, 2), 1)
        write(Self.bytes(9, 3), 2)
        write(Self.bytes(record, 4), 3)
        #expect(completed.isEmpty, "a write is done when its bytes are written out, not when gathered")
        channel.flush()
        var out: [ByteBuffer] = []
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { out.append(buffer) }
        #expect(out.map(\.readableBytes) == [record, record, 18], "whole records, the rest at the flush")
        var joined = ByteBuffer()
        for var buffer in out { joined.writeBuffer(&buffer) }
        var expected = Self.bytes(9, 1)
        for var part in [Self.bytes(record, 2), Self.bytes(9, 3), Self.bytes(record, 4)] { expected.writeBuffer(&part) }
        #expect(joined == expected, "every byte, in order")
        #expect(completed == [0, 1, 2, 3])

        // A large write with nothing gathered goes on as it is.
        write(Self.bytes(3 * record, 5), 4)
        channel.flush()
        #expect(try channel.readOutbound(as: ByteBuffer.self)?.readableBytes == 3 * record)
        #expect(completed.last == 4)
        #expect(try channel.finish().isClean)
    }

    @Test(arguments: [HTTPClient.Configuration.HTTPVersion.automatic, .http1Only])
    func filesDownloadWholeOverTLS(version: HTTPClient.Configuration.HTTPVersion) async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tls-coalescer-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let content = dir.appendingPathComponent("content")
        try FileManager.default.createDirectory(at: content, withIntermediateDirectories: true)
        var generator = SystemRandomNumberGenerator()
        let file = Data((0..<(3 << 20) + 12_345).map { _ in UInt8.random(in: 0...255, using: &generator) })
        try file.write(to: content.appendingPathComponent("big.bin"))
        let key = "tls-coalescer-test-key-0123456789abcdef"
        try await EdgeTests.withTLSEdge(
            configure: {
                $0.contentDirectory = content
                $0.contentSigner = ContentURLSigner(key: key)
            }, httpVersion: version
        ) { _, _, port, client in
            let grant = ContentURLSigner.Grant(
                contentId: "big.bin", accountId: "tester", scope: "Production", expiresAtMs: Int64(Date().timeIntervalSince1970 * 1000) + 600_000)
            let url = "https://localhost:\(port)" + ContentURLSigner(key: key).path(for: grant)
            let whole = try await client.execute(HTTPClientRequest(url: url), timeout: .seconds(60))
            #expect(whole.version == (version == .http1Only ? .http1_1 : .http2))
            let body = try await whole.body.collect(upTo: 8 << 20)
            #expect(body.readableBytes == file.count && Data(SHA256.hash(data: Data(buffer: body))) == Data(SHA256.hash(data: file)))

            var ranged = HTTPClientRequest(url: url)
            ranged.headers.add(name: "Range", value: "bytes=1000-200999")
            let part = try await client.execute(ranged, timeout: .seconds(60))
            #expect(part.status == .partialContent)
            #expect(Data(buffer: try await part.body.collect(upTo: 1 << 20)) == file[1000...200_999])
        }
    }
}
