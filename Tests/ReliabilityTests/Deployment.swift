import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import Testing

/// A deployment of the suite as Docker Compose files describe it, run as processes on this machine: every service
/// of the files (but the database server, which `TestPostgres` provides), started with the command and environment
/// Compose would give it, after `rewrite`. The App Store simulator stands in for Apple, outside the deployment.
struct Deployment {
    static let bundleId = "com.example.game"
    static let adminToken = String(repeating: "a", count: 40)
    static let internalToken = String(repeating: "i", count: 40)

    let directory: URL
    let appStoreAPI: Bool
    let edgePort: Int
    let ports: [String: Int]
    let simulator: RPCClient
    /// Google Play's stand-in (`play: true`), outside the deployment like Apple's.
    let play: RPCClient?
    let fulfillment: RPCClient
    var certificate: String { directory.appendingPathComponent("certs/cert.pem").path }

    /// Compose's view of the services: (command, environment) each, read from the files by compose/compose_services.py.
    struct ComposeService: Decodable {
        var command: [String]
        var environment: [String: String]
    }

    /// The only changes made to what the files say, each a difference between a container and this machine:
    /// - `--port` and every `host:port` in `IAP_*_ADDR`: a free loopback port per service (`0.0.0.0` and the compose
    ///   host names become 127.0.0.1);
    /// - container paths: `/data` (`IAP_DATA_DIR`, and the working directory of services without one), `/certs`,
    ///   `/etc/iap/content` and `/run/secrets/app-store-api-key` become files in this test's directory;
    /// - the database server `postgres:5432` becomes this test's PostgreSQL database (each service keeps its own login,
    ///   which `compose/postgres-roles.sh`, run as the postgres service would, made there);
    /// - verification also trusts the simulator's roots (`--trust-anchor-dir`), and with the App Store Server API
    ///   asks the simulator instead of Apple's hosts (`IAP_APP_STORE_API_URL`, `IAP_APP_STORE_API_SANDBOX_URL`);
    /// - with Google Play, `/run/secrets/play-service-account` is the key file the Play simulator issued, and verification
    ///   asks the Play simulator instead of Google's hosts (`IAP_PLAY_API_URL`, `IAP_PLAY_CERTS_URL`).
    static func rewrite(
        _ name: String, _ service: ComposeService, ports: [String: Int], directory: URL, simHTTP: Int, playHTTP: Int?, databaseURL: String?
    ) -> (arguments: [String], environment: [String: String]) {
        func path(_ value: String) -> String {
            var value = value
            for (from, to) in [
                ("/certs/", "certs/"), ("/etc/iap/content", "content"), ("/run/secrets/app-store-api-key", "sim/sim-pki/api-key.p8"),
                ("/run/secrets/play-service-account", "play/service-account.json"),
            ] where value.hasPrefix(from) {
                value = directory.appendingPathComponent(to + value.dropFirst(from.count)).path
            }
            return value
        }
        var arguments = Array(service.command.dropFirst()).map(path)
        if let i = arguments.firstIndex(of: "--port") { arguments[i + 1] = String(ports[name]!) }
        var environment = service.environment.mapValues(path)
        for (key, value) in environment {
            if key == "IAP_HOST" { environment[key] = "127.0.0.1" }
            if key.hasSuffix("_ADDR") {
                environment[key] = value.split(separator: ",").map { "127.0.0.1:\(ports[String($0.split(separator: ":")[0])]!)" }
                    .joined(separator: ",")
            }
            if key == "IAP_DATA_DIR" { environment[key] = directory.appendingPathComponent("data/\(name)").path }
            if key == "IAP_DATABASE_URL", let databaseURL { environment[key] = Self.login(of: value, on: databaseURL) }
        }
        if name == "verification" {
            arguments += ["--trust-anchor-dir", directory.appendingPathComponent("sim/sim-pki").path]
            if environment["IAP_APP_STORE_API_KEY"]?.isEmpty == false {
                environment["IAP_APP_STORE_API_URL"] = "http://127.0.0.1:\(simHTTP)"
                environment["IAP_APP_STORE_API_SANDBOX_URL"] = "http://127.0.0.1:\(simHTTP)/sandbox"
            }
            if let playHTTP, environment["IAP_PLAY_SERVICE_ACCOUNT"]?.isEmpty == false {
                environment["IAP_PLAY_API_URL"] = "http://127.0.0.1:\(playHTTP)"
                environment["IAP_PLAY_CERTS_URL"] = "http://127.0.0.1:\(playHTTP)/oauth2/v3/certs"
            }
        }
        return (arguments, environment)
    }

    /// A service's database URL from the compose files (its own login) on the test's server and database instead of
    /// `postgres:5432/iap`.
    static func login(of composeURL: String, on databaseURL: String) -> String {
        guard var given = URLComponents(string: composeURL), let test = URLComponents(string: databaseURL) else { return databaseURL }
        (given.host, given.port, given.path) = (test.host, test.port, test.path)
        return given.string ?? databaseURL
    }

    /// Runs `compose/postgres-roles.sh` with the postgres service's environment, as its image runs it at the first start,
    /// against the test's server (as its administrator) and database.
    static func makeLogins(_ postgres: ComposeService, on databaseURL: String, root: String) async throws {
        let url = try #require(URLComponents(string: databaseURL))
        var environment = postgres.environment
        environment["POSTGRES_USER"] = url.user ?? "postgres"
        environment["POSTGRES_DB"] = String(url.path.dropFirst())
        environment["PGHOST"] = url.host ?? "127.0.0.1"
        environment["PGPORT"] = String(url.port ?? 5432)
        environment["PATH"] = (TestPostgres.binDirectory.map { $0 + ":" } ?? "") + "/usr/bin:/bin"
        let made = try await Subprocess.run("/bin/bash", [root + "/compose/postgres-roles.sh"], environment: environment)
        try #require(made.status == 0 && made.stdout.contains("3 service login(s)"), "\(made.stdout)\(made.stderr)")
    }

    /// Starts the simulator and the deployment, runs `body`, stops everything.
    static func with(
        files: [String], appStoreAPI: Bool, play: Bool = false, databaseURL: String? = nil, _ body: (Deployment) async throws -> Void
    ) async throws {
        let python = try #require(Judges.python, "no judges' virtual environment: run scripts/test")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("deployed-\(UUID().uuidString)")
        for sub in ["certs", "content", "sim", "play", "logs"] {
            try FileManager.default.createDirectory(at: directory.appendingPathComponent(sub), withIntermediateDirectories: true)
        }
        var processes: [(String, Subprocess)] = []
        defer {
            for (_, process) in processes { process.kill(SIGKILL) }
            try? FileManager.default.removeItem(at: directory)
        }
        let root = Judges.repository.path
        let cert = try await Subprocess.run("bash", [root + "/compose/dev-cert.sh", directory.appendingPathComponent("certs").path])
        try #require(cert.status == 0, "\(cert.stderr)")
        try Data(repeating: 7, count: 4_096).write(to: directory.appendingPathComponent("content/levels-pack-1.zip"))

        // Apple's stand-in: its notifications go to the edge's webhook, over HTTPS with the edge's certificate.
        let edgePort = try LoopbackPort.free()
        let (simPort, simHTTP) = (try LoopbackPort.free(), try LoopbackPort.free())
        let webhook = "https://localhost:\(edgePort)/v1/notifications/appstore"
        processes.append(
            (
                "appstore-sim",
                try start(
                    "appstore-sim",
                    [
                        "--port", "\(simPort)", "--http-port", "\(simHTTP)", "--data-dir", directory.appendingPathComponent("sim").path,
                        "--notification-url", webhook, "--sandbox-notification-url", webhook + "/sandbox",
                        "--notification-ca", directory.appendingPathComponent("certs/cert.pem").path,
                    ], environment: [:], directory: directory, name: "appstore-sim")
            ))
        let simulator = RPCClient(host: "127.0.0.1", port: simPort, configuration: .init(callTimeout: .seconds(60)))
        try await ready(simulator, "appstore-sim", processes)
        let key = try await simulator.call(SimAPIKey.self, EmptyParams())
        // Google's stand-in: its pushes go to the edge's Google Play route over HTTPS, its key file where the secret is.
        var playClient: RPCClient?
        var playHTTP: Int?
        if play {
            let (port, http) = (try LoopbackPort.free(), try LoopbackPort.free())
            processes.append(
                (
                    "play-sim",
                    try start(
                        "play-sim",
                        [
                            "--port", "\(port)", "--http-port", "\(http)", "--data-dir", directory.appendingPathComponent("play").path,
                            "--push-url", "https://localhost:\(edgePort)/v1/notifications/googleplay",
                            "--push-ca", directory.appendingPathComponent("certs/cert.pem").path,
                            "--key-file", directory.appendingPathComponent("play/service-account.json").path,
                        ], environment: [:], directory: directory, name: "play-sim")
                ))
            let client = RPCClient(host: "127.0.0.1", port: port, configuration: .init(callTimeout: .seconds(60)))
            try await ready(client, "play-sim", processes)
            (playClient, playHTTP) = (client, http)
        }

        var composeEnvironment = BuiltExecutables.environment([
            "IAP_ADMIN_TOKEN": adminToken, "IAP_INTERNAL_TOKEN": internalToken, "IAP_CONTENT_URL_KEY": String(repeating: "c", count: 40),
            "IAP_BUNDLE_IDS": bundleId, "IAP_EDGE_CERT_DIR": directory.appendingPathComponent("certs").path,
            "IAP_EDGE_PUBLIC_URL": "https://localhost:\(edgePort)", "IAP_POSTGRES_PASSWORD": "unused-the-test-database-is-given",
            "IAP_POSTGRES_ACCOUNTS_PASSWORD": "accounts-login-\(UUID().uuidString)",
            "IAP_POSTGRES_CATALOG_PASSWORD": "catalog-login-\(UUID().uuidString)",
            "IAP_POSTGRES_FULFILLMENT_PASSWORD": "fulfillment-login-\(UUID().uuidString)", "IAP_LOG_LEVEL": "info",
        ])
        if play {
            composeEnvironment["IAP_PLAY_SERVICE_ACCOUNT_FILE"] = directory.appendingPathComponent("play/service-account.json").path
            composeEnvironment["IAP_PLAY_PACKAGES"] = bundleId
            composeEnvironment["IAP_PLAY_PUSH_AUDIENCE"] = "https://localhost:\(edgePort)/v1/notifications/googleplay"
            composeEnvironment["IAP_PLAY_PUSH_EMAIL"] = "rtdn-push@iap-play-sim.iam.gserviceaccount.com"
        }
        if appStoreAPI {
            composeEnvironment["IAP_APP_STORE_API_KEY_FILE"] = directory.appendingPathComponent("sim/sim-pki/api-key.p8").path
            composeEnvironment["IAP_APP_STORE_API_KEY_ID"] = key.keyId
            composeEnvironment["IAP_APP_STORE_API_ISSUER_ID"] = key.issuerId
        }
        let read = try await Subprocess.run(
            python, [root + "/compose/compose_services.py"] + files.map { root + "/" + $0 }, environment: composeEnvironment)
        try #require(read.status == 0, "\(read.stderr)")
        var services = try JSONDecoder().decode([String: ComposeService].self, from: Data(read.stdout.utf8))
        if let databaseURL, let postgres = services["postgres"] {
            // The test's own server stands in for it: its first start's script makes each service's login there.
            try await makeLogins(postgres, on: databaseURL, root: root)
        }
        services["postgres"] = nil
        var ports: [String: Int] = ["edge": edgePort]
        for name in services.keys where name != "edge" { ports[name] = try LoopbackPort.free() }

        // In dependency order, as Compose's depends_on starts them.
        let order = ["accounts", "catalog", "verification", "fulfillment", "edge"]
        for base in order {
            for name in services.keys.sorted() where name == base || name.hasPrefix(base + "-") {
                let (arguments, environment) = rewrite(
                    name, services[name]!, ports: ports, directory: directory, simHTTP: simHTTP, playHTTP: playHTTP, databaseURL: databaseURL)
                let process = try start(services[name]!.command[0], arguments, environment: environment, directory: directory, name: name)
                processes.append((name, process))
                if name != "edge" {
                    try await ready(RPCClient(host: "127.0.0.1", port: ports[name]!, configuration: .init(connections: 1)), name, processes)
                }
            }
        }
        let deployment = Deployment(
            directory: directory, appStoreAPI: appStoreAPI, edgePort: edgePort, ports: ports, simulator: simulator, play: playClient,
            fulfillment: RPCClient(host: "127.0.0.1", port: ports["fulfillment"]!, configuration: .init(callTimeout: .seconds(60))))
        try await deployment.eventually("the edge answers over HTTPS") { (try? await deployment.curl(["/healthz"])) != nil }

        // The operator creates the catalog, as docs/configuration.md says: `iap catalog import FILE` with the admin token.
        let imported = try await BuiltExecutables.run(
            "iap", ["catalog", "import", root + "/compose/demo-catalog.json", "--addr", "127.0.0.1:\(ports["catalog"]!)"],
            env: ["IAP_ADMIN_TOKEN": adminToken])
        try #require(imported.status == 0, "\(imported.stdout)\(imported.stderr)")
        do {
            try await body(deployment)
        } catch {
            for (name, _) in processes {
                let log = (try? String(contentsOf: directory.appendingPathComponent("logs/\(name).log"), encoding: .utf8)) ?? ""
                print("--- \(name) (last lines)\n\(log.split(separator: "\n").suffix(15).joined(separator: "\n"))")
            }
            throw error
        }
    }

    static func start(_ executable: String, _ arguments: [String], environment: [String: String], directory: URL, name: String) throws
        -> Subprocess
    {
        let workdir = directory.appendingPathComponent("work/\(name)")
        try FileManager.default.createDirectory(at: workdir, withIntermediateDirectories: true)
        let log = directory.appendingPathComponent("logs/\(name).log").path
        return try Subprocess.spawn(
            BuiltExecutables.url(executable).path, arguments, environment: BuiltExecutables.environment(environment),
            currentDirectory: workdir.path, stdout: log, stderr: log + ".err")
    }

    /// Waits (bounded) until `client` answers a ping; fails at once if a process has stopped.
    static func ready(_ client: RPCClient, _ name: String, _ processes: [(String, Subprocess)]) async throws {
        let deadline = Date().addingTimeInterval(180)  // generous: CI starts many processes at once on two cores
        while (try? await client.call(RPCPing.self, EmptyParams())) == nil {
            for (other, process) in processes where !process.isRunning { Issue.record("\(other) stopped while \(name) started") }
            guard processes.allSatisfy({ $0.1.isRunning }), Date() < deadline else { throw CancellationError() }
            try await Task.sleep(nanoseconds: 20_000_000)  // polling a process's readiness, bounded by the deadline
        }
    }

    /// Waits (bounded) for an effect of asynchronous processing (a notification applied after the webhook answered).
    func eventually(_ what: String, _ check: () async throws -> Bool) async throws {
        let deadline = Date().addingTimeInterval(30)
        while try await !check() {
            guard Date() < deadline else {
                Issue.record("not within 30 s: \(what)")
                throw CancellationError()
            }
            try await Task.sleep(nanoseconds: 50_000_000)  // polling an asynchronous effect, bounded by the deadline
        }
    }

    /// `curl` against the edge (a client nobody here wrote): the body printed, non-2xx a failure.
    func curl(_ arguments: [String]) async throws -> String {
        let path = arguments[0]
        let run = try await Subprocess.run(
            "curl",
            ["-sS", "--fail-with-body", "--max-time", "60", "--cacert", certificate, "https://localhost:\(edgePort)\(path)"]
                + arguments.dropFirst())
        guard run.status == 0 else { throw DeploymentError("curl \(path): \(run.status) \(run.stdout) \(run.stderr)") }
        return run.stdout
    }

    /// A JSON-RPC call through the edge (`/v1/rpc`, HTTPS, the session as a bearer token): the whole answer.
    func edgeAnswer(_ method: String, _ params: JSONValue, session: String? = nil) async throws -> JSONValue {
        let request: JSONValue = ["jsonrpc": "2.0", "id": 1, "method": .string(method), "params": params]
        var arguments = [
            "/v1/rpc", "-H", "Content-Type: application/json", "--data-binary", String(decoding: try JSONByteEncoder.encode(request), as: UTF8.self),
        ]
        if let session { arguments += ["-H", "Authorization: Bearer \(session)"] }
        return try JSONValue.parse(try await curl(arguments))
    }

    /// The result of a call through the edge; an error answer fails.
    func edge(_ method: String, _ params: JSONValue, session: String? = nil) async throws -> JSONValue {
        let answer = try await edgeAnswer(method, params, session: session)
        guard let result = answer["result"] else { throw DeploymentError("\(method): \(answer)") }
        return result
    }

    /// A call to the simulator's control port (Apple's side of the story).
    func sim(_ method: String, _ params: JSONValue) async throws -> JSONValue {
        let raw = try await simulator.callRaw(method: method, params: try JSONByteEncoder.encode(params))
        return try JSONValue.parse(String(decoding: raw, as: UTF8.self))
    }

    /// A call to the Play simulator's control port (Google's side of the story).
    func play(_ method: String, _ params: JSONValue) async throws -> JSONValue {
        guard let play else { throw DeploymentError("this deployment has no Play simulator") }
        let raw = try await play.callRaw(method: method, params: try JSONByteEncoder.encode(params))
        return try JSONValue.parse(String(decoding: raw, as: UTF8.self))
    }

    /// True when fulfillment's inbox holds no notification pending or parked (admin method, on its own port).
    func inboxSettled() async throws -> Bool {
        for state in [NotificationState.pending, .parked] {
            let listed = try await fulfillment.call(
                FulfillmentListNotifications.self, .init(adminToken: Self.adminToken, state: state, limit: 10))
            if !listed.notifications.isEmpty { return false }
        }
        return true
    }
}

struct DeploymentError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
