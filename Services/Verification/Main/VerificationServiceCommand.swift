import AppStoreServerAPI
import ArgumentParser
import Foundation
import Logging
import PlayDeveloperAPI
import RPCTransport
import Receipts
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

    @Option(
        name: .customLong("trust-anchor-dir"),
        help:
            "Also trust every *-root.der / *-root.pem certificate in this directory (e.g. a simulator's sim-pki; development only). A missing or empty directory stops the start."
    )
    var trustAnchorDir: String?

    @Flag(name: .customLong("allow-xcode"), help: "Accept Xcode StoreKit-testing receipts and StoreKit 2 JWS (development only).")
    var allowXcode = false

    @Option(
        name: .customLong("bundle-id"),
        help:
            "Your app's bundle id: only its receipts, transactions and notifications are accepted. Repeatable (env IAP_BUNDLE_IDS, comma-separated). Required unless --any-bundle-id."
    )
    var bundleIds: [String] = []

    @Flag(
        name: .customLong("any-bundle-id"),
        help: "Development only: accept purchases of ANY app. Anyone who ships an app with your product ids would get value for free.")
    var anyBundleId = false

    @Option(name: .customLong("verify-receipt-url"), help: "Production verifyReceipt URL, for mode remote/auto.")
    var verifyReceiptURL: String?

    @Option(name: .customLong("sandbox-verify-receipt-url"), help: "Sandbox verifyReceipt URL (21007 fallback).")
    var sandboxVerifyReceiptURL: String?

    @Option(name: .customLong("shared-secret"), help: "App-specific shared secret sent to verifyReceipt (env IAP_SHARED_SECRET). Never logged.")
    var sharedSecret: String?

    @Flag(
        name: .customLong("ocsp"),
        help:
            "Check online (OCSP) that no certificate signing receipts and JWS is revoked (env IAP_OCSP=soft|hard). Answers are cached until their nextUpdate; a responder that cannot be reached is soft-failed (accepted, with a warning) unless --ocsp-hard-fail."
    )
    var ocsp = false

    @Flag(
        name: .customLong("ocsp-hard-fail"),
        help: "With --ocsp: when a responder cannot be reached, refuse with the retryable `unavailable` (reason revocationUnknown).")
    var ocspHardFail = false

    @Option(name: .customLong("ocsp-timeout-ms"), help: "With --ocsp: the longest wait for one responder's answer (default 3000).")
    var ocspTimeoutMs: Int = 3_000

    /// The revocation checker the flags ask for (`IAP_OCSP` when no flag is given), or nil.
    func revocationChecker(logger: Logger) throws -> RevocationChecker? {
        let fromEnvironment = Environment.resolve(nil, env: "IAP_OCSP")
        guard ocsp || ocspHardFail || (fromEnvironment != nil && fromEnvironment != "off") else { return nil }
        if let fromEnvironment, !["off", "soft", "hard"].contains(fromEnvironment) {
            throw ValidationError("IAP_OCSP must be off, soft or hard (got \(fromEnvironment))")
        }
        guard (1...60_000).contains(ocspTimeoutMs) else { throw ValidationError("--ocsp-timeout-ms must be 1...60000") }
        var configuration = RevocationChecker.Configuration()
        configuration.hardFail = ocspHardFail || (!ocsp && fromEnvironment == "hard")
        configuration.timeout = .milliseconds(ocspTimeoutMs)
        logger.notice(
            "online revocation checks (OCSP) on",
            metadata: ["unreachable": "\(configuration.hardFail ? "hard-fail" : "soft-fail")", "timeoutMs": "\(ocspTimeoutMs)"])
        return RevocationChecker(configuration: configuration, transport: OCSPHTTPTransport.post) { message in
            logger.warning("\(message)")
        }
    }

    /// `--bundle-id`, else `IAP_BUNDLE_IDS`.
    var resolvedBundleIds: [String] { bundleIds.isEmpty ? Environment.list("IAP_BUNDLE_IDS") : bundleIds }

    func validate() throws {
        if resolvedBundleIds.isEmpty && !anyBundleId {
            throw ValidationError(
                """
                no expected bundle id: pass --bundle-id YOUR.APP.BUNDLE.ID (repeatable) or set IAP_BUNDLE_IDS=id1,id2. \
                Without one, purchases made in any app with your product ids would be accepted; \
                --any-bundle-id allows that, for development only.
                """)
        }
        if anyBundleId && !resolvedBundleIds.isEmpty {
            throw ValidationError("--any-bundle-id and --bundle-id / IAP_BUNDLE_IDS contradict each other: pass one")
        }
    }

    @Option(
        name: .customLong("app-store-api-key"),
        help: "App Store Server API private key, PEM (.p8) file (env IAP_APP_STORE_API_KEY). Read once, never logged.")
    var appStoreAPIKey: String?
    @Option(
        name: .customLong("app-store-api-key-id"),
        help: "Its key id (env IAP_APP_STORE_API_KEY_ID; the simulator's are read from api-key.json beside its key).")
    var appStoreAPIKeyId: String?
    @Option(name: .customLong("app-store-api-issuer-id"), help: "The team's issuer id (env IAP_APP_STORE_API_ISSUER_ID).")
    var appStoreAPIIssuerId: String?
    @Option(name: .customLong("app-store-api-url"), help: "Production base URL (env IAP_APP_STORE_API_URL; default Apple's).")
    var appStoreAPIURL: String?
    @Option(name: .customLong("app-store-api-sandbox-url"), help: "Sandbox base URL (env IAP_APP_STORE_API_SANDBOX_URL; default Apple's).")
    var appStoreAPISandboxURL: String?
    @Option(
        name: .customLong("app-apple-id"),
        help: "The app's Apple ID in App Store Connect (env IAP_APP_APPLE_ID): Production retention requests must name it.")
    var appAppleId: String?

    @Option(
        name: .customLong("play-service-account"),
        help:
            "Google Play: the service account's key file (JSON, as Google issues it; env IAP_PLAY_SERVICE_ACCOUNT). Read once, never logged. Without it Play purchases are refused."
    )
    var playServiceAccount: String?
    @Option(
        name: .customLong("play-api-url"),
        help: "The Play Developer API's root (env IAP_PLAY_API_URL; default Google's https://androidpublisher.googleapis.com).")
    var playAPIURL: String?
    @Option(
        name: [.customLong("package-name"), .customLong("play-package-name")],
        help: "Your Android app's package name: only its Play purchases are accepted. Repeatable (env IAP_PLAY_PACKAGES, comma-separated).")
    var playPackageNames: [String] = []
    @Option(
        name: .customLong("play-push-audience"),
        help:
            "Google Play notifications: the audience of the Pub/Sub push subscription's OIDC tokens (env IAP_PLAY_PUSH_AUDIENCE; Pub/Sub's default is the push URL). Without it every push is refused."
    )
    var playPushAudience: String?
    @Option(
        name: .customLong("play-push-email"),
        help: "The service account the push subscription authenticates as (env IAP_PLAY_PUSH_EMAIL); required with --play-push-audience.")
    var playPushEmail: String?
    @Option(
        name: .customLong("play-certs-url"),
        help: "Where the push tokens' signing keys are published, a JSON Web Key Set (env IAP_PLAY_CERTS_URL; default Google's).")
    var playCertsURL: String?

    @Option(
        name: .customLong("internal-token"),
        help: "The suite's internal token (env IAP_INTERNAL_TOKEN): required by transactionInfo and transactionHistory.")
    var internalToken: String?

    /// An https URL, or http to this machine or to a one-label host name (a service of the same Compose network: names
    /// with no dot are never resolved on the internet).
    static func acceptable(_ url: String) -> Bool {
        guard let parsed = URL(string: url), let host = parsed.host, !host.isEmpty else { return false }
        return parsed.scheme == "https" || (parsed.scheme == "http" && (["127.0.0.1", "::1"].contains(host) || !host.contains(".")))
    }

    /// The verifier of Google Play's push tokens from the flags; nil without an audience.
    func playPushVerifier() throws -> PlayPushTokenVerifier? {
        guard let audience = Environment.resolve(playPushAudience, env: "IAP_PLAY_PUSH_AUDIENCE"), !audience.isEmpty else { return nil }
        guard let email = Environment.resolve(playPushEmail, env: "IAP_PLAY_PUSH_EMAIL"), !email.isEmpty else {
            throw ValidationError("--play-push-audience needs --play-push-email (the push subscription's service account)")
        }
        let certs =
            Environment.resolve(playCertsURL, env: "IAP_PLAY_CERTS_URL").flatMap { $0.isEmpty ? nil : $0 }
            ?? PlayPushTokenVerifier.googleCertsURL
        // Google's keys decide what is accepted: fetched only over TLS, or from this machine or its own network (the simulator).
        guard Self.acceptable(certs) else {
            throw ValidationError("--play-certs-url must be https (http only to 127.0.0.1, localhost or a one-label host name such as play-sim)")
        }
        return PlayPushTokenVerifier(certsURL: certs, rules: PlayPushTokenRules(audience: audience, email: email))
    }

    /// The App Store Server API client from the flags, for the first accepted bundle id; nil without a key.
    func appStoreAPIClient(config: VerificationConfiguration, logger: Logger) throws -> AppStoreServerAPIClient? {
        // Empty counts as not given: compose/compose.yaml passes the three as empty strings when the operator sets none.
        func given(_ flag: String?, _ env: String) -> String? { Environment.resolve(flag, env: env).flatMap { $0.isEmpty ? nil : $0 } }
        guard let keyFile = given(appStoreAPIKey, "IAP_APP_STORE_API_KEY") else { return nil }
        let beside = KeyIdentity.beside(keyFile)
        guard let keyId = given(appStoreAPIKeyId, "IAP_APP_STORE_API_KEY_ID") ?? beside?.keyId,
            let issuerId = given(appStoreAPIIssuerId, "IAP_APP_STORE_API_ISSUER_ID") ?? beside?.issuerId
        else { throw ValidationError("--app-store-api-key needs --app-store-api-key-id and --app-store-api-issuer-id") }
        guard let bundleId = config.bundleIds.sorted().first else {
            throw ValidationError("the App Store Server API needs the app's bundle id (--bundle-id / IAP_BUNDLE_IDS)")
        }
        let pem: String
        do {
            pem = try String(contentsOfFile: keyFile, encoding: .utf8)
        } catch {
            throw ValidationError("--app-store-api-key \(keyFile) cannot be read")
        }
        var apiConfig = AppStoreServerAPIClient.Configuration()
        if let url = Environment.resolve(appStoreAPIURL, env: "IAP_APP_STORE_API_URL") { apiConfig.productionURL = url }
        if let url = Environment.resolve(appStoreAPISandboxURL, env: "IAP_APP_STORE_API_SANDBOX_URL") { apiConfig.sandboxURL = url }
        let credentials: AppStoreAPICredentials
        do {
            credentials = try AppStoreAPICredentials(keyId: keyId, issuerId: issuerId, bundleId: bundleId, privateKeyPEM: pem)
        } catch {
            throw ValidationError("--app-store-api-key \(keyFile) is not a P-256 private key in PEM")
        }
        if config.bundleIds.count > 1 {
            // Apple answers a token for one app about that app's purchases only: the others' are "not found" there.
            logger.warning(
                "the App Store Server API is asked as the first bundle id only: purchases of the others are not found there, so their copied receipts without an appAccountToken go to whoever redeems them first (as without the API); run one verification service per app for the API's protection",
                metadata: ["asked as": "\(bundleId)", "not asked": "\(config.bundleIds.sorted().dropFirst().joined(separator: ","))"])
        }
        logger.info(
            "App Store Server API configured",
            metadata: [
                "keyId": "\(keyId)", "bundleId": "\(bundleId)", "production": "\(apiConfig.productionURL)", "sandbox": "\(apiConfig.sandboxURL)",
            ])
        return AppStoreServerAPIClient(
            credentials: credentials,
            verifier: SignedPayloadVerifier(roots: config.signedPayloadRoots + config.extraRoots, revocation: config.revocation),
            configuration: apiConfig)
    }

    func run() async throws {
        let logger = options.logger(label: "verification")
        var config = VerificationConfiguration()
        var anchorFiles = trustAnchors
        if let dir = trustAnchorDir {
            let roots = TrustAnchors.rootFiles(in: dir)
            guard !roots.isEmpty else {
                throw ValidationError("--trust-anchor-dir \(dir) holds no *-root.der or *-root.pem certificate")
            }
            anchorFiles += roots
        }
        do {
            config.extraRoots = try TrustAnchors.load(anchorFiles)
        } catch {
            throw ValidationError("--trust-anchor \(error)")
        }
        config.allowXcode = allowXcode
        config.bundleIds = Set(resolvedBundleIds)
        config.acceptAnyBundleId = anyBundleId
        if let production = verifyReceiptURL {
            guard let sandbox = sandboxVerifyReceiptURL else {
                throw ValidationError("--verify-receipt-url needs --sandbox-verify-receipt-url too")
            }
            config.remote = RemoteVerification(
                productionURL: production, sandboxURL: sandbox,
                sharedSecret: Environment.resolve(sharedSecret, env: "IAP_SHARED_SECRET"))
            logger.info("remote verifyReceipt configured", metadata: ["production": "\(production)", "sandbox": "\(sandbox)"])
        }
        if anyBundleId {
            logger.critical(
                "--any-bundle-id: purchases of ANY app are accepted. Development only: in production anyone who builds an app with your product ids gets value for free"
            )
        } else {
            logger.info("accepting purchases of", metadata: ["bundleIds": "\(config.bundleIds.sorted().joined(separator: ","))"])
        }
        for (use, roots) in [
            ("receipts", config.receiptRoots), ("signed payloads", config.signedPayloadRoots), ("both (operator-added)", config.extraRoots),
        ] {
            for root in roots {
                logger.notice(
                    "trusted root",
                    metadata: [
                        "for": "\(use)", "subject": "\(root.subject)",
                        "sha256": "\(TrustAnchors.fingerprint(root))",
                    ])
            }
        }
        if !config.extraRoots.isEmpty {
            logger.warning("operator-added roots are trusted (--trust-anchor / --trust-anchor-dir): never a simulator's in production")
        }
        if allowXcode { logger.warning("--allow-xcode: Xcode StoreKit-testing receipts and JWS are accepted (never in production)") }
        config.internalToken = try Environment.token(internalToken, flagName: "--internal-token", env: "IAP_INTERNAL_TOKEN")
        if let text = appAppleId ?? ProcessInfo.processInfo.environment["IAP_APP_APPLE_ID"].flatMap({ $0.isEmpty ? nil : $0 }) {
            guard let id = Int64(text), id > 0 else { throw ValidationError("--app-apple-id (IAP_APP_APPLE_ID) is the app's numeric Apple ID") }
            config.appAppleId = id
        }
        config.revocation = try revocationChecker(logger: logger)
        config.appStoreAPI = try appStoreAPIClient(config: config, logger: logger)
        // IAP_PLAY_PACKAGE_NAMES (and --play-package-name) are this setting's earlier names, still read.
        let listed = Environment.list("IAP_PLAY_PACKAGES")
        config.playPackageNames = Set(
            !playPackageNames.isEmpty ? playPackageNames : !listed.isEmpty ? listed : Environment.list("IAP_PLAY_PACKAGE_NAMES"))
        if let keyFile = Environment.resolve(playServiceAccount, env: "IAP_PLAY_SERVICE_ACCOUNT"), !keyFile.isEmpty {
            let account: PlayServiceAccount
            do {
                account = try PlayServiceAccount(keyFileJSON: try Data(contentsOf: URL(fileURLWithPath: keyFile)))
            } catch {
                throw ValidationError("--play-service-account \(keyFile): \(error)")
            }
            var playConfig = PlayDeveloperAPIClient.Configuration()
            if let url = Environment.resolve(playAPIURL, env: "IAP_PLAY_API_URL"), !url.isEmpty {
                // The access token travels with every call: in clear only to this machine or a host of its own network (the
                // simulator, under Compose).
                guard Self.acceptable(url) else {
                    throw ValidationError(
                        "--play-api-url must be https (http only to 127.0.0.1, localhost or a one-label host name such as play-sim)")
                }
                if url != playConfig.apiURL {  // Google's, until set here
                    logger.warning(
                        "--play-api-url: Google Play purchases are looked up there, not at Google: whoever answers there decides what is granted (never a simulator in production)",
                        metadata: ["url": "\(url)"])
                }
                playConfig.apiURL = url
            }
            config.playAPI = PlayDeveloperAPIClient(account: account, configuration: playConfig)
            config.playPush = try playPushVerifier()
            if let certs = config.playPush?.certsURL, certs != PlayPushTokenVerifier.googleCertsURL {
                logger.warning(
                    "--play-certs-url: Google Play pushes are checked against these keys, not Google's: whoever holds them can sign pushes (never a simulator in production)",
                    metadata: ["url": "\(certs)"])
            }
            logger.info(
                "Google Play purchases of",
                metadata: ["packageNames": "\(config.playPackageNames.sorted().joined(separator: ","))", "serviceAccount": "\(account.clientEmail)"])
        }
        let service = VerificationService(configuration: config, logger: logger)
        let server = RPCServer(
            configuration: try options.serverConfiguration(serviceName: "verification", defaultPort: DefaultPorts.verification),
            router: service.router(), logger: logger)
        try await options.runUntilSignalled([server], logger: logger)
    }
}
