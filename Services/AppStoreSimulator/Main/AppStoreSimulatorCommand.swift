import AppStoreSimulator
import ArgumentParser
import Hummingbird
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

    @Option(name: .customLong("shared-secret"), help: "App-specific shared secret the verifyReceipt endpoints require (env IAP_SIM_SHARED_SECRET).")
    var sharedSecret: String?

    func run() async throws {
        let logger = options.logger(label: "appstore-sim")
        let simulator = try AppStoreSimulator(directory: options.resolvedDataDir())
        let endpoint = try VerifyReceiptEndpoint(
            simulator: simulator,
            sharedSecret: Environment.resolve(sharedSecret, env: "IAP_SIM_SHARED_SECRET"))
        logger.warning("this is the App Store SIMULATOR: its receipts are signed by its own test PKI (see sim.trustAnchor)")
        var config = options.serverConfiguration(serviceName: "appstore-sim", defaultPort: DefaultPorts.simulator)
        config.blockingThreads = 2  // RSA signing per call
        let server = RPCServer(configuration: config, router: simulator.router(endpoint: endpoint), logger: logger)
        let api = AppStoreServerAPIEndpoint(simulator: simulator, faults: endpoint.faults)
        let http = endpoint.application(host: options.resolvedHost(), port: httpPort, logger: logger, api: api)
        try await options.runUntilSignalled([server, http], logger: logger)
    }
}
