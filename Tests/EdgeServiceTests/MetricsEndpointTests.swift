import AsyncHTTPClient
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import NIOCore
import NIOHTTP1
import Prometheus
import RPCTransport
import ServiceSupport
import SuiteTestSupport
import Testing

@testable import EdgeService

/// `/metrics` in Prometheus text over real HTTP: a JSON-RPC service's counters on its `--metrics-port`
/// listener, and the edge's HTTP server metrics on its own port (to loopback callers).
@Suite struct MetricsEndpointTests {
    static func get(_ url: String) async throws -> (status: Int, body: String, contentType: String?) {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: url), timeout: .seconds(30))
        return (
            Int(response.status.code), String(buffer: try await response.body.collect(upTo: 8 << 20)), response.headers.first(name: "Content-Type")
        )
    }

    @Test func aJSONRPCServiceShowsItsCallsOnItsMetricsPort() async throws {
        let registry = PrometheusCollectorRegistry()
        var config = RPCServerConfiguration(serviceName: "catalog", port: 0)
        config.metricsFactory = PrometheusMetrics.factory(registry: registry)
        let server = RPCServer(configuration: config, router: RPCRouter(), logger: EdgeFixture.quiet)
        try await server.start()
        let metrics = MetricsServer(host: "127.0.0.1", port: 0, registry: registry, logger: EdgeFixture.quiet)
        try await metrics.start()
        let client = RPCClient(host: "127.0.0.1", port: server.localPort!, configuration: .init(connections: 1))
        for _ in 0..<3 { _ = try await client.call(RPCPing.self, EmptyParams()) }
        _ = try? await client.callRaw(method: "no.such.method", params: Array("{}".utf8))
        await client.close()

        let port = try #require(metrics.localPort)
        let scraped = try await Self.get("http://127.0.0.1:\(port)/metrics")
        #expect(scraped.status == 200 && scraped.contentType?.hasPrefix("text/plain; version=0.0.4") == true)
        let pings = scraped.body.split(separator: "\n").first {
            $0.hasPrefix("rpc_server_duration_count") && $0.contains(#"rpc_method="rpc.ping""#) && $0.contains(#"rpc_service="catalog""#)
        }
        #expect(pings?.hasSuffix(" 3") == true, "\(scraped.body)")
        #expect(scraped.body.contains(#"rpc_jsonrpc_error_code="-32601""#))
        #expect(try await Self.get("http://127.0.0.1:\(port)/other").status == 404)
        await metrics.stop()
        await server.shutdown()
    }

    @Test func theEdgeCountsRequestsByRouteAndStatus() async throws {
        try await EdgeTests.withEdge { _, base in
            for _ in 0..<2 { _ = try await EdgeTests.post(base + "/v1/rpc", #"{"jsonrpc":"2.0","id":1,"method":"catalog.listProducts"}"#) }
            _ = try await EdgeTests.post(base + "/v1/rpc", "{}", contentType: "text/plain")
            let scraped = try await Self.get(base + "/metrics")
            #expect(scraped.status == 200)
            let lines = scraped.body.split(separator: "\n")
            let ok = lines.first {
                $0.hasPrefix("http_server_request_duration_count") && $0.contains(#"http_route="/v1/rpc""#)
                    && $0.contains(#"http_response_status_code="200""#) && $0.contains(#"http_request_method="POST""#)
            }
            #expect(ok?.hasSuffix(" 2") == true, "\(scraped.body)")
            #expect(lines.contains { $0.hasPrefix("http_server_request_duration_count") && $0.contains(#"http_response_status_code="415""#) })
            #expect(lines.contains { $0.hasPrefix("http_server_active_requests") })
            // Only scrapers on this machine see them: the public port does not publish metrics to apps.
            #expect(EdgeService.isLoopback("127.0.0.1") && EdgeService.isLoopback("::1"))
            #expect(!EdgeService.isLoopback("198.51.100.7") && !EdgeService.isLoopback(nil))
            // A request relayed by a proxy on this machine is the public's, not a scraper's.
            var relayed = HTTPClientRequest(url: base + "/metrics")
            relayed.headers.add(name: "X-Forwarded-For", value: "198.51.100.7")
            #expect(try await HTTPClient.shared.execute(relayed, timeout: .seconds(30)).status == .notFound)
        }
        try await EdgeTests.withEdge(configure: { $0.trustedProxies = ["127.0.0.1"] }) { _, base in
            let proxied = try await Self.get(base + "/metrics")
            #expect(proxied.status == 404, "the loopback peer is a trusted proxy")
        }
    }

    /// HTTP/2's `:method` can be any token, and every label set a metric is given is kept for ever: one connection
    /// sending distinct methods used to grow the edge's memory and `/metrics` without bound. Methods outside
    /// HTTP's registered few are labelled `_OTHER` (OpenTelemetry's convention).
    @Test func distinctMethodsDoNotGrowTheMetrics() async throws {
        try await EdgeTests.withTLSEdge { _, _, port, client in
            let base = "https://localhost:\(port)"
            func send(_ method: String) async throws -> HTTPVersion {
                var request = HTTPClientRequest(url: base + "/no/such/route")
                request.method = .RAW(value: method)
                let response = try await client.execute(request, timeout: .seconds(30))
                _ = try await response.body.collect(upTo: 1 << 16)
                return response.version
            }
            func labelSets() async throws -> Int {
                let response = try await client.execute(HTTPClientRequest(url: base + "/metrics"), timeout: .seconds(30))
                let body = String(buffer: try await response.body.collect(upTo: 64 << 20))
                return body.split(separator: "\n").filter { $0.hasPrefix("http_server_request_duration_count") }.count
            }
            #expect(try await send("FIRST") == .http2)
            _ = try await labelSets()  // the scrape's own label set is there from the second scrape on
            let before = try await labelSets()
            let count = Int(ProcessInfo.processInfo.environment["IAP_METHOD_FLOOD"] ?? "") ?? 10_000
            try await withThrowingTaskGroup(of: Void.self) { group in
                for worker in 0..<16 {
                    group.addTask {
                        for i in stride(from: worker, to: count, by: 16) { _ = try await send("M\(i)") }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await labelSets() == before, "\(count) distinct methods made new label sets")
        }
    }
}

/// The log handler the executables use: metadata set on a logger is kept and read back as set, explicit
/// metadata wins at log time, and the level passes through (the stream handler renders only when writing).
@Suite struct DeferredMetadataLogHandlerTests {
    @Test func metadataIsKeptAsSetAndTheLevelPassesThrough() {
        var logger = Logger(label: "deferred", factory: DeferredMetadataLogHandler.standardError(label:))
        logger.logLevel = .error
        logger[metadataKey: "rpc.request_id"] = "42"
        logger[metadataKey: "rpc.method"] = "catalog.listProducts"
        #expect(logger[metadataKey: "rpc.request_id"] == "42" && logger.handler.metadata.count == 2)
        logger[metadataKey: "rpc.method"] = nil
        #expect(logger.handler.metadata.keys.sorted() == ["rpc.request_id"])
        #expect(logger.logLevel == .error && logger.handler.logLevel == .error)
        logger.debug("below the level: not written")
    }
}
