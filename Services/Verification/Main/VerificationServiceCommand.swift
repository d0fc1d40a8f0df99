import ArgumentParser
import Foundation
import Logging
import Receipts
import RPCTransport
import ServiceLifecycle
import ServiceSupport
import VerificationService

@main
struct VerificationServiceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verification-service",
        abstract: "Verifies app receipts and StoreKit 2 signed transactions locally, against pinned roots.")

    @OptionGroup var options: ServiceOptions

    @Option(name: .customLong("trust-anchor"), help: "Also trust this root certificate (DER or PEM file). Repeatable.")
    var trustAnchors: [String] = []

    @Flag(name: .customLong("allow-xcode"), help: "Accept Xcode StoreKit-testing receipts (development only).")
    var allowXcode = false

    @Option(name: .customLong("bundle-id"), help: "Accept only receipts of this bundle id. Repeatable; none accepts any.")
    var bundleIds: [String] = []

    func run() async throws {
        let logger = options.logger(label: "verification")
        var config = VerificationConfiguration()
        for path in trustAnchors {
            do {
                config.extraRoots.append(try ReceiptTrust.certificate(from: Array(Data(contentsOf: URL(fileURLWithPath: path)))))
            } catch {
                throw ValidationError("--trust-anchor \(path): not a readable DER or PEM certificate (\(error))")
            }
        }
        config.allowXcode = allowXcode
        config.bundleIds = Set(bundleIds)
        if bundleIds.isEmpty { logger.warning("no --bundle-id given: receipts of any bundle are accepted") }
        if allowXcode { logger.warning("--allow-xcode: Xcode StoreKit-testing receipts are accepted (never in production)") }
        let service = VerificationService(configuration: config)
        let server = RPCServer(
            configuration: .init(serviceName: "verification", host: options.resolvedHost(),
                                 port: options.resolvedPort(default: DefaultPorts.verification)),
            router: service.router(), logger: logger)
        let group = ServiceGroup(services: [server], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        try await group.run()
    }
}
