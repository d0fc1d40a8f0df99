import Foundation
import Testing

/// How `iap` finds the admin and internal tokens: a `<NAME>_FILE` it cannot read is an error naming the file, never a
/// silent fall back to the data directory's token (another deployment's, perhaps).
@Suite struct TokenResolutionTests {
    @Test func anUnreadableTokenFileIsAnErrorNotAFallBack() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("iap-tokens-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        for name in ["admin-token", "internal-token"] {
            try Data("a-token-of-the-data-directory-0123456789".utf8).write(to: dir.appendingPathComponent(name))
        }
        let missing = dir.appendingPathComponent("no-such-file").path
        // No service listens on these ports: a command that got as far as calling would fail as unreachable (exit 2).
        let base = ["IAP_DATA_DIR": dir.path, "IAP_FULFILLMENT_ADDR": "127.0.0.1:9", "IAP_ACCOUNTS_ADDR": "127.0.0.1:9"]
        for (env, args) in [
            ("IAP_ADMIN_TOKEN_FILE", ["admin", "reconcile"]), ("IAP_INTERNAL_TOKEN_FILE", ["accounts", "find-user", "someone"]),
        ] {
            var environment = base
            environment[env] = missing
            let run = try await CLIStackTests.iap(args, env: environment)
            #expect(run.status == 64, "\(args): exit \(run.status), \(run.stderr)")
            #expect(run.stderr.contains("\(env): cannot read \(missing)"), "\(run.stderr)")
        }
        // An empty file: an error too, not the data directory's token.
        let empty = dir.appendingPathComponent("empty-token")
        try Data().write(to: empty)
        var emptyFile = base
        emptyFile["IAP_ADMIN_TOKEN_FILE"] = empty.path
        let emptyRun = try await CLIStackTests.iap(["admin", "reconcile"], env: emptyFile)
        #expect(emptyRun.status == 64 && emptyRun.stderr.contains("IAP_ADMIN_TOKEN_FILE: \(empty.path) is empty"), "\(emptyRun.stderr)")
        // Both the token and its file: which one was meant is not guessed.
        var both = base
        both["IAP_ADMIN_TOKEN"] = "a-token-set-in-the-environment-0123456789"
        both["IAP_ADMIN_TOKEN_FILE"] = dir.appendingPathComponent("admin-token").path
        let run = try await CLIStackTests.iap(["admin", "reconcile"], env: both)
        #expect(run.status == 64 && run.stderr.contains("set IAP_ADMIN_TOKEN or IAP_ADMIN_TOKEN_FILE, not both"), "\(run.stderr)")
    }
}
