import Foundation
import HTTPTypes
import JSONRPC
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOHTTPTypes
import NIOPosix
import Prometheus
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

@testable import EdgeService

/// `/v1/rpc` answered on the event loop (`EventLoopRoutes`) beside Hummingbird on the same connection: answers
/// in request order whichever path takes a request, nothing lost to a half close, 413 without losing the
/// connection. Over a raw TCP socket with NIO's HTTP/1 response parser, so requests can be pipelined byte for byte.
@Suite struct EventLoopRoutesTests {
    /// One HTTP/1.1 connection: raw bytes out, parsed responses in. Used by one task.
    final class RawHTTP {
        struct Answer: Sendable {
            let status: Int
            let headers: [String: String]
            let body: String
        }

        let channel: NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>
        var parts: NIOAsyncChannelInboundStream<HTTPClientResponsePart>.AsyncIterator

        init(port: Int) async throws {
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .channelOption(.allowRemoteHalfClosure, value: true)
                .connect(host: "127.0.0.1", port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(HTTPRequestEncoder())
                        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(HTTPResponseDecoder()))
                        return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(
                            wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
                    }
                }
            parts = channel.inbound.makeAsyncIterator()
        }

        /// Every part written, then one flush: the requests leave together, pipelined.
        func send(_ parts: [HTTPClientRequestPart]) async throws {
            try await channel.outbound.write(contentsOf: parts)
        }

        /// The client's half close: no more requests, answers still welcome.
        func finishSending() {
            channel.outbound.finish()
        }

        /// The next whole response; nil once the server closed.
        func next() async throws -> Answer? {
            guard case .head(let head)? = try await parts.next() else { return nil }
            var body = ""
            while let part = try await parts.next() {
                switch part {
                case .body(let buffer): body += String(buffer: buffer)
                case .end: return Answer(status: Int(head.status.code), headers: Self.fields(head.headers), body: body)
                case .head: Issue.record("a head inside a response")
                }
            }
            return nil
        }

        static func fields(_ headers: HTTPHeaders) -> [String: String] {
            var out: [String: String] = [:]
            for (name, value) in headers { out[name.lowercased()] = value }
            return out
        }

        func close() async { try? await channel.channel.close() }

        deinit { channel.outbound.finish() }  // NIO's writer must be finished before it goes
    }

    static func post(_ body: String, contentType: String = "application/json", path: String = "/v1/rpc", authorization: String? = nil)
        -> [HTTPClientRequestPart]
    {
        var head = HTTPRequestHead(version: .http1_1, method: .POST, uri: path)
        head.headers.add(name: "Host", value: "localhost")
        if let authorization { head.headers.add(name: "Authorization", value: authorization) }
        head.headers.add(name: "Content-Type", value: contentType)
        head.headers.add(name: "Content-Length", value: String(body.utf8.count))
        return [.head(head), .body(.byteBuffer(ByteBuffer(string: body))), .end(nil)]
    }

    /// A POST whose body comes in `pieces`, chunked, with no length said up front.
    static func chunked(_ pieces: [String]) -> [HTTPClientRequestPart] {
        var head = HTTPRequestHead(version: .http1_1, method: .POST, uri: "/v1/rpc")
        head.headers.add(name: "Host", value: "localhost")
        head.headers.add(name: "Content-Type", value: "application/json")
        head.headers.add(name: "Transfer-Encoding", value: "chunked")
        return [.head(head)] + pieces.map { .body(.byteBuffer(ByteBuffer(string: $0))) } + [.end(nil)]
    }

    static func get(_ path: String) -> [HTTPClientRequestPart] {
        var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: path)
        head.headers.add(name: "Host", value: "localhost")
        return [.head(head), .end(nil)]
    }

    static func list(_ id: Int) -> String {
        #"{"jsonrpc":"2.0","id":\#(id),"method":"catalog.listProducts"}"#
    }

    static func withEdge(configure: (inout EdgeConfiguration) -> Void = { _ in }, _ body: (EdgeService, Int) async throws -> Void)
        async throws
    {
        try await SuiteFixture.with { suite in
            var config = EdgeConfiguration()
            config.internalToken = SuiteFixture.internalToken  // the webhook presents it to fulfillment
            configure(&config)
            let edge = EdgeService(
                accounts: suite.accounts, catalog: suite.catalog, fulfillment: suite.fulfillment, configuration: config,
                logger: EdgeTests.quiet)
            try await EdgeTests.serving(edge) { port in try await body(edge, port) }
        }
    }

    static func id(_ answer: RawHTTP.Answer?) -> Int64? {
        (try? JSONValue.parse(answer?.body ?? ""))?["id"]?.intValue
    }

    @Test func pipelinedRequestsAreAnsweredInOrderWhicheverPathTakesThem() async throws {
        try await Self.withEdge { edge, port in
            let connection = try await RawHTTP(port: port)
            func onTheEventLoop() -> Int { edge.answeredOnTheEventLoop.load(ordering: .relaxed) }
            // readyz goes through Hummingbird and waits on three pings: what is pipelined behind it waits for it, so it
            // goes through Hummingbird too.
            try await connection.send(Self.get("/readyz") + Self.post(Self.list(1)) + Self.get("/healthz") + Self.post(Self.list(2)))
            // readyz's own answer first, whatever it says: its pings have a second each, which a loaded machine (a hundred
            // suites in parallel) sometimes misses, and what this test is about is the order of the answers.
            let ready = try await connection.next()
            #expect([200, 503].contains(ready?.status) && ready?.body.contains(#""catalog":"#) == true, "\(String(describing: ready))")
            #expect(Self.id(try await connection.next()) == 1)
            #expect(try await connection.next()?.body == "ok\n")
            #expect(Self.id(try await connection.next()) == 2)
            #expect(onTheEventLoop() == 0)

            // Calls first: each answered on the event loop in turn; one behind a Hummingbird request waits for it.
            let batch = "[" + Self.list(4) + "," + Self.list(5) + "]"
            try await connection.send(Self.post(Self.list(3)) + Self.post(batch) + Self.get("/healthz") + Self.post(Self.list(6)))
            #expect(Self.id(try await connection.next()) == 3)
            let batched = try await connection.next()
            #expect(batched?.status == 200 && batched?.headers["content-type"] == "application/json")
            let members = try JSONValue.parse(batched?.body ?? "").arrayValue ?? []
            #expect(members.compactMap { $0["id"]?.intValue } == [4, 5])
            #expect(try await connection.next()?.body == "ok\n")
            #expect(Self.id(try await connection.next()) == 6)
            #expect(onTheEventLoop() == 2)
            await connection.close()
        }
    }

    @Test func anAnswerArrivesAfterTheClientHalfClosed() async throws {
        try await Self.withEdge { edge, port in
            let connection = try await RawHTTP(port: port)
            try await connection.send(Self.post(Self.list(7)) + Self.post(Self.list(8)))
            connection.finishSending()
            let first = try await connection.next()
            #expect(first?.status == 200 && Self.id(first) == 7)
            #expect(first?.headers["date"]?.hasSuffix(" GMT") == true && first?.headers["server"] == "iap-edge")
            #expect(Self.id(try await connection.next()) == 8)
            #expect(try await connection.next() == nil, "closed once answered")
            #expect(edge.answeredOnTheEventLoop.load(ordering: .relaxed) == 2)
        }
    }

    @Test func aBodyPastTheCapIs413AndTheConnectionGoesOn() async throws {
        try await Self.withEdge(configure: { $0.maxBodyBytes = 1024 }) { edge, port in
            let connection = try await RawHTTP(port: port)
            let big = #"{"jsonrpc":"2.0","id":9,"method":"catalog.listProducts","params":{"pad":""# + String(repeating: "a", count: 2000) + #""}}"#
            // Said in Content-Length, and found out while a chunked body arrives.
            let chunked = Self.chunked([String(big.prefix(700)), String(big.dropFirst(700))])
            try await connection.send(Self.post(big) + Self.post(Self.list(10)) + chunked + Self.post(Self.list(11)))
            #expect(try await connection.next()?.status == 413)
            #expect(Self.id(try await connection.next()) == 10)
            #expect(try await connection.next()?.status == 413)
            #expect(Self.id(try await connection.next()) == 11)
            #expect(edge.answeredOnTheEventLoop.load(ordering: .relaxed) == 4)
            await connection.close()
        }
    }

    /// Apple's webhook takes the same path: what fails verification or is not Apple's body is 400, a body past its
    /// cap 413 (and the connection goes on), each answered on the event loop.
    @Test func theWebhookIsAnsweredOnTheEventLoopToo() async throws {
        try await Self.withEdge(configure: { $0.maxWebhookBodyBytes = 4096 }) { edge, port in
            let connection = try await RawHTTP(port: port)
            let webhook = "/v1/notifications/appstore"
            try await connection.send(
                Self.post(#"{"signedPayload":"a.b.c"}"#, path: webhook) + Self.post(#"{"signedPayload":5}"#, path: webhook + "/sandbox")
                    + Self.post("not json", path: webhook) + Self.post(String(repeating: "a", count: 5000), path: webhook)
                    + Self.post(Self.list(12)))
            #expect(try await connection.next()?.status == 400, "a forgery")
            #expect(try await connection.next()?.status == 400, "not a string")
            #expect(try await connection.next()?.status == 400, "not JSON")
            #expect(try await connection.next()?.status == 413)
            #expect(Self.id(try await connection.next()) == 12)
            #expect(edge.answeredOnTheEventLoop.load(ordering: .relaxed) == 5)
            await connection.close()
        }
    }

    /// Google Play's pushes too: no bearer token 401, a body past the webhook's cap 413, and a push verification cannot
    /// check (no Play push settings in this suite) 503 for Pub/Sub to retry, each answered on the event loop.
    @Test func googlePlaysPushesAreAnsweredOnTheEventLoopToo() async throws {
        try await Self.withEdge(configure: { $0.maxWebhookBodyBytes = 4096 }) { edge, port in
            let connection = try await RawHTTP(port: port)
            let push = "/v1/notifications/googleplay"
            let body = #"{"message":{"data":"e30=","messageId":"1"},"subscription":"projects/p/subscriptions/s"}"#
            try await connection.send(
                Self.post(body, path: push) + Self.post(String(repeating: "a", count: 5000), path: push, authorization: "Bearer a.b.c")
                    + Self.post(body, path: push, authorization: "Bearer a.b.c") + Self.post(Self.list(7)))
            #expect(try await connection.next()?.status == 401)
            #expect(try await connection.next()?.status == 413)
            #expect(try await connection.next()?.status == 503)
            #expect(Self.id(try await connection.next()) == 7)
            #expect(edge.answeredOnTheEventLoop.load(ordering: .relaxed) == 4)
            await connection.close()
        }
    }

    @Test func refusalsAreTheRoutesRefusals() async throws {
        try await Self.withEdge(configure: {
            $0.burst = 2; $0.requestsPerSecond = 0.001
        }) { edge, port in
            let connection = try await RawHTTP(port: port)
            try await connection.send(
                Self.post(Self.list(1), contentType: "text/plain") + Self.post(Self.list(2))
                    + Self.post(Self.list(3)))
            #expect(try await connection.next()?.status == 415)
            #expect(Self.id(try await connection.next()) == 2)
            let limited = try await connection.next()
            #expect(limited?.status == 429 && Int(limited?.headers["retry-after"] ?? "") ?? 0 >= 1)
            #expect(edge.answeredOnTheEventLoop.load(ordering: .relaxed) == 3)
            await connection.close()
        }
    }
}

/// The route's gauge of requests in progress on an embedded channel: a client that leaves mid-body is no longer
/// counted (nothing is forwarded, so no network is needed here).
@Suite struct EventLoopRoutesGaugeTests {
    @Test func aClientLeavingMidBodyIsNoLongerAnActiveRequest() throws {
        let registry = PrometheusCollectorRegistry()
        var config = EdgeConfiguration()
        config.internalToken = SuiteFixture.internalToken  // the webhook presents it to fulfillment
        config.metricsRegistry = registry
        let nowhere = RPCClient(host: "127.0.0.1", port: 1)
        let edge = EdgeService(accounts: nowhere, catalog: nowhere, fulfillment: nowhere, configuration: config, logger: EdgeTests.quiet)
        func active() -> String? {
            var text: [UInt8] = []
            registry.emit(into: &text)
            return String(decoding: text, as: UTF8.self).split(separator: "\n").first { $0.hasPrefix("http_server_active_requests") }.map(String.init)
        }
        let channel = EmbeddedChannel(handler: EventLoopRoutes(edge: edge, maxBodyBytes: 1024, maxWebhookBodyBytes: 1024))
        var head = HTTPRequest(method: .post, scheme: "http", authority: "localhost", path: "/v1/rpc")
        head.headerFields[.contentType] = "application/json"
        try channel.writeInbound(HTTPRequestPart.head(head))
        try channel.writeInbound(HTTPRequestPart.body(ByteBuffer(string: #"{"jsonrpc":"2.0","#)))
        #expect(active() == "http_server_active_requests 1.0", "\(active() ?? "no gauge")")
        #expect(try channel.readInbound(as: HTTPRequestPart.self) == nil, "the request is this handler's, not Hummingbird's")
        _ = try channel.finish()
        #expect(active() == "http_server_active_requests 0.0", "\(active() ?? "no gauge")")
    }
}
