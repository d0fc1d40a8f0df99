import Foundation
import JSONRPC
import RPCTestSupport
import RPCTransport
import Testing

/// Google's own client libraries (Python `google-api-python-client` and `google-auth`, pinned in
/// Tests/Judges/requirements.txt) judge the Play simulator: `Tests/Judges/google_play_judge.py` gets an access token
/// with the key file it issues, calls each Developer API method through Google's androidpublisher client, and verifies
/// every pushed notification's OIDC token with google-auth against the simulator's certificates. The simulator is the
/// real `play-sim` executable in a process of its own.
@Suite(.enabled(if: Judges.available)) struct GooglePlayJudgeTests {
    @Test func googlesLibrariesAcceptTheSimulator() async throws {
        let python = try #require(Judges.python, "no judges' virtual environment: run scripts/test (IAP_REQUIRE_JUDGES=1)")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("play-judge-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (rpcPort, httpPort) = (try LoopbackPort.free(), try LoopbackPort.free())
        let sim = try Subprocess.spawn(
            BuiltExecutables.url("play-sim").path,
            ["--port", "\(rpcPort)", "--http-port", "\(httpPort)", "--data-dir", directory.path, "--log-level", "error"],
            environment: BuiltExecutables.environment())
        defer { sim.kill(SIGKILL) }
        let client = RPCClient(host: "127.0.0.1", port: rpcPort, configuration: .init(connections: 1, callTimeout: .seconds(10)))
        let deadline = Date().addingTimeInterval(180)  // generous: CI starts many processes at once on two cores
        while (try? await client.call(RPCPing.self, EmptyParams())) == nil {
            try #require(sim.isRunning && Date() < deadline, "play-sim did not start")
            try await Task.sleep(nanoseconds: 50_000_000)  // polling a starting process, bounded by the deadline
        }
        await client.close()

        let run = try await Subprocess.run(
            python,
            [Judges.script("google_play_judge.py"), "--sim", "127.0.0.1:\(rpcPort)", "--api", "http://127.0.0.1:\(httpPort)"])
        let failures = run.stdout.split(separator: "\n").filter { $0.hasPrefix("FAIL") }
        #expect(run.status == 0 && failures.isEmpty, "\(failures.joined(separator: "\n"))\n\(run.stderr.suffix(4_000))")
        // Every part ran (OAuth, one-time products, subscriptions, refunds, voided purchases, pushes).
        let summary = run.stdout.split(separator: "\n").last { $0.hasPrefix("play-judge: ") } ?? ""
        let count = Int(summary.dropFirst("play-judge: ".count).prefix { $0.isNumber }) ?? 0
        #expect(count >= 35, "\(summary)\n\(run.stdout.suffix(3_000))\n\(run.stderr.suffix(3_000))")
    }
}
