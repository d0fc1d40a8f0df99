import AccountsService
import ArgumentParser
import IAPProtocol
import Logging
import PostgresSupport
import RPCTransport
import ServiceLifecycle
import ServiceSupport

@main
struct AccountsServiceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "accounts-service",
        abstract: "Users, password login, sessions and appAccountToken for the in-app purchase suite.")

    @OptionGroup var options: ServiceOptions
    @OptionGroup var database: DatabaseOptions
    @OptionGroup var clientTLS: InternalClientTLSOptions

    @Option(
        name: .customLong("verification-addr"),
        help:
            "verification-service HOST:PORT (or several, comma-separated), which checks the app transactions apps link (env IAP_VERIFICATION_ADDR; default 127.0.0.1:7103)."
    )
    var verificationAddr: String?

    @Option(name: .customLong("internal-token"), help: "Token other services present for internal methods (env IAP_INTERNAL_TOKEN).")
    var internalToken: String?

    @Option(name: .customLong("session-days"), help: "Days a session lives without use (sliding). Default 30.")
    var sessionDays: Int = 30

    @Option(
        name: .customLong("registrations-per-address"),
        help: "Registrations from one client address per 15 minutes before it is slowed down (env IAP_REGISTRATIONS_PER_ADDRESS; default 30).")
    var registrationsPerAddress: Int?

    @Option(name: .customLong("session-max-days"), help: "Days a session lives at most, however much it is used. Default 90.")
    var sessionMaxDays: Int = 90

    @Option(name: .customLong("sessions-per-account"), help: "Sessions an account may hold; signing in past it ends the oldest. Default 20.")
    var sessionsPerAccount: Int = 20

    @Option(name: .customLong("scrypt-log-n"), help: "log2 of scrypt's N for new password hashes (16 = 64 MiB per hash). Default 14.")
    var scryptLogN: Int = ScryptParameters.default.logN

    @Option(
        name: .customLong("scrypt-p"),
        help: "scrypt's p for new password hashes (each step: one more N of CPU, no more memory). Default \(ScryptParameters.default.p)."
    )
    var scryptP: Int = ScryptParameters.default.p

    func validate() throws {
        guard sessionDays > 0 else { throw ValidationError("--session-days must be positive") }
        guard sessionMaxDays >= sessionDays else { throw ValidationError("--session-max-days must be at least --session-days") }
        guard sessionsPerAccount > 0 else { throw ValidationError("--sessions-per-account must be positive") }
        guard (10...22).contains(scryptLogN) else { throw ValidationError("--scrypt-log-n must be between 10 and 22") }
        guard (1...16).contains(scryptP) else { throw ValidationError("--scrypt-p must be between 1 and 16") }
    }

    func run() async throws {
        let logger = options.logger(label: "accounts")
        var config = AccountsConfiguration()
        config.internalToken = try Environment.token(internalToken, flagName: "--internal-token", env: "IAP_INTERNAL_TOKEN")
        config.sessionLifetimeMs = Int64(sessionDays) * 24 * 3600 * 1000
        config.sessionAbsoluteLifetimeMs = Int64(sessionMaxDays) * 24 * 3600 * 1000
        config.maxSessionsPerAccount = sessionsPerAccount
        if let limit = registrationsPerAddress ?? Environment.value("IAP_REGISTRATIONS_PER_ADDRESS").flatMap({ Int($0) }) {
            guard limit > 0 else { throw ValidationError("--registrations-per-address must be positive") }
            config.throttle.registrationThreshold = limit
        }
        config.passwordHashing.logN = scryptLogN
        config.passwordHashing.p = scryptP
        if config.internalToken == nil {
            logger.warning("no internal token configured (--internal-token or IAP_INTERNAL_TOKEN): internal methods will refuse every call")
        }
        let store: any AccountsStorage
        // PostgreSQL: revocations on other instances, heard at once; their sessions are kept only while it listens (the
        // group runs it). SQLite: one instance per file, nothing to hear.
        var listener: PostgresListener?
        if let url = database.resolvedURL() {
            let pool = try PostgresPool(url: try PostgresURL(url), schema: "accounts", connections: try database.resolvedPoolSize(), logger: logger)
            let postgres = try await PostgresAccountsStore(pool: pool)
            listener = try postgres.revocationsListener()
            store = postgres
            logger.info("accounts store: PostgreSQL \(pool.url.redacted)")
        } else {
            store = try AccountsStore.open(directory: options.resolvedDataDir())
        }
        // linkAppTransaction's one dependency, connected on first use: accounts starts (and signs people in) without it.
        let verification = try RPCClient(
            address: SuiteService.verification.address(flag: verificationAddr),
            configuration: RPCClientConfiguration(connections: 2, callTimeout: .seconds(3), tls: try clientTLS.clientTLS()))
        let service = AccountsService(
            store: store, configuration: config, logger: logger,
            appTransactionVerifier: { jws in
                try await verification.call(VerificationVerifyAppTransaction.self, .init(signedAppTransaction: jws))
            })
        let server = RPCServer(
            configuration: try options.serverConfiguration(serviceName: "accounts", defaultPort: DefaultPorts.accounts),
            router: service.router(), logger: logger)
        // Resources first: the group stops the server (draining it) before closing them.
        try await options.runUntilSignalled(
            [
                ClosingService("accounts database", logger: logger) { try store.close() },
                ClosingService("password hasher", logger: logger) { await service.shutdown() },
                ClosingService("verification client", logger: logger) { await verification.close() },
            ] + (listener.map { [$0] } ?? []) + [server], logger: logger)
    }
}
