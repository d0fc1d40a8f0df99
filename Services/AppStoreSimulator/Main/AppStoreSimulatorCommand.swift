import AppStoreSimulator
import ArgumentParser
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

    func run() async throws {
        let logger = options.logger(label: "appstore-sim")
        let simulator = try AppStoreSimulator(directory: options.resolvedDataDir())
        logger.warning("this is the App Store SIMULATOR: its receipts are signed by its own test PKI (see sim.trustAnchor)")
        var config = RPCServerConfiguration(serviceName: "appstore-sim", host: options.resolvedHost(),
                                            port: options.resolvedPort(default: DefaultPorts.simulator))
        config.blockingThreads = 2  // RSA signing per call
        let server = RPCServer(configuration: config, router: simulator.router(), logger: logger)
        let group = ServiceGroup(services: [server], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        try await group.run()
    }
}
