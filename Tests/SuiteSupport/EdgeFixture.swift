import EdgeService
import Foundation
import FulfillmentService
import Logging
import NIOSSL
import ServiceSupport

/// The edge on a free loopback port in front of a `SuiteFixture`, for tests over real HTTP(S).
public enum EdgeFixture {
    /// The content URL key the suite's fulfillment and the edge share in tests.
    public static let contentKey = "content-url-key-for-tests-0123456789abcdef"

    public static var quiet: Logger {
        var logger = Logger(label: "edge-test")
        logger.logLevel = .critical
        return logger
    }

    /// Serves `edge` on a free loopback port (HTTPS with `tls`) while `body` runs with that port.
    public static func serving(_ edge: EdgeService, tls: TLSConfiguration? = nil, _ body: (Int) async throws -> Void) async throws {
        let port = AsyncStream<Int>.makeStream()
        let app = try edge.application(host: "127.0.0.1", port: 0, tls: tls) { port.continuation.yield($0) }
        let server = Task { try await app.runService() }
        defer { server.cancel() }
        var ports = port.stream.makeAsyncIterator()
        guard let bound = await ports.next() else { throw EdgeFixtureError.didNotStart }
        try await body(bound)
    }

    enum EdgeFixtureError: Error { case didNotStart }

    /// A suite whose fulfillment signs content URLs, an edge in front of it that serves its content
    /// directory on the suite's clock, and `body` with both and the edge's base URL.
    public static func withContentEdge(
        configure: (inout EdgeConfiguration) -> Void = { _ in }, _ body: (SuiteFixture, String) async throws -> Void
    ) async throws {
        try await SuiteFixture.with(configure: { $0.contentURLSigner = ContentURLSigner(key: contentKey) }) { suite in
            var config = EdgeConfiguration()
            config.internalToken = SuiteFixture.internalToken  // the webhook presents it to fulfillment
            config.contentSigner = ContentURLSigner(key: contentKey)
            config.contentDirectory = suite.directory.appendingPathComponent("fulfillment/content")
            config.clock = suite.clock.clock
            // Tests assert a notification's effect right after the webhook's answer.
            config.webhookAnswersOnceRecorded = false
            // Answers on a machine every test shares: a patient deadline (the default, Apple's 700 ms, is for deployments).
            config.retentionDeadline = .seconds(30)
            configure(&config)
            let edge = EdgeService(
                accounts: suite.accounts, catalog: suite.catalog, fulfillment: suite.fulfillment, configuration: config, logger: quiet)
            try await serving(edge) { port in try await body(suite, "http://127.0.0.1:\(port)") }
        }
    }

    /// A suite with the Google Play simulator, an edge in front of it, and the simulator's pushes aimed at the edge's
    /// Google Play route (with the audience verification expects): `body` gets the suite, the simulator and the edge's URL.
    public static func withPlayEdge(
        configure: (inout FulfillmentConfiguration) -> Void = { _ in }, _ body: (SuiteFixture, PlayStand, String) async throws -> Void
    ) async throws {
        try await SuiteFixture.with(configure: configure, play: true) { suite in
            guard let play = suite.play else { throw SuiteFixtureError("the suite has no Play simulator") }
            var config = EdgeConfiguration()
            config.internalToken = SuiteFixture.internalToken
            config.clock = suite.clock.clock
            // Tests assert a notification's effect right after the push's answer.
            config.webhookAnswersOnceRecorded = false
            let edge = EdgeService(
                accounts: suite.accounts, catalog: suite.catalog, fulfillment: suite.fulfillment, configuration: config, logger: quiet)
            try await serving(edge) { port in
                let base = "http://127.0.0.1:\(port)"
                try await play.pushTo("\(base)/v1/notifications/googleplay")
                try await body(suite, play, base)
            }
        }
    }
}
