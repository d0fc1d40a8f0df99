import Foundation
import RPCTestSupport
import SuiteTestSupport
import Testing

/// The README's `iap` tour, run exactly as written (the first code block under "Using the suite") against
/// a live suite seeded with the demo catalog, so the README cannot promise what the CLI does not do.
@Suite struct ReadmeTourTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func tour() throws -> String {
        let readme = try String(contentsOf: repository.appendingPathComponent("README.md"), encoding: .utf8)
        guard let section = readme.range(of: "## Using the suite: `iap`"),
            let open = readme.range(of: "```\n", range: section.upperBound..<readme.endIndex),
            let close = readme.range(of: "```", range: open.upperBound..<readme.endIndex)
        else { throw TourMissing() }
        return String(readme[open.upperBound..<close.lowerBound])
    }

    struct TourMissing: Error {}

    @Test func theReadmeTourRunsAsWritten() async throws {
        try await SuiteFixture.with { suite in
            let work = FileManager.default.temporaryDirectory.appendingPathComponent("tour-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: work) }
            // The demo catalog and its content, as compose/up.sh sets them up.
            try Data(repeating: 7, count: 300_000).write(to: suite.directory.appendingPathComponent("fulfillment/content/levels-pack-1.zip"))
            let binDir = BuiltExecutables.directory
            var env = ProcessInfo.processInfo.environment
            for key in env.keys where key.hasPrefix("IAP_") { env[key] = nil }
            env.merge(suite.environment) { _, new in new }
            env["PATH"] = binDir.path + ":" + (env["PATH"] ?? "/usr/bin:/bin")
            env["HOME"] = work.path
            env["IAP_PASSWORD"] = "correct horse battery"
            let seed = try await Subprocess.run(
                binDir.appendingPathComponent("iap").path,
                ["catalog", "import", Self.repository.appendingPathComponent("compose/demo-catalog.json").path],
                environment: env)
            #expect(seed.status == 0, "\(seed.stderr)")
            let script = "set -euo pipefail\n" + (try Self.tour())
            let run = try await Subprocess.run("/bin/bash", ["-c", script], environment: env, currentDirectory: work.path)
            #expect(run.status == 0, "the README tour failed:\n\(run.stdout)\n\(run.stderr)")
            #expect(FileManager.default.fileExists(atPath: work.appendingPathComponent("levels-pack-1.zip").path))
            #expect(run.stdout.contains("signed out"))
        }
    }
}
