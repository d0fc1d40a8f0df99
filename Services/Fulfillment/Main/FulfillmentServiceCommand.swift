import ArgumentParser
import Foundation
import FulfillmentService
import Logging
import NIOCore
import PostgresSupport
import RPCTransport
import ServiceLifecycle
import ServiceSupport

@main
struct FulfillmentServiceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fulfillment-service",
        abstract: "Exactly-once grants, the coin ledger, entitlements, restores and content for the in-app purchase suite.")

    @OptionGroup var options: ServiceOptions
    @OptionGroup var database: DatabaseOptions
    @OptionGroup var clientTLS: InternalClientTLSOptions

    @Option(
        name: .customLong("accounts-addr"),
        help: "accounts-service HOST:PORT, or several comma-separated for several instances (env IAP_ACCOUNTS_ADDR; default 127.0.0.1:7101).")
    var accountsAddr: String?

    @Option(
        name: .customLong("verification-addr"),
        help: "verification-service HOST:PORT, or several comma-separated for several instances (env IAP_VERIFICATION_ADDR; default 127.0.0.1:7103).")
    var verificationAddr: String?

    @Option(
        name: .customLong("catalog-addr"),
        help: "catalog-service HOST:PORT, or several comma-separated for several instances (env IAP_CATALOG_ADDR; default 127.0.0.1:7102).")
    var catalogAddr: String?

    @Option(name: .customLong("admin-token"), help: "Token for fulfillment.revokeTransaction (env IAP_ADMIN_TOKEN).")
    var adminToken: String?

    @Option(
        name: .customLong("internal-token"),
        help:
            "Token for accounts' internal methods (env IAP_INTERNAL_TOKEN): notifications about purchases never redeemed find their account by appAccountToken."
    )
    var internalToken: String?

    @Option(
        name: .customLong("ownership-policy"),
        help:
            "When another account presents a purchase already bound to an account: refuse (default) or transfer (moves the entitlement, never coins)."
    )
    var ownershipPolicy: OwnershipPolicy = .refuse

    @Option(
        name: .customLong("sandbox-policy"),
        help:
            "What Sandbox, TestFlight and Xcode purchases grant: isolate (default: a separate Sandbox balance, ledger and entitlements per account), refuse (nothing: outcome wrongEnvironment) or grant (into Production like real purchases: development only, never in production)."
    )
    var sandboxPolicy: SandboxPolicy = .isolate

    @Option(name: .customLong("dependency-timeout-ms"), help: "Deadline for each call to accounts, verification or catalog. Default 3000.")
    var dependencyTimeoutMs: Int64 = 3000

    @Option(
        name: .customLong("catalog-cache-ms"),
        help:
            "How long what the catalog says a product grants is reused (a catalog change reaches redeems at most this much later); 0 asks the catalog every time. Default 2000."
    )
    var catalogCacheMs: Int64 = 2000

    @Option(name: .customLong("content-dir"), help: "Directory of downloadable content files named by content id. Default DATA_DIR/content.")
    var contentDir: String?

    @Flag(
        name: .customLong("sandbox-content"),
        help: "Development only: Sandbox entitlements (TestFlight, Xcode; free to buy) unlock content too (env IAP_SANDBOX_CONTENT=1).")
    var sandboxContent = false

    @Flag(
        name: .customLong("no-finish-at-apple"),
        help:
            "Do not call Finish Transaction at Apple for what is granted (env IAP_FINISH_AT_APPLE=0, or empty); for deployments without the App Store Server API."
    )
    var noFinishAtApple = false

    @Option(
        name: .customLong("finishes-per-second"),
        help:
            "Finish Transaction calls a second from this instance (env IAP_FINISHES_PER_SECOND; default 50, Apple's limit for the endpoint: with N instances give each 50/N)."
    )
    var finishesPerSecond: Double?

    @Option(
        name: .customLong("store-calls-per-minute"),
        help:
            "Calls to the stores one account's redeems may cause (transaction ids, history, Google Play tokens): refilled per minute (env IAP_STORE_CALLS_PER_MINUTE; default 20), with a burst as large (env IAP_STORE_CALL_BURST)."
    )
    var storeCallsPerMinute: Double?

    @Option(
        name: .customLong("content-url-key"),
        help:
            "Key (32+ bytes) that signs fulfillment.contentURL links, the same the edge checks them with (env IAP_CONTENT_URL_KEY). Without it contentURL is unavailable."
    )
    var contentURLKey: String?

    @Option(
        name: .customLong("content-url-base"),
        help: "The edge's public URL, e.g. https://iap.example.com (env IAP_EDGE_PUBLIC_URL); content URLs are paths without it.")
    var contentURLBase: String?

    @Option(
        name: .customLong("reconcile-interval-s"),
        help:
            "Seconds between reconciliations with Apple (Notification History and a subscription status sweep; needs --internal-token and verification's App Store Server API). Default 3600; 0: only on demand (fulfillment.reconcile)."
    )
    var reconcileIntervalSeconds = 3600

    @Option(name: .customLong("content-url-lifetime"), help: "Seconds a content URL is good for (default 300).")
    var contentURLLifetime: Int64 = 300

    @Option(
        name: .customLong("offer-key"),
        help: "The subscription-offer key from App Store Connect, a PEM file (env IAP_OFFER_KEY_FILE): signs promotional offers. Never logged.")
    var offerKey: String?
    @Option(
        name: .customLong("offer-key-id"), help: "Its key id (env IAP_OFFER_KEY_ID; the simulator's are read from offer-key.json beside its key).")
    var offerKeyId: String?
    @Option(name: .customLong("offer-issuer-id"), help: "The issuer id of the App Store Connect team (env IAP_OFFER_ISSUER_ID).")
    var offerIssuerId: String?
    @Option(
        name: .customLong("offer-bundle-id"),
        help: "The app the offers are signed for (default: the first of IAP_BUNDLE_IDS).")
    var offerBundleId: String?

    @Option(
        name: .customLong("event-retention-days"),
        help:
            "Days the event feed keeps events, 7 or more (env IAP_EVENT_RETENTION_DAYS); each account's latest, and any not yet given to a webhook endpoint, are kept. Default: forever."
    )
    var eventRetentionDays: Int?

    @Option(
        name: .customLong("webhook-lease-s"),
        help: "Seconds a webhook delivery claimed by this instance is left to it (30-3600, default 60); after a crash it is sent again then.")
    var webhookLeaseSeconds: Int64 = 60

    func validate() throws {
        guard (10...86_400).contains(contentURLLifetime) else { throw ValidationError("--content-url-lifetime must be 10-86400 seconds") }
        guard (50...60_000).contains(dependencyTimeoutMs) else { throw ValidationError("--dependency-timeout-ms must be 50-60000") }
        guard (0...60_000).contains(catalogCacheMs) else { throw ValidationError("--catalog-cache-ms must be 0-60000") }
        guard (30...3_600).contains(webhookLeaseSeconds) else { throw ValidationError("--webhook-lease-s must be 30-3600") }
    }

    func run() async throws {
        let logger = options.logger(label: "fulfillment")
        var config = FulfillmentConfiguration()
        config.adminToken = try Environment.token(adminToken, flagName: "--admin-token", env: "IAP_ADMIN_TOKEN")
        config.ownershipPolicy = ownershipPolicy
        config.sandboxPolicy = sandboxPolicy
        if config.sandboxPolicy == .grant {
            logger.critical(
                "--sandbox-policy grant: Sandbox, TestFlight and Xcode purchases (free to make) grant real coins and entitlements. Development only")
        }
        config.internalToken = try Environment.token(internalToken, flagName: "--internal-token", env: "IAP_INTERNAL_TOKEN")
        config.sandboxContent = sandboxContent || ProcessInfo.processInfo.environment["IAP_SANDBOX_CONTENT"] == "1"
        switch ProcessInfo.processInfo.environment["IAP_FINISH_AT_APPLE"]?.lowercased() {
        case nil, "1", "true", "yes", "on": config.finishAtApple = !noFinishAtApple
        case "", "0", "false", "no", "off": config.finishAtApple = false
        case let other?: throw ValidationError("IAP_FINISH_AT_APPLE=\(other): use 1 (on) or 0 (off; empty is off too)")
        }
        if let rate = finishesPerSecond ?? Environment.resolve(nil, env: "IAP_FINISHES_PER_SECOND").flatMap(Double.init) {
            guard rate > 0, rate <= 1_000 else { throw ValidationError("--finishes-per-second must be above 0 and at most 1000") }
            config.finishesPerSecond = rate
        }
        if let rate = storeCallsPerMinute ?? Environment.resolve(nil, env: "IAP_STORE_CALLS_PER_MINUTE").flatMap(Double.init) {
            guard rate > 0 else { throw ValidationError("--store-calls-per-minute must be above 0") }
            config.appleCallsPerMinute = rate
            config.appleCallBurst = Environment.resolve(nil, env: "IAP_STORE_CALL_BURST").flatMap { Int($0) } ?? max(1, Int(rate))
        }
        if !config.finishAtApple {
            logger.notice("Finish Transaction at Apple is off: the app's own finish() is the only one")
        }
        if config.sandboxContent {
            logger.warning("--sandbox-content: Sandbox purchases (free to make) unlock content downloads. Development only")
        }
        if config.adminToken == nil {
            logger.warning("no admin token configured (--admin-token or IAP_ADMIN_TOKEN): revokeTransaction will refuse every call")
        }
        config.contentURLSigner = try Environment.token(contentURLKey, flagName: "--content-url-key", env: "IAP_CONTENT_URL_KEY")
            .map(ContentURLSigner.init(key:))
        config.contentURLBase = Environment.resolve(contentURLBase, env: "IAP_EDGE_PUBLIC_URL")
        config.contentURLLifetimeMs = contentURLLifetime * 1000
        config.catalogCacheMs = catalogCacheMs
        if let days = eventRetentionDays ?? Environment.resolve(nil, env: "IAP_EVENT_RETENTION_DAYS").flatMap(Int.init) {
            // At least a week: longer than a webhook endpoint retries (three days), so a receiver back within it misses nothing.
            guard (7...36_500).contains(days) else { throw ValidationError("--event-retention-days must be 7-36500") }
            config.eventRetentionMs = Int64(days) * 86_400_000
        }
        config.webhooks.leaseMs = webhookLeaseSeconds * 1000
        if let keyFile = Environment.resolve(offerKey, env: "IAP_OFFER_KEY_FILE") {
            let beside = KeyIdentity.beside(keyFile)
            guard let keyId = Environment.resolve(offerKeyId, env: "IAP_OFFER_KEY_ID") ?? beside?.keyId,
                let issuerId = Environment.resolve(offerIssuerId, env: "IAP_OFFER_ISSUER_ID") ?? beside?.issuerId,
                let bundleId = offerBundleId
                    ?? Environment.resolve(nil, env: "IAP_BUNDLE_IDS")?.split(separator: ",").first.map({
                        $0.trimmingCharacters(in: .whitespaces)
                    })
            else {
                throw ValidationError("--offer-key needs --offer-key-id, --offer-issuer-id and a bundle id (--offer-bundle-id or IAP_BUNDLE_IDS)")
            }
            do {
                config.offerKey = try OfferSigningKey(
                    keyId: keyId, issuerId: issuerId, bundleId: bundleId, pem: try String(contentsOfFile: keyFile, encoding: .utf8))
            } catch {
                throw ValidationError("--offer-key \(keyFile): not a readable PEM P-256 private key")
            }
            logger.info("subscription offers are signed", metadata: ["keyId": "\(keyId)", "bundleId": "\(bundleId)"])
        }
        let dataDir = try options.resolvedDataDir()
        let contentURL = contentDir.map { URL(fileURLWithPath: $0, isDirectory: true) } ?? dataDir.appendingPathComponent("content")
        try FileManager.default.createDirectory(at: contentURL, withIntermediateDirectories: true)
        var configured = try Dependencies(
            accounts: SuiteService.accounts.address(flag: accountsAddr),
            verification: SuiteService.verification.address(flag: verificationAddr),
            catalog: SuiteService.catalog.address(flag: catalogAddr),
            deadline: .milliseconds(dependencyTimeoutMs), tls: try clientTLS.clientTLS())
        configured.internalToken = config.internalToken
        let dependencies = configured
        let store: any FulfillmentStorage
        let storeName: String
        if let url = database.resolvedURL() {
            let pool = try PostgresPool(
                url: try PostgresURL(url), schema: "fulfillment", connections: try database.resolvedPoolSize(), logger: logger)
            store = try await PostgresFulfillmentStore(pool: pool)
            storeName = "PostgreSQL \(pool.url.redacted)"
        } else {
            store = try FulfillmentStore.open(directory: dataDir)
            storeName = "fulfillment.sqlite"
        }
        let service = FulfillmentService(
            store: store, dependencies: dependencies,
            content: ContentLibrary(directory: contentURL), configuration: config, logger: logger)
        var serverConfig = try options.serverConfiguration(serviceName: "fulfillment", defaultPort: DefaultPorts.fulfillment)
        serverConfig.healthProbes = dependencies.probes
        let server = RPCServer(configuration: serverConfig, router: service.router(), logger: logger)
        logger.info(
            "fulfillment ready",
            metadata: [
                "store": "\(storeName)", "policy": "\(config.ownershipPolicy.rawValue)", "sandboxPolicy": "\(config.sandboxPolicy.rawValue)",
                "content": "\(contentURL.path)",
            ])
        // Resources first: the group stops the server (draining it) before closing them.
        try await options.runUntilSignalled(
            [
                ClosingService(storeName, logger: logger) { try store.close() },
                ClosingService("dependency clients", logger: logger) { await dependencies.close() },
                InboxWorker(
                    service: service,
                    reconcileInterval: reconcileIntervalSeconds > 0 && config.internalToken != nil ? .seconds(reconcileIntervalSeconds) : nil,
                    logger: logger),
                WebhookWorkerService(service: service, logger: logger),
                server,
            ], logger: logger)
    }
}

// The policies' flags take exactly their names; ArgumentParser refuses any other spelling, listing the names.
extension OwnershipPolicy: ExpressibleByArgument {}
extension SandboxPolicy: ExpressibleByArgument {}
