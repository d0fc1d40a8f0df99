import AsyncHTTPClient
import Crypto
import Foundation
import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import RPCTransport
import ServiceSupport
import SuiteTestSupport
import Testing

@testable import EdgeService

/// Content downloads through signed URLs: fulfillment signs, the edge checks and serves ranges, over real
/// HTTP in front of the real suite.
@Suite struct EdgeContentTests {
    static let key = EdgeFixture.contentKey

    struct Download {
        var status: Int
        var bytes: [UInt8]
        var headers: [String: String]
    }

    static func get(_ url: String, method: NIOHTTP1.HTTPMethod = .GET, headers: [String: String] = [:]) async throws -> Download {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
        let body = try await response.body.collect(upTo: 64 << 20)
        var fields: [String: String] = [:]
        for h in response.headers { fields[h.name.lowercased()] = h.value }
        return Download(status: Int(response.status.code), bytes: Array(buffer: body), headers: fields)
    }

    static func withContentEdge(sendfile: Bool = true, _ body: (SuiteFixture, String) async throws -> Void) async throws {
        try await EdgeFixture.withContentEdge(
            configure: {
                $0.contentChunkBytes = 64 * 1024
                $0.contentSendfile = sendfile
            }, body)
    }

    /// `fulfillment.contentURL` through the edge's JSON-RPC: the result, or the error object.
    static func contentURL(_ base: String, session: String) async throws -> JSONValue {
        let answer = try await EdgeTests.post(
            base + "/v1/rpc", #"{"jsonrpc":"2.0","id":1,"method":"fulfillment.contentURL","params":{"contentId":"\#(SuiteFixture.contentId)"}}"#,
            bearer: session)
        let parsed = try JSONValue.parse(answer.body)
        return parsed["result"] ?? parsed["error"] ?? .null
    }

    static func sha256(_ bytes: [UInt8]) -> String { SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined() }

    /// Both ways a body leaves the edge: `sendfile` (plain HTTP/1.1) and buffers (as over TLS).
    @Test(arguments: [true, false]) func anEntitledAccountDownloadsWholeRangedAndResumed(sendfile: Bool) async throws {
        try await Self.withContentEdge(sendfile: sendfile) { suite, base in
            let alice = try await suite.register("alice")
            _ = try await suite.redeem(alice.session, signed: [try await suite.buy("alice@icloud", "pack.castle").signedTransaction])
            let issued = try await Self.contentURL(base, session: alice.session)
            let path = try #require(issued["url"]?.stringValue, "\(issued)")
            #expect(path.hasPrefix("/v1/content/\(SuiteFixture.contentId)?"))
            let size = Int64(suite.content.count)
            #expect(issued["size"] == .int(size) && issued["sha256"]?.stringValue == Self.sha256(suite.content))
            let url = base + path

            // The whole file: bytes, SHA-256 and its ETag.
            let whole = try await Self.get(url)
            #expect(whole.status == 200 && whole.bytes == suite.content)
            #expect(whole.headers.keys.allSatisfy { !$0.hasPrefix("iap-") }, "no internal header reaches the client")
            let etag = try #require(whole.headers["etag"])
            #expect(etag == "\"\(Self.sha256(suite.content))\"" && whole.headers["accept-ranges"] == "bytes")

            // Three ranges: a span, an open end, a suffix.
            for (header, expected) in [
                ("bytes=0-99", 0...99), ("bytes=250000-", 250_000...(suite.content.count - 1)),
                ("bytes=-500", (suite.content.count - 500)...(suite.content.count - 1)),
            ] {
                let part = try await Self.get(url, headers: ["Range": header])
                #expect(part.status == 206, "\(header)")
                #expect(part.bytes == Array(suite.content[expected]), "\(header)")
                #expect(part.headers["content-range"] == "bytes \(expected.lowerBound)-\(expected.upperBound)/\(size)")
            }

            // A resumed download: the first 100,000 bytes, then the rest if the file is still the same one.
            let first = try await Self.get(url, headers: ["Range": "bytes=0-99999"])
            let rest = try await Self.get(url, headers: ["Range": "bytes=100000-", "If-Range": etag])
            #expect(rest.status == 206 && Self.sha256(first.bytes + rest.bytes) == Self.sha256(suite.content))
            // A stale ETag: the whole file again, not a splice of two versions.
            let stale = try await Self.get(url, headers: ["Range": "bytes=100000-", "If-Range": "\"0000\""])
            #expect(stale.status == 200 && stale.bytes == suite.content)
            // Past the end: 416 with the size.
            let past = try await Self.get(url, headers: ["Range": "bytes=\(size)-"])
            #expect(past.status == 416 && past.headers["content-range"] == "bytes */\(size)")
            // HEAD: the headers of the whole file and no body.
            let head = try await Self.get(url, method: .HEAD)
            #expect(head.status == 200 && head.headers["content-length"] == "\(size)" && head.bytes.isEmpty)
            #expect(head.headers["etag"] == etag)
        }
    }

    /// An empty content file is served as an empty body: a GET or HEAD without Range used to build the range
    /// `0...(size - 1)` before looking at the size, and trap the edge process.
    @Test(arguments: [true, false]) func anEmptyFileIsServedEmptyAndTheEdgeLives(sendfile: Bool) async throws {
        try await Self.withContentEdge(sendfile: sendfile) { suite, base in
            let alice = try await suite.register("alice")
            _ = try await suite.redeem(alice.session, signed: [try await suite.buy("alice@icloud", "pack.castle").signedTransaction])
            let file = suite.directory.appendingPathComponent("fulfillment/content/\(SuiteFixture.contentId)")
            try Data().write(to: file)
            let issued = try await Self.contentURL(base, session: alice.session)
            let url = base + (try #require(issued["url"]?.stringValue, "\(issued)"))
            for method in [NIOHTTP1.HTTPMethod.GET, .HEAD, .GET] {
                let answer = try await Self.get(url, method: method)
                #expect(answer.status == 200 && answer.bytes.isEmpty && answer.headers["content-length"] == "0", "\(method)")
            }
            #expect(try await Self.get(url, headers: ["Range": "bytes=0-"]).status == 416)
        }
    }

    /// Pipelined requests on one keep-alive connection, sent in one write: file bodies sent by `sendfile` and
    /// ordinary answers come back whole and in order, and the route's internal header never leaves the edge.
    @Test func pipelinedDownloadsAndAnswersKeepTheirOrder() async throws {
        try await Self.withContentEdge { suite, base in
            let alice = try await suite.register("alice")
            _ = try await suite.redeem(alice.session, signed: [try await suite.buy("alice@icloud", "pack.castle").signedTransaction])
            let path = try #require(try await Self.contentURL(base, session: alice.session)["url"]?.stringValue)
            func get(_ target: String, _ extra: String = "") -> String { "GET \(target) HTTP/1.1\r\nHost: localhost\r\n\(extra)\r\n" }
            let wire =
                get(path, "Range: bytes=0-99\r\n") + get("/healthz") + get(path, "Range: bytes=1000-1999\r\n")
                + get(path, "Connection: close\r\n")
            let port = Int(base.split(separator: ":").last!)!
            var rest = try await RawHTTP.exchange(port: port, send: Array(wire.utf8))[...]
            var answers: [(head: String, body: [UInt8])] = []
            while let end = rest.firstRange(of: Array("\r\n\r\n".utf8)) {
                let head = String(decoding: rest[..<end.lowerBound], as: UTF8.self)
                let length =
                    head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                let bodyStart = end.upperBound
                guard rest.endIndex - bodyStart >= length else { break }
                answers.append((head, Array(rest[bodyStart..<(bodyStart + length)])))
                rest = rest[(bodyStart + length)...]
            }
            #expect(answers.count == 4 && rest.isEmpty, "\(answers.map(\.head)) and \(rest.count) bytes left")
            guard answers.count == 4 else { return }
            #expect(answers[0].head.hasPrefix("HTTP/1.1 206") && answers[0].body == Array(suite.content[0...99]))
            #expect(answers[1].head.hasPrefix("HTTP/1.1 200") && answers[1].body == Array("ok\n".utf8))
            #expect(answers[2].head.hasPrefix("HTTP/1.1 206") && answers[2].body == Array(suite.content[1000...1999]))
            #expect(answers[3].head.hasPrefix("HTTP/1.1 200") && answers[3].body == suite.content)
            #expect(answers.allSatisfy { !$0.head.lowercased().contains(FileRegionResponses.header) }, "no internal header reaches the client")
        }
    }

    /// 16 MiB of random bytes, read once: more than the socket buffers on both sides of a loopback connection hold.
    static let largeFile: [UInt8] = Array(FileHandle(forReadingAtPath: "/dev/urandom")!.readData(ofLength: 16 << 20))

    /// An edge alone (no suite behind it) serving `largeFile`; `body` gets its port, the file's path and bytes.
    static func withLargeFile(
        configure: (inout EdgeConfiguration) -> Void, _ body: (Int, String, [UInt8]) async throws -> Void
    ) async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("edge-large-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = Self.largeFile
        try Data(file).write(to: dir.appendingPathComponent("large.bin"))
        var config = EdgeConfiguration()
        config.internalToken = SuiteFixture.internalToken  // the webhook presents it to fulfillment
        config.contentDirectory = dir
        config.contentSigner = ContentURLSigner(key: Self.key)
        configure(&config)
        func dead() throws -> RPCClient { try RPCClient(address: "127.0.0.1:1", configuration: .init(connections: 1)) }
        let edge = EdgeService(
            accounts: try dead(), catalog: try dead(), fulfillment: try dead(), configuration: config, logger: EdgeFixture.quiet)
        let path = ContentURLSigner(key: Self.key).path(
            for: .init(contentId: "large.bin", accountId: "a", scope: "Production", expiresAtMs: Int64(Date().timeIntervalSince1970 * 1000) + 600_000)
        )
        try await EdgeFixture.serving(edge) { port in try await body(port, path, file) }
    }

    /// A file far larger than the socket buffers, asked for with `Connection: close`: every byte arrives before
    /// the server closes the connection, on both body paths.
    @Test(arguments: [true, false]) func aLargeFileArrivesWholeBeforeTheConnectionCloses(sendfile: Bool) async throws {
        try await Self.withLargeFile(configure: { $0.contentSendfile = sendfile }) { port, path, file in
            let wire = "GET \(path) HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
            let received = try await RawHTTP.exchange(port: port, send: Array(wire.utf8))
            let end = try #require(received.firstRange(of: Array("\r\n\r\n".utf8)))
            #expect(String(decoding: received[..<end.lowerBound], as: UTF8.self).hasPrefix("HTTP/1.1 200"))
            let body = received[end.upperBound...]
            #expect(body.count == file.count)
            #expect(Self.sha256(Array(body)) == Self.sha256(file))
        }
    }

    /// A client that asks for a large file and stops reading: once its writes have made no progress for the stalled
    /// write timeout, the edge closes the connection (the client, reading again later, gets what was already in
    /// flight and the end, not the file); on both body paths.
    @Test(arguments: [true, false]) func aDownloadThatStopsBeingReadIsClosed(sendfile: Bool) async throws {
        try await Self.withLargeFile(configure: {
            $0.contentSendfile = sendfile
            $0.stalledWriteTimeout = .seconds(1)
        }) { port, path, file in
            let received = NIOLockedValueBox<[UInt8]>([])
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .channelOption(.autoRead, value: false)
                .channelOption(.socketOption(.so_rcvbuf), value: 16 * 1024)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(RawHTTP.Collector(received: received)) }
                }
                .connect(host: "127.0.0.1", port: port).get()
            try await channel.writeAndFlush(ByteBuffer(string: "GET \(path) HTTP/1.1\r\nHost: localhost\r\n\r\n"))
            // The stall under test: eight times the timeout without reading a byte (four were not always enough for the
            // edge's check to run while CI loads both cores).
            try await Task.sleep(for: .seconds(8))
            try await channel.setOption(.autoRead, value: true)
            channel.read()
            try await channel.closeFuture.get()
            let count = received.withLockedValue { $0.count }
            #expect(count > 0 && count < file.count, "\(count) of \(file.count) bytes: the edge should have given up")
        }
    }

    @Test func tamperedExpiredForeignAndRefundedURLsAreRefused() async throws {
        try await Self.withContentEdge { suite, base in
            let alice = try await suite.register("alice")
            let bob = try await suite.register("bob")
            let bought = try await suite.buy("alice@icloud", "pack.castle")
            _ = try await suite.redeem(alice.session, signed: [bought.signedTransaction])
            let path = try #require(try await Self.contentURL(base, session: alice.session)["url"]?.stringValue)
            #expect(try await Self.get(base + path).status == 200)

            // A changed signature, another account's id under alice's signature, another file: 403.
            var tampered = Array(path)
            tampered[tampered.count - 3] = tampered[tampered.count - 3] == "A" ? "B" : "A"
            #expect(try await Self.get(base + String(tampered)).status == 403)
            let foreign = path.replacingOccurrences(of: "account=\(alice.accountId)", with: "account=\(bob.accountId)")
            #expect(foreign != path)
            #expect(try await Self.get(base + foreign).status == 403)
            let otherFile = path.replacingOccurrences(of: SuiteFixture.contentId, with: "other.bin")
            #expect(try await Self.get(base + otherFile).status == 403)
            #expect(try await Self.get(base + "/v1/content/\(SuiteFixture.contentId)").status == 403)

            // Bob is not entitled: no URL.
            #expect(try await Self.contentURL(base, session: bob.session)["code"] == .int(1002))

            // Expired: the edge's clock past the URL's expiry.
            let expiring = try await Self.get(base + path)
            #expect(expiring.status == 200)
            suite.clock.advance(ms: 5 * 60 * 1000 + 1)
            #expect(try await Self.get(base + path).status == 403)

            // A refund (Apple's notification through the webhook): no new URL.
            let fresh = try #require(try await Self.contentURL(base, session: alice.session)["url"]?.stringValue)
            #expect(try await Self.get(base + fresh).status == 200)
            let refund = try await suite.simulator.call(SimRefund.self, .init(appleId: "alice@icloud", transactionId: bought.transactionId))
            let payload = try #require(refund.signedPayload)
            #expect(try await EdgeTests.post(base + "/v1/notifications/appstore", #"{"signedPayload":"\#(payload)"}"#).status == 200)
            #expect(try await Self.contentURL(base, session: alice.session)["code"] == .int(1002))
        }
    }

    /// Downloads pay into the per-address bucket: a valid URL fetched in a loop (or signatures guessed)
    /// meets 429 with Retry-After once the burst is spent.
    @Test func downloadsAreRateLimitedPerAddress() async throws {
        try await EdgeFixture.withContentEdge(configure: {
            $0.burst = 4
            $0.requestsPerSecond = 0.01
        }) { _, base in
            for _ in 0..<4 { #expect(try await Self.get(base + "/v1/content/x.bin?account=a&env=Production&expires=1&sig=x").status == 403) }
            let limited = try await Self.get(base + "/v1/content/x.bin?account=a&env=Production&expires=1&sig=x")
            #expect(limited.status == 429 && Int(limited.headers["retry-after"] ?? "") ?? 0 >= 1)
        }
    }

    @Test func rangeHeadersResolveAsTheRFCSays() {
        let tag = "\"abc\""
        #expect(ByteRanges.resolve(range: nil, ifRange: nil, etag: tag, size: 10) == .full)
        #expect(ByteRanges.resolve(range: "bytes=2-4", ifRange: nil, etag: tag, size: 10) == .partial(2...4))
        #expect(ByteRanges.resolve(range: "bytes=8-100", ifRange: nil, etag: tag, size: 10) == .partial(8...9))
        #expect(ByteRanges.resolve(range: "bytes=-3", ifRange: nil, etag: tag, size: 10) == .partial(7...9))
        #expect(ByteRanges.resolve(range: "bytes=-30", ifRange: nil, etag: tag, size: 10) == .partial(0...9))
        #expect(ByteRanges.resolve(range: "bytes=10-", ifRange: nil, etag: tag, size: 10) == .unsatisfiable)
        #expect(ByteRanges.resolve(range: "bytes=-0", ifRange: nil, etag: tag, size: 10) == .unsatisfiable)
        #expect(ByteRanges.resolve(range: "bytes=0-", ifRange: nil, etag: tag, size: 0) == .unsatisfiable)
        // Ignored: several ranges, another unit, malformed, backwards, a stale If-Range.
        #expect(ByteRanges.resolve(range: "bytes=0-1,4-5", ifRange: nil, etag: tag, size: 10) == .full)
        #expect(ByteRanges.resolve(range: "items=0-1", ifRange: nil, etag: tag, size: 10) == .full)
        #expect(ByteRanges.resolve(range: "bytes=x-1", ifRange: nil, etag: tag, size: 10) == .full)
        #expect(ByteRanges.resolve(range: "bytes=5-2", ifRange: nil, etag: tag, size: 10) == .full)
        #expect(ByteRanges.resolve(range: "bytes=2-4", ifRange: "\"old\"", etag: tag, size: 10) == .full)
        #expect(ByteRanges.resolve(range: "bytes=2-4", ifRange: tag, etag: tag, size: 10) == .partial(2...4))
    }

    @Test func aSignedURLNamesOneFileAccountScopeAndExpiry() {
        let signer = ContentURLSigner(key: Self.key)
        let grant = ContentURLSigner.Grant(contentId: "a.bin", accountId: "acct-1", scope: "Production", expiresAtMs: 2_000)
        let path = signer.path(for: grant)
        let query = Dictionary(
            uniqueKeysWithValues: (URLComponents(string: path)?.queryItems ?? []).map { ($0.name, $0.value ?? "") })
        #expect(signer.check(contentId: "a.bin", query: query, nowMs: 1_999) == .success(grant))
        #expect(signer.check(contentId: "a.bin", query: query, nowMs: 2_000) == .failure(.expired))
        #expect(signer.check(contentId: "b.bin", query: query, nowMs: 1_000) == .failure(.badSignature))
        var sandbox = query
        sandbox["env"] = "Sandbox"
        #expect(signer.check(contentId: "a.bin", query: sandbox, nowMs: 1_000) == .failure(.badSignature))
        var later = query
        later["expires"] = "9999999"
        #expect(signer.check(contentId: "a.bin", query: later, nowMs: 1_000) == .failure(.badSignature))
        #expect(ContentURLSigner(key: Self.key + "x").check(contentId: "a.bin", query: query, nowMs: 1_000) == .failure(.badSignature))
        #expect(signer.check(contentId: "a.bin", query: [:], nowMs: 1_000) == .failure(.malformed))
    }
}

/// A raw TCP exchange: sends the bytes in one write and returns everything the server sends until it closes.
enum RawHTTP {
    static func exchange(port: Int, send bytes: [UInt8]) async throws -> [UInt8] {
        let received = NIOLockedValueBox<[UInt8]>([])
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Collector(received: received)) }
            }
            .connect(host: "127.0.0.1", port: port).get()
        try await channel.writeAndFlush(ByteBuffer(bytes: bytes))
        try await channel.closeFuture.get()
        return received.withLockedValue { $0 }
    }

    final class Collector: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let received: NIOLockedValueBox<[UInt8]>
        init(received: NIOLockedValueBox<[UInt8]>) { self.received = received }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            received.withLockedValue { $0 += buffer.readableBytesView }
        }
    }
}
