import ArgumentParser
import Foundation
import IAPProtocol
import Logging
import PlaySimulator
import RPCTransport
import ServiceLifecycle
import ServiceSupport

@main
struct PlaySimulatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "play-sim",
        abstract: "A local stand-in for Google Play (development and tests only): purchases, the Play Developer API, push notifications.")

    @OptionGroup var options: ServiceOptions

    @Option(
        name: .customLong("http-port"),
        help: "Port of the HTTP endpoints: the OAuth token endpoint, the push certificates and the Play Developer API. Default 7190.")
    var httpPort = 7190

    @Option(
        name: .customLong("public-url"),
        help:
            "The address clients reach the HTTP port at, written into the service-account key file's token_uri (env IAP_PLAY_SIM_PUBLIC_URL; default http://127.0.0.1:HTTP-PORT), e.g. http://play-sim:7190 under compose."
    )
    var publicURL: String?

    @Option(
        name: .customLong("push-url"),
        help: "Where real-time developer notifications are pushed, e.g. the edge's /v1/notifications/googleplay (env IAP_PLAY_SIM_PUSH_URL).")
    var pushURL: String?

    @Option(name: .customLong("push-audience"), help: "The push tokens' OIDC audience (env IAP_PLAY_SIM_PUSH_AUDIENCE; default the push URL).")
    var pushAudience: String?

    @Option(
        name: .customLong("push-email"),
        help: "The service account the pushes authenticate as (env IAP_PLAY_SIM_PUSH_EMAIL; default rtdn-push@iap-play-sim.iam.gserviceaccount.com).")
    var pushEmail: String?

    @Option(
        name: .customLong("push-ca"),
        help: "A PEM certificate to trust for HTTPS pushes besides the system's (env IAP_PLAY_SIM_PUSH_CA): a development edge's own.")
    var pushCA: String?

    @Option(
        name: .customLong("key-file"),
        help:
            "Also write the service-account key file it issues here (0600; env IAP_PLAY_SIM_KEY_FILE), for verification's --play-service-account."
    )
    var keyFile: String?

    func run() async throws {
        let logger = options.logger(label: "play-sim")
        let simulator = try PlaySimulator(
            directory: options.resolvedDataDir(),
            publicURL: Environment.resolve(publicURL, env: "IAP_PLAY_SIM_PUBLIC_URL") ?? "http://127.0.0.1:\(httpPort)",
            pushTrustRootsPEM: try Environment.resolve(pushCA, env: "IAP_PLAY_SIM_PUSH_CA").map { try String(contentsOfFile: $0, encoding: .utf8) })
        if let url = Environment.resolve(pushURL, env: "IAP_PLAY_SIM_PUSH_URL") {
            try simulator.courier.setEndpoint(
                .init(
                    url: url, audience: Environment.resolve(pushAudience, env: "IAP_PLAY_SIM_PUSH_AUDIENCE"),
                    serviceAccountEmail: Environment.resolve(pushEmail, env: "IAP_PLAY_SIM_PUSH_EMAIL")))
            logger.info("notifications are pushed to \(url)")
        }
        if let path = Environment.resolve(keyFile, env: "IAP_PLAY_SIM_KEY_FILE") {
            try PrivateFiles.writeSecret(Array(simulator.accounts.keyFileResult().keyFile.utf8), to: URL(fileURLWithPath: path))
        }
        logger.warning("this is the Google Play SIMULATOR: its tokens and keys are its own (see play.serviceAccountKey)")
        let config = try options.serverConfiguration(serviceName: "play-sim", defaultPort: DefaultPorts.playSimulator)
        let server = RPCServer(configuration: config, router: simulator.router(), logger: logger)
        let http = PlayDeveloperAPI(simulator: simulator).application(host: options.resolvedHost(), port: httpPort, logger: logger)
        try await options.runUntilSignalled([PlaySimulatorLoop(simulator: simulator), server, http], logger: logger)
    }
}
