import AppStoreSimulator
import ArgumentParser
import Hummingbird
import IAPProtocol
import Logging
import RPCTransport
import ServiceLifecycle
import ServiceSupport

@main
struct AppStoreSimulatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "appstore-sim",
        abstract: "A local stand-in for the App Store (development and tests only): purchases, receipts, signed transactions.")

    @OptionGroup var options: ServiceOptions

    @Option(
        name: .customLong("http-port"), help: "Port of the HTTP endpoints: verifyReceipt and the App Store Server API (/inApps/...). Default 7180.")
    var httpPort = 7180

    @Option(
        name: .customLong("ocsp-url"),
        help:
            "The OCSP responder URL a NEW data directory's certificates carry (env IAP_SIM_OCSP_URL; default http://127.0.0.1:HTTP-PORT/ocsp, this simulator's own). Give the address verifiers reach it at, e.g. http://appstore-sim:7180/ocsp under compose."
    )
    var ocspURL: String?

    @Option(name: .customLong("shared-secret"), help: "App-specific shared secret the verifyReceipt endpoints require (env IAP_SIM_SHARED_SECRET).")
    var sharedSecret: String?

    @Option(
        name: .customLong("notification-url"),
        help: "Where production App Store Server Notifications are POSTed, e.g. the edge's /v1/notifications/appstore (env IAP_SIM_NOTIFICATION_URL)."
    )
    var notificationURL: String?

    @Option(
        name: .customLong("sandbox-notification-url"),
        help: "Where sandbox notifications are POSTed, e.g. the edge's /v1/notifications/appstore/sandbox (env IAP_SIM_SANDBOX_NOTIFICATION_URL).")
    var sandboxNotificationURL: String?

    @Option(
        name: .customLong("notification-ca"),
        help: "PEM certificate(s) to trust for https notification and realtime retention URLs besides the system's (env IAP_SIM_NOTIFICATION_CA).")
    var notificationCA: String?

    func run() async throws {
        let logger = options.logger(label: "appstore-sim")
        var delivery = NotificationCourier.Configuration()
        if let ca = Environment.resolve(notificationCA, env: "IAP_SIM_NOTIFICATION_CA") {
            delivery.trustRootsPEM = try String(contentsOfFile: ca, encoding: .utf8)
        }
        let simulator = try AppStoreSimulator(
            directory: options.resolvedDataDir(), delivery: delivery,
            ocspURL: Environment.resolve(ocspURL, env: "IAP_SIM_OCSP_URL") ?? "http://127.0.0.1:\(httpPort)/ocsp")
        for (environment, flag, env) in [
            (SimEnvironment.production, notificationURL, "IAP_SIM_NOTIFICATION_URL"),
            (SimEnvironment.sandbox, sandboxNotificationURL, "IAP_SIM_SANDBOX_NOTIFICATION_URL"),
        ] {
            if let url = Environment.resolve(flag, env: env) {
                try simulator.setNotificationURL(.init(environment: environment, url: url))
                logger.info("notifications go to \(url)", metadata: ["environment": "\(environment.rawValue)"])
            }
        }
        let endpoint = try VerifyReceiptEndpoint(
            simulator: simulator,
            sharedSecret: Environment.resolve(sharedSecret, env: "IAP_SIM_SHARED_SECRET"))
        logger.warning("this is the App Store SIMULATOR: its receipts are signed by its own test PKI (see sim.trustAnchor)")
        var config = try options.serverConfiguration(serviceName: "appstore-sim", defaultPort: DefaultPorts.simulator)
        config.blockingThreads = 2  // RSA signing per call
        let server = RPCServer(configuration: config, router: simulator.router(endpoint: endpoint), logger: logger)
        let api = AppStoreServerAPIEndpoint(simulator: simulator, faults: endpoint.faults)
        let http = endpoint.application(host: options.resolvedHost(), port: httpPort, logger: logger, api: api)
        try await options.runUntilSignalled([NotificationCourierLoop(courier: simulator.courier), server, http], logger: logger)
    }
}
