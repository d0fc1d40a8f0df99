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

    @Option(name: .customLong("trust-anchor-dir"),
            help: "Also trust every *-root.der / *-root.pem certificate in this directory, if it exists (env IAP_TRUST_ANCHOR_DIR; e.g. a simulator's sim-pki).")
    var trustAnchorDir: String?

    @Flag(name: .customLong("allow-xcode"), help: "Accept Xcode StoreKit-testing receipts (development only).")
    var allowXcode = false

    @Option(name: .customLong("bundle-id"), help: "Accept only receipts of this bundle id. Repeatable; none accepts any.")
    var bundleIds: [String] = []

    @Option(name: .customLong("verify-receipt-url"), help: "Production verifyReceipt URL, for mode remote/auto.")
    var verifyReceiptURL: String?

    @Option(name: .customLong("sandbox-verify-receipt-url"), help: "Sandbox verifyReceipt URL (21007 fallback).")
    var sandboxVerifyReceiptURL: String?

    @Option(name: .customLong("shared-secret"), help: "App-specific shared secret sent to verifyReceipt (env IAP_SHARED_SECRET). Never logged.")
    var sharedSecret: String?

    func run() async throws {
        let logger = options.logger(label: "verification")
        var config = VerificationConfiguration()
        var anchorFiles = trustAnchors
        if let dir = Environment.resolve(trustAnchorDir, env: "IAP_TRUST_ANCHOR_DIR") {
            let roots = TrustAnchors.rootFiles(in: dir)
            if roots.isEmpty { logger.warning("no *-root.der or *-root.pem in the trust anchor directory", metadata: ["dir": "\(dir)"]) }
            anchorFiles += roots
        }
        do {
            config.extraRoots = try TrustAnchors.load(anchorFiles)
        } catch {
            throw ValidationError("--trust-anchor \(error)")
        }
        config.allowXcode = allowXcode
        config.bundleIds = Set(bundleIds)
        if let production = verifyReceiptURL {
            guard let sandbox = sandboxVerifyReceiptURL else {
                throw ValidationError("--verify-receipt-url needs --sandbox-verify-receipt-url too")
            }
            config.remote = RemoteVerification(productionURL: production, sandboxURL: sandbox,
                                               sharedSecret: Environment.resolve(sharedSecret, env: "IAP_SHARED_SECRET"))
            logger.info("remote verifyReceipt configured", metadata: ["production": "\(production)", "sandbox": "\(sandbox)"])
        }
        if bundleIds.isEmpty { logger.warning("no --bundle-id given: receipts of any bundle are accepted") }
        if allowXcode { logger.warning("--allow-xcode: Xcode StoreKit-testing receipts are accepted (never in production)") }
        let service = VerificationService(configuration: config, logger: logger)
        let server = RPCServer(
            configuration: options.serverConfiguration(serviceName: "verification", defaultPort: DefaultPorts.verification),
            router: service.router(), logger: logger)
        try await ServiceOptions.runUntilSignalled([server], logger: logger)
    }
}
