import ArgumentParser
import Foundation
import Logging
import RPCTransport
import ServiceLifecycle
import ServiceSupport

/// Flags every service executable takes (docs/configuration.md). A flag wins over its environment
/// variable, which wins over the default.
public struct ServiceOptions: ParsableArguments, Sendable {
    @Option(help: "Address to bind (default 127.0.0.1; env IAP_HOST).")
    public var host: String?

    @Option(help: "Port to listen on (default: the service's default port, docs/contract.md).")
    public var port: Int?

    @Option(name: .customLong("data-dir"), help: "Directory for the service's SQLite database (env IAP_DATA_DIR; default ./data).")
    public var dataDir: String?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical (env IAP_LOG_LEVEL; default info).")
    public var logLevel: String?

    @Option(
        name: .customLong("metrics-port"), help: "Serve GET /metrics (Prometheus text) on this port, plain HTTP (env IAP_METRICS_PORT; default: off)."
    )
    public var metricsPort: Int?

    @Option(name: .customLong("metrics-host"), help: "Address the metrics port binds (default 127.0.0.1).")
    public var metricsHost: String?

    @Option(
        name: .customLong("tls-cert"),
        help: "PEM certificate chain: serve JSON-RPC over TLS 1.2+ (env IAP_TLS_CERT; with --tls-key; default: plain TCP).")
    public var tlsCert: String?

    @Option(name: .customLong("tls-key"), help: "PEM private key of --tls-cert (env IAP_TLS_KEY). Read once, never logged.")
    public var tlsKey: String?

    @Option(
        name: .customLong("tls-client-ca"),
        help: "PEM roots: accept only clients presenting a certificate that chains to them (mutual TLS; env IAP_TLS_CLIENT_CA).")
    public var tlsClientCA: String?

    public init() {}

    /// The listener's TLS from `--tls-cert`/`--tls-key`/`--tls-client-ca` (or IAP_TLS_*); nil for plain TCP.
    public func serverTLS() throws -> RPCServerTLS? {
        let cert = Environment.resolve(tlsCert, env: "IAP_TLS_CERT")
        let key = Environment.resolve(tlsKey, env: "IAP_TLS_KEY")
        let clientCA = Environment.resolve(tlsClientCA, env: "IAP_TLS_CLIENT_CA")
        guard let cert, let key else {
            if cert != nil || key != nil { throw ValidationError("--tls-cert and --tls-key go together") }
            if clientCA != nil { throw ValidationError("--tls-client-ca needs --tls-cert and --tls-key") }
            return nil
        }
        do {
            return try RPCServerTLS(certificateFile: cert, keyFile: key, clientCAFile: clientCA)
        } catch {
            throw ValidationError("cannot use the TLS certificate \(cert) and its key: \(error)")
        }
    }

    var resolvedMetricsPort: Int? { metricsPort ?? Environment.value("IAP_METRICS_PORT").flatMap { Int($0) } }

    public func resolvedHost() -> String { host ?? Environment.value("IAP_HOST") ?? "127.0.0.1" }

    public func resolvedPort(default defaultPort: Int) -> Int { port ?? defaultPort }

    /// The data directory, created if missing.
    public func resolvedDataDir() throws -> URL {
        let path = dataDir ?? Environment.value("IAP_DATA_DIR") ?? "data"
        let url = URL(fileURLWithPath: path, isDirectory: true)
        try PrivateFiles.directory(url)
        return url
    }

    public func logger(label: String) -> Logger {
        var logger = Logger(label: label, factory: DeferredMetadataLogHandler.standardError(label:))
        logger.logLevel = (logLevel ?? Environment.value("IAP_LOG_LEVEL")).flatMap(Logger.Level.init(rawValue:)) ?? .info
        return logger
    }
}

extension ServiceOptions {
    /// The server settings every service starts from: `--host`/`--port` (or their defaults) and its name.
    /// The JSON-RPC server's settings. With `--metrics-port` this also makes Prometheus the process's metrics
    /// backend, before the server creates its counters.
    public func serverConfiguration(serviceName: String, defaultPort: Int) throws -> RPCServerConfiguration {
        var configuration = RPCServerConfiguration(serviceName: serviceName, host: resolvedHost(), port: resolvedPort(default: defaultPort))
        configuration.tls = try serverTLS()
        if resolvedMetricsPort != nil { configuration.metricsFactory = PrometheusMetrics.factory(registry: PrometheusMetrics.bootstrapProcess()) }
        return configuration
    }

    /// Runs the services until SIGTERM or SIGINT, then shuts them down gracefully (in reverse order); with
    /// `--metrics-port`, the metrics listener runs first and stops last.
    public func runUntilSignalled(_ services: [any Service], logger: Logger) async throws {
        var all = services
        if let port = resolvedMetricsPort {
            all.insert(
                MetricsServer(host: metricsHost ?? "127.0.0.1", port: port, registry: PrometheusMetrics.bootstrapProcess(), logger: logger),
                at: 0)
        }
        try await Self.runUntilSignalled(all, logger: logger)
    }

    /// Runs the services until SIGTERM or SIGINT, then shuts them down gracefully (in reverse order).
    public static func runUntilSignalled(_ services: [any Service], logger: Logger) async throws {
        CooperativePoolHeartbeat.start()
        let group = ServiceGroup(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        try await group.run()
    }
}

public enum Environment {
    /// A non-empty environment variable.
    public static func value(_ name: String) -> String? {
        guard let v = ProcessInfo.processInfo.environment[name], !v.isEmpty else { return nil }
        return v
    }

    /// A flag value, else the environment variable.
    public static func resolve(_ flag: String?, env name: String) -> String? {
        flag ?? value(name)
    }

    /// The shortest admin or internal token a service starts with: guessable tokens are refused, not warned about.
    public static let minimumTokenBytes = 32

    /// A secret token from its flag, else its environment variable; nil when neither is set. One that is
    /// set but empty or shorter than `minimumTokenBytes` stops the start with a message saying what to pass.
    /// A token from its flag or environment variable, at least `minimumTokenBytes` long. For the admin and internal
    /// tokens, `<NAME>_PREVIOUS` (e.g. `IAP_ADMIN_TOKEN_PREVIOUS`) is accepted as well while set: the old token
    /// during a rotation (docs/operations.md, "Rotating tokens without downtime").
    /// `<NAME>_FILE` names a file holding it instead (Docker and Compose secrets, mounted files): kept out of the process's
    /// environment, which `docker inspect` and /proc show; surrounding whitespace (a final newline) is not part of it.
    public static func token(_ flag: String?, flagName: String, env name: String) throws -> String? {
        let given = try flag ?? fromEnvironment(name, ProcessInfo.processInfo.environment)
        guard let given else { return nil }
        try checkLength(given, flagName, name)
        let gate: TokenGate? = name == "IAP_ADMIN_TOKEN" ? .admin : name == "IAP_INTERNAL_TOKEN" ? .internal : nil
        if let gate {
            let previous = try fromEnvironment(name + "_PREVIOUS", ProcessInfo.processInfo.environment).flatMap { $0.isEmpty ? nil : $0 }
            if let previous { try checkLength(previous, name + "_PREVIOUS", name + "_PREVIOUS") }
            gate.acceptPrevious(previous)
        }
        return given
    }

    /// `name`'s value, else the content of the file `<name>_FILE` names; nil when neither is set, an error when both are or
    /// the file cannot be read.
    public static func fromEnvironment(_ name: String, _ environment: [String: String]) throws -> String? {
        let direct = environment[name], file = environment[name + "_FILE"].flatMap { $0.isEmpty ? nil : $0 }
        guard let file else { return direct }
        guard direct?.isEmpty ?? true else { throw ValidationError("set \(name) or \(name)_FILE, not both") }
        guard let data = FileManager.default.contents(atPath: file), let text = String(data: data, encoding: .utf8) else {
            throw ValidationError("\(name)_FILE: cannot read \(file)")
        }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private static func checkLength(_ token: String, _ flagName: String, _ name: String) throws {
        guard token.utf8.count >= minimumTokenBytes else {
            throw ValidationError(
                "\(flagName) / \(name) must be at least \(minimumTokenBytes) bytes (it is \(token.utf8.count)); "
                    + "make one with: head -c 32 /dev/urandom | base64")
        }
    }

    /// A comma-separated list from the environment, blanks dropped.
    public static func list(_ name: String) -> [String] {
        (value(name) ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}

/// The suite's services as other executables address them: default ports and `IAP_*_ADDR` variables (docs/contract.md).
/// One lookup for every executable: a flag, else the environment variable, else (for the CLI) a
/// configured address, else 127.0.0.1 and the default port.
public enum SuiteService: String, CaseIterable, Sendable {
    case accounts, catalog, verification, fulfillment, sim
    /// The Google Play simulator (`play-sim`).
    case play

    public var defaultPort: Int {
        switch self {
        case .accounts: return DefaultPorts.accounts
        case .catalog: return DefaultPorts.catalog
        case .verification: return DefaultPorts.verification
        case .fulfillment: return DefaultPorts.fulfillment
        case .sim: return DefaultPorts.simulator
        case .play: return DefaultPorts.playSimulator
        }
    }

    public var environmentVariable: String { "IAP_\(rawValue.uppercased())_ADDR" }

    public func address(flag: String?, configured: String? = nil) -> String {
        flag ?? Environment.value(environmentVariable) ?? configured ?? "127.0.0.1:\(defaultPort)"
    }
}

/// TLS on the connections a service (or `iap`) opens to the suite's services: `--tls-ca` turns it on.
public struct InternalClientTLSOptions: ParsableArguments, Sendable {
    @Option(
        name: .customLong("tls-ca"),
        help: "PEM roots: call the suite's services over TLS, their certificates chaining to these (env IAP_TLS_CA; default: plain TCP).")
    public var tlsCA: String?

    @Option(
        name: .customLong("tls-client-cert"),
        help: "PEM certificate presented to services that require one (env IAP_TLS_CLIENT_CERT; with --tls-client-key).")
    public var tlsClientCert: String?

    @Option(name: .customLong("tls-client-key"), help: "PEM private key of --tls-client-cert (env IAP_TLS_CLIENT_KEY). Never logged.")
    public var tlsClientKey: String?

    public init() {}

    /// nil (plain TCP) without a CA.
    public func clientTLS() throws -> RPCClientTLS? {
        try Self.clientTLS(ca: tlsCA, certificate: tlsClientCert, key: tlsClientKey)
    }

    /// From the given files, else IAP_TLS_CA / IAP_TLS_CLIENT_CERT / IAP_TLS_CLIENT_KEY (what `iap` uses).
    public static func clientTLS(ca: String? = nil, certificate: String? = nil, key: String? = nil) throws -> RPCClientTLS? {
        let ca = Environment.resolve(ca, env: "IAP_TLS_CA")
        let cert = Environment.resolve(certificate, env: "IAP_TLS_CLIENT_CERT")
        let key = Environment.resolve(key, env: "IAP_TLS_CLIENT_KEY")
        if (cert == nil) != (key == nil) { throw ValidationError("--tls-client-cert and --tls-client-key go together") }
        guard let ca else {
            if cert != nil { throw ValidationError("--tls-client-cert needs --tls-ca") }
            return nil
        }
        do {
            return try RPCClientTLS(caFile: ca, certificateFile: cert, keyFile: key)
        } catch {
            throw ValidationError("cannot use the TLS roots \(ca) or the client certificate: \(error)")
        }
    }
}

/// The suite's default ports (docs/contract.md, "Services and ports").
public enum DefaultPorts {
    public static let accounts = 7101
    public static let catalog = 7102
    public static let verification = 7103
    public static let fulfillment = 7104
    public static let simulator = 7105
    public static let playSimulator = 7106
}

/// The ids App Store Connect shows next to a key it hands out (key id, issuer id). The simulator writes them
/// beside each key it issues (`api-key.p8` -> `api-key.json`, `offer-key.p8` -> `offer-key.json`); Apple's
/// keys come with them separately (flags or environment).
public struct KeyIdentity: Decodable, Sendable {
    public var keyId: String
    public var issuerId: String

    /// The identity kept beside `keyFile` (same name, `.json`), if there is one.
    public static func beside(_ keyFile: String) -> KeyIdentity? {
        let file = URL(fileURLWithPath: keyFile).deletingPathExtension().appendingPathExtension("json")
        return (try? Data(contentsOf: file)).flatMap { try? JSONDecoder().decode(KeyIdentity.self, from: $0) }
    }
}

/// Where accounts, catalog and fulfillment keep their records: SQLite in `--data-dir` (the default), or
/// PostgreSQL when a URL is given (several instances of a service on one database, docs/configuration.md).
public struct DatabaseOptions: ParsableArguments, Sendable {
    @Option(
        name: .customLong("database-url"),
        help: """
            postgres://USER:PASSWORD@HOST:PORT/DATABASE[?sslmode=require]: keep this service's records in PostgreSQL \
            (env IAP_DATABASE_URL, which keeps the password out of `ps`; default: SQLite in --data-dir).
            """)
    public var databaseURL: String?

    @Option(
        name: .customLong("database-pool-size"), help: "PostgreSQL connections this instance opens at most (env IAP_DATABASE_POOL_SIZE; default 8).")
    public var databasePoolSize: Int?

    public init() {}

    /// The URL from the flag or the environment; nil means SQLite.
    public func resolvedURL() -> String? { Environment.resolve(databaseURL, env: "IAP_DATABASE_URL") }

    public func resolvedPoolSize() throws -> Int {
        let size = databasePoolSize ?? Environment.value("IAP_DATABASE_POOL_SIZE").flatMap { Int($0) } ?? 8
        guard (1...256).contains(size) else { throw ValidationError("--database-pool-size must be 1 to 256") }
        return size
    }
}
