import ArgumentParser
import ConsoleService
import Foundation
import Logging
import NIOSSL
import PostgresSupport
import RPCTransport
import ServiceLifecycle
import ServiceSupport

@main
struct ConsoleServiceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "console-service",
        abstract: "The support console: web pages for the people who answer customers (operators with roles, passwords and TOTP).",
        discussion: """
            Binds 127.0.0.1 by default: it belongs on the private network, never on the edge. With --tls-cert and --tls-key \
            (PEM) it serves HTTPS and marks its cookies Secure; plain HTTP is refused on any address but loopback. Create the \
            first operator with `iap console add-operator NAME --role admin --data-dir D`.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var clientTLS: InternalClientTLSOptions

    @Option(help: "Address to bind (default 127.0.0.1; env IAP_CONSOLE_HOST).") var host: String?
    @Option(help: "Port (env IAP_CONSOLE_PORT; default 8444).") var port: Int?
    @Option(name: .customLong("data-dir"), help: "Where console.sqlite lives: operators and their sessions (env IAP_DATA_DIR; default data).")
    var dataDir: String?
    @Option(name: .customLong("tls-cert"), help: "PEM certificate chain (env IAP_CONSOLE_TLS_CERT).") var tlsCert: String?
    @Option(name: .customLong("tls-key"), help: "PEM private key (env IAP_CONSOLE_TLS_KEY). Read once, never logged.") var tlsKey: String?
    @Option(name: .customLong("accounts-addr"), help: "accounts-service HOST:PORT, or several comma-separated (env IAP_ACCOUNTS_ADDR).")
    var accountsAddr: String?
    @Option(name: .customLong("catalog-addr"), help: "catalog-service HOST:PORT, or several comma-separated (env IAP_CATALOG_ADDR).")
    var catalogAddr: String?
    @Option(name: .customLong("fulfillment-addr"), help: "fulfillment-service HOST:PORT, or several comma-separated (env IAP_FULFILLMENT_ADDR).")
    var fulfillmentAddr: String?
    @Option(name: .customLong("admin-token"), help: "fulfillment's admin token (env IAP_ADMIN_TOKEN).") var adminToken: String?
    @Option(name: .customLong("internal-token"), help: "The suite's internal token, for accounts (env IAP_INTERNAL_TOKEN).") var internalToken:
        String?
    @Option(name: .customLong("session-idle-minutes"), help: "An operator's session ends after this long without a request (default 30).")
    var sessionIdleMinutes = 30
    @Option(name: .customLong("log-level"), help: "trace ... critical (env IAP_LOG_LEVEL; default info).") var logLevel: String?

    var resolvedHost: String { host ?? Environment.value("IAP_CONSOLE_HOST") ?? "127.0.0.1" }
    var resolvedPort: Int { port ?? Environment.value("IAP_CONSOLE_PORT").flatMap { Int($0) } ?? 8444 }
    var certFile: String? { Environment.resolve(tlsCert, env: "IAP_CONSOLE_TLS_CERT") }
    var keyFile: String? { Environment.resolve(tlsKey, env: "IAP_CONSOLE_TLS_KEY") }

    func validate() throws {
        if (certFile == nil) != (keyFile == nil) { throw ValidationError("--tls-cert and --tls-key go together") }
        guard (1...720).contains(sessionIdleMinutes) else { throw ValidationError("--session-idle-minutes must be 1-720") }
        do { try ConsoleConfiguration.checkBind(host: resolvedHost, tls: certFile != nil) } catch { throw ValidationError("\(error)") }
    }

    func run() async throws {
        var logger = Logger(label: "console", factory: DeferredMetadataLogHandler.standardError(label:))
        logger.logLevel = (logLevel ?? Environment.value("IAP_LOG_LEVEL")).flatMap(Logger.Level.init(rawValue:)) ?? .info
        guard let admin = try Environment.token(adminToken, flagName: "--admin-token", env: "IAP_ADMIN_TOKEN"),
            let internalToken = try Environment.token(internalToken, flagName: "--internal-token", env: "IAP_INTERNAL_TOKEN")
        else { throw ValidationError("the console needs --admin-token and --internal-token (IAP_ADMIN_TOKEN, IAP_INTERNAL_TOKEN)") }
        var config = ConsoleConfiguration(adminToken: admin, internalToken: internalToken)
        config.secureCookies = certFile != nil
        config.sessionIdleMs = Int64(sessionIdleMinutes) * 60_000
        let store: any ConsoleStorage
        if let url = database.resolvedURL() {
            let pool = try PostgresPool(url: try PostgresURL(url), schema: "console", connections: try database.resolvedPoolSize(), logger: logger)
            store = try await PostgresConsoleStore(pool: pool)
            logger.info("console store: PostgreSQL \(pool.url.redacted)")
        } else {
            let directory = URL(fileURLWithPath: dataDir ?? Environment.value("IAP_DATA_DIR") ?? "data", isDirectory: true)
            try PrivateFiles.directory(directory)
            store = try ConsoleStore.open(directory: directory)
        }
        let clients = RPCClientConfiguration(connections: 2, callTimeout: .seconds(15), tls: try clientTLS.clientTLS())
        let console = try ConsoleService(
            store: store, accounts: try RPCClient(address: SuiteService.accounts.address(flag: accountsAddr), configuration: clients),
            fulfillment: try RPCClient(address: SuiteService.fulfillment.address(flag: fulfillmentAddr), configuration: clients),
            catalog: try RPCClient(address: SuiteService.catalog.address(flag: catalogAddr), configuration: clients),
            configuration: config, logger: logger)
        let tls = try certFile.map { cert -> TLSConfiguration in
            var tls = TLSConfiguration.makeServerConfiguration(
                certificateChain: try NIOSSLCertificate.fromPEMFile(cert).map { .certificate($0) },
                privateKey: .privateKey(try NIOSSLPrivateKey(file: keyFile!, format: .pem)))
            tls.minimumTLSVersion = .tlsv12
            return tls
        }
        let host = resolvedHost
        let log = logger
        try await ServiceOptions.runUntilSignalled(
            [
                ClosingService("console", logger: logger) { await console.close() },
                try console.application(host: host, port: resolvedPort, tls: tls) { port in
                    log.notice("console listening", metadata: ["url": "\(tls == nil ? "http" : "https")://\(host):\(port)/"])
                },
            ], logger: logger)
    }
}
