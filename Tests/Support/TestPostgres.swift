import Foundation
import Glibc
import NIOConcurrencyHelpers

/// A real PostgreSQL server for the tests: `IAP_TEST_POSTGRES_URL` (a server someone runs, reached as a user
/// that may create databases), or else a throwaway cluster this test process starts on first use, with the
/// PostgreSQL that Debian packages (`/usr/lib/postgresql/*/bin`), on a free loopback port in a temporary
/// directory, stopped when the process exits. `initdb` refuses root, so as root it runs as the `postgres` user.
///
/// Without PostgreSQL installed the PostgreSQL variants of the tests are left out, unless
/// `IAP_REQUIRE_POSTGRES=1` (CI), where that is a failure.
public enum TestPostgres {
    /// True when a server is configured or can be started here.
    public static var isAvailable: Bool {
        ProcessInfo.processInfo.environment["IAP_TEST_POSTGRES_URL"] != nil || binDirectory != nil
            || ProcessInfo.processInfo.environment["IAP_REQUIRE_POSTGRES"] == "1"
    }

    /// `IAP_TEST_ENGINE=postgres`: the suite fixtures keep every store on PostgreSQL.
    public static var suiteUsesPostgres: Bool { ProcessInfo.processInfo.environment["IAP_TEST_ENGINE"] == "postgres" }

    /// A new, empty database on the test server; answers its URL.
    public static func newDatabase() async throws -> String { try await server.newDatabase() }

    static func newDatabase(on server: TestPostgresServer) async throws -> String {
        let base = try await server.baseURL()
        let name = "iap_test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(20)
        let created = try await Subprocess.run(psql, [base, "-q", "-v", "ON_ERROR_STOP=1", "-c", "CREATE DATABASE \(name)"])
        guard created.status == 0 else { throw Failure(description: "CREATE DATABASE failed: \(created.stderr)") }
        return replacingDatabase(of: base, with: String(name))
    }

    /// Runs SQL as the server's administrator against the database at `url` (tests that tamper on purpose).
    public static func psql(_ url: String, _ sql: String) async throws -> String {
        let out = try await Subprocess.run(psql, [url, "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
        guard out.status == 0 else { throw Failure(description: out.stderr) }
        return out.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Every row of the database at `url` as `pg_dump --data-only` writes it (tests that look for what must not be
    /// stored).
    public static func dump(_ url: String) async throws -> String {
        let pgDump = binDirectory.map { $0 + "/pg_dump" } ?? "pg_dump"
        let out = try await Subprocess.run(pgDump, ["--data-only", "--dbname", url])
        guard out.status == 0 else { throw Failure(description: out.stderr) }
        return out.stdout
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    static let server = TestPostgresServer()

    public static var binDirectory: String? {
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        return versions.compactMap(Int.init).sorted().reversed().map { "/usr/lib/postgresql/\($0)/bin" }
            .first { FileManager.default.isExecutableFile(atPath: $0 + "/initdb") }
    }

    static var psql: String {
        if let bin = binDirectory, FileManager.default.isExecutableFile(atPath: bin + "/psql") { return bin + "/psql" }
        return "psql"
    }

    static func replacingDatabase(of url: String, with name: String) -> String {
        guard var components = URLComponents(string: url) else { return url }
        components.path = "/" + name
        return components.string ?? url
    }
}

/// A throwaway PostgreSQL cluster: `TestPostgres`'s shared one, or one of a test's own (`TestPostgresServer(own: true)`,
/// for a test that stops and restarts it without disturbing the tests running beside it).
public actor TestPostgresServer {
    private var url: String?
    private let own: Bool

    public init(own: Bool = false) { self.own = own }

    /// A new, empty database on this server; answers its URL.
    public func newDatabase() async throws -> String { try await TestPostgres.newDatabase(on: self) }

    /// Stops and removes a cluster of a test's own.
    public func shutdown() async {
        guard let cluster else { return }
        try? await run(cluster.bin + "/pg_ctl", ["-D", cluster.directory + "/data", "-m", "immediate", "-w", "stop"])
        try? FileManager.default.removeItem(atPath: cluster.directory)
        TestPostgresCleanup.forget(directory: cluster.directory)
    }
    private var cluster: (directory: String, port: Int, bin: String)?

    private var starting: Task<String, any Error>?

    /// One server for the whole process: callers that arrive while it starts wait for the same start.
    func baseURL() async throws -> String {
        if let url { return url }
        if let starting { return try await starting.value }
        let task = Task { try await self.startOnce() }
        starting = task
        return try await task.value
    }

    private func startOnce() async throws -> String {
        if !own, let given = ProcessInfo.processInfo.environment["IAP_TEST_POSTGRES_URL"] {
            url = given
            return given
        }
        guard let bin = TestPostgres.binDirectory else {
            throw TestPostgres.Failure(description: "PostgreSQL is not installed (apt-get install postgresql) and IAP_TEST_POSTGRES_URL is not set")
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("iap-test-pg-\(getpid())-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        if geteuid() == 0 { try await run("/bin/chown", ["postgres", directory], asPostgres: false) }
        try await run(bin + "/initdb", ["-D", directory + "/data", "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
        let port = try LoopbackPort.free()
        cluster = (directory, port, bin)
        try await start()
        TestPostgresCleanup.register(directory: directory, bin: bin)
        let base = "postgres://postgres@127.0.0.1:\(port)/postgres"
        url = base
        return base
    }

    /// Stops the cluster ("fast": open transactions are rolled back, connections dropped); `start` brings it back on
    /// the same port and data.
    public func stop() async throws {
        guard let cluster else { throw TestPostgres.Failure(description: "only a server these tests started can be stopped") }
        try await run(cluster.bin + "/pg_ctl", ["-D", cluster.directory + "/data", "-m", "fast", "-w", "stop"])
    }

    public func start() async throws {
        guard let cluster else { throw TestPostgres.Failure(description: "only a server these tests started can be started") }
        // fsync off: a test server's data need not survive a power cut (commits still wait for the WAL write, so a
        // killed server loses nothing); many connections: suites run in parallel, each service with its own pool.
        let options =
            "-p \(cluster.port) -k \(cluster.directory) -c listen_addresses=127.0.0.1 -c max_connections=1000 -c fsync=off"
            + " -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.max=10000"
        try await run(
            cluster.bin + "/pg_ctl", ["-D", cluster.directory + "/data", "-o", options, "-l", cluster.directory + "/log", "-w", "-t", "60", "start"])
    }

    private func run(_ executable: String, _ arguments: [String], asPostgres: Bool = true) async throws {
        let (command, args) =
            asPostgres && geteuid() == 0 ? ("/usr/sbin/runuser", ["-u", "postgres", "--", executable] + arguments) : (executable, arguments)
        let out = try await Subprocess.run(command, args, currentDirectory: "/tmp")
        guard out.status == 0 else {
            throw TestPostgres.Failure(description: "\(executable) \(arguments.joined(separator: " ")) failed: \(out.stderr)\(out.stdout)")
        }
    }
}

/// Stops the throwaway cluster when the test process exits (however the tests ended).
enum TestPostgresCleanup {
    private static let registered = NIOLockedValueBox<[String: String]>([:])

    static func register(directory: String, bin: String) {
        let first = registered.withLockedValue { list in
            defer { list[directory] = bin }
            return list.isEmpty
        }
        guard first else { return }
        atexit {
            for (directory, bin) in TestPostgresCleanup.registered.withLockedValue({ $0 }) {
                let stop = "\(bin)/pg_ctl -D \(directory)/data -m immediate stop >/dev/null 2>&1"
                _ = system(geteuid() == 0 ? "/usr/sbin/runuser -u postgres -- \(stop)" : stop)
                _ = system("rm -rf \(directory)")
            }
        }
    }

    static func forget(directory: String) {
        _ = registered.withLockedValue { $0.removeValue(forKey: directory) }
    }
}

/// A TCP port nothing listens on now (bound to 127.0.0.1 and released), for a child process to take.
public enum LoopbackPort {
    /// Ports handed out by this process, never handed out twice.
    private static let given = NIOLockedValueBox<Set<Int>>([])

    /// A port below the kernel's ephemeral range (32768-60999 here), free now. Not from the ephemeral range: the
    /// tests hold thousands of client connections, each on an ephemeral local port, and one of them taking the
    /// port between this answer and the child's bind made that bind fail (a test then waited for a server that
    /// never came up).
    public static func free() throws -> Int {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let port = Int.random(in: 20_000..<32_000, using: &generator)
            guard given.withLockedValue({ $0.insert(port).inserted }) else { continue }
            if bindable(port) { return port }
        }
        throw TestPostgres.Failure(description: "no free port")
    }

    private static func bindable(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        return withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 }
        }
    }
}
