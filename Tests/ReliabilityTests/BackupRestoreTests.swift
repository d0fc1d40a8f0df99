import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

/// `iap admin backup` and `iap admin restore` end to end, on both engines: a backup taken while a real
/// fulfillment-service writes holds the records of that moment; restore refuses while the service answers, and
/// after it the restarted service has exactly those records (a grant kept, a later spend gone, nothing doubled).
@Suite(.serialized) struct BackupRestoreTests {
    static func iap(_ args: [String], env: [String: String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        let run = try await BuiltExecutables.run("iap", args, env: env)
        return (run.status, run.stdout, run.stderr)
    }

    /// Runs the story against one engine: `engine` is the flags for fulfillment-service and for `iap admin`.
    static func story(suite: SuiteFixture, engine: [String]) async throws {
        let data = suite.directory.appendingPathComponent("backed-up")
        let service = CrashSafetyTests.FulfillmentProcess(port: try LoopbackPort.free(), dataDir: data, suite: suite, extraArguments: engine)
        try await service.start()
        let client = RPCClient(host: "127.0.0.1", port: service.port, configuration: .init(callTimeout: .seconds(30)))
        defer { Task { await client.close() } }
        let user = try await suite.register("saver")
        let bought = try await suite.buy("saver@icloud", "coins.100")
        _ = try await client.call(FulfillmentRedeem.self, .init(session: user.session, receiptData: bought.receiptData))
        func balance() async throws -> Int64 { try await client.call(FulfillmentGetBalance.self, .init(session: user.session)).balance }
        func spend(_ key: String) async throws -> Int64 {
            try await client.call(FulfillmentSpendCoins.self, .init(session: user.session, amount: 30, idempotencyKey: key)).balance
        }
        #expect(try await balance() == 100)

        let backupDir = suite.directory.appendingPathComponent("backup")
        let database = Array(engine.prefix(2))  // --database-url URL, when on PostgreSQL
        let backup = try await iap(["admin", "backup", "--data-dir", data.path, "--to", backupDir.path] + database, env: [:])
        #expect(backup.status == 0, "\(backup.stderr)")
        #expect(backup.stdout.contains(engine.isEmpty ? "fulfillment.sqlite" : "iap.pgdump"), "\(backup.stdout)")
        // Owner-only: it holds password and session-token hashes.
        for file in try FileManager.default.contentsOfDirectory(atPath: backupDir.path) {
            let mode = try FileManager.default.attributesOfItem(atPath: backupDir.appendingPathComponent(file).path)[.posixPermissions] as? Int
            #expect(mode.map { $0 & 0o077 } == 0, "\(file) is readable by others: \(String(mode ?? 0, radix: 8))")
        }
        #expect(try await spend("after-backup") == 70)

        // Only fulfillment runs here: accounts and catalog are pointed at ports where nothing listens.
        let stopped = ["IAP_ACCOUNTS_ADDR": "127.0.0.1:\(try LoopbackPort.free())", "IAP_CATALOG_ADDR": "127.0.0.1:\(try LoopbackPort.free())"]
        let restoreArgs = ["admin", "restore", "--from", backupDir.path, "--data-dir", data.path] + database
        let refused = try await iap(restoreArgs, env: stopped.merging(["IAP_FULFILLMENT_ADDR": "127.0.0.1:\(service.port)"]) { $1 })
        #expect(refused.status == 1 && refused.stderr.contains("stop the services"), "\(refused.stderr)")
        #expect(try await balance() == 70, "a refused restore changed nothing")

        await service.kill()
        let restored = try await iap(restoreArgs, env: stopped.merging(["IAP_FULFILLMENT_ADDR": "127.0.0.1:\(service.port)"]) { $1 })
        #expect(restored.status == 0, "\(restored.stderr)")
        try await service.start()
        #expect(try await balance() == 100, "the records of the backup's moment")
        let again = try await client.call(FulfillmentRedeem.self, .init(session: user.session, receiptData: bought.receiptData))
        #expect(again.results.map(\.outcome) == [.alreadyGranted], "the purchase in the backup is not granted twice")
        #expect(try await balance() == 100)
        #expect(try await spend("after-backup") == 70, "the spend made after the backup is gone: its key applies anew")
        await service.kill()
        guard engine.isEmpty else { return }
        // Restored onto a new host (a directory that does not exist yet): owner-only before any service starts.
        let fresh = suite.directory.appendingPathComponent("new-host/data")
        let onNewHost = try await iap(["admin", "restore", "--from", backupDir.path, "--data-dir", fresh.path], env: stopped)
        #expect(onNewHost.status == 0, "\(onNewHost.stderr)")
        for path in [fresh.path] + (try FileManager.default.contentsOfDirectory(atPath: fresh.path)).map({ fresh.appendingPathComponent($0).path }) {
            let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
            #expect(mode.map { $0 & 0o077 } == 0, "\(path) is open to others: \(String(mode ?? 0, radix: 8))")
        }
    }

    @Test func onSQLite() async throws {
        try await SuiteFixture.with { suite in try await Self.story(suite: suite, engine: []) }
    }

    @Test(.enabled(if: TestPostgres.isAvailable, "PostgreSQL is not installed"))
    func onPostgreSQL() async throws {
        let url = try await TestPostgres.newDatabase()
        try await SuiteFixture.with { suite in
            try await Self.story(suite: suite, engine: ["--database-url", url, "--database-pool-size", "4"])
        }
    }
}
