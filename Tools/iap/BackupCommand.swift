import ArgumentParser
import Foundation
import GRDB
import JSONRPC
import RPCTransport
import ServiceSupport

/// `iap admin backup` and `iap admin restore`: the suite's records, both engines.
///
/// SQLite: each service's file in the data directory is copied with SQLite's online backup API (a consistent
/// snapshot even while the service writes: copying the file alone would miss what is still in its `-wal`), then
/// checked with `PRAGMA integrity_check`. PostgreSQL: `pg_dump --format=custom` of the services' schemas.
/// Restoring needs the services stopped (it refuses while one answers), and then copies every file back (or runs
/// `pg_restore --clean`).
struct DataBackupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Back up the suite's records: SQLite files through the online backup API, or pg_dump for PostgreSQL.",
        discussion: """
            Safe while the services run. Writes accounts.sqlite, catalog.sqlite and fulfillment.sqlite (those found in \
            --data-dir) into --to, or, with --database-url, iap.pgdump (schemas accounts, catalog, fulfillment). \
            Restore with `iap admin restore --from DIR`.
            """)

    @Option(name: .customLong("data-dir"), help: "The services' data directory (env IAP_DATA_DIR; default ./data).") var dataDir: String?
    @Option(name: .customLong("database-url"), help: "Back up this PostgreSQL database instead (env IAP_DATABASE_URL).") var databaseURL: String?
    @Option(name: .customLong("to"), help: "Directory to write the backup into (created; must not hold a backup already).") var destination: String

    func run() async throws {
        let out = URL(fileURLWithPath: destination, isDirectory: true)
        // A backup holds password hashes, session-token hashes and every account's ledger: owner-only, like the keys.
        try FileManager.default.createDirectory(at: out, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let previousMask = umask(0o077)
        defer { umask(previousMask) }
        if let url = Environment.resolve(databaseURL, env: "IAP_DATABASE_URL") {
            let file = out.appendingPathComponent(SuiteBackup.dumpName)
            guard !FileManager.default.fileExists(atPath: file.path) else { fail("\(file.path) exists already", exit: ExitCodes.usage) }
            try await SuiteBackup.runTool(
                "pg_dump", ["--format=custom", "--file", file.path] + SuiteBackup.schemas.flatMap { ["--schema", $0] } + ["--dbname", url])
            print("\(file.path): \(SuiteBackup.size(file)) bytes (pg_dump of \(SuiteBackup.schemas.joined(separator: ", ")))")
            return
        }
        let data = URL(fileURLWithPath: dataDir ?? Environment.value("IAP_DATA_DIR") ?? "data", isDirectory: true)
        let found = SuiteBackup.files.filter { FileManager.default.fileExists(atPath: data.appendingPathComponent($0).path) }
        guard !found.isEmpty else { fail("no service database in \(data.path)", exit: ExitCodes.usage) }
        for name in found {
            let target = out.appendingPathComponent(name)
            guard !FileManager.default.fileExists(atPath: target.path) else { fail("\(target.path) exists already", exit: ExitCodes.usage) }
            let source = try DatabaseQueue(path: data.appendingPathComponent(name).path)
            let copy = try DatabaseQueue(path: target.path)
            try source.backup(to: copy)
            let integrity = try await copy.read { try String.fetchOne($0, sql: "PRAGMA integrity_check") }
            try copy.close()
            try source.close()
            guard integrity == "ok" else { fail("\(target.path): integrity check says \(integrity ?? "nothing")", exit: ExitCodes.refused) }
            print("\(target.path): \(SuiteBackup.size(target)) bytes, integrity ok")
        }
    }
}

struct DataRestoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Put a backup made by `iap admin backup` back. Stop the services first: it refuses while one answers.",
        discussion: """
            SQLite: every file in --from replaces the one in --data-dir (through the backup API, so the file's WAL is \
            reset too). PostgreSQL (--database-url): pg_restore --clean of iap.pgdump. Everything recorded after the \
            backup is gone afterwards: grants and spends since then, sessions, notifications (Apple's Notification \
            History brings those back: `iap admin reconcile`).
            """)

    @Option(name: .customLong("data-dir"), help: "The services' data directory (env IAP_DATA_DIR; default ./data).") var dataDir: String?
    @Option(name: .customLong("database-url"), help: "Restore into this PostgreSQL database instead (env IAP_DATABASE_URL).") var databaseURL: String?
    @Option(name: .customLong("from"), help: "A directory written by `iap admin backup`.") var source: String

    func run() async throws {
        for service in [SuiteService.accounts, .catalog, .fulfillment] {
            let address = service.address(flag: nil)
            let probe = try RPCClient(address: address, configuration: .init(connections: 1, callTimeout: .seconds(2), tls: internalTLS()))
            let answered = (try? await probe.call(RPCPing.self, EmptyParams())) != nil
            await probe.close()
            if answered { fail("\(service.rawValue) answers at \(address): stop the services before restoring", exit: ExitCodes.refused) }
        }
        let from = URL(fileURLWithPath: source, isDirectory: true)
        if let url = Environment.resolve(databaseURL, env: "IAP_DATABASE_URL") {
            let file = from.appendingPathComponent(SuiteBackup.dumpName)
            guard FileManager.default.fileExists(atPath: file.path) else { fail("no \(SuiteBackup.dumpName) in \(from.path)", exit: ExitCodes.usage) }
            try await SuiteBackup.runTool("pg_restore", ["--clean", "--if-exists", "--single-transaction", "--dbname", url, file.path])
            print("restored \(file.path)")
            return
        }
        let data = URL(fileURLWithPath: dataDir ?? Environment.value("IAP_DATA_DIR") ?? "data", isDirectory: true)
        let found = SuiteBackup.files.filter { FileManager.default.fileExists(atPath: from.appendingPathComponent($0).path) }
        guard !found.isEmpty else { fail("no backup in \(from.path)", exit: ExitCodes.usage) }
        // Owner-only, as the services keep them (`PrivateFiles`): password and session-token hashes are in them.
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let previousMask = umask(0o077)
        defer { umask(previousMask) }
        for name in found {
            let backup = try DatabaseQueue(path: from.appendingPathComponent(name).path)
            let live = try DatabaseQueue(path: data.appendingPathComponent(name).path)
            try backup.backup(to: live)
            try live.close()
            try backup.close()
            print("restored \(data.appendingPathComponent(name).path)")
        }
    }
}

enum SuiteBackup {
    /// The services' files worth keeping (the simulator's is disposable, verification keeps none).
    static let files = ["accounts.sqlite", "catalog.sqlite", "fulfillment.sqlite"]
    static let schemas = ["accounts", "catalog", "fulfillment"]
    static let dumpName = "iap.pgdump"

    static func size(_ url: URL) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: url.path)[.size]) as? Int) ?? 0
    }

    /// Runs a PostgreSQL client tool (from PATH, else Debian's /usr/lib/postgresql/*/bin); fails with its output.
    static func runTool(_ name: String, _ arguments: [String]) async throws {
        let debian = ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []).compactMap(Int.init).sorted()
            .reversed().map { "/usr/lib/postgresql/\($0)/bin/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
        // A password in a database URL goes to the tool as PGPASSWORD, not on its command line (visible in `ps`).
        var environment = ProcessInfo.processInfo.environment
        let arguments = arguments.map { argument -> String in
            guard argument.hasPrefix("postgres"), var url = URLComponents(string: argument), let password = url.password else { return argument }
            environment["PGPASSWORD"] = password
            url.password = nil
            return url.string ?? argument
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: debian ?? "/usr/bin/env")
        process.arguments = debian == nil ? [name] + arguments : arguments
        process.environment = environment
        let errors = Pipe()
        process.standardError = errors
        do {
            try process.run()
        } catch {
            fail("cannot run \(name) (install PostgreSQL's client tools): \(error)", exit: ExitCodes.usage)
        }
        let message = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            fail("\(name) failed: \(String(decoding: message, as: UTF8.self))", exit: ExitCodes.refused)
        }
    }
}
