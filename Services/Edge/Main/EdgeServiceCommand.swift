import ArgumentParser
import EdgeService
import Foundation
import Logging
import RPCTransport
import ServiceLifecycle
import ServiceSupport

@main
struct EdgeServiceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "edge-service",
        abstract: "The suite's one public door: JSON-RPC over HTTP for apps, and Apple's notification webhook.",
        discussion: """
            With --tls-cert and --tls-key (PEM): HTTPS, TLS 1.2+, HTTP/2 by ALPN and HTTP/1.1. Without: plain HTTP, on \
            loopback unless --allow-plain-http-on-any-address (behind a TLS-terminating proxy).
            """)

    @OptionGroup var clientTLS: InternalClientTLSOptions

    @Option(name: .customLong("tls-cert"), help: "PEM certificate chain (env IAP_EDGE_TLS_CERT).") var tlsCert: String?
    @Option(name: .customLong("tls-key"), help: "PEM private key (env IAP_EDGE_TLS_KEY). Read once, never logged.") var tlsKey: String?

    @Option(help: "Address to bind (default 127.0.0.1; env IAP_HOST).") var host: String?
    @Option(help: "Port (default 8443).") var port: Int = 8443
    @Option(
        name: .customLong("accounts-addr"),
        help: "accounts-service HOST:PORT, or several comma-separated for several instances (env IAP_ACCOUNTS_ADDR).") var accountsAddr: String?
    @Option(
        name: .customLong("catalog-addr"), help: "catalog-service HOST:PORT, or several comma-separated for several instances (env IAP_CATALOG_ADDR)."
    ) var catalogAddr: String?
    @Option(
        name: .customLong("fulfillment-addr"),
        help: "fulfillment-service HOST:PORT, or several comma-separated for several instances (env IAP_FULFILLMENT_ADDR).") var fulfillmentAddr:
        String?
    @Option(name: .customLong("trusted-proxy"), help: "A reverse proxy's address whose X-Forwarded-For is believed. Repeatable.")
    var trustedProxies: [String] = []
    @Flag(
        name: .customLong("allow-plain-http-on-any-address"),
        help: "Serve plain HTTP on a non-loopback address (only behind a TLS-terminating proxy on a private network).")
    var allowPlainHTTP = false
    @Option(
        name: .customLong("internal-token"),
        help: "The suite's internal token (env IAP_INTERNAL_TOKEN): lets accounts key its limits on each app's address.")
    var internalToken: String?
    @Option(
        name: .customLong("content-dir"),
        help: "The content directory fulfillment serves (env IAP_CONTENT_DIR): GET /v1/content/... reads files from it.")
    var contentDir: String?
    @Option(
        name: .customLong("content-url-key"),
        help: "Key (32+ bytes) fulfillment signs content URLs with (env IAP_CONTENT_URL_KEY). Read once, never logged.")
    var contentURLKey: String?
    @Option(
        name: .customLong("content-chunk-kib"),
        help: "Over TLS (or without sendfile): size of each read of a content file and write to the connection (default 256 KiB).")
    var contentChunkKiB = 256
    @Flag(
        name: .customLong("no-sendfile"),
        help: "Over plain HTTP, read content files into buffers instead of sendfile(2) (for file systems without it).")
    var noSendfile = false
    @Option(name: .customLong("requests-per-second"), help: "Per client address: requests per second refilled into its bucket (default 20).")
    var requestsPerSecond: Double = 20
    @Option(help: "Per client address: the bucket's size, the burst allowed at once (default 100).") var burst: Double = 100
    @Option(
        name: .customLong("max-connections-per-address"),
        help: "Per client address: open connections at most; past it a new one is closed at once (default 512; trusted proxies exempt).")
    var maxConnectionsPerAddress = 512
    @Option(
        name: .customLong("webhook-requests-per-second"),
        help: "Apple's webhook, per client address: deliveries per second refilled into its bucket (env IAP_EDGE_WEBHOOK_RPS; default 200).")
    var webhookRequestsPerSecond: Double?
    @Option(
        name: .customLong("retention-requests-per-second"),
        help: "Apple's Get Retention Message requests, per client address: refilled per second (env IAP_EDGE_RETENTION_RPS; default 200).")
    var retentionRequestsPerSecond: Double?
    @Option(
        name: .customLong("retention-burst"),
        help: "Apple's Get Retention Message requests, per client address: the bucket's size (env IAP_EDGE_RETENTION_BURST; default 1000).")
    var retentionBurst: Double?
    @Option(
        name: .customLong("webhook-burst"), help: "Apple's webhook, per client address: the bucket's size (env IAP_EDGE_WEBHOOK_BURST; default 1000)."
    )
    var webhookBurst: Double?
    @Option(name: .customLong("log-level"), help: "trace ... critical (env IAP_LOG_LEVEL; default info).") var logLevel: String?

    var resolvedHost: String { host ?? Environment.value("IAP_HOST") ?? "127.0.0.1" }

    var certFile: String? { Environment.resolve(tlsCert, env: "IAP_EDGE_TLS_CERT") }
    var keyFile: String? { Environment.resolve(tlsKey, env: "IAP_EDGE_TLS_KEY") }

    func validate() throws {
        if (certFile == nil) != (keyFile == nil) { throw ValidationError("--tls-cert and --tls-key go together") }
        guard requestsPerSecond > 0, burst >= 1 else { throw ValidationError("--requests-per-second must be > 0 and --burst >= 1") }
        guard maxConnectionsPerAddress >= 1 else { throw ValidationError("--max-connections-per-address must be >= 1") }
        if certFile != nil { return }
        if !Loopback.contains(resolvedHost) && !allowPlainHTTP {
            throw ValidationError(
                """
                \(resolvedHost) is not a loopback address and this edge serves plain HTTP: put it behind a TLS-terminating \
                proxy and pass --allow-plain-http-on-any-address, or bind 127.0.0.1
                """)
        }
    }

    func run() async throws {
        var logger = Logger(label: "edge", factory: DeferredMetadataLogHandler.standardError(label:))
        logger.logLevel = (logLevel ?? Environment.value("IAP_LOG_LEVEL")).flatMap(Logger.Level.init(rawValue:)) ?? .info
        var config = EdgeConfiguration()
        config.trustedProxies = Set(trustedProxies)
        config.contentChunkBytes = max(16, min(contentChunkKiB, 16 * 1024)) * 1024
        config.contentSendfile = !noSendfile
        config.metricsRegistry = PrometheusMetrics.bootstrapProcess()
        config.requestsPerSecond = requestsPerSecond
        config.burst = burst
        config.maxConnectionsPerAddress = maxConnectionsPerAddress
        if let rate = webhookRequestsPerSecond ?? Environment.value("IAP_EDGE_WEBHOOK_RPS").flatMap(Double.init) {
            guard rate > 0 else { throw ValidationError("--webhook-requests-per-second must be > 0") }
            config.webhookRequestsPerSecond = rate
        }
        if let size = webhookBurst ?? Environment.value("IAP_EDGE_WEBHOOK_BURST").flatMap(Double.init) {
            guard size >= 1 else { throw ValidationError("--webhook-burst must be >= 1") }
            config.webhookBurst = size
        }
        if let rate = retentionRequestsPerSecond ?? Environment.value("IAP_EDGE_RETENTION_RPS").flatMap(Double.init) {
            guard rate > 0 else { throw ValidationError("--retention-requests-per-second must be > 0") }
            config.retentionRequestsPerSecond = rate
        }
        if let size = retentionBurst ?? Environment.value("IAP_EDGE_RETENTION_BURST").flatMap(Double.init) {
            guard size >= 1 else { throw ValidationError("--retention-burst must be >= 1") }
            config.retentionBurst = size
        }
        config.internalToken = try Environment.token(internalToken, flagName: "--internal-token", env: "IAP_INTERNAL_TOKEN")
        if config.internalToken == nil {
            logger.warning(
                "no internal token (--internal-token or IAP_INTERNAL_TOKEN): accounts' sign-in limits will key on the edge's address, shared by every app"
            )
        }
        config.contentSigner = try Environment.token(contentURLKey, flagName: "--content-url-key", env: "IAP_CONTENT_URL_KEY")
            .map(ContentURLSigner.init(key:))
        config.contentDirectory = Environment.resolve(contentDir, env: "IAP_CONTENT_DIR").map { URL(fileURLWithPath: $0, isDirectory: true) }
        if (config.contentSigner == nil) != (config.contentDirectory == nil) {
            throw ValidationError("content downloads need both --content-dir and --content-url-key (IAP_CONTENT_DIR, IAP_CONTENT_URL_KEY)")
        }
        let clientConfig = RPCClientConfiguration(connections: 4, callTimeout: config.callTimeout, tls: try clientTLS.clientTLS())
        let edge = EdgeService(
            accounts: try RPCClient(address: SuiteService.accounts.address(flag: accountsAddr), configuration: clientConfig),
            catalog: try RPCClient(address: SuiteService.catalog.address(flag: catalogAddr), configuration: clientConfig),
            fulfillment: try RPCClient(address: SuiteService.fulfillment.address(flag: fulfillmentAddr), configuration: clientConfig),
            configuration: config, logger: logger)
        try await ServiceOptions.runUntilSignalled(
            [
                ClosingService("service clients", logger: logger) { await edge.close() },
                try edge.application(
                    host: resolvedHost, port: port,
                    tls: try certFile.map { try EdgeService.tlsConfiguration(certificateFile: $0, keyFile: keyFile!) }),
            ], logger: logger)
    }
}
