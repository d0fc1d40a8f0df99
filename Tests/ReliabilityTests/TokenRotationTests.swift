import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import Testing

/// Rotating the internal token without downtime, on the real accounts-service: started with the new token and
/// the old one in IAP_INTERNAL_TOKEN_PREVIOUS it accepts both (callers switch one by one); started without the
/// previous one it accepts only the new one. A wrong token is refused throughout.
@Suite struct TokenRotationTests {
    static let old = String(repeating: "o", count: 40)
    static let new = String(repeating: "n", count: 40)

    static func accounts(environment extra: [String: String]) async throws -> (Subprocess, RPCClient) {
        let environment = BuiltExecutables.environment(extra)
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("rotation-\(UUID().uuidString)")
        // A free port can be taken by another test's process between the look and the bind: then it exits at once,
        // and starts again on another port (at most three times).
        for _ in 0..<3 {
            let port = try LoopbackPort.free()
            let process = try Subprocess.spawn(
                GracefulStopTests.executable.path, ["--port", "\(port)", "--data-dir", data.path, "--log-level", "error"],
                environment: environment)
            let client = RPCClient(host: "127.0.0.1", port: port, configuration: .init(callTimeout: .seconds(10)))
            let deadline = Date().addingTimeInterval(180)  // generous: CI starts many processes at once on two cores
            while (try? await client.call(RPCPing.self, EmptyParams())) == nil, process.isRunning {
                guard Date() < deadline else { throw CancellationError() }
                try await Task.sleep(nanoseconds: 20_000_000)  // polling for readiness, bounded by the deadline
            }
            if process.isRunning { return (process, client) }
            await client.close()
        }
        throw CancellationError()
    }

    /// The gate's verdict for `token` on an internal method: "ok" (the method ran: no account has this
    /// appAccountToken) or the refusal's reason.
    static func verdict(_ client: RPCClient, _ token: String) async -> String {
        do {
            _ = try await client.call(
                AccountsFindByAppAccountToken.self, .init(appAccountToken: UUID().uuidString.lowercased(), internalToken: token))
            return "ok"
        } catch {
            return error.reason == "unknownAppAccountToken" ? "ok" : error.reason ?? "\(error.code)"
        }
    }

    @Test func theOldTokenWorksOnlyWhileItIsListedAsPrevious() async throws {
        let (during, duringClient) = try await Self.accounts(environment: [
            "IAP_INTERNAL_TOKEN": Self.new, "IAP_INTERNAL_TOKEN_PREVIOUS": Self.old,
        ])
        #expect(await Self.verdict(duringClient, Self.new) == "ok")
        #expect(await Self.verdict(duringClient, Self.old) == "ok")
        #expect(await Self.verdict(duringClient, String(repeating: "x", count: 40)) == "internalTokenRequired")
        await duringClient.close()
        during.kill(SIGTERM)
        _ = await during.wait()

        let (after, afterClient) = try await Self.accounts(environment: ["IAP_INTERNAL_TOKEN": Self.new])
        #expect(await Self.verdict(afterClient, Self.new) == "ok")
        #expect(await Self.verdict(afterClient, Self.old) == "internalTokenRequired")
        await afterClient.close()
        after.kill(SIGTERM)
        _ = await after.wait()
    }

    @Test func aShortPreviousTokenStopsTheStart() async throws {
        var environment = ProcessInfo.processInfo.environment
        environment["IAP_INTERNAL_TOKEN"] = Self.new
        environment["IAP_INTERNAL_TOKEN_PREVIOUS"] = "short"
        let run = try await Subprocess.run(
            GracefulStopTests.executable.path, ["--port", "\(try LoopbackPort.free())", "--data-dir", NSTemporaryDirectory()],
            environment: environment)
        #expect(run.status != 0)
        #expect(run.stderr.contains("IAP_INTERNAL_TOKEN_PREVIOUS must be at least 32 bytes"), "\(run.stderr)")
    }
}
